"""Golden results (issue 29): what every registered policy does on fixed workloads, written once from the code
as it was before the speed work and checked in (``tests/sim/golden.json``), so a faster policy, a compiled core
or a new fast-forward is held to the same results, bit for bit.

Each (policy, scenario) is summarised by a SHA-256 over every request's id, state, reason, preemption count and
token times (as ``float.hex``), and by a few readable figures (finished, preemptions, last token) that say what
moved when the digest does. The scenarios are the stress matrix's (tests/sim/test_stress.py) plus ``steady``:
600 requests at about 80 % load, mixed priorities, SLOs and predictions, whose long pure-decode stretches are
where fast-forward pays.

Rewrite the file only for a change that is meant to change results, and say so in the commit:
``.venv/bin/python -m tests.sim.golden --write``.

``--trace`` checks (or with ``--write`` writes) ``golden_trace.json`` instead: every registered policy on the real
Azure conversation trace (19,366 requests at 3.49 req/s, about 80 % of the default instance's capacity; the data
in ``../shared/data``), about three minutes. The scenarios above missed a change on that trace once (the order
a policy's ``step_budget`` saw the running requests in moved vtc's float counters by their last bits): run it
before landing a speed change to the core or a policy.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np

from semsched.core.request import Request
from semsched.core.scheduler import SchedulerConfig
from semsched.policies import POLICIES
from semsched.sim.runner import ClusterSpec, build_simulation
from tests.sim.test_stress import SCENARIOS, Scenario, _poisson, _requests

GOLDEN_PATH = Path(__file__).with_name("golden.json")
TRACE_GOLDEN_PATH = Path(__file__).with_name("golden_trace.json")
#: the ``--trace`` run: the workload, its rate (about 80 % of the default instance's saturation) and seed
TRACE, TRACE_RATE_PER_S, TRACE_SEED = "azure-conv-trace", 3.49, 0

#: configurations beside each policy's defaults whose code paths the speed work touches
CONFIGURED = (
    "tiered:fair_shares=0.4/0.3/0.2/0.1;share_window_s=5;shedding=true;preemption=cheapest",
    "gittins:slo_slack=0.2;displace=true",
    "laps-sd:order=predicted;tiers=true",
    "semantic:stage_aware=strict;cache=swap",
    "fastserve:starve_s=2",
)


def steady(seed: int = 7) -> list[Request]:
    """600 requests at 12/s (about 80 % of the engine's capacity): prompts 16-1,024 tokens, outputs 1-400."""
    rng = np.random.default_rng(seed)
    return _requests(seed, rng.integers(16, 1025, 600), rng.integers(1, 401, 600), _poisson(rng, 600, 12.0))


GOLDEN_SCENARIOS = [
    *SCENARIOS,
    Scenario("steady", steady, ClusterSpec(scheduler=SchedulerConfig(num_gpu_blocks=2048, num_cpu_blocks=256))),
]


def digest(requests: list[Request]) -> dict[str, Any]:
    """The SHA-256 of every request's outcome, and the figures that say what moved."""
    sha = hashlib.sha256()
    last = 0.0
    for r in requests:
        times = r.token_times_s().tolist()
        sha.update(repr((r.request_id, r.state.value, r.finish_reason, r.num_preemptions,
                         [float(t).hex() for t in times])).encode())
        if times:
            last = max(last, times[-1])
    return {
        "sha256": sha.hexdigest(),
        "finished": sum(r.state.value == "finished" for r in requests),
        "preemptions": sum(r.num_preemptions for r in requests),
        "last_token_s": round(last, 6),
    }


def specs() -> list[str]:
    return [*POLICIES.names(), *CONFIGURED]


def run(spec: str, scenario: Scenario, *, fast_forward: bool = True) -> dict[str, Any]:
    simulation = build_simulation(spec, scenario.cluster, fast_forward=fast_forward)
    requests = scenario.requests()
    simulation.run(requests)
    return digest(requests)


def compute() -> dict[str, dict[str, dict[str, Any]]]:
    return {spec: {s.name: run(spec, s) for s in GOLDEN_SCENARIOS} for spec in specs()}


def compute_trace() -> dict[str, dict[str, dict[str, Any]]]:
    """Every registered policy on the Azure trace (``--trace``), fast-forward."""
    from semsched.sim.runner import run_policy
    from semsched.workloads import build_workload

    workload = build_workload(TRACE, rate_per_s=TRACE_RATE_PER_S, seed=TRACE_SEED)
    return {name: {TRACE: digest(run_policy(workload, name, ClusterSpec(), fast_forward=True).requests)}
            for name in POLICIES.names()}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--write", action="store_true", help="write the golden file from the current code")
    parser.add_argument("--trace", action="store_true",
                        help=f"every policy on the Azure trace ({TRACE_GOLDEN_PATH.name}), not the scenarios")
    args = parser.parse_args()
    path = TRACE_GOLDEN_PATH if args.trace else GOLDEN_PATH
    results = compute_trace() if args.trace else compute()
    if args.write:
        path.write_text(json.dumps(results, indent=1, sort_keys=True) + "\n")
        print(f"wrote {path} ({len(results)} policies)")
        return 0
    golden = json.loads(path.read_text())
    moved = [(p, s) for p in results for s in results[p] if golden.get(p, {}).get(s) != results[p][s]]
    for policy, scenario in moved:
        was = golden.get(policy, {}).get(scenario)
        print(f"{policy} / {scenario}: golden {was} now {results[policy][scenario]}")
    return 1 if moved else 0


if __name__ == "__main__":
    sys.exit(main())
