from __future__ import annotations

from pathlib import Path

from matplotlib.axes import Axes
from matplotlib.colors import to_hex
from matplotlib.figure import Figure

from semsched.core.plan import PreemptionMode, PreemptionReason
from semsched.core.request import Request, RequestState
from semsched.metrics.plots import (
    NO_DATA,
    NO_SLO,
    NONE,
    class_bars_figure,
    latency_vs_rate_figure,
    plain_number,
    plot_class_bars,
    plot_latency_vs_rate,
    plot_series,
    series_figure,
)
from semsched.metrics.series import MonitoringSeries, monitoring_series
from semsched.metrics.summary import Summary, summarize
from semsched.sim.monitor import MonitorLog, PreemptionRecord, QueueSample
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


def _nothing_finished(make_request: RequestFactory) -> Summary:
    return summarize(
        [
            make_request([], request_id="a", state=RequestState.REJECTED, priority=0, ttft_slo_s=0.5),
            make_request([], request_id="b", state=RequestState.DROPPED, priority=1),
        ]
    )


def _notes(figure: Figure) -> list[list[str]]:
    return [[text.get_text() for text in ax.texts] for ax in figure.axes]


def test_class_bars_when_no_request_finishes(tmp_path: Path, make_request: RequestFactory) -> None:
    results = {"fcfs": _nothing_finished(make_request), "edf": _nothing_finished(make_request)}
    figure = class_bars_figure(results)  # latencies are all missing: no log scale over nothing
    # ttft_p90 and e2e_mean: no value; slo_attainment and tdg_ratio: 0 for p0 and all (each bar says so), no
    # target for p1 (one label over the group), never a dash that reads as a value
    notes = _notes(figure)
    assert notes[:2] == [[NO_DATA], [NO_DATA]]
    assert [sorted(texts) for texts in notes[2:]] == [["0 %"] * 4 + [NO_SLO]] * 2
    plot_class_bars(results, tmp_path / "bars.png")
    _assert_png(tmp_path / "bars.png")


def test_class_bars_without_results_or_metrics(tmp_path: Path, make_request: RequestFactory) -> None:
    assert _notes(class_bars_figure({}, ["e2e_mean", "slo_attainment"])) == [[NO_DATA], [NO_DATA]]
    assert _notes(class_bars_figure({"fcfs": summarize(_run(make_request, 1.0))}, [])) == [["no metric to plot"]]
    assert _notes(class_bars_figure({"fcfs": summarize([])})) == [[NO_DATA]] * 4
    plot_class_bars({}, tmp_path / "empty.png")
    _assert_png(tmp_path / "empty.png")


def test_latency_vs_rate_skips_series_without_data(tmp_path: Path, make_request: RequestFactory) -> None:
    sweep: dict[str, list[tuple[float, Summary]]] = {
        "fcfs": [(1.0, summarize(_run(make_request, 1.0))), (2.0, _nothing_finished(make_request))],
        "edf": [(1.0, _nothing_finished(make_request)), (2.0, _nothing_finished(make_request))],
    }
    figure = latency_vs_rate_figure(sweep, "e2e_mean")
    overall = figure.axes[0]
    assert [line.get_label() for line in overall.get_lines()] == ["fcfs"]  # edf never has an E2E
    assert list(overall.texts) == []
    assert [[t.get_text() for t in legend.get_texts()] for legend in figure.legends] == [["fcfs"]]
    plot_latency_vs_rate(sweep, tmp_path / "sweep.png", metric="e2e_mean")
    _assert_png(tmp_path / "sweep.png")


def test_latency_vs_rate_when_nothing_finishes(tmp_path: Path, make_request: RequestFactory) -> None:
    sweep = {"fcfs": [(1.0, _nothing_finished(make_request))]}
    assert _notes(latency_vs_rate_figure(sweep, "ttft_p90")) == [[NO_DATA], [NO_DATA], [NO_DATA]]
    assert _notes(latency_vs_rate_figure({}, "ttft_p90")) == [[NO_DATA]]
    plot_latency_vs_rate(sweep, tmp_path / "sweep.png", metric="ttft_p90")
    _assert_png(tmp_path / "sweep.png")


def test_a_policy_keeps_its_colour_in_every_panel(make_request: RequestFactory) -> None:
    results = {"edf": _nothing_finished(make_request), "fcfs": summarize(_run(make_request, 1.0))}
    figure = class_bars_figure(results, ["ttft_p90", "slo_attainment"])  # edf draws only in the second

    def colours(ax: Axes) -> dict[str, tuple[float, ...]]:
        return {bars.get_label(): tuple(bars.patches[0].get_facecolor()) for bars in ax.containers}

    latency, attainment = (colours(ax) for ax in figure.axes)
    assert list(latency) == ["fcfs"] and list(attainment) == ["edf", "fcfs"]
    assert latency["fcfs"] == attainment["fcfs"] != attainment["edf"]


# ---- monitoring series -----------------------------------------------------------------------------------------
def _series(make_request: RequestFactory, log: MonitorLog) -> MonitoringSeries:
    requests = [
        make_request([1.0, 2.0], request_id="a", priority=1, tier="PREMIUM", ttft_slo_s=0.5),
        make_request([70.0], request_id="b", priority=3, tier="BACKGROUND", arrival_time_s=65.0),
    ]
    return monitoring_series(requests, log)


def _titled(figure: Figure) -> dict[str, Axes]:
    return {ax.get_title(): ax for ax in figure.axes if ax.get_title()}


def test_series_figure_draws_each_policy_in_its_colour(tmp_path: Path, make_request: RequestFactory) -> None:
    busy = MonitorLog(
        1.0,
        num_swap_blocks=10,
        preemptions=[PreemptionRecord(3.0, 0, "b", 3, "BACKGROUND", PreemptionMode.SWAP,
                                      PreemptionReason.PRIORITY)],
        queue_samples=[QueueSample(0.0, {1: 1, 3: 2}, 4), QueueSample(61.0, {3: 1}, 0)],
        end_time_s=70.0,
    )
    idle = MonitorLog(1.0, end_time_s=70.0)
    series = {"fcfs": _series(make_request, idle), "tiered": _series(make_request, busy)}
    colours = {"fcfs": "#1f77b4", "tiered": "#d62728"}
    figure = series_figure(series, colours)
    panels = _titled(figure)
    assert set(panels) >= {
        "preemptions (swap) per min", "queue depth (mean) p1 (PREMIUM)", "SLO compliance p3 (BACKGROUND)",
        "swap blocks in use (max)", "rejections per min",
    }
    lines = {patch.get_label(): patch.get_edgecolor() for patch in panels["preemptions (swap) per min"].patches}
    assert set(lines) == {"fcfs", "tiered"} and to_hex(lines["tiered"]) == colours["tiered"]
    assert [t.get_text() for t in panels["SLO compliance p3 (BACKGROUND)"].texts] == [NO_DATA]  # no target
    assert not panels["SLO compliance p1 (PREMIUM)"].texts
    plot_series(series, tmp_path / "series.png", colours)
    _assert_png(tmp_path / "series.png")


def test_series_figure_without_data_says_so(tmp_path: Path, make_request: RequestFactory) -> None:
    assert all(notes == [NO_DATA] for notes in _notes(series_figure({})) if notes)
    empty = {"fcfs": monitoring_series([], MonitorLog(1.0))}
    figure = series_figure(empty)
    panels = _titled(figure)
    assert not panels["swap blocks in use (max)"].has_data()
    assert [t.get_text() for t in panels["swap blocks in use (max)"].texts] == [NO_DATA]
    plot_series(empty, tmp_path / "empty.png")
    plot_series({}, tmp_path / "none.png")
    _assert_png(tmp_path / "empty.png")
    _assert_png(tmp_path / "none.png")


def _tick_labels(figure: Figure) -> list[str]:
    figure.canvas.draw()
    return [t.get_text() for ax in figure.axes for minor in (False, True)
            for t in ax.get_yticklabels(minor=minor) if t.get_text()]


def test_the_legend_sits_outside_every_panel(make_request: RequestFactory) -> None:
    results = {"fcfs": summarize(_run(make_request, 1.0)), "edf": summarize(_run(make_request, 3.0))}
    for figure in (class_bars_figure(results), series_figure({"fcfs": _series(make_request, MonitorLog(1.0))})):
        assert all(ax.get_legend() is None for ax in figure.axes)  # none drawn over bars or lines
        assert len(figure.legends) == 1


def test_log_axes_only_over_a_decade_and_with_plain_ticks(make_request: RequestFactory) -> None:
    wide = {"fcfs": summarize(_run(make_request, 1.0)), "edf": summarize(_run(make_request, 40.0))}
    narrow = {"fcfs": summarize(_run(make_request, 11.1)), "edf": summarize(_run(make_request, 12.6))}
    wide_figure, narrow_figure = class_bars_figure(wide, ["ttft_p90"]), class_bars_figure(narrow, ["ttft_p90"])
    assert wide_figure.axes[0].get_yscale() == "log"
    labels = _tick_labels(wide_figure)
    assert labels and all(float(label.replace(",", "")) > 0 for label in labels)  # "12", never "1.26x10^1"
    assert narrow_figure.axes[0].get_yscale() == "linear"  # 11-13 s on a log axis would exaggerate
    assert narrow_figure.axes[0].get_ylim()[0] == 0.0


def test_plain_number() -> None:
    assert [plain_number(v) for v in (12.0, 12.6, 0.25, 1000.0, 0.001, 2e5)] == [
        "12", "12.6", "0.25", "1,000", "0.001", "200,000"]


def test_an_all_zero_series_panel_starts_at_zero_and_says_none(make_request: RequestFactory) -> None:
    idle = MonitorLog(1.0, end_time_s=70.0)
    panels = _titled(series_figure({"fcfs": _series(make_request, idle)}))
    swaps = panels["preemptions (swap) per min"]
    assert swaps.has_data() and swaps.get_ylim() == (0.0, 1.0)  # not -0.04..0.04 around a flat line
    assert [t.get_text() for t in swaps.texts] == [NONE]
    assert panels["queue depth (mean) p1 (PREMIUM)"].get_ylim()[0] == 0.0


def test_class_bars_take_the_colours_the_series_figure_takes(make_request: RequestFactory) -> None:
    results = {"fcfs": summarize(_run(make_request, 1.0)), "tiered": summarize(_run(make_request, 2.0))}
    colours = {"fcfs": "#1f77b4", "tiered": "#98df8a"}
    figure = class_bars_figure(results, ["ttft_p90"], colours)
    drawn = {bars.get_label(): to_hex(bars.patches[0].get_facecolor()) for bars in figure.axes[0].containers}
    assert drawn == colours  # as in series.png of the same run
