"""Speculative decoding in the simulator: replayed logs, the fitted fallback, costs and KV accounting."""

from __future__ import annotations

import json

import numpy as np
import pytest

from semsched.core.request import Request, RequestState
from semsched.core.scheduler import Scheduler, SchedulerConfig
from semsched.latency import load_profile
from semsched.policies import make_policy
from semsched.sim.acceptance import fit_acceptance
from semsched.sim.engine import Instance, Simulation
from semsched.sim.router import make_router
from semsched.sim.runner import ClusterSpec, PolicyRun, build_simulation, run_policy
from semsched.sim.speculative import SpeculationError, SpeculationSpec, SpeculativeExecutor, speculation_preset
from semsched.workloads import Workload
from semsched.workloads.traces import data_dir
from tests.support import check_kv

LATENCY = load_profile("a100-qwen1.5-7b")
LOGS = {"eagle": "vicuna-7b-v1.3-eagle-float16-temperature-0.0.jsonl",
        "sps-68m": "vicuna-7b-v1.3-sps-68m-float16-temp-0.0.jsonl"}


def _log_turns(method: str) -> list[tuple[str, int, int, tuple[int, ...]]]:
    """(id, output tokens, logged steps, rounds) of every turn, parsed here independently of the loader."""
    turns = []
    with open(data_dir() / "spec_bench" / "model_answer" / LOGS[method]) as file:
        for line in file:
            row = json.loads(line)
            choice = row["choices"][0]
            start = 0
            for t, (steps, tokens) in enumerate(zip(choice["decoding_steps"], choice["new_tokens"], strict=True)):
                rounds = tuple(choice["accept_lengths"][start:start + steps])
                start += steps
                turns.append((f"{row['question_id']}-{t}", tokens, steps, rounds))
    return turns


def _simulate(requests: list[Request], spec: SpeculationSpec, **config: int) -> tuple[Simulation, Scheduler]:
    settings = {"max_num_seqs": 256, "num_gpu_blocks": 200_000, "max_num_batched_tokens": 1 << 20,
                "num_lookahead_tokens": spec.draft_tokens, **config}
    scheduler = Scheduler(SchedulerConfig(**settings), make_policy("fcfs"))
    simulation = Simulation([Instance(scheduler, executor=SpeculativeExecutor(LATENCY, spec))],
                            make_router("round-robin"))
    simulation.run(requests)
    return simulation, scheduler


@pytest.mark.parametrize("method", sorted(LOGS))
def test_replayed_logs_reproduce_every_turns_token_and_round_counts(method: str) -> None:
    turns = _log_turns(method)
    requests = [Request(rid, prompt_tokens=16, max_output_tokens=tokens, arrival_time_s=0.0, output_tokens=tokens,
                        accept_lengths=rounds) for rid, tokens, _, rounds in turns]
    spec = speculation_preset(method)
    simulation, scheduler = _simulate(requests, spec)
    executor = simulation.instances[0].executor
    assert isinstance(executor, SpeculativeExecutor)
    for request, (rid, tokens, steps, rounds) in zip(requests, turns, strict=True):
        assert request.state is RequestState.FINISHED
        assert request.num_output_tokens == tokens
        # the prefill emits the first token; a log whose last step yielded one token only appended the bonus
        # token of the step before (the authors' loop checks for the end before appending it): one round fewer
        assert executor.rounds_run(rid) == steps - (1 if rounds[-1] == 1 else 0)
        assert executor.yields_drawn(rid) == rounds[: executor.rounds_run(rid)]
        # every round's tokens share one emission time: the request has as many distinct times as steps
        assert len(set(request.token_times_s().tolist())) == 1 + executor.rounds_run(rid)
    check_kv(scheduler)
    assert scheduler.kv.num_free_gpu_blocks == scheduler.kv.num_gpu_blocks


def test_kv_blocks_stay_conserved_with_lookahead_under_pressure_and_swap() -> None:
    rng = np.random.default_rng(3)
    requests = [Request(str(i), prompt_tokens=int(rng.integers(20, 200)), max_output_tokens=300,
                        arrival_time_s=float(i) * 0.01, output_tokens=int(rng.integers(50, 300)),
                        accept_lengths=tuple(int(v) for v in rng.integers(1, 7, 200))) for i in range(40)]
    spec = speculation_preset("eagle")
    scheduler = Scheduler(SchedulerConfig(max_num_seqs=16, num_gpu_blocks=120, num_cpu_blocks=400, block_size=16,
                                          num_lookahead_tokens=spec.draft_tokens), make_policy("laps-sd"))
    executor = SpeculativeExecutor(LATENCY, spec)
    now, pending = 0.0, sorted(requests, key=lambda r: r.arrival_time_s)
    steps = 0
    while pending or scheduler.has_unfinished():
        while pending and pending[0].arrival_time_s <= now:
            scheduler.add_request(pending.pop(0), now)
        plan = scheduler.schedule(now)
        if plan.is_empty:
            now = pending[0].arrival_time_s if pending else now + 0.01
            continue
        for request in plan.decode:  # every decode holds room for its lookahead slots
            held = scheduler.kv.gpu_blocks_of(request) * scheduler.block_size
            assert held >= request.num_computed_tokens + 1 + spec.draft_tokens
        result = executor.execute(plan, now)
        scheduler.update(plan, result)
        check_kv(scheduler)
        now, steps = result.end_time_s, steps + 1
    assert all(r.state is RequestState.FINISHED for r in requests)
    assert sum(r.num_preemptions for r in requests) > 0  # the pool was tight enough to preempt
    assert scheduler.kv.num_free_gpu_blocks == scheduler.kv.num_gpu_blocks
    assert scheduler.kv.num_free_cpu_blocks == scheduler.kv.num_cpu_blocks


def test_requests_without_a_log_draw_the_same_rounds_under_every_policy() -> None:
    logs = [tuple(int(v) for v in np.random.default_rng(s).integers(1, 7, 80)) for s in range(30)]
    fitted = fit_acceptance(logs, draft_tokens=5)
    spec = speculation_preset("eagle", fitted, seed=11)
    workload = Workload.untiered("w", np.zeros(12), np.full(12, 50), np.arange(30, 150, 10))
    engine = SchedulerConfig(max_num_seqs=1, num_cpu_blocks=2000)
    cluster = ClusterSpec(profile="a100-qwen1.5-7b", scheduler=engine, speculation=spec)
    draws = []
    for policy in ("fcfs", "lp-sjf", "laps-sd", "las"):
        run = run_policy(workload, policy, cluster)
        assert all(r.state is RequestState.FINISHED for r in run.requests)
        # the token times differ by policy, but each request's tokens per round do not
        draws.append({r.request_id: np.unique(r.token_times_s(), return_counts=True)[1].tolist()[1:]
                      for r in run.requests})
    assert all(d == draws[0] for d in draws[1:])


def test_round_cost_grows_with_the_batch_and_with_drafts() -> None:
    from semsched.core.plan import BatchPlan

    def plan(batch: int) -> BatchPlan:
        requests = [Request(str(i), prompt_tokens=100, max_output_tokens=50, arrival_time_s=0.0)
                    for i in range(batch)]
        for request in requests:
            request.num_computed_tokens = 100
        return BatchPlan(0.0, decode=requests, decode_context_tokens=100 * batch)

    eagle = SpeculativeExecutor(LATENCY, speculation_preset("eagle"))
    sps = SpeculativeExecutor(LATENCY, speculation_preset("sps-68m"))
    decode_1 = LATENCY.step_time_s([], 1, 100)
    one = eagle.round_time_s(plan(1), {"0": 3})
    assert one > decode_1 * (1 + 5 * 0.077)  # verification + five draft steps
    per_request = [eagle.round_time_s(plan(b), {str(i): 3 for i in range(b)}) / b for b in (1, 8, 32)]
    totals = [eagle.round_time_s(plan(b), {str(i): 3 for i in range(b)}) for b in (1, 8, 32)]
    assert totals[0] < totals[1] < totals[2] and per_request[0] > per_request[2]  # grows, but batching pays
    # an adaptive drafter drafts as far as the batch's longest run needs
    assert sps.round_time_s(plan(1), {"0": 2}) < sps.round_time_s(plan(1), {"0": 12})
    assert eagle.round_time_s(plan(1), {"0": 1}) == eagle.round_time_s(plan(1), {"0": 6})


def test_bad_speculation_settings_and_logs_are_named() -> None:
    with pytest.raises(SpeculationError, match="draft_tokens"):
        SpeculationSpec("x", draft_tokens=0, draft_cost=0.3)
    with pytest.raises(SpeculationError, match="draft_cost"):
        SpeculationSpec("x", draft_tokens=3, draft_cost=-1)
    with pytest.raises(SpeculationError, match="unknown method 'medusa'"):
        speculation_preset("medusa")
    spec = speculation_preset("eagle")
    too_long = Request("r", prompt_tokens=8, max_output_tokens=20, arrival_time_s=0.0, output_tokens=20,
                       accept_lengths=(3, 9))
    with pytest.raises(SpeculationError, match="round of 9 tokens"):
        spec.check_log(too_long)
    unlogged = Request("u", prompt_tokens=8, max_output_tokens=20, arrival_time_s=0.0)
    with pytest.raises(SpeculationError, match="no accept_lengths"):
        spec.check_log(unlogged)
    with pytest.raises(ValueError, match="num_lookahead_tokens"):
        ClusterSpec(scheduler=SchedulerConfig(num_lookahead_tokens=2), speculation=spec)
    assert ClusterSpec(speculation=spec).scheduler.num_lookahead_tokens == 5


def test_presets_match_the_logs_wall_times() -> None:
    """The preset ratios are what a least-squares fit of the logs' wall times gives (see speculation_preset)."""
    fits = {}
    for name, file in {**LOGS, "vanilla": "vicuna-7b-v1.3-vanilla-float16-temp-0.0.jsonl"}.items():
        rows, walls = [], []
        with open(data_dir() / "spec_bench" / "model_answer" / file) as handle:
            for line in handle:
                choice = json.loads(line)["choices"][0]
                for steps, tokens, wall in zip(choice["decoding_steps"], choice["new_tokens"], choice["wall_time"],
                                               strict=True):
                    rows.append((steps, tokens))
                    walls.append(wall)
        fits[name] = np.linalg.lstsq(np.asarray(rows, float), np.asarray(walls), rcond=None)[0]
    decode = fits["vanilla"].sum()  # per token: one step and one token
    eagle, sps = speculation_preset("eagle"), speculation_preset("sps-68m")
    extra = 1.481e-4 / 1.330e-2  # the profile's compute of one draft token in verification, in decodes
    eagle_round = (fits["eagle"][0] + fits["eagle"][1] * 3.58) / decode  # at the log's mean yield
    assert eagle_round == pytest.approx(1 + eagle.draft_tokens * (extra + eagle.draft_cost), rel=0.05)
    assert fits["sps-68m"][1] / decode == pytest.approx(extra + sps.draft_cost, rel=0.05)
    assert fits["sps-68m"][0] / decode == pytest.approx(1 + sps.round_overhead, rel=0.05)


def test_replay_off_draws_every_request_from_the_fitted_model() -> None:
    logs = [tuple(int(v) for v in np.random.default_rng(s).integers(1, 7, 80)) for s in range(30)]
    fitted = fit_acceptance(logs, draft_tokens=5)
    with pytest.raises(SpeculationError, match="replay"):
        speculation_preset("eagle", replay=False)
    logged = (6,) * 40
    requests = [Request(str(i), prompt_tokens=8, max_output_tokens=120, arrival_time_s=0.0, output_tokens=120,
                        accept_lengths=logged) for i in range(4)]
    _, _ = _simulate(requests, speculation_preset("eagle", fitted, replay=False))
    for request in requests:  # a replayed log of sixes would give 1 + 20 emission times; the model gives more
        assert len(set(request.token_times_s().tolist())) > 21


@pytest.mark.parametrize("method", ["eagle", "sps-68m"])
@pytest.mark.parametrize("policy", ["fcfs", "laps-sd", "laps-sd:order=predicted;tiers=true", "las"])
def test_fast_forward_prices_stretches_of_rounds_ahead_with_per_round_outcomes(method: str, policy: str) -> None:
    """Each request's rounds are its own seeded draws, so a stretch of rounds is priced ahead: fewer events than
    steps, and every request's tokens, states, preemptions and drawn rounds as the per-round run gives them (on a
    cache small enough that stretches end where blocks run out)."""
    logs = [tuple(int(v) for v in np.random.default_rng(s).integers(1, 7, 80)) for s in range(30)]
    spec = speculation_preset(method, fit_acceptance(logs, draft_tokens=5), seed=5)
    rng = np.random.default_rng(8)
    arrivals = np.cumsum(rng.exponential(0.4, 40))
    workload = Workload.untiered("w", arrivals, rng.integers(16, 400, 40), rng.integers(20, 300, 40))
    engine = SchedulerConfig(num_gpu_blocks=160, num_cpu_blocks=64)
    cluster = ClusterSpec(profile="a100-qwen1.5-7b", scheduler=engine, speculation=spec)
    fast = run_policy(workload, policy, cluster, fast_forward=True)
    slow = run_policy(workload, policy, cluster, fast_forward=False)
    assert slow.result.num_events == slow.result.num_steps == fast.result.num_steps
    assert fast.result.num_events < fast.result.num_steps
    assert sum(r.num_preemptions for r in slow.requests) > 0  # the cache ran out: stretches end at its blocks

    def outcomes(run: PolicyRun) -> list[tuple[object, ...]]:
        return [(r.request_id, r.state, r.finish_reason, r.num_preemptions, r.token_times_s().tolist())
                for r in run.requests]

    assert outcomes(fast) == outcomes(slow)


def _half_speculating() -> ClusterSpec:
    spec = speculation_preset("eagle")
    return ClusterSpec(profile="a100-qwen1.5-7b", num_instances=2, router="round-robin", speculation=spec,
                       speculating_instances=1)


def test_speculating_instances_speculate_only_on_the_first_k() -> None:
    """Round-robin sends even ids to instance 0 (speculating) and odd ids to instance 1 (plain): every logged
    round of 6 tokens shows on instance 0 as one emission time, while instance 1 emits a token a step."""
    cluster = _half_speculating()
    requests = [Request(str(i), prompt_tokens=32, max_output_tokens=60, arrival_time_s=0.01 * i, output_tokens=60,
                        accept_lengths=(6,) * 10) for i in range(8)]
    simulation = build_simulation("fcfs", cluster)
    simulation.run(requests)
    speculative, plain = (instance.executor for instance in simulation.instances)
    assert isinstance(speculative, SpeculativeExecutor) and not isinstance(plain, SpeculativeExecutor)
    assert [i.scheduler.config.num_lookahead_tokens for i in simulation.instances] == [5, 0]
    for request in requests:
        assert request.state is RequestState.FINISHED
        times = len(set(request.token_times_s().tolist()))
        if int(request.request_id) % 2 == 0:
            assert speculative.rounds_run(request.request_id) > 0
            assert times == 1 + speculative.rounds_run(request.request_id) < 60
        else:
            assert speculative.rounds_run(request.request_id) == 0
            assert times == 60


def test_speculating_instances_are_checked() -> None:
    spec = speculation_preset("eagle")
    for bad in (-1, 3, True):
        with pytest.raises(ValueError, match="speculating_instances"):
            ClusterSpec(num_instances=2, speculation=spec, speculating_instances=bad)
    with pytest.raises(ValueError, match="speculating_instances: .* give speculation"):
        ClusterSpec(num_instances=2, speculating_instances=1)
    assert [ClusterSpec(num_instances=3, speculation=spec, speculating_instances=k).speculates(1)
            for k in (None, 0, 1, 2)] == [True, False, False, True]


@pytest.mark.parametrize("policy", ["fcfs", "laps-sd", "las"])
def test_fast_forward_matches_stepping_on_a_half_speculating_cluster(policy: str) -> None:
    logs = [tuple(int(v) for v in np.random.default_rng(s).integers(1, 7, 80)) for s in range(30)]
    spec = speculation_preset("eagle", fit_acceptance(logs, draft_tokens=5), seed=5)
    rng = np.random.default_rng(9)
    arrivals = np.cumsum(rng.exponential(0.2, 40))
    workload = Workload.untiered("w", arrivals, rng.integers(16, 400, 40), rng.integers(20, 300, 40))
    cluster = ClusterSpec(profile="a100-qwen1.5-7b", num_instances=2, router="least-outstanding",
                          scheduler=SchedulerConfig(num_gpu_blocks=160, num_cpu_blocks=64), speculation=spec,
                          speculating_instances=1)
    fast = run_policy(workload, policy, cluster, fast_forward=True)
    slow = run_policy(workload, policy, cluster, fast_forward=False)
    assert slow.result.num_events == slow.result.num_steps == fast.result.num_steps
    assert fast.result.num_events < fast.result.num_steps

    def outcomes(run: PolicyRun) -> list[tuple[object, ...]]:
        return [(r.request_id, r.state, r.finish_reason, r.num_preemptions, r.token_times_s().tolist())
                for r in run.requests]

    assert outcomes(fast) == outcomes(slow)
