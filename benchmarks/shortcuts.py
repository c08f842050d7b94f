"""Exact shortcuts against the long way round, on traffic nobody tuned them for.

A speed path that must not change a run (the core's aging classes, semantic's certificates, the simulator's
fast-forward) is checked by running each case twice in one process: as shipped, and with the shortcut turned off.
Every request's state, first scheduled time, finish time, preemptions and token emission times must match. A case
is ``WORKLOAD@RATE`` (a registered workload or a trace path, in requests per second), or
``WORKLOAD@RATE+PRESET`` with speculative decoding (a preset of ``semsched simulate --speculation``, its acceptance
model fitted to the preset's whole log for the requests that carry no logged rounds), run for each seed and policy
spec. What ``aging_classes.py``, ``timed_rekey.py``, ``semantic_certificates.py`` and ``fast_forward.py`` share.
"""

from __future__ import annotations

import argparse
import hashlib
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

from common import ResultTable, dump_json, target_line
from rich.console import Console

from semsched.cli.common import UsageError, speculation_spec
from semsched.core.request import Request
from semsched.policies import POLICIES, make_policy
from semsched.sim.runner import ClusterSpec, build_simulation, prepare_requests
from semsched.workloads import build_workload

LONG_CONTEXT = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "long_context_synthetic.jsonl"
#: both Azure traces, a three-tier production mix well over saturation, the long-context trace
DEFAULT_CASES = f"azure-conv-trace@4.2,azure-code-trace@8,production-mix@40,{LONG_CONTEXT}@0.5"

#: a request's id, state, first scheduled time, finish time, preemptions and a digest of its token times
Outcome = tuple[str, str, float | None, float | None, int, str]


class Case(NamedTuple):
    workload: str
    rate: float
    speculation: str | None = None  # a speculative decoding preset

    @property
    def label(self) -> str:
        return Path(self.workload).name + (f" +{self.speculation}" if self.speculation else "")


@contextmanager
def hook_turned_off(spec: str, hook: str) -> Iterator[None]:
    """While it lasts, ``spec``'s policy class says it does not use ``hook`` (``aging_class``,
    ``waiting_key_until``): the core's queue re-keys every waiting request, the long way."""
    cls = type(make_policy(spec))
    shipped = cls.uses_hook

    def uses_hook(self: object, name: str) -> bool:
        return False if name == hook else shipped(self, name)  # type: ignore[arg-type]

    cls.uses_hook = uses_hook  # type: ignore[method-assign,assignment]
    try:
        yield
    finally:
        cls.uses_hook = shipped  # type: ignore[method-assign]


def run_case(
    case: Case, seed: int, spec: str, num_requests: int | None, *, fast_forward: bool = True
) -> tuple[list[Outcome], float]:
    """Every request's outcome of one simulation, and its wall time."""
    requests: list[Request] = build_workload(case.workload, rate_per_s=case.rate, seed=seed,
                                             num_requests=num_requests).to_requests(None)
    speculation = None if case.speculation is None else speculation_spec(case.speculation, seed)
    cluster = ClusterSpec(speculation=speculation)
    simulation = build_simulation(spec, cluster, fast_forward=fast_forward,
                                  prediction=prepare_requests(requests, cluster))
    started = time.perf_counter()
    simulation.run(requests)  # (raises on a stranded request)
    wall_s = time.perf_counter() - started
    return [(r.request_id, r.state.value, r.first_scheduled_time_s, r.finish_time_s, r.num_preemptions,
             hashlib.sha256(r.token_times_s().tobytes()).hexdigest()[:16]) for r in requests], wall_s


def digest(outcomes: list[Outcome]) -> str:
    """One run's outcomes in 16 hex digits (floats by their exact hex)."""
    text = repr([(i, state, None if first is None else first.hex(), None if end is None else end.hex(), n, times)
                 for i, state, first, end, n, times in outcomes])
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def parse_cases(text: str) -> list[Case]:
    cases = []
    for item in (part for part in text.split(",") if part):
        workload, sep, rest = item.rpartition("@")
        rate, plus, preset = rest.partition("+")
        if not sep or not workload or (plus and not preset):
            raise SystemExit(f"--cases: {item!r} must look like WORKLOAD@RATE or WORKLOAD@RATE+PRESET")
        try:
            value = float(rate)
        except ValueError:
            raise SystemExit(f"--cases: {item!r}: rate {rate!r} is not a number") from None
        if preset:
            try:
                speculation_spec(preset, 0)
            except UsageError as error:
                raise SystemExit(f"--cases: {item!r}: {error}") from None
        cases.append(Case(workload, value, preset or None))
    return cases


@dataclass
class Comparison:
    table: ResultTable
    rows: list[dict[str, Any]] = field(default_factory=list)
    differing: int = 0


def compare(
    title: str,
    labels: tuple[str, str],
    long_way: Callable[[str], AbstractContextManager[None]],
    cases: Sequence[Case],
    seeds: Sequence[int],
    specs: Sequence[str],
    num_requests: int | None,
    uses: tuple[str, Callable[[], int]] | None = None,
    *,
    long_way_fast_forward: bool = True,
) -> Comparison:
    """Each case as shipped (``labels[0]``: the shortcut, fast-forward on), then inside ``long_way(spec)``
    (``labels[1]``; with ``long_way_fast_forward`` false, stepping every iteration); with ``uses``, a column of
    how often the shortcut was taken in the shipped run (a running count, read before and after it), so that an
    identical run is not one the shortcut never touched."""
    shortcut, long = labels
    columns = ["workload", "rate/s", "seed", "policy", "outcomes", "preemptions"]
    columns += [uses[0]] if uses is not None else []
    columns += ["identical", f"{long} s", f"{shortcut} s", "speed-up"]
    result = Comparison(ResultTable(title, columns))
    for case in cases:
        for seed in seeds:
            for spec in specs:
                before = uses[1]() if uses is not None else 0
                taken, taken_s = run_case(case, seed, spec, num_requests)
                used = uses[1]() - before if uses is not None else None
                with long_way(spec):
                    reference, reference_s = run_case(case, seed, spec, num_requests,
                                                      fast_forward=long_way_fast_forward)
                same = taken == reference
                result.differing += not same
                states = Counter(outcome[1] for outcome in taken)
                result.rows.append({"workload": case.workload, "rate_per_s": case.rate,
                                    "speculation": case.speculation, "seed": seed, "policy": spec,
                                    "states": dict(states), "identical": same, "uses": used,
                                    "long_way_s": reference_s, "shortcut_s": taken_s, "digest": digest(taken)})
                cells = [case.label, f"{case.rate:g}", str(seed), spec,
                         ", ".join(f"{n} {state}" for state, n in sorted(states.items())),
                         f"{sum(outcome[4] for outcome in taken):,}"]
                cells += [f"{used:,}"] if used is not None else []
                cells += ["yes" if same else "**NO**", f"{reference_s:.2f}", f"{taken_s:.2f}",
                          f"{reference_s / taken_s:.2f}x"]
                result.table.add(*cells)
    return result


def case_arguments(parser: argparse.ArgumentParser, policies: str, policies_help: str) -> None:
    """The options every such script takes: the cases, policy specs, seeds, requests per case and a JSON path."""
    parser.add_argument("--cases", default=DEFAULT_CASES,
                        help="comma-separated WORKLOAD@RATE (requests per second)")
    parser.add_argument("--policies", default=policies, help=policies_help)
    parser.add_argument("--seeds", default="0,1", help="comma-separated seeds")
    parser.add_argument("--num-requests", type=int, default=3000, help="the first N requests of each workload")
    parser.add_argument("--json", type=Path, default=None)


def seeds_of(args: argparse.Namespace) -> list[int]:
    """``--seeds``, as integers."""
    return [int(s) for s in args.seeds.split(",") if s]


def specs_of(args: argparse.Namespace) -> list[str]:
    """``--policies``: the comma-separated specs, or ``all``: every registered policy with its defaults."""
    if args.policies.strip() == "all":
        return list(POLICIES.names())
    return [s.strip() for s in args.policies.split(",") if s.strip()]


def report(console: Console, result: Comparison, json_path: Path | None) -> int:
    """Print the table and the verdict, write the JSON; the exit status: 1 if any case differs."""
    result.table.print(console)
    if json_path is not None:
        dump_json(json_path, {"cases": result.rows, "differing": result.differing})
    console.print(target_line("cases whose outcomes differ", str(result.differing), "0", result.differing == 0),
                  markup=False)
    return 1 if result.differing else 0
