"""SlideBatching (seed 001, PROSERVE §4.2, Algorithm 1): a time-budgeted batch whose order slides between
deadline-first and density-first with the load.

Every step, for every unfinished request ``r`` (running or waiting):

* ``r.exec``: the estimated cost of its next work in the batch model of eq. 4-7, corrected online (§4.1,
  :class:`~semsched.latency.correction.CorrectedEstimator`, fed by the :meth:`on_step` callback with the steps
  the engine really ran): a decode costs ``a_d·lkv + b_d``; a request in its prompt (or recomputing after a
  preemption) costs its whole remaining prefill ``a_p·lq² + b_p·lq·lkv + c_p·lq``.
* ``r.remain``: the time left until its next token's TDG deadline (eq. 3): arrival + TTFT SLO + (i-1)·TPOT SLO
  for its i-th token. A token already past its deadline has a negative ``remain``; it stays in the queue (its
  later tokens can still be on time: deadlines are fixed, so a late request can catch up).
* ``r.density``: the gain of that token, ``w_r(i)`` (first-token or decode weight times the priority weight),
  over ``r.exec``.

The time budget is ``t_budget = max(min_r remain, η)`` (line 7; η defaults to the smallest TPOT SLO queued;
``max_budget_ms`` caps it when no request has a deadline soon, and with no deadline at all the engine's token
budget is the only limit). A request is URGENT when ``remain < γ·φ`` where φ is the load judgement: ``aggressive``
(φa, eq. 8: the batches the whole queue needs, ``t_budget / (t_budget - t_c) · Σ exec``), ``conservative`` (φc, eq.
9: the same up to the request's own position in deadline order) or ``prefill`` (φp, for prefill instances of a PD-
disaggregated cluster: ``Σ exec + |Q|·t_c``). URGENT requests go first by descending density, NORMAL ones by
ascending ``remain``; the batch is filled in that order from ``t_c`` until the budget is spent, a prompt taking the
largest chunk that fits what is left (GETMAXCHUNK). Ablations (the paper's Fig. 15): ``order=deadline`` (no
partition: everything NORMAL), ``order=density`` (everything URGENT), ``latency_aware=false`` (no time budget: the
engine's token budget; the order still uses the estimator).

How the plan reaches the engine through the core's hooks (the same in the simulator and inside vLLM):
``step_budget`` is the planned tokens, ``running_order`` the planned running requests in plan order (the others
hold their KV and compute nothing this step), and the waiting queue is re-keyed every step with each request's
position in the plan. The core serves running requests before waiting ones; the one place that matters is a
running prompt cut by GETMAXCHUNK (always the plan's last item): if waiting requests precede it in the plan it is
left out of this step, so it cannot take their tokens.

Weights: ``priority_weights`` per priority (0 most important; priorities past the list take its last value),
the paper's 2 and 1 by default. The first-token weight is ``first_token_weight``, or when unset the mean prompt
length over the mean output length of the requests seen so far (the paper's w_p:w_d setting, learned online).
"""

from __future__ import annotations

import bisect
import functools
import itertools
import math
import operator
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import ClassVar, Literal

import numpy as np

from semsched.core.policy import Policy, PolicyConfig, SchedulerView, SortKey, StepBudget
from semsched.core.request import Request, RequestState
from semsched.latency import AnalyticLatencyModel, load_profile
from semsched.latency.batch import BatchConfig, BatchLatencyModel
from semsched.latency.correction import CorrectedEstimator, CorrectionConfig
from semsched.latency.derive_profiles import derive_batch_profile
from semsched.policies.params import check_float, check_int, param
from semsched.policies.registry import register_policy
from semsched.policies.vllm_fcfs import is_waiting

#: η when neither the configuration nor any queued request's TPOT SLO gives one (ms)
DEFAULT_ETA_MS = 25.0
#: re-key the waiting queue at every step (its order is the plan's, which moves with time and load)
EVERY_STEP_S = 1e-6


@dataclass(frozen=True)
class SlideBatchingConfig(PolicyConfig):
    profile: str = param("a100-qwen1.5-7b-batch",
                         "latency profile the estimator starts from: a batch one (PROSERVE eq. 4-7), or an "
                         "analytic one it is fitted to; use the engine's own (semsched profile)")
    eta_ms: float | None = param(None, "lower bound of the time budget, η (ms), so batches stay efficient when a "
                                       "deadline is near or past; None: the smallest TPOT SLO in the queue "
                                       f"({DEFAULT_ETA_MS:g} ms when none has one)")
    max_budget_ms: float | None = param(None, "upper bound of the time budget (ms); None: the nearest deadline, "
                                              "or only the engine's token budget when no request has one")
    gamma: float = param(1.0, "aggressiveness γ: URGENT when remain < γ·φ (larger: more density-first)")
    phi: Literal["aggressive", "conservative", "prefill"] = param(
        "aggressive", "load judgement: aggressive (φa, eq. 8), conservative (φc, eq. 9), prefill (φp, PD prefill "
                      "instances)")
    order: Literal["slide", "deadline", "density"] = param(
        "slide", "slide (Alg. 1), or the ablations: deadline (all NORMAL) or density (all URGENT)")
    latency_aware: bool = param(True, "cap each step at the time budget (false: the engine's token budget, the "
                                      "paper's 'w/o latency-aware' ablation)")
    priority_weights: tuple[float, ...] = param((2.0, 1.0), "TDG weight of priority 0/1/2/... (the last applies "
                                                            "to every less important priority)")
    first_token_weight: float | None = param(None, "w_p, the first token's weight relative to a decode token "
                                                   "(None: mean prompt / mean output length, learned online)")
    min_chunk_tokens: int = param(32, "smallest prompt chunk worth a step unless it completes the prompt")
    correction: bool = param(True, "correct the estimator online from the steps the engine ran (§4.1)")
    momentum: float = param(0.9, "momentum θ of the correction factor")
    window_s: float = param(1.0, "engine time (s) whose steps the correction averages")

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.eta_ms is not None:
            check_float("eta_ms", self.eta_ms, 0.0, 3_600_000.0)
        if self.max_budget_ms is not None:
            check_float("max_budget_ms", self.max_budget_ms, max(self.eta_ms or 0.0, 1e-3), 3_600_000.0)
        check_float("gamma", self.gamma, 0.0, 1e6)
        if not self.priority_weights:
            raise ValueError("priority_weights must list at least one weight")
        for index, weight in enumerate(self.priority_weights):
            check_float(f"priority_weights[{index}]", weight, 0.0, 1e9)
        if self.first_token_weight is not None:
            check_float("first_token_weight", self.first_token_weight, 0.0, 1e9)
        check_int("min_chunk_tokens", self.min_chunk_tokens, 1, 2**31 - 1)
        self.correction_config()  # its own checks, now

    def correction_config(self) -> CorrectionConfig:
        return CorrectionConfig(momentum=self.momentum, window_s=self.window_s, enabled=self.correction)


@dataclass(frozen=True, slots=True)
class SlidePlan:
    """One step's plan: what Algorithm 1 chose at ``time_s`` (read by tests and the experiment's timelines)."""

    time_s: float
    budget_s: float  # t_budget (inf: no time limit)
    estimated_s: float  # t_batch of the chosen requests, t_c included
    tokens: int  # planned tokens (a decode counts one)
    running: tuple[Request, ...]  # the chosen running requests, in plan order
    chosen: tuple[tuple[str, int], ...]  # (request id, tokens) of every chosen request, in plan order
    rank: dict[str, int]  # each unfinished request's position in the sorted queue (complete: every one)
    ranked: tuple[Request, ...]  # those requests in that order
    num_urgent: int
    num_normal: int
    #: False for a plan made on the running requests alone (none waiting could start): ``rank`` and ``ranked``
    #: then hold only the running ones, and ``waiting`` gives the waiting ones in order, when asked
    complete: bool = True
    waiting: Callable[[], Iterator[Request]] | None = None


_FIRST, _SECOND, _REQUEST_ID = operator.itemgetter(0), operator.itemgetter(1), operator.attrgetter("request_id")


@functools.cache
def batch_model(profile: str) -> BatchLatencyModel:
    """The estimator's starting model: a batch profile as it is, or eq. 4-7 least-squares fitted to an analytic
    profile's step times on a fixed grid of batches (``semsched.latency.derive_profiles``; once per process)."""
    model = load_profile(profile)  # an unknown profile fails here, when the policy is built
    if isinstance(model, BatchLatencyModel):
        return model
    if isinstance(model, AnalyticLatencyModel):
        fitted, _report = derive_batch_profile(profile)
        return fitted
    raise ValueError(f"profile {profile!r}: slide-batching needs a batch profile (PROSERVE eq. 4-7) or an "
                     "analytic one to fit it to")


@register_policy
class SlideBatching(Policy):
    """PROSERVE's SlideBatching (Algorithm 1): a time-budgeted batch ordered by density or by deadline.

    starvation: possible: URGENT requests go by density, so a long prompt (low density) yields to every denser
    urgent request, and NORMAL ones by deadline, so a request without SLOs waits behind every one with them.
    """

    name: ClassVar[str] = "slide-batching"
    config_cls: ClassVar[type[PolicyConfig]] = SlideBatchingConfig
    rekey_interval_s: ClassVar[float | None] = EVERY_STEP_S
    config: SlideBatchingConfig

    def __init__(self, config: PolicyConfig | None = None) -> None:
        super().__init__(config)
        cfg = self.config
        self.estimator = CorrectedEstimator(batch_model(cfg.profile), cfg.correction_config())
        self._live: dict[str, Request] = {}
        self._seq: dict[str, int] = {}  # each live request's arrival order at this policy (the sort's last tie)
        self._next_seq = 0
        #: the live requests not running as far as the policy knows (arrived or preempted; those the engine has
        #: admitted since leave at the next plan, which reads the running ones from the engine's view)
        self._waiting: dict[str, Request] = {}
        self._waiting_version = 0
        self._waiting_stats: _WaitingStats | None = None
        self._running_cache: tuple[tuple[int, ...], list[Request], _Static, np.ndarray] | None = None
        #: the running requests (their id()s) that the waiting set was last brought up to date with; None after a
        #: preemption or a request left (the only events that can make the next sync differ for the same set)
        self._synced_running: tuple[int, ...] | None = None
        self._plan: SlidePlan | None = None
        self._engine_budget: StepBudget | None = None  # the last one a hook was given (waiting_key has none)
        self._view: SchedulerView | None = None  # the engine's state, from the last hook that gave it
        self._prompt_tokens_seen = 0
        self._arrivals_seen = 0
        self._output_tokens_finished = 0
        self._finished_seen = 0

    # ---- bookkeeping -------------------------------------------------------------------------------------
    def on_arrival(self, request: Request, now_s: float) -> None:
        self._live[request.request_id] = request
        self._seq[request.request_id] = self._next_seq
        self._next_seq += 1
        self._waiting[request.request_id] = request
        self._waiting_version += 1
        self._plan = None  # (several arrivals may share an instant: the next hook plans with all of them)
        self._prompt_tokens_seen += request.prompt_tokens
        self._arrivals_seen += 1

    def on_finish(self, request: Request, now_s: float) -> None:
        self._forget(request.request_id)
        self._output_tokens_finished += request.num_output_tokens
        self._finished_seen += 1

    def on_leave(self, request: Request) -> None:
        self._forget(request.request_id)
        self._plan = None

    def on_preempt(self, request: Request, now_s: float) -> None:
        if request.request_id in self._live:
            self._waiting[request.request_id] = request
            self._waiting_version += 1
            self._synced_running = None

    def _forget(self, request_id: str) -> None:
        self._synced_running = None
        self._live.pop(request_id, None)
        self._seq.pop(request_id, None)
        if self._waiting.pop(request_id, None) is not None:
            self._waiting_version += 1

    def on_step(self, prefill: Sequence[tuple[int, int]], num_decode: int, decode_context_tokens: int,
                duration_s: float, now_s: float) -> None:
        self.estimator.observe(prefill, num_decode, decode_context_tokens, duration_s, now_s)

    def first_token_weight(self) -> float:
        """w_p: configured, or mean prompt over mean output length so far (1 before anything finished)."""
        if self.config.first_token_weight is not None:
            return self.config.first_token_weight
        if not self._finished_seen or not self._output_tokens_finished:
            return 1.0
        mean_prompt = self._prompt_tokens_seen / self._arrivals_seen
        return mean_prompt / (self._output_tokens_finished / self._finished_seen)

    def priority_weight(self, priority: int) -> float:
        weights = self.config.priority_weights
        return weights[min(max(priority, 0), len(weights) - 1)]

    # ---- hooks -------------------------------------------------------------------------------------------
    def waiting_key(self, request: Request, now_s: float) -> SortKey:
        rank = self._complete_plan(now_s).rank.get(request.request_id)
        return (math.inf if rank is None else float(rank), request.arrival_time_s)

    def waiting_order(self, view: SchedulerView, now_s: float) -> Iterator[Request]:
        """The waiting requests in plan order (those chosen first): the order ``waiting_key`` gives, without
        re-keying the queue every step."""
        plan = self.plan(now_s, view.budget, view)
        if plan.waiting is not None:
            return plan.waiting()
        return (r for r in plan.ranked if is_waiting(r))

    def step_budget(self, view: SchedulerView, now_s: float) -> StepBudget | None:
        plan = self.plan(now_s, view.budget, view)
        if not self.config.latency_aware or not plan.rank:
            return None
        return StepBudget(max(1, plan.tokens), view.budget.max_num_seqs)

    def running_order(self, running: Sequence[Request], view: SchedulerView, now_s: float) -> Sequence[Request]:
        plan = self.plan(now_s, view.budget, view)
        if not self.config.latency_aware:  # no time budget: every running request, in plan order
            return sorted(running, key=lambda r: plan.rank.get(r.request_id, len(plan.rank)))
        chosen = plan.running
        if chosen == tuple(running):  # (requests compare by identity)
            return running  # (already in plan order, every one chosen: the caller need not reorder)
        here = {id(r) for r in running}
        return [r for r in chosen if id(r) in here]

    def victim_key(self, request: Request) -> SortKey:
        """Under KV pressure the request that ranks last in the current plan goes first."""
        plan = self._plan
        rank = plan.rank.get(request.request_id) if plan is not None else None
        if rank is None and plan is not None and not plan.complete:
            rank = self._complete_plan(plan.time_s).rank.get(request.request_id)
        return (math.inf if rank is None else float(rank), request.arrival_time_s)

    # ---- Algorithm 1 -------------------------------------------------------------------------------------
    @property
    def last_plan(self) -> SlidePlan | None:
        """The plan of the latest step (None before the first)."""
        return self._plan

    def plan(self, now_s: float, budget: StepBudget | None = None, view: SchedulerView | None = None) -> SlidePlan:
        """The plan at ``now_s`` (computed once per instant; ``budget`` is the engine's token budget and
        sequence cap, ``view`` its KV state, each remembered from the last call that gave one)."""
        if budget is not None:
            self._engine_budget = budget
        if view is not None:
            self._view = view
        if self._plan is None or self._plan.time_s != now_s:
            self._plan = self._make_plan(now_s)
        return self._plan

    def _complete_plan(self, now_s: float) -> SlidePlan:
        """The plan at ``now_s`` with every unfinished request ranked (a plan made on the running requests
        alone is made again on all of them: the same choice, the waiting requests' ranks added)."""
        plan = self._plan
        if plan is None or plan.time_s != now_s or not plan.complete:
            plan = self._plan = self._full_plan(now_s)
        return plan

    def _unfinished(self) -> list[Request]:
        live = self._live
        ended = [i for i, r in live.items() if r.state.is_terminal]
        for request_id in ended:  # rejected, dropped or aborted requests end without on_finish
            self._forget(request_id)
        return list(live.values())

    def _make_plan(self, now_s: float) -> SlidePlan:
        view = self._view
        if view is not None:
            try:
                plan = self._running_plan(now_s, view)
            except _NeedsFullPlan:
                plan = None
            if plan is not None:
                return plan
        return self._full_plan(now_s)

    def _full_plan(self, now_s: float) -> SlidePlan:
        requests = self._unfinished()
        if not requests:
            return SlidePlan(now_s, math.inf, 0.0, 0, (), (), {}, (), 0, 0)
        return self._plan_of(requests, _Queue.of(requests, self, now_s), now_s)

    def _plan_of(self, requests: Sequence[Request], queue: _Queue, now_s: float) -> SlidePlan:
        """Algorithm 1 on every unfinished request (``requests``, in arrival order at this policy)."""
        budget_s = self._budget_s(queue)
        urgent = self._urgent(queue, budget_s)
        order = _sorted(queue, urgent)
        chosen, estimated_s = self._fill(requests, queue, order, budget_s)
        chosen = self._cut_last(requests, chosen, queue.prefill)
        running = [requests[i] for i, _ in chosen if requests[i].state is RequestState.RUNNING]
        if len(running) < len(chosen) and running and self._is_cut(requests, chosen[-1]) \
                and requests[chosen[-1][0]].state is RequestState.RUNNING:
            chosen, running = chosen[:-1], running[:-1]  # a cut running prompt would take waiting tokens
        first = [i for i, _ in chosen]
        taken = set(first)
        ranked = first + [i for i in order.tolist() if i not in taken]
        rank = {requests[i].request_id: position for position, i in enumerate(ranked)}
        return SlidePlan(
            time_s=now_s, budget_s=budget_s, estimated_s=estimated_s, tokens=sum(t for _, t in chosen),
            running=tuple(running), chosen=tuple((requests[i].request_id, t) for i, t in chosen), rank=rank,
            ranked=tuple(requests[i] for i in ranked),
            num_urgent=int(urgent.sum()), num_normal=int(len(requests) - urgent.sum()),
        )

    def _running_plan(self, now_s: float, view: SchedulerView) -> SlidePlan | None:
        """The plan of :meth:`_full_plan`, made on the running requests alone when no waiting request can be in
        it (no sequence slot is free, or none's whole sequence fits the blocks it may take), so a step costs
        O(running + log waiting), not a walk over the queue. What the waiting requests add to it comes from
        :class:`_WaitingStats` (kept while the waiting set does not change): the nearest deadline and smallest
        TPOT SLO exactly, and the URGENT threshold's sum of costs within a bound on its rounding; when a request's
        ``remain`` lies within that bound of the threshold (or a case only the full plan covers comes up), None
        or :class:`_NeedsFullPlan`: the full plan decides. None when this shortcut does not apply."""
        cfg = self.config
        if not hasattr(view, "running_requests"):
            return None  # a partial view (a test's): only the full plan, which reads each request's state
        running = view.running_requests()
        key = tuple(map(id, running))
        if not self._sync_waiting(running, view, key):
            return None
        stats = self._current_waiting_stats(view.block_size)
        requests, static, seqs = self._running_static(running, key)
        n = len(requests)
        computed = np.fromiter((r.num_computed_tokens for r in requests), np.float64, n)
        outputs = np.fromiter((r.num_output_tokens for r in requests), np.float64, n)
        engine = self._engine_budget
        max_num_seqs = engine.max_num_seqs if engine is not None else 2**31
        if not n or (cfg.order == "slide" and cfg.phi != "aggressive") \
                or _waiting_may_start(requests, stats, view, max_num_seqs):
            return self._merged_plan(now_s, (requests, static, seqs, computed, outputs), stats)
        queue = _Queue.build(static, computed, outputs, np.ones(n, dtype=bool), self, now_s)
        room = _StartRoom(queue, None, max_num_seqs)  # (all started: no KV check is asked of it)
        budget_s = self._budget_s_with(queue, stats, now_s)
        beta = self.estimator.beta
        if stats.size and not beta * stats.min_cost_s >= 1e-9:
            return None  # a waiting cost floored at 1e-9: the sum below would not be beta times theirs
        urgent, threshold_s, num_urgent_waiting = self._urgent_with(queue, stats, budget_s, now_s)
        order = _sorted(queue, urgent)
        chosen, estimated_s = self._fill(requests, queue, order, budget_s, room=room)
        chosen = self._cut_last(requests, chosen, queue.prefill)
        first = list(map(_FIRST, chosen))
        if len(first) < n:
            taken = set(first)
            first += [i for i in order.tolist() if i not in taken]
        ranked = tuple(map(requests.__getitem__, first))  # (all running: a cut prompt takes no waiting tokens)
        ids = list(map(_REQUEST_ID, ranked))
        num_urgent = int(urgent.sum()) + num_urgent_waiting
        size = queue.size + stats.size
        tokens = list(map(_SECOND, chosen))
        return SlidePlan(
            time_s=now_s, budget_s=budget_s, estimated_s=estimated_s, tokens=sum(tokens),
            running=ranked[:len(chosen)], chosen=tuple(zip(ids, tokens, strict=False)),
            rank=dict(zip(ids, range(n), strict=True)), ranked=ranked, num_urgent=num_urgent,
            num_normal=size - num_urgent, complete=False,
            waiting=functools.partial(self._waiting_in_order, stats, now_s, threshold_s),
        )

    def _merged_plan(self, now_s: float, running: _RunningColumns, stats: _WaitingStats) -> SlidePlan:
        """The full plan, its queue put together from the running requests' columns and the waiting ones'
        (kept while the waiting set stays), in the full plan's order (arrival at this policy)."""
        requests_r, static_r, seqs_r, computed_r, outputs_r = running
        order = np.argsort(np.concatenate((seqs_r, stats.seqs)), kind="stable")
        every = (*requests_r, *stats.requests)
        requests = [every[i] for i in order.tolist()]
        if not requests:
            return SlidePlan(now_s, math.inf, 0.0, 0, (), (), {}, (), 0, 0)
        started = np.concatenate((np.ones(len(requests_r), dtype=bool), np.zeros(stats.size, dtype=bool)))
        queue = _Queue.build(
            _Static.merged(static_r, stats.static, order), np.concatenate((computed_r, stats.computed))[order],
            np.concatenate((outputs_r, stats.outputs))[order], started[order], self, now_s,
        )
        return self._plan_of(requests, queue, now_s)

    def _running_static(self, running: Sequence[Request],
                        key: tuple[int, ...]) -> tuple[Sequence[Request], _Static, np.ndarray]:
        """The running requests in the full plan's index order (arrival at this policy), their static
        columns and arrival order, kept while the running set (``key``: their id()s) does not change."""
        cached = self._running_cache
        if cached is None or cached[0] != key:
            seq = self._seq
            ordered = sorted(running, key=lambda r: seq[r.request_id])
            seqs = np.fromiter((seq[r.request_id] for r in ordered), np.int64, len(ordered))
            cached = self._running_cache = (key, ordered, _Static.of(ordered, self), seqs)
        return cached[1], cached[2], cached[3]

    def _sync_waiting(self, running: Sequence[Request], view: SchedulerView, key: tuple[int, ...]) -> bool:
        """Bring the waiting set up to date with the engine's running requests (``key``: their id()s); False when
        the two do not add up to the live requests (then the full plan, which reads every request's state,
        decides). The same running requests as at the last sync, with no preemption or departure since, need no
        walk: each is live and none is waiting (arrivals only add waiting requests)."""
        live, waiting = self._live, self._waiting
        if key == self._synced_running and len(waiting) + len(running) == len(live) \
                and len(waiting) == view.num_waiting:
            return True
        for request in running:
            request_id = request.request_id
            if request_id not in live:
                return False
            if waiting.pop(request_id, None) is not None:
                self._waiting_version += 1
        if len(waiting) + len(running) == len(live) and len(waiting) == view.num_waiting:
            self._synced_running = key
            return True
        self._unfinished()  # requests ended without on_finish (aborted, dropped) leave
        waiting = self._waiting
        if len(waiting) + len(running) == len(self._live) and len(waiting) == view.num_waiting:
            self._synced_running = key
            return True
        return False

    def _current_waiting_stats(self, block_size: int) -> _WaitingStats:
        stats = self._waiting_stats
        if stats is None or stats.version != self._waiting_version or stats.block_size != block_size:
            stats = self._waiting_stats = _WaitingStats.of(self, block_size)
        return stats

    def _budget_s_with(self, queue: _Queue, stats: _WaitingStats, now_s: float) -> float:
        """:meth:`_budget_s` of the whole queue: the running requests' ``queue`` and the waiting ``stats``."""
        cfg = self.config
        budget_s = float(queue.remain.min())
        if stats.size:
            budget_s = min(budget_s, stats.deadlines_s[0] - now_s)  # (x - now is monotone in x)
        if cfg.max_budget_ms is not None:
            budget_s = min(budget_s, cfg.max_budget_ms / 1e3)
        if cfg.eta_ms is not None:
            eta_s = cfg.eta_ms / 1e3
        else:
            tpot = min(float(queue.tpot_s.min()), stats.min_tpot_s)
            eta_s = tpot if math.isfinite(tpot) else DEFAULT_ETA_MS / 1e3
        return max(budget_s, eta_s)

    def _urgent_with(self, queue: _Queue, stats: _WaitingStats, budget_s: float,
                     now_s: float) -> tuple[np.ndarray, float, int]:
        """:meth:`_urgent` of the whole queue: the running requests' flags, the threshold ``remain`` is held
        against (nan: none urgent, -inf: all) and how many waiting requests are URGENT."""
        cfg = self.config
        if cfg.order != "slide":
            every = cfg.order == "density"
            return np.full(queue.size, every), (math.inf if every else math.nan), stats.size if every else 0
        t_c = self.estimator.t_c
        scale = budget_s / (budget_s - t_c) if budget_s > t_c else math.inf
        if math.isinf(budget_s):
            scale = 1.0
        # the full plan's sum runs over every request in its own order: this one is equal up to rounding, so a
        # request within the rounding bound of the threshold is left to the full plan
        total_s = float(queue.exec_s.sum()) + self.estimator.beta * stats.cost_s
        threshold_s = cfg.gamma * (scale * total_s)
        if math.isinf(scale) or threshold_s == 0.0:
            slack_s = 0.0  # the threshold is exact: inf, nan or 0 whatever the sum
        else:
            slack_s = abs(threshold_s) * (8 * (queue.size + stats.size + 16) * 2.0**-53)
        with np.errstate(invalid="ignore"):
            urgent: np.ndarray = queue.remain < threshold_s
            if slack_s and np.any(np.abs(queue.remain - threshold_s) <= slack_s):
                raise _NeedsFullPlan
        num_urgent = stats.count_remain_below(threshold_s, now_s)
        if slack_s and stats.count_remain_below(threshold_s - slack_s, now_s) != \
                stats.count_remain_at_most(threshold_s + slack_s, now_s):
            raise _NeedsFullPlan
        return urgent, threshold_s, num_urgent

    def _waiting_in_order(self, stats: _WaitingStats, now_s: float, threshold_s: float) -> Iterator[Request]:
        """The waiting requests of a running-only plan in the full plan's order (URGENT by density, then by
        deadline), sorted when first asked for: the core asks only when it has tokens left to admit with."""
        if not stats.size:
            return
        with np.errstate(invalid="ignore"):
            remain = stats.deadlines_unsorted_s - now_s
            urgent = remain < threshold_s
        if self.config.order != "slide":
            urgent = np.full(stats.size, self.config.order == "density")
        exec_s = np.maximum(self.estimator.beta * stats.costs_s, 1e-9)
        token_weight = np.where(stats.outputs == 0, self.first_token_weight(), 1.0)
        density = token_weight * stats.priority_weights / exec_s
        secondary = np.where(urgent, -density, remain)
        order = np.lexsort((stats.seqs, stats.arrival_s, secondary, ~urgent))
        for i in order.tolist():
            request = stats.requests[i]
            if is_waiting(request):
                yield request

    @staticmethod
    def _is_cut(requests: Sequence[Request], item: tuple[int, int]) -> bool:
        index, tokens = item
        return tokens < requests[index].num_uncomputed_tokens and requests[index].num_uncomputed_tokens > 1

    def _cut_last(self, requests: Sequence[Request], chosen: list[tuple[int, int]],
                  prefill: np.ndarray) -> list[tuple[int, int]]:
        """The core gives a request ``min(uncomputed, tokens left)``: a prompt cut by GETMAXCHUNK must come last,
        or it takes the tokens planned for those after it (decodes that still fitted the budget). Only a
        request in its prompt (``prefill``) can be cut."""
        if not prefill.any():
            return chosen
        flags = prefill.tolist()
        cut = [item for item in chosen if flags[item[0]] and self._is_cut(requests, item)]
        if not cut:
            return chosen
        return [item for item in chosen if item not in cut] + cut

    def _budget_s(self, queue: _Queue) -> float:
        """t_budget = max(min remain, η), capped by ``max_budget_ms``; inf when nothing has a deadline."""
        cfg = self.config
        budget_s = float(queue.remain.min())
        if cfg.max_budget_ms is not None:
            budget_s = min(budget_s, cfg.max_budget_ms / 1e3)
        return max(budget_s, self.eta_s(queue))

    def eta_s(self, queue: _Queue) -> float:
        """η: configured, else the smallest TPOT SLO among the queued requests. The paper keeps t_budget within
        [η, max TPOT SLO]; with η below the TPOT SLO a late token shrinks every step to η, and the per-step
        constant t_c then eats the engine (azure-conv at 0.8x capacity, TTFT 3.4 s / TPOT 69 ms SLOs: η = 25 ms
        attained 37 % of SLOs, η = the TPOT SLO 74 %, FCFS 53 %)."""
        if self.config.eta_ms is not None:
            return self.config.eta_ms / 1e3
        tpot = float(queue.tpot_s.min())
        return tpot if math.isfinite(tpot) else DEFAULT_ETA_MS / 1e3

    def _urgent(self, queue: _Queue, budget_s: float) -> np.ndarray:
        cfg = self.config
        if cfg.order != "slide":
            return np.full(queue.size, cfg.order == "density")
        t_c = self.estimator.t_c
        if cfg.phi == "prefill":
            phi = np.full(queue.size, float(queue.exec_s.sum()) + queue.size * t_c)
        else:
            # steps per unit of work: a step holds budget - t_c of it (eq. 8-9); none when budget <= t_c
            scale = budget_s / (budget_s - t_c) if budget_s > t_c else math.inf
            if math.isinf(budget_s):
                scale = 1.0
            if cfg.phi == "aggressive":
                phi = np.full(queue.size, scale * float(queue.exec_s.sum()))
            else:
                by_deadline = np.lexsort((queue.arrival_s, queue.remain))
                phi = np.empty(queue.size)
                phi[by_deadline] = scale * np.cumsum(queue.exec_s[by_deadline])
        with np.errstate(invalid="ignore"):  # inf remain against inf phi: not urgent
            urgent: np.ndarray = queue.remain < cfg.gamma * phi
        return urgent

    def _fill(self, requests: Sequence[Request], queue: _Queue, order: np.ndarray, budget_s: float,
              room: _StartRoom | None = None) -> tuple[list[tuple[int, int]], float]:
        """Lines 14-18: take requests in order from t_c until the time budget (and the engine's token budget
        and sequence cap) is spent; a prompt takes the largest chunk that fits (GETMAXCHUNK)."""
        engine = self._engine_budget
        tokens_left = engine.max_num_batched_tokens if engine is not None else 2**31
        seqs_left = engine.max_num_seqs if engine is not None else 2**31
        if not self.config.latency_aware:
            budget_s = math.inf
        estimated_s = self.estimator.t_c
        chosen: list[tuple[int, int]] = []
        partial = room is not None  # the queue holds the running requests only
        if room is None:
            room = _StartRoom(queue, self._view, seqs_left)
        order_list = order.tolist()
        if 0 < queue.size <= min(tokens_left, seqs_left) and not queue.prefill.any() and queue.started.all():
            # every request a running decode (one token each, within the token budget and the sequence cap):
            # the loop below takes each one whose cost fits what is left, in order; when all fit, its sums
            # (accumulated in the same order, so the same floats) give the answer without the loop
            # (the sums only grow, costs being positive, and a NaN carries to the last: the last sum before an
            # item is under the budget exactly when every one is; with no budget every cost fits what is left)
            ordered_s = queue.exec_s[order]
            totals = np.cumsum(np.concatenate(([estimated_s], ordered_s)))
            if totals[-2] < budget_s and (math.isinf(budget_s)
                                          or not bool(np.any(ordered_s > budget_s - totals[:-1]))):
                return list(zip(order_list, itertools.repeat(1), strict=False)), float(totals[-1])
        cut = False  # after a prompt cut to the budget, only decodes (one fractional item, as in a knapsack)
        started, prefill, exec_s = queue.started.tolist(), queue.prefill.tolist(), queue.exec_s.tolist()
        for i in order_list:
            if estimated_s >= budget_s or tokens_left <= 0 or seqs_left <= 0:
                break
            if not started[i] and not room.admits(i, requests[i]):
                continue  # the KV cache could not hold its whole prompt beside the prompts already started
            left_s = budget_s - estimated_s
            if not prefill[i]:
                if exec_s[i] > left_s:
                    continue
                room.take(i)
                chosen.append((i, 1))
                estimated_s += exec_s[i]
                tokens_left -= 1
                seqs_left -= 1
                continue
            request = requests[i]
            tokens = 0 if cut else self._max_chunk(request, left_s, tokens_left)
            if tokens == 0:
                continue
            cut = tokens < request.num_uncomputed_tokens
            room.take(i)
            chosen.append((i, tokens))
            estimated_s += self.estimator.chunk_time_s(tokens, request.num_computed_tokens)
            tokens_left -= tokens
            seqs_left -= 1
        if not chosen and queue.size:  # progress: the first request in order that can start, even past the budget
            i = next((j for j in order_list if started[j] or room.admits(j, requests[j])), order_list[0])
            request = requests[i]
            if partial and prefill[i]:
                raise _NeedsFullPlan  # the overrun chunk reads every request's deadline
            tokens = 1 if not prefill[i] else self._overrun_chunk(request, queue, tokens_left)
            chosen.append((i, tokens))
            estimated_s += exec_s[i] if not prefill[i] else \
                self.estimator.chunk_time_s(tokens, request.num_computed_tokens)
        return chosen, estimated_s

    def _overrun_chunk(self, request: Request, queue: _Queue, tokens_left: int) -> int:
        """The chunk of a prompt that must run although no chunk fits the time budget (its smallest chunk costs
        more than the budget at its context). While a decode waits, ``min_chunk_tokens`` (the least delay for it);
        with none, the step delays only first tokens, so the chunk may last until the nearest first-token deadline
        still ahead (the engine's token budget when every one has passed): a long prompt then needs a few steps,
        not thousands of ``min_chunk_tokens`` each."""
        smallest = min(request.num_uncomputed_tokens, max(1, tokens_left), self.config.min_chunk_tokens)
        if not queue.prefill.all():
            return smallest
        ahead = queue.remain[queue.remain > 0]
        limit_s = float(ahead.min()) if ahead.size else math.inf
        return max(smallest, self._max_chunk(request, limit_s - self.estimator.t_c, tokens_left))

    def _max_chunk(self, request: Request, left_s: float, tokens_left: int) -> int:
        """GETMAXCHUNK: the most prompt tokens whose estimated chunk time fits ``left_s`` (0 when fewer than
        ``min_chunk_tokens`` fit and they would not complete the prompt)."""
        cached, most = request.num_computed_tokens, min(request.num_uncomputed_tokens, tokens_left)
        chunk_s = self.estimator.chunk_time_s
        if math.isinf(left_s) or chunk_s(most, cached) <= left_s:
            return most
        low = self._chunk_within(left_s, cached, most)
        return low if low >= min(self.config.min_chunk_tokens, most) else 0

    def _chunk_within(self, left_s: float, cached: int, most: int) -> int:
        """The largest chunk c < ``most`` with ``chunk_time_s(c, cached) <= left_s`` (0 if none), where
        ``chunk_time_s(most)`` does not fit: eq. 5 is a quadratic in c, solved, then the root's neighbours checked
        with the estimator itself, so the answer is the one a search with it would find. A model that is not
        increasing in c (a negative fitted coefficient) is searched."""
        chunk_s = self.estimator.chunk_time_s
        config, beta = self.estimator.model.config, self.estimator.beta
        quad, lin = config.a_p, config.b_p * cached + config.c_p
        if quad >= 0 and lin >= 0 and quad + lin > 0 and beta > 0:
            const = config.d_p - left_s / beta
            if quad > 0:
                root = (-lin + math.sqrt(max(lin * lin - 4 * quad * const, 0.0))) / (2 * quad)
            else:
                root = -const / lin
            low = min(max(int(root), 0), most - 1)
            while low > 0 and chunk_s(low, cached) > left_s:
                low -= 1
            while low + 1 < most and chunk_s(low + 1, cached) <= left_s:
                low += 1
            return low if low > 0 or chunk_s(0, cached) <= left_s else 0
        low, high = 0, most  # chunk_s(low) fits, chunk_s(high) does not
        while high - low > 1:
            mid = (low + high) // 2
            if chunk_s(mid, cached) <= left_s:
                low = mid
            else:
                high = mid
        return low


@dataclass(frozen=True, slots=True)
class _Queue:
    """Per-request arrays of one plan (lines 2-6 of Algorithm 1)."""

    size: int
    prefill: np.ndarray  # bool: the next work is prompt (or recompute) tokens, not one decode
    exec_s: np.ndarray
    remain: np.ndarray
    density: np.ndarray
    arrival_s: np.ndarray
    tpot_s: np.ndarray
    started: np.ndarray  # bool: running, so it holds KV blocks
    num_tokens: np.ndarray  # prompt + output tokens so far
    computed: np.ndarray

    @classmethod
    def of(cls, requests: Sequence[Request], policy: SlideBatching, now_s: float) -> _Queue:
        n = len(requests)
        computed = np.fromiter((r.num_computed_tokens for r in requests), np.float64, n)
        outputs = np.fromiter((r.num_output_tokens for r in requests), np.float64, n)
        started = np.fromiter((r.state is RequestState.RUNNING for r in requests), bool, n)
        return cls.build(_Static.of(requests, policy), computed, outputs, started, policy, now_s)

    @classmethod
    def build(cls, static: _Static, computed: np.ndarray, outputs: np.ndarray, started: np.ndarray,
              policy: SlideBatching, now_s: float) -> _Queue:
        estimator = policy.estimator
        prefill, cost_s = _costs(computed, static.prompt, outputs, estimator.model.config)
        exec_s = estimator.beta * cost_s
        exec_s = np.maximum(exec_s, 1e-9)  # a fitted model may price a tiny step at zero or less
        remain = _deadlines(static, outputs) - now_s
        if outputs.size and outputs.min() > 0:  # every one past its first token: weight 1 for all
            density = static.priority_weights / exec_s
        else:
            token_weight = np.where(outputs == 0, policy.first_token_weight(), 1.0)
            density = token_weight * static.priority_weights / exec_s
        return cls(static.size, prefill, exec_s, remain, density, static.arrival_s, static.tpot_s, started,
                   static.prompt + outputs, computed)


@dataclass(frozen=True, slots=True)
class _Static:
    """The columns of a set of requests that do not change while they are in it."""

    ids: tuple[int, ...]  # id() of each request, to tell whether a set is the same
    size: int
    prompt: np.ndarray
    arrival_s: np.ndarray
    ttft_s: np.ndarray
    tpot_s: np.ndarray
    priority_weights: np.ndarray

    @classmethod
    def merged(cls, first: _Static, second: _Static, order: np.ndarray) -> _Static:
        """``first``'s rows then ``second``'s, taken in ``order``."""
        def column(a: np.ndarray, b: np.ndarray) -> np.ndarray:
            merged: np.ndarray = np.concatenate((a, b))[order]
            return merged
        ids = (*first.ids, *second.ids)
        return cls(
            tuple(ids[i] for i in order.tolist()), first.size + second.size, column(first.prompt, second.prompt),
            column(first.arrival_s, second.arrival_s), column(first.ttft_s, second.ttft_s),
            column(first.tpot_s, second.tpot_s), column(first.priority_weights, second.priority_weights),
        )

    @classmethod
    def of(cls, requests: Sequence[Request], policy: SlideBatching) -> _Static:
        n = len(requests)
        return cls(
            tuple(map(id, requests)), n,
            np.fromiter((r.prompt_tokens for r in requests), np.float64, n),
            np.fromiter((r.arrival_time_s for r in requests), np.float64, n),
            np.fromiter((math.inf if r.ttft_slo_s is None else r.ttft_slo_s for r in requests), np.float64, n),
            np.fromiter((math.inf if r.tpot_slo_s is None else r.tpot_slo_s for r in requests), np.float64, n),
            np.fromiter((policy.priority_weight(r.priority) for r in requests), np.float64, n),
        )


def _costs(computed: np.ndarray, prompt: np.ndarray, outputs: np.ndarray,
           config: BatchConfig) -> tuple[np.ndarray, np.ndarray]:
    """Each request's next work (prefill or not) and its cost in the base model, before the correction beta."""
    uncomputed = prompt + outputs - computed
    prefill = (uncomputed > 1) | (computed < prompt)
    decode_s = config.a_d * computed + config.b_d
    if not prefill.any():  # (the steady state: every one decoding)
        return prefill, decode_s
    prefill_s = (config.a_p * uncomputed**2 + config.b_p * uncomputed * computed + config.c_p * uncomputed
                 + config.d_p)
    return prefill, np.where(prefill, prefill_s, decode_s)


def _deadlines(static: _Static, outputs: np.ndarray) -> np.ndarray:
    """Each request's next token's deadline (eq. 3): arrival + TTFT SLO + outputs·TPOT SLO."""
    if outputs.size and outputs.min() > 0:  # (every one past its first token: no 0 times inf)
        offset_s = outputs * static.tpot_s
    else:
        with np.errstate(invalid="ignore"):  # 0 outputs times a missing TPOT SLO
            offset_s = np.where(outputs > 0, outputs * static.tpot_s, 0.0)
    deadline_s: np.ndarray = static.arrival_s + static.ttft_s + offset_s
    return deadline_s


#: the running requests' columns: requests (in arrival order), static columns, arrival order, computed, outputs
_RunningColumns = tuple[Sequence[Request], "_Static", np.ndarray, np.ndarray, np.ndarray]


class _NeedsFullPlan(Exception):
    """A running-only plan met a case it cannot decide exactly: the full plan decides."""


@dataclass(frozen=True, slots=True)
class _WaitingStats:
    """What the waiting requests add to a plan while none of them can be in it, kept until the waiting set
    changes (their deadlines and costs do not move while they wait; only ``now`` and beta do)."""

    version: int
    block_size: int
    size: int
    requests: tuple[Request, ...]
    deadlines_s: list[float]  # ascending
    deadlines_unsorted_s: np.ndarray  # in ``requests`` order, as the arrays below
    arrival_s: np.ndarray
    seqs: np.ndarray
    outputs: np.ndarray
    static: _Static
    computed: np.ndarray
    costs_s: np.ndarray  # base-model cost of the next work (exec_s is beta times it)
    priority_weights: np.ndarray
    cost_s: float  # their sum
    min_cost_s: float
    min_tpot_s: float
    min_blocks: dict[int, tuple[int, Request]]  # per priority: the fewest blocks a whole sequence needs, and whose

    @classmethod
    def of(cls, policy: SlideBatching, block_size: int) -> _WaitingStats:
        requests = tuple(policy._waiting.values())
        n = len(requests)
        static = _Static.of(requests, policy)
        computed = np.fromiter((r.num_computed_tokens for r in requests), np.float64, n)
        outputs = np.fromiter((r.num_output_tokens for r in requests), np.float64, n)
        _prefill, costs_s = _costs(computed, static.prompt, outputs, policy.estimator.model.config)
        deadline_s = _deadlines(static, outputs)
        seqs = np.fromiter((policy._seq[r.request_id] for r in requests), np.int64, n)
        arrival_s, tpot_s, weights = static.arrival_s, static.tpot_s, static.priority_weights
        min_blocks: dict[int, tuple[int, Request]] = {}
        for request in requests:
            blocks = -(-(request.prompt_tokens + request.num_output_tokens) // block_size)
            best = min_blocks.get(request.priority)
            if best is None or blocks < best[0]:
                min_blocks[request.priority] = (blocks, request)
        return cls(
            policy._waiting_version, block_size, n, requests, np.sort(deadline_s).tolist(), deadline_s, arrival_s,
            seqs, outputs, static, computed, costs_s, weights, float(costs_s.sum()) if n else 0.0,
            float(costs_s.min()) if n else math.inf, float(tpot_s.min()) if n else math.inf, min_blocks,
        )

    def count_remain_below(self, threshold_s: float, now_s: float) -> int:
        """How many have ``deadline - now < threshold_s`` (``deadline - now`` is monotone in the deadline)."""
        return bisect.bisect_left(self.deadlines_s, threshold_s, key=lambda d: d - now_s)

    def count_remain_at_most(self, threshold_s: float, now_s: float) -> int:
        return bisect.bisect_right(self.deadlines_s, threshold_s, key=lambda d: d - now_s)


def _waiting_may_start(running: Sequence[Request], stats: _WaitingStats, view: SchedulerView,
                       max_num_seqs: int) -> bool:
    """Whether a waiting request may be in the plan by :class:`_StartRoom`'s rule, asked before the running
    requests' columns are built: a sequence slot is free, and some priority's smallest whole sequence fits the
    blocks it may take once every started prompt has the blocks to complete (the plan's commitments only grow,
    so a waiting request shut out now stays out of this plan)."""
    if not stats.size or max_num_seqs - len(running) <= 0:
        return False
    block_size, committed = view.block_size, 0
    for request in running:
        computed, prompt, outputs = request.num_computed_tokens, request.prompt_tokens, request.num_output_tokens
        if prompt + outputs - computed > 1 or computed < prompt:  # in its prompt: blocks still to take
            committed += max(-(-(prompt + outputs) // block_size) - -(-computed // block_size), 0)
    return any(blocks <= view.available_blocks(request, admission=True) - committed
               for blocks, request in stats.min_blocks.values())


class _StartRoom:
    """Which requests may start without stranding the ones that have. A request not yet running is planned
    only if (1) a sequence slot is free beside the running requests, which keep theirs whether or not the plan
    serves them, and (2) its whole sequence fits the KV blocks left once every started prompt has the blocks to
    complete (vLLM 0.32's ``scheduler_reserve_full_isl`` rule, applied to the plan). Without (1) a plan can
    choose only waiting requests that the engine cannot admit, and the step is empty; without (2) a plan that
    keeps starting prompts whose first chunks fit the time budget fills the KV cache with half-computed prompts
    none of which can finish, and long-context traffic stops the engine. Without a view of the engine (a plan
    made before any hook gave one) only the slots are checked."""

    def __init__(self, queue: _Queue, view: SchedulerView | None, max_num_seqs: int) -> None:
        self._view = view
        self._started = queue.started
        self._free_slots = max_num_seqs - int(queue.started.sum())
        self._whole_blocks = np.zeros(queue.size, dtype=np.int64)
        self._committed = 0
        self._available: dict[int, int] = {}  # free blocks per priority (reservations differ), asked once a plan
        if view is None:
            return
        size = view.block_size
        self._whole_blocks = -(-queue.num_tokens.astype(np.int64) // size)  # ceil
        held = -(-queue.computed.astype(np.int64) // size)
        still_needed = np.where(queue.started & queue.prefill, self._whole_blocks - held, 0)
        self._committed = int(np.maximum(still_needed, 0).sum())

    def admits(self, index: int, request: Request) -> bool:
        """Whether request ``index`` (not running) may start now."""
        if self._free_slots <= 0:
            return False
        if self._view is None:
            return True
        available = self._available.get(request.priority)
        if available is None:
            available = self._available[request.priority] = self._view.available_blocks(request, admission=True)
        return int(self._whole_blocks[index]) <= available - self._committed

    def take(self, index: int) -> None:
        """Request ``index`` is in the plan: one not yet running takes a slot and commits its whole sequence."""
        if not self._started[index]:
            self._free_slots -= 1
            self._committed += int(self._whole_blocks[index])


def _sorted(queue: _Queue, urgent: np.ndarray) -> np.ndarray:
    """Line 13: URGENT first by descending density, then NORMAL by ascending remain; arrival breaks ties."""
    order: np.ndarray
    if not urgent.any():  # (the first key is the same for all: the order of the other two)
        order = np.lexsort((queue.arrival_s, queue.remain))
        return order
    secondary = np.where(urgent, -queue.density, queue.remain)
    order = np.lexsort((queue.arrival_s, secondary, ~urgent))
    return order
