"""One call from a workload and a policy spec to simulated requests and their summary.

The CLI, the benchmarks and user scripts share this entry point, so "compare policies on the same
workload" always means: fresh requests from the same :class:`Workload` for each policy, same cluster,
same latency profile.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from semsched.core.request import Request
from semsched.core.scheduler import Scheduler, SchedulerConfig
from semsched.latency import load_profile_info
from semsched.latency.base import LatencyModel
from semsched.latency.profiles import EngineOverheads
from semsched.metrics import Summary, TDGWeights, summarize
from semsched.metrics.series import DEFAULT_BIN_S, MonitoringSeries, monitoring_series
from semsched.policies import make_policy
from semsched.predict.cost import PredictorCost
from semsched.sim.disagg import PDSpec
from semsched.sim.engine import Instance, ProgressCallback, SimResult, Simulation
from semsched.sim.executor import ModelExecutor
from semsched.sim.ground_truth import GroundTruth
from semsched.sim.prediction import (
    LengthPredictionError,
    LengthPredictorSpec,
    OnlinePrediction,
    apply_latency,
    start_prediction,
)
from semsched.sim.router import RouterContext, make_router
from semsched.sim.speculative import SpeculationSpec, SpeculativeExecutor
from semsched.workloads import Workload

DEFAULT_PROFILE = "a100-qwen1.5-4b"


@dataclass(frozen=True)
class ClusterSpec:
    """What is simulated: ``num_instances`` identical engines behind ``router``, and optionally a ``predictor``
    in front of them whose batches delay each request's hand-over (:mod:`semsched.predict.cost`) and a
    ``length_predictor``, an online output-length predictor that predicts each request at its hand-over and learns
    from finished requests (:mod:`semsched.sim.prediction`). With both, the cost model's batches decide the
    hand-over times, so the length predictor's own ``latency_s`` may not be given.

    ``pd`` makes the cluster PD-disaggregated (:class:`~semsched.sim.disagg.PDSpec`: prefill and decode pools, the
    KV link, the model whose KV crosses it); ``num_instances`` is then left at 1 and ``router`` picks the prefill
    instance (and the decode instance, if it has ``route_decode``). ``router`` is a router spec
    (``go-routing:alpha=0.9``), checked here."""

    profile: str = DEFAULT_PROFILE
    num_instances: int = 1
    router: str = "round-robin"
    scheduler: SchedulerConfig = field(default_factory=SchedulerConfig)
    predictor: PredictorCost | None = None
    length_predictor: LengthPredictorSpec | None = None
    #: real step times that differ from the profile (noise, drift; instance i draws from stream i); None: exact
    ground_truth: GroundTruth | None = None
    #: a PD-disaggregated cluster (prefill and decode pools, the KV link); None: co-located
    pd: PDSpec | None = None
    #: speculative decoding on every instance, or on the first ``speculating_instances`` (seed 004: the drafting
    #: method, its costs, the acceptance model of requests without a log); the scheduler reserves ``draft_tokens``
    #: lookahead slots per decode. None: off
    speculation: SpeculationSpec | None = None
    #: how many instances speculate with ``speculation``: the first k (instances 0..k-1); the others decode one
    #: token a step and reserve no lookahead slots. None: every instance (with ``speculation``)
    speculating_instances: int | None = None
    #: an instance left idle while it holds work it could run (a scheduler defect) ends those requests STALLED,
    #: counted and shown in red, instead of stopping the run with a SimulationError (``--allow-stalls``)
    allow_stalls: bool = False

    def speculates(self, index: int) -> bool:
        """Whether instance ``index`` runs speculative decoding."""
        if self.speculation is None:
            return False
        return self.speculating_instances is None or index < self.speculating_instances

    def _check_speculating_instances(self) -> None:
        k = self.speculating_instances
        if k is None:
            return
        if isinstance(k, bool) or not isinstance(k, int) or not 0 <= k <= self.num_instances:
            raise ValueError(
                f"speculating_instances: must be an integer from 0 to num_instances ({self.num_instances}) "
                f"or None (got {k!r})"
            )
        if self.speculation is None:
            raise ValueError("speculating_instances: says how many instances speculate; give speculation too")

    def __post_init__(self) -> None:
        if self.num_instances < 1:
            raise ValueError(f"num_instances: must be >= 1 (got {self.num_instances})")
        if self.pd is not None and self.num_instances != 1:
            raise ValueError(
                f"num_instances: leave it at 1 with pd (the cluster is pd.num_prefill_instances + "
                f"pd.num_decode_instances = {self.pd.num_instances} instances; got {self.num_instances})"
            )
        make_router(self.router)  # an unknown name or a bad parameter fails here, before anything runs
        self._check_speculating_instances()
        if self.speculation is not None:
            if self.pd is not None:
                raise ValueError("speculation: not simulated on a PD-disaggregated cluster (leave pd or it out)")
            lookahead = self.scheduler.num_lookahead_tokens
            if lookahead not in (0, self.speculation.draft_tokens):
                raise ValueError(
                    f"scheduler.num_lookahead_tokens: {lookahead} differs from speculation.draft_tokens "
                    f"{self.speculation.draft_tokens} (leave it 0: the speculation sets it)"
                )
            object.__setattr__(self, "scheduler", dataclasses.replace(
                self.scheduler, num_lookahead_tokens=self.speculation.draft_tokens
            ))
        length = self.length_predictor
        if self.predictor is not None and length is not None and length.latency_s is not None:
            raise LengthPredictionError(
                f"{length.spec}: latency_s: with a predictor cost ({self.predictor.spec}) its batches decide when "
                "each prediction is made; leave latency_s out"
            )


@dataclass
class PolicyRun:
    policy: str
    requests: list[Request]
    result: SimResult
    summary: Summary
    wall_s: float  # wall-clock seconds the simulation itself took (not the summary)

    def series(
        self, bin_s: float = DEFAULT_BIN_S, *, target_shares: Mapping[int, float] | None = None
    ) -> MonitoringSeries:
        """The run's monitoring series per ``bin_s`` of simulated time (:mod:`semsched.metrics.series`)."""
        return monitoring_series(self.requests, self.result.monitor, bin_s=bin_s, target_shares=target_shares)


def build_simulation(
    policy: str,
    cluster: ClusterSpec,
    *,
    fast_forward: bool = True,
    progress: ProgressCallback | None = None,
    prediction: OnlinePrediction | None = None,
    tdg_weights: TDGWeights | None = None,
) -> Simulation:
    """The cluster's instances (a PD cluster: its prefill instances, then its decode instances) behind a fresh
    router, bound (if it has ``bind``) to the profile's latency model and ``tdg_weights``."""
    info = load_profile_info(cluster.profile)
    latency = info.model
    count = cluster.num_instances if cluster.pd is None else cluster.pd.num_instances
    instances = [
        Instance(
            Scheduler(_scheduler_config(cluster, index), make_policy(policy)),
            executor=_executor(cluster, latency, info.overheads, index),
        )
        for index in range(count)
    ]
    router = make_router(cluster.router)
    bind = getattr(router, "bind", None)
    if bind is not None:
        bind(RouterContext(latency, disaggregated=cluster.pd is not None, tdg_weights=tdg_weights))
    return Simulation(
        instances,
        router,
        fast_forward=fast_forward,
        progress=progress,
        on_handover=None if prediction is None else prediction.handed_over,
        on_finish=None if prediction is None else prediction.finished,
        disaggregation=None if cluster.pd is None else cluster.pd.disaggregation(),
        allow_stalls=cluster.allow_stalls,
    )


def _scheduler_config(cluster: ClusterSpec, index: int) -> SchedulerConfig:
    """The cluster's scheduler configuration; an instance that does not speculate reserves no lookahead slots."""
    if cluster.speculation is None or cluster.speculates(index):
        return cluster.scheduler
    return dataclasses.replace(cluster.scheduler, num_lookahead_tokens=0)


def _executor(
    cluster: ClusterSpec, latency: LatencyModel, overheads: EngineOverheads, index: int
) -> ModelExecutor:
    truth = None if cluster.ground_truth is None else cluster.ground_truth.sampler(index)
    if cluster.speculation is not None and cluster.speculates(index):
        return SpeculativeExecutor(latency, cluster.speculation, overheads=overheads, truth=truth)
    return ModelExecutor(latency, overheads=overheads, truth=truth)


def prepare_requests(requests: list[Request], cluster: ClusterSpec) -> OnlinePrediction | None:
    """Set each fresh request's hand-over time from the cluster's predictors, and start the run's online length
    prediction (a fresh predictor, every prompt embedded now) when the cluster has one."""
    prediction = None
    if cluster.length_predictor is not None:
        prediction = start_prediction(cluster.length_predictor, requests)
    if cluster.predictor is not None:
        cluster.predictor.apply(requests)
    elif cluster.length_predictor is not None:
        apply_latency(requests, cluster.length_predictor.effective_latency_s)
    return prediction


def check_prefix_blocks(workload: Workload, cluster: ClusterSpec) -> None:
    """With prefix caching on, a workload's prefix hashes must be for the engine's block size (a
    :class:`ValueError` naming both otherwise: every lookup would miss or, worse, match the wrong blocks)."""
    block_size = cluster.scheduler.block_size
    if cluster.scheduler.enable_prefix_caching and workload.prefix_hashes is not None and (
            workload.prefix_block_size != block_size):
        raise ValueError(
            f"prefix_block_size: the workload's prefix hashes are for {workload.prefix_block_size}-token blocks, "
            f"the engine's block_size is {block_size} (build the workload with prefix_block_size={block_size})"
        )


def run_policy(
    workload: Workload,
    policy: str,
    cluster: ClusterSpec | None = None,
    *,
    fast_forward: bool = True,
    progress: ProgressCallback | None = None,
    tdg_weights: TDGWeights | None = None,
    max_output_tokens: int | None = None,
) -> PolicyRun:
    """Simulate ``workload`` under ``policy`` (a spec such as ``"edf:deadline=e2e"``); with a predictor in the
    cluster, each request enters the cluster when its prediction is ready; with a length predictor, each carries
    the distribution predicted then (``wall_s`` counts the predictor's calls during the run, not the prompts'
    embedding before it)."""
    cluster = cluster or ClusterSpec()
    check_prefix_blocks(workload, cluster)
    requests = workload.to_requests(max_output_tokens)
    prediction = prepare_requests(requests, cluster)
    weights = tdg_weights or TDGWeights.paper_defaults(requests)
    simulation = build_simulation(
        policy, cluster, fast_forward=fast_forward, progress=progress, prediction=prediction, tdg_weights=weights
    )
    started = time.perf_counter()
    result = simulation.run(requests)
    wall_s = time.perf_counter() - started
    if prediction is not None:
        prediction.flush()  # the last finishes too: the predictor has seen the whole run
    return PolicyRun(policy, requests, result, summarize(requests, tdg_weights=weights), wall_s)


def compare_policies(
    workload: Workload,
    policies: Sequence[str],
    cluster: ClusterSpec | None = None,
    *,
    fast_forward: bool = True,
    progress: ProgressCallback | None = None,
) -> dict[str, PolicyRun]:
    """Run every policy on the same workload and cluster; TDG weights are the same for all."""
    weights = TDGWeights.paper_defaults(workload.to_requests())
    return {
        spec: run_policy(
            workload, spec, cluster, fast_forward=fast_forward, progress=progress, tdg_weights=weights
        )
        for spec in policies
    }
