"""Where a policy's simulation time goes: its hooks (interpreted Python) against the rest (the core, compiled).

The workload and load are ``sim_throughput.py``'s (the trace replayed at ``--load`` x the saturation rate fcfs
measures, fast-forward). Each policy runs once with every hook the scheduler calls on it timed: the policy is made
as the runner makes it, then each hook on the instance is replaced by a wrapper that adds its wall time, before the
scheduler binds them (a hook it skips, or one read as a class attribute, stays unwrapped and uncounted). Per hook:
calls, seconds, microseconds per call and the share of the run. The wrappers' own cost (measured in the same run
on a hook that does nothing) is taken out of each hook's time and of the run's. That estimate is rough where a hook
is a C function called millions of times (las's ``victim_key``, an ``attrgetter`` the sorts call): a Python wrapper
costs such a hook more than it costs a Python one, so the run reads longer than ``sim_throughput.py``'s.

What it is for: whether a policy below issue 29's 0.33x fcfs is slow in its own hooks (a policy change can move it)
or in the core it drives (more steps, preemptions: only the core's cost per step can). Every number printed is
measured in this run. Run: ``.venv/bin/python benchmarks/policy_hooks.py --policies sarathi-priority,tiered``.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import sim_throughput
from common import ResultTable, dump_json, make_console

import semsched.sim.runner as runner
from semsched.core.policy import Policy
from semsched.metrics.tdg import TDGWeights
from semsched.policies import POLICIES, make_policy
from semsched.sim.runner import ClusterSpec, build_simulation, prepare_requests

#: the hooks a scheduler may call on its policy (``semsched.core.policy.Policy``'s methods)
HOOKS = (
    "waiting_key", "waiting_key_until", "aging_class", "victim_key", "waiting_order", "admit", "victims_for",
    "preemption_mode", "swap_tokens", "running_order", "exclusive_class", "step_budget", "on_arrival",
    "on_preempt", "on_finish", "on_leave", "on_tokens", "on_step",
)
CALIBRATION_CALLS = 200_000


@dataclass
class HookTimes:
    calls: dict[str, int] = field(default_factory=dict)
    seconds: dict[str, float] = field(default_factory=dict)

    def timed(self, name: str, hook: Callable[..., Any]) -> Callable[..., Any]:
        calls, seconds, clock = self.calls, self.seconds, time.perf_counter
        calls[name], seconds[name] = 0, 0.0

        def wrapper(*args: Any, **kwargs: Any) -> Any:
            started = clock()
            try:
                return hook(*args, **kwargs)
            finally:
                seconds[name] += clock() - started
                calls[name] += 1

        return wrapper


def wrapper_cost_s() -> float:
    """Seconds one wrapper adds to a call of a hook that does nothing (the median of 5 batches)."""
    times = HookTimes()
    nothing = times.timed("nothing", lambda: None)
    samples = []
    for _ in range(5):
        started = time.perf_counter()
        for _ in range(CALIBRATION_CALLS):
            nothing()
        bare_started = time.perf_counter()
        for _ in range(CALIBRATION_CALLS):
            (lambda: None)()
        samples.append(((bare_started - started) - (time.perf_counter() - bare_started)) / CALIBRATION_CALLS)
    return sorted(samples)[2]


@contextmanager
def timed_policies(times: HookTimes) -> Iterator[None]:
    """Policies the runner makes in the block have their hooks timed (instance attributes the scheduler binds)."""
    original = runner.make_policy

    def make_timed(spec: str) -> Policy:
        policy = make_policy(spec)
        for name in HOOKS:
            hook = getattr(policy, name, None)
            if callable(hook):
                try:
                    setattr(policy, name, times.timed(name, hook))
                except AttributeError:  # a read-only property (a hook made at construction): left as it is
                    times.calls.pop(name, None)
                    times.seconds.pop(name, None)
        return policy

    runner.make_policy = make_timed
    try:
        yield
    finally:
        runner.make_policy = original


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workload", default="azure-conv-trace", help="registered workload or trace path")
    parser.add_argument("--policies", default="sarathi-priority,tiered,fairbatching,semantic",
                        help="comma-separated policy specs, or 'all' (every registered)")
    parser.add_argument("--load", type=float, default=0.8, help="fraction of the measured saturation rate")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--num-requests", type=int, default=None, help="replay only the first N requests")
    parser.add_argument("--saturation-policy", default="fcfs")
    parser.add_argument("--overload-rate", type=float, default=1000.0)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)
    policies = sorted(POLICIES) if args.policies == "all" else [p for p in args.policies.split(",") if p]
    console = make_console()
    cluster = ClusterSpec()
    saturation = sim_throughput.measure_saturation(args, cluster)
    rate_per_s = args.load * saturation.throughput_per_s
    workload = sim_throughput.load_workload(args, rate_per_s)
    console.print(f"{args.workload} at {rate_per_s:.3f} req/s ({args.load:g} x the saturation rate under "
                  f"{args.saturation_policy}), fast-forward")
    overhead_s = wrapper_cost_s()
    table = ResultTable("Policy hooks' share of the simulation (wrapper cost taken out)",
                        ["policy", "hook", "calls", "s", "µs per call", "share of the run"])
    payload: dict[str, Any] = {"rate_per_s": rate_per_s, "wrapper_cost_s": overhead_s, "policies": {}}
    for spec in policies:
        times = HookTimes()
        requests = workload.to_requests(None)
        with timed_policies(times):
            simulation = build_simulation(spec, cluster, fast_forward=True,
                                          prediction=prepare_requests(requests, cluster),
                                          tdg_weights=TDGWeights.paper_defaults(requests))
        started = time.perf_counter()
        simulation.run(requests)
        wrapped_s = time.perf_counter() - started
        run_s = max(wrapped_s - overhead_s * sum(times.calls.values()), 1e-9)  # (the wrappers' cost taken out)
        hooks = {name: max(times.seconds[name] - overhead_s * times.calls[name], 0.0)
                 for name in times.calls if times.calls[name]}
        total_hooks_s = sum(hooks.values())
        for name, seconds in sorted(hooks.items(), key=lambda item: -item[1]):
            calls = times.calls[name]
            table.add(spec, name, f"{calls:,}", f"{seconds:.3f}", f"{seconds / calls * 1e6:.2f}",
                      f"{seconds / run_s:.0%}")
        table.add(spec, "(all hooks)", f"{sum(times.calls.values()):,}", f"{total_hooks_s:.3f}", "",
                  f"{total_hooks_s / run_s:.0%} of {run_s:.2f} s")
        payload["policies"][spec] = {"run_s": run_s, "wrapped_run_s": wrapped_s, "hooks_s": hooks,
                                     "calls": dict(times.calls)}
    table.print(console)
    console.print(f"wrapper cost taken out of each call: {overhead_s * 1e6:.2f} µs")
    if args.json is not None:
        dump_json(args.json, payload)


if __name__ == "__main__":
    main()
