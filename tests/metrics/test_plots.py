from __future__ import annotations

from pathlib import Path

from semsched.core.request import Request
from semsched.metrics.plots import plot_class_bars, plot_latency_vs_rate
from semsched.metrics.summary import Summary, summarize
from tests.metrics.factories import RequestFactory

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def _run(make_request: RequestFactory, slowdown: float) -> list[Request]:
    return [
        make_request([0.2 * slowdown, 0.4 * slowdown], request_id="a", priority=0, ttft_slo_s=0.5),
        make_request([0.3 * slowdown, 0.9 * slowdown], request_id="b", priority=1, ttft_slo_s=0.5),
    ]


def _assert_png(path: Path) -> None:
    data = path.read_bytes()
    assert data.startswith(PNG_SIGNATURE)
    assert len(data) > 1000


def test_latency_vs_rate(tmp_path: Path, make_request: RequestFactory) -> None:
    sweep: dict[str, list[tuple[float, Summary]]] = {
        policy: [(rate, summarize(_run(make_request, rate * factor))) for rate in (4.0, 1.0, 2.0)]
        for policy, factor in (("fcfs", 1.0), ("edf", 0.7))
    }
    for metric in ("e2e_mean", "slo_attainment"):
        path = tmp_path / f"{metric}.png"
        plot_latency_vs_rate(sweep, path, metric=metric)
        _assert_png(path)


def test_class_bars(tmp_path: Path, make_request: RequestFactory) -> None:
    results = {"fcfs": summarize(_run(make_request, 1.0)), "edf": summarize(_run(make_request, 3.0)[:1])}
    path = tmp_path / "bars.png"
    plot_class_bars(results, path)  # edf has no priority-1 class: its bar is left empty
    _assert_png(path)
