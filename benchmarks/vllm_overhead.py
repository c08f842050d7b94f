"""vLLM overhead of semsched's scheduler: engine step time with ``semsched.vllm.Scheduler`` vs vLLM's own.

Two measurements, each comparing schedulers on the same workload in the same run:

1. **Engine step** (real forward passes): one ``vllm.LLM`` per scheduler on the same model (default: the tiny
   random-weight model, whose steps are a few milliseconds on CPU, so scheduler overhead weighs as much as it
   ever will), each in its own process (the CPU backend binds threads per process), all alive at once and
   running one at a time. Each round replays the same requests (seeded prompt and output
   lengths, priorities 0-3, ``ignore_eos``) through every engine in turn with ``add_request``/``step()``,
   timing every ``step()``; the engine order rotates between rounds so drift on this shared machine hits
   all of them alike. Reported: mean step time (total step wall / steps) per scheduler, median over rounds,
   and its ratio to vLLM's own scheduler. With ``fcfs`` both schedulers form identical batches, so that ratio
   is pure adapter overhead; ``priority-preempt`` also changes the order.
2. **Scheduler only** (no model): :class:`semsched.vllm.harness.SchedulerHarness` keeps ``--running`` decodes
   running and ``--waiting`` requests queued, and times ``schedule()`` + ``update_from_output()``; once with
   vLLM's synchronous scheduling (the CPU backend's) and once with its asynchronous scheduling (the GPU default:
   ``semsched.vllm.AsyncScheduler`` vs vLLM's ``AsyncScheduler``, a batch scheduled before the previous one's
   output arrives). Every scheduler is built first; the ``--scheduler-steps`` are then taken in
   ``--scheduler-rounds`` rounds over all of them, the order rotating, so the machine's drift reaches each alike.

3. **Arrival bursts** (``--arrivals``, no model): for each semsched policy, the wall time per request of adding
   ``--burst-sizes`` requests (each at its own time, as an engine adds them) to a queue behind a running batch,
   before the next step, with the garbage collector paused (its pauses otherwise land in one size or the other).
   vLLM keys every request it adds to the waiting queue, so a key that walks the queue makes a burst O(N^2).
   Reported: microseconds per request at each size and the growth from the smallest to the largest.
4. **KV-bound queues** (``--kv-queues``, no model): for each semsched policy, the median step (``schedule()`` +
   ``update_from_output()``, wall clock, garbage collector paused) with 16 requests decoding, sequence slots
   free, and ``--kv-queue-sizes`` requests waiting that the KV cache cannot take. That is a GPU engine's usual
   saturation: vLLM reads the queue at every step, so a policy that re-keys every waiting request there pays for
   the whole queue at every step. Reported: median ms per step at each size, the growth, and how many waiting
   requests were admitted meanwhile (what the few free blocks take, and what a policy that displaces running work
   admits: its steps then include that work). For a policy whose order drifts with time (``rekey_interval_s``),
   also one periodic re-key of the waiting queues at each size, timed alone: the adapter does it at the first step
   after each interval, so a queue that re-keys every request stalls that step for it, and a median step does not
   show it (the queues that key only what may have changed, by aging class or by when each key changes, pay per
   class and per key due). Then 1,000 more requests arrive and the re-key after them is timed: tiered files them
   into its classes there; the others paid at each arrival.

``--cpu-time`` times the scheduler-only steps by the thread's CPU time (``time.thread_time``) instead of the wall
clock: on a machine shared with other work, the time slices it takes otherwise land in whichever steps they hit.

With ``--slos`` every request of the scheduler-only state carries a TTFT and a TPOT SLO and arrives at the start
of the run (without it: no SLOs, arrival times in the past), so deadline-driven policies (slide-batching,
fairbatching, edf) plan with deadlines, as they do on real traffic.

Targets: engine step ratio <= 1.1 for every semsched policy measured (issue 3); scheduler-only ratio <= 1.05,
sync and async, for every semsched policy measured (issue 13; by default fcfs and priority-preempt; slide-batching
<= 1.1, issue 29). In the scheduler-only state every sequence slot is taken and the waiting requests (8 output
tokens, the least important priority, the latest arrivals) rank after the running ones for most policies, which
is the steady state of a saturated engine: what the adapter adds there is its per-step cost when nothing changes
(see "What it costs per step" in docs/vllm.md). A policy that ranks short or unserved requests first (srpt, and
by attained service las, laps-sd, fastserve, ltr) displaces running ones instead: about a third of its steps then
preempt, admit or finish, work vLLM's own scheduler never does here. Those steps are counted and shown ("steady
steps"), and the ratio is taken over the others (every step's median is printed beside it).

Run: ``.venv/bin/python benchmarks/vllm_overhead.py`` (about 2 minutes on 2 cores).
"""

from __future__ import annotations

import argparse
import math
import os
import random
import statistics
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")

from common import ResultTable, dump_json, make_console, target_line  # noqa: E402

TARGET_RATIO = 1.1
TARGET_SCHEDULER_RATIO = 1.05
#: arrival bursts and KV-bound queues: the cost at the largest size over the smallest's, at most (issue 29's rule)
TARGET_ARRIVAL_GROWTH = 1.5
TARGET_QUEUE_GROWTH = 1.5
#: scheduler-only targets of policies that plan more than a sort per step (issue 29: slide-batching's plan)
SCHEDULER_RATIO_OF = {"slide-batching": 1.1}
VLLM = "vllm"
#: ``--slos``: the SLOs every request of the scheduler-only state carries, loose enough that none is missed while
#: every scheduler takes its steps (a waiting request past its TTFT deadline would turn the state into a rush to
#: admit it): deadline-driven policies rank and budget by them, as on real traffic
SLO_TTFT_MS = 600_000.0
SLO_TPOT_MS = 100.0


@dataclass(frozen=True)
class Job:
    request_id: str
    prompt_token_ids: list[int]
    max_tokens: int
    priority: int


def make_jobs(num_requests: int, seed: int) -> list[Job]:
    rng = random.Random(seed)
    return [
        Job(f"r{i}", [rng.randrange(100, 31000) for _ in range(rng.randint(32, 256))], rng.randint(32, 128),
            rng.randrange(4))
        for i in range(num_requests)
    ]


def make_llm(model: str, policy: str, args: argparse.Namespace) -> Any:
    from vllm import LLM

    settings: dict[str, Any] = dict(
        max_model_len=512, max_num_seqs=args.max_num_seqs, max_num_batched_tokens=512, block_size=32,
        dtype="bfloat16", seed=0, enforce_eager=True,
    )
    if policy == VLLM:
        return LLM(model, **settings)
    os.environ["SEMSCHED_POLICY"] = policy  # read once, when the engine builds its scheduler
    try:
        return LLM(model, scheduler_cls="semsched.vllm.Scheduler", **settings)
    finally:
        del os.environ["SEMSCHED_POLICY"]


def replay(llm: Any, jobs: list[Job], round_index: int) -> tuple[float, int, int]:
    """(total step wall seconds, steps, output tokens) for one pass of ``jobs``."""
    from vllm import SamplingParams

    engine = llm.llm_engine
    for job in jobs:
        params = SamplingParams(max_tokens=job.max_tokens, ignore_eos=True)
        engine.add_request(f"{job.request_id}-{round_index}", {"prompt_token_ids": job.prompt_token_ids}, params,
                           priority=job.priority)
    total_s, steps, tokens = 0.0, 0, 0
    while engine.has_unfinished_requests():
        started = time.perf_counter()
        outputs = engine.step()
        total_s += time.perf_counter() - started
        steps += 1
        tokens += sum(len(o.outputs[0].token_ids) for o in outputs if o.finished)
    expected = sum(j.max_tokens for j in jobs)
    if tokens != expected:
        raise RuntimeError(f"round {round_index}: {tokens} output tokens, expected {expected}")
    return total_s, steps, tokens


def _engine_worker(model: str, policy: str, args: argparse.Namespace, jobs: list[Job], conn: Any) -> None:
    """One engine per process (vLLM's CPU backend binds its threads per process): runs rounds on request."""
    llm = make_llm(model, policy, args)
    replay(llm, jobs[: max(4, len(jobs) // 8)], -1)  # warm-up, not timed
    conn.send("ready")
    while (round_index := conn.recv()) is not None:
        total_s, num_steps, _ = replay(llm, jobs, round_index)
        conn.send((total_s, num_steps))


def engine_benchmark(model: str, args: argparse.Namespace) -> tuple[ResultTable, dict[str, Any]]:
    import multiprocessing

    context = multiprocessing.get_context("spawn")
    policies = [VLLM, *args.policies]
    jobs = make_jobs(args.requests, args.seed)
    workers = {}
    for policy in policies:  # started one at a time, so start-up does not overlap a timed round
        parent, child = context.Pipe()
        process = context.Process(target=_engine_worker, args=(model, policy, args, jobs, child), daemon=True)
        process.start()
        if parent.recv() != "ready":
            raise RuntimeError(f"{policy}: engine worker failed to start")
        workers[policy] = (process, parent)
    per_step: dict[str, list[float]] = {p: [] for p in policies}
    steps: dict[str, list[int]] = {p: [] for p in policies}
    try:
        for round_index in range(args.rounds):
            shift = round_index % len(policies)
            for policy in policies[shift:] + policies[:shift]:  # one engine runs at a time
                _, conn = workers[policy]
                conn.send(round_index)
                total_s, num_steps = conn.recv()
                per_step[policy].append(total_s / num_steps)
                steps[policy].append(num_steps)
    finally:
        for process, conn in workers.values():
            conn.send(None)
            process.join(timeout=60)
    base = statistics.median(per_step[VLLM])
    table = ResultTable(
        f"Engine step time, {args.requests} requests x {args.rounds} rounds (tiny model, CPU)",
        ["scheduler", "steps / round", "mean step ms (median of rounds)", "ratio to vLLM"],
    )
    for policy in policies:
        median = statistics.median(per_step[policy])
        name = "vLLM Scheduler (fcfs)" if policy == VLLM else f"semsched.vllm.Scheduler {policy}"
        table.add(name, f"{statistics.median(steps[policy]):.0f}", f"{median * 1e3:.3f}", f"{median / base:.3f}")
    raw = {"per_step_s": per_step, "steps": steps}
    return table, raw


def scheduler_benchmark(
    model: str, args: argparse.Namespace, *, async_scheduling: bool
) -> tuple[ResultTable, dict[str, Any]]:
    from semsched.vllm.harness import HarnessConfig, SchedulerHarness

    config = HarnessConfig(num_blocks=args.running * 8 + 64, max_num_seqs=args.running,
                           max_num_batched_tokens=max(512, args.running), max_model_len=512,
                           async_scheduling=async_scheduling)
    rng = random.Random(args.seed)
    harnesses: dict[str, Any] = {}
    for policy in [VLLM, *args.policies]:
        if policy == VLLM:  # vLLM's own class for the config (its AsyncScheduler under async scheduling)
            harness = SchedulerHarness(None, model, config)
        else:
            harness = SchedulerHarness("semsched.vllm.Scheduler", model, config, env={"SEMSCHED_POLICY": policy})
        slos = {"ttft_slo_ms": SLO_TTFT_MS, "tpot_slo_ms": SLO_TPOT_MS} if args.slos else None
        for i in range(args.running):  # admitted first, so they hold every sequence slot
            harness.add(f"run{i}", [rng.randrange(100, 31000) for _ in range(16)], 400, priority=0,
                        extra_args=slos, arrival_time=None if args.slos else 1.0 + i)
        while len(harness.scheduler.running) < args.running or harness.scheduler.waiting:
            harness.step()
        for i in range(args.waiting):
            harness.add(f"wait{i}", [rng.randrange(100, 31000) for _ in range(16)], 8, priority=3,
                        extra_args=slos, arrival_time=None if args.slos else 10_000.0 + i)
        harnesses[policy] = harness
    # the steps in rounds, every scheduler in each round (the order rotating), so the machine's drift over the
    # run reaches every scheduler alike instead of the last ones measured
    timings: dict[str, list[float]] = {policy: [] for policy in harnesses}
    busy: dict[str, list[bool]] = {policy: [] for policy in harnesses}
    names = list(harnesses)
    clock = time.thread_time if args.cpu_time else time.perf_counter
    rounds = max(1, min(args.scheduler_rounds, args.scheduler_steps))
    for round_index in range(rounds):
        steps = args.scheduler_steps // rounds + (1 if round_index < args.scheduler_steps % rounds else 0)
        shift = round_index % len(names)
        for policy in names[shift:] + names[:shift]:
            harness, samples, flags = harnesses[policy], timings[policy], busy[policy]
            for _ in range(steps):
                started = clock()
                record = harness.step()
                samples.append(clock() - started)
                flags.append(is_busy(record))
    steady = {policy: [t for t, flag in zip(samples, busy[policy], strict=True) if not flag]
              for policy, samples in timings.items()}
    base = statistics.median(steady[VLLM] or timings[VLLM])
    mode = "async" if async_scheduling else "sync"
    table = ResultTable(
        f"Scheduler only, {mode} scheduling: {args.running} running, {args.waiting} waiting (no model)",
        ["scheduler", "steady steps", "median steady step ms", "ratio to vLLM", "median step ms, every step"],
    )
    prefix = "Async" if async_scheduling else ""
    for policy, samples in timings.items():
        name = f"vLLM {prefix}Scheduler (fcfs)" if policy == VLLM else f"semsched.vllm.{prefix}Scheduler {policy}"
        quiet = steady[policy]
        median = statistics.median(quiet) if quiet else math.nan
        table.add(name, f"{len(quiet)} of {len(samples)}", f"{median * 1e3:.3f}", f"{median / base:.3f}",
                  f"{statistics.median(samples) * 1e3:.3f}")
    return table, {"step_s": timings, "busy": busy}


def arrival_benchmark(model: str, args: argparse.Namespace) -> tuple[ResultTable, dict[str, Any]]:
    """Microseconds per request of a burst of arrivals, per policy and burst size (the module docstring's 3)."""
    import gc

    from semsched.vllm.harness import HarnessConfig, SchedulerHarness

    sizes = sorted(args.burst_sizes)
    config = HarnessConfig(num_blocks=16 * 8 + 64, max_num_seqs=16, max_num_batched_tokens=512, max_model_len=512)
    slos = {"ttft_slo_ms": SLO_TTFT_MS, "tpot_slo_ms": SLO_TPOT_MS}
    per_request: dict[str, list[float]] = {}
    for policy in args.policies:
        per_request[policy] = []
        for size in sizes:
            rng = random.Random(args.seed)
            harness = SchedulerHarness("semsched.vllm.Scheduler", model, config, env={"SEMSCHED_POLICY": policy})
            for i in range(config.max_num_seqs):
                harness.add(f"run{i}", [rng.randrange(100, 31000) for _ in range(16)], 400, extra_args=slos)
            for _ in range(3):
                harness.step()
            prompts = [[rng.randrange(100, 31000) for _ in range(16)] for _ in range(size)]
            gc.collect()
            gc.disable()
            try:
                started = time.perf_counter()
                for i, prompt in enumerate(prompts):
                    harness.add(f"burst{i}", prompt, 8, priority=i % 4, extra_args=slos)
                elapsed = time.perf_counter() - started
            finally:
                gc.enable()
            per_request[policy].append(elapsed / size)
    table = ResultTable(
        f"Arrival bursts: microseconds per request added before the next step ({config.max_num_seqs} running)",
        ["policy", *(f"{size:,} added" for size in sizes), f"growth {sizes[0]:,} -> {sizes[-1]:,}"],
    )
    for policy, costs in per_request.items():
        table.add(policy, *(f"{cost * 1e6:.1f}" for cost in costs), f"{costs[-1] / costs[0]:.2f}x")
    return table, {"sizes": sizes, "seconds_per_request": per_request}


#: requests added before the re-key timed after the periodic one (``--kv-queues``)
REKEY_BURST = 1_000


def kv_queue_benchmark(model: str, args: argparse.Namespace) -> tuple[ResultTable, dict[str, Any]]:
    """Median step per policy and queue size under KV-bound saturation (the module docstring's 4)."""
    import gc

    from semsched.vllm.harness import HarnessConfig, SchedulerHarness

    sizes = sorted(args.kv_queue_sizes)
    running, steps = 16, 30  # (the running requests emit 60 tokens: none finishes before the last step)
    # the running requests hold all but a few blocks; slots stay free; no waiting prompt fits what is left
    config = HarnessConfig(num_blocks=running * 12 + 8, block_size=32, max_num_seqs=64, max_num_batched_tokens=512,
                           max_model_len=512)
    slos = {"ttft_slo_ms": SLO_TTFT_MS, "tpot_slo_ms": SLO_TPOT_MS} if args.slos else None
    step_ms: dict[str, list[float]] = {}
    admitted: dict[str, list[int]] = {}
    rekey_ms: dict[str, list[float | None]] = {}
    burst_rekey_ms: dict[str, list[float | None]] = {}
    intervals: dict[str, float | None] = {}
    for policy in args.policies:
        step_ms[policy], admitted[policy], rekey_ms[policy], burst_rekey_ms[policy] = [], [], [], []
        for size in sizes:
            rng = random.Random(args.seed)
            harness = SchedulerHarness("semsched.vllm.Scheduler", model, config, env={"SEMSCHED_POLICY": policy})
            for i in range(running):
                harness.add(f"run{i}", [rng.randrange(100, 31000) for _ in range(300)], 60, extra_args=slos,
                            arrival_time=None if slos else 1.0 + i)
            while len(harness.scheduler.running) < running or harness.scheduler.waiting:
                harness.step()
            for i in range(size):
                harness.add(f"wait{i}", [rng.randrange(100, 31000) for _ in range(400)], 8, priority=3,
                            extra_args=slos, arrival_time=None if slos else 10_000.0 + i)
            for _ in range(3):
                harness.step()
            gc.collect()
            gc.disable()
            try:
                samples = []
                for _ in range(steps):
                    started = time.perf_counter()
                    harness.step()
                    samples.append(time.perf_counter() - started)
                # (what the blocks left take, and what a policy that displaces running work admits)
                admitted[policy].append(size - len(harness.scheduler.waiting))
                rekey_ms[policy].append(_rekey_ms(harness.scheduler))
                intervals[policy] = harness.scheduler.semsched_policy.rekey_interval_s
                # a burst arrives before the next re-key: the re-key that files it (a queue that keys only what
                # may have changed pays for each addition once, there or at the addition)
                for i in range(REKEY_BURST):
                    harness.add(f"burst{i}", [rng.randrange(100, 31000) for _ in range(400)], 8, priority=3,
                                extra_args=slos, arrival_time=None if slos else 20_000.0 + i)
                burst_rekey_ms[policy].append(_timed_rekey(harness.scheduler))
            finally:
                gc.enable()
            step_ms[policy].append(statistics.median(samples) * 1e3)
    table = ResultTable(
        f"KV-bound queues: median step ms ({running} decoding, slots free, no waiting prompt fits)",
        ["policy", *(f"{size:,} waiting" for size in sizes), f"growth {sizes[0]:,} -> {sizes[-1]:,}",
         "admitted meanwhile", *(f"re-key ms at {size:,}" for size in sizes),
         *(f"after {REKEY_BURST:,} more at {size:,}" for size in sizes), "re-key every s"],
    )
    for policy, values in step_ms.items():
        interval = intervals[policy]
        table.add(policy, *(f"{value:.3f}" for value in values), f"{values[-1] / values[0]:.2f}x",
                  " / ".join(map(str, admitted[policy])),
                  *("-" if value is None else f"{value:.3f}" for value in rekey_ms[policy]),
                  *("-" if value is None else f"{value:.3f}" for value in burst_rekey_ms[policy]),
                  "-" if interval is None else f"{interval:g}")
    return table, {"sizes": sizes, "step_ms": step_ms, "admitted": admitted, "rekey_ms": rekey_ms,
                   "burst_rekey_ms": burst_rekey_ms, "rekey_burst": REKEY_BURST}


def _rekey_ms(scheduler: Any) -> float | None:
    """One periodic re-key of the adapter's waiting queues (what ``_maybe_rekey`` does once per
    ``rekey_interval_s``), in ms; None for a policy that never re-keys. Timed after one re-key untimed, which
    files the requests added since the last (a queue that keys only what may have changed pays for each addition
    once, there; a re-key of every request pays for the whole queue at each)."""
    if scheduler.semsched_policy.rekey_interval_s is None:
        return None
    _timed_rekey(scheduler)
    return _timed_rekey(scheduler)


def _timed_rekey(scheduler: Any) -> float | None:
    """One re-key of the adapter's waiting queues, in ms; None for a policy that never re-keys."""
    if scheduler.semsched_policy.rekey_interval_s is None:
        return None
    started = time.perf_counter()
    scheduler.waiting.rekey()
    scheduler.kv_holding_waiting.rekey()
    return (time.perf_counter() - started) * 1e3


def print_growth(console: Any, what: str, sizes: list[int], per_policy: dict[str, list[float]],
                 target: float) -> None:
    """The target line of a growth: the policy whose cost at the largest size over the smallest's is largest."""
    policy = max(per_policy, key=lambda name: per_policy[name][-1] / per_policy[name][0])
    worst = per_policy[policy][-1] / per_policy[policy][0]
    console.print(target_line(f"{what} {sizes[0]:,} -> {sizes[-1]:,} (worst policy)", f"{worst:.2f}x ({policy})",
                              f"<= {target}x", worst <= target))


def is_busy(record: Any) -> bool:
    """Whether a scheduler-only step did more than decode the running requests: it preempted, finished or
    scheduled a waiting request (a policy that ranks the queued short requests first, or by attained service,
    displaces running ones: vLLM's own scheduler never does here). Such a step does work vLLM's does not, so it
    is no measure of the adapter's cost; the ratio is taken over the other steps, the steady ones."""
    return bool(record.preempted or record.finished
                or any(request_id.startswith("wait") for request_id in record.num_scheduled_tokens))


def _policies(text: str) -> list[str]:
    if text.strip() == "all":
        from semsched.policies import POLICIES

        return list(POLICIES.names())
    return [spec.strip() for spec in text.split(",") if spec.strip()]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--model", help="model directory (default: the tiny random-weight model, in a temp dir)")
    parser.add_argument("--policies", default="fcfs,priority-preempt", type=_policies,
                        help="comma-separated policy specs, or `all`: every registered policy")
    parser.add_argument("--scheduler-only", action="store_true",
                        help="skip the engine-step measurement (the slow part): scheduler only, sync and async")
    parser.add_argument("--requests", type=int, default=48)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--max-num-seqs", type=int, default=16)
    parser.add_argument("--running", type=int, default=256)
    parser.add_argument("--waiting", type=int, default=1000)
    parser.add_argument("--scheduler-steps", type=int, default=200)
    parser.add_argument("--slos", action="store_true",
                        help=f"scheduler only and --kv-queues: every request carries SLOs (TTFT {SLO_TTFT_MS:g} "
                             f"ms, TPOT {SLO_TPOT_MS:g} ms) and arrives now (without: no SLOs, arrivals in the "
                             "past), so deadline-driven policies plan with deadlines")
    parser.add_argument("--scheduler-rounds", type=int, default=10,
                        help="scheduler only: the steps are taken in this many rounds over every scheduler")
    parser.add_argument("--cpu-time", action="store_true",
                        help="scheduler only: time each step by the thread's CPU time, not the wall clock (on a "
                             "machine shared with other work, whose time slices otherwise land in the steps)")
    parser.add_argument("--arrivals", action="store_true",
                        help="also measure bursts of arrivals (per-request cost at each --burst-sizes)")
    parser.add_argument("--burst-sizes", type=lambda text: [int(x) for x in text.split(",")], default=[500, 2000],
                        help="comma-separated burst sizes for --arrivals (default: 500,2000)")
    parser.add_argument("--kv-queues", action="store_true",
                        help="also measure steps under KV-bound saturation at each --kv-queue-sizes")
    parser.add_argument("--kv-queue-sizes", type=lambda text: [int(x) for x in text.split(",")],
                        default=[1000, 10000], help="comma-separated waiting counts for --kv-queues")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    console = make_console()
    with tempfile.TemporaryDirectory() as tmp:
        model = args.model
        if model is None:
            from semsched.calibrate.tiny_model import make_tiny_model

            model = str(make_tiny_model(Path(tmp) / "tiny"))
        engine_table, engine_raw = (None, {}) if args.scheduler_only else engine_benchmark(model, args)
        scheduler_runs = {mode: scheduler_benchmark(model, args, async_scheduling=mode == "async")
                          for mode in ("sync", "async")}
        arrival_table, arrival_raw = arrival_benchmark(model, args) if args.arrivals else (None, {})
        queue_table, queue_raw = kv_queue_benchmark(model, args) if args.kv_queues else (None, {})
    if engine_table is not None:
        engine_table.print(console)
    for scheduler_table, _ in scheduler_runs.values():
        scheduler_table.print(console)
    for extra in (arrival_table, queue_table):
        if extra is not None:
            extra.print(console)
    if engine_table is not None:
        worst = max(float(row[3]) for row in engine_table.rows[1:])
        console.print(target_line("engine step ratio (worst semsched policy)", f"{worst:.3f}",
                                  f"<= {TARGET_RATIO}", worst <= TARGET_RATIO))
    for mode, (scheduler_table, _) in scheduler_runs.items():
        rows = [(row[0].split(" ", 1)[1], float(row[3])) for row in scheduler_table.rows[1:]]  # (policy, ratio)
        plain = [ratio for policy, ratio in rows if policy not in SCHEDULER_RATIO_OF]
        if plain:
            worst = math.nan if any(map(math.isnan, plain)) else max(plain)  # (nan: a policy had no steady step)
            console.print(target_line(f"scheduler-only ratio, {mode} (worst semsched policy)", f"{worst:.3f}",
                                      f"<= {TARGET_SCHEDULER_RATIO}", worst <= TARGET_SCHEDULER_RATIO))
        for policy, ratio in rows:
            target = SCHEDULER_RATIO_OF.get(policy)
            if target is not None:
                console.print(target_line(f"scheduler-only ratio, {mode}, {policy}", f"{ratio:.3f}",
                                          f"<= {target}", ratio <= target))
    if arrival_raw:
        print_growth(console, "arrival burst growth", arrival_raw["sizes"], arrival_raw["seconds_per_request"],
                     TARGET_ARRIVAL_GROWTH)
    if queue_raw:
        print_growth(console, "KV-bound step growth", queue_raw["sizes"], queue_raw["step_ms"],
                     TARGET_QUEUE_GROWTH)
    if args.json:
        settings = vars(args) | {"json": None}
        scheduler_raw = {mode: raw for mode, (_, raw) in scheduler_runs.items()}
        dump_json(args.json, {"engine": engine_raw, "scheduler": scheduler_raw, "arrivals": arrival_raw,
                              "kv_queues": queue_raw, "args": settings})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
