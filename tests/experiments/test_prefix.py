"""``semsched reproduce prefix --quick`` (semsched/experiments/prefix.py, issue 32): its figures' numbers are
recomputed from its own requests.csv, the controls hold what they claim, and a run with no request left is a
collapse, never a number."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from semsched.core.request import RequestState
from semsched.experiments import prefix
from tests.experiments.conftest import QuickReports

FIGURES = ("ttft-mean", "ttft-p99", "hit-rate", "caching-off", "no-sharing")


@pytest.fixture(scope="module")
def report(quick_reports: QuickReports) -> Path:
    return quick_reports.path("prefix")


def _groups(rows: list[dict[str, str]], figure: str) -> dict[tuple[str, str, str], list[dict[str, str]]]:
    grouped: dict[tuple[str, str, str], list[dict[str, str]]] = defaultdict(list)
    for row in rows:
        if row["figure"] == figure and row["state"] != "rejected":  # (rejected at arrival: left out)
            grouped[(row["router"], row["load"], row["seed"])].append(row)
    return grouped


def _per_seed(figure: dict[str, Any], router: str, load: str, seed: str) -> float:
    seeds = [str(s) for s in figure["ours"]["seeds"]]
    return float(figure["ours"]["per_seed"][router][load][seeds.index(seed)])


def test_every_figure_and_claim_is_there(figures: dict[str, dict[str, Any]], results: dict[str, Any]) -> None:
    assert set(figures) == set(FIGURES)
    assert len(results["claims"]) == 4
    for figure in figures.values():
        assert set(figure["ours"]["per_seed"]) == set(prefix.ROUTERS)


@pytest.mark.parametrize(("figure_id", "source", "reduce"), [
    ("ttft-mean", "ttft-mean", np.mean), ("ttft-p99", "ttft-mean", lambda v: np.quantile(v, 0.99)),
    ("caching-off", "caching-off", np.mean), ("no-sharing", "no-sharing", np.mean)])
def test_ttft_numbers_come_from_the_requests(figures: dict[str, dict[str, Any]], rows: list[dict[str, str]],
                                             figure_id: str, source: str, reduce: Any) -> None:
    groups = _groups(rows, source)
    assert groups
    for (router, load, seed), requests in groups.items():
        ttft = [float(r["ttft_s"]) for r in requests]
        assert _per_seed(figures[figure_id], router, f"{float(load):g}", seed) == pytest.approx(reduce(ttft))


def test_hit_rates_come_from_the_requests(figures: dict[str, dict[str, Any]], rows: list[dict[str, str]]) -> None:
    for (router, load, seed), requests in _groups(rows, "ttft-mean").items():
        cached = sum(int(r["cached_tokens"]) for r in requests)
        prompt = sum(int(r["prompt_tokens"]) for r in requests)
        assert _per_seed(figures["hit-rate"], router, f"{float(load):g}", seed) == pytest.approx(cached / prompt)


def test_without_caching_nothing_is_cached(rows: list[dict[str, str]]) -> None:
    off = [r for r in rows if r["figure"] == "caching-off"]
    assert off and all(r["cached_tokens"] == "0" for r in off)


def test_affinity_raises_the_hit_rate_at_every_load(figures: dict[str, dict[str, Any]]) -> None:
    median = figures["hit-rate"]["ours"]["median"]
    for load, ours in median[prefix.OURS].items():
        assert ours > median["least-outstanding"][load] and ours > median["round-robin"][load]


def test_without_shared_prefixes_affinity_routes_as_least_outstanding(figures: dict[str, dict[str, Any]]) -> None:
    per_seed = figures["no-sharing"]["ours"]["per_seed"]
    assert per_seed[prefix.OURS] == per_seed["least-outstanding"]


def test_a_run_that_leaves_a_taken_request_without_a_first_token_has_no_value() -> None:
    class _Request:
        def __init__(self, first: float | None, state: RequestState = RequestState.FINISHED) -> None:
            self.first_token_time_s, self.arrival_time_s, self.state = first, 0.0, state
            self.prompt_tokens, self.num_cached_tokens = 10, 5

    class _Run:
        def __init__(self, *requests: _Request) -> None:
            self.requests = list(requests)

    numbers = prefix.RunNumbers.of(_Run(_Request(1.0), _Request(None, RequestState.DROPPED)))  # type: ignore[arg-type]
    assert numbers.ttft_mean_s is None and numbers.ttft_p99_s is None and numbers.hit_rate == 0.5
    # one rejected at arrival (too large for any engine) is left out, under every router alike
    numbers = prefix.RunNumbers.of(_Run(_Request(1.0), _Request(None, RequestState.REJECTED)))  # type: ignore[arg-type]
    assert numbers.ttft_mean_s == 1.0 and numbers.hit_rate == 0.5
