"""The experiment figures (semsched/experiments/plots.py): policy colours, legends outside the axes, bars that
cannot be seen labelled, log axes only where they help, with plain ticks."""

from __future__ import annotations

from pathlib import Path

from matplotlib.figure import Figure

from semsched.experiments.plots import bar_chart, bar_chart_figure, policy_colour, policy_colours
from semsched.experiments.tiers import STARVATION_POLICIES, TABLE_POLICIES
from semsched.metrics.plots import NO_SLO, NOT_AVAILABLE


def test_a_policy_keeps_its_colour_across_figures_when_nothing_collides() -> None:
    assert policy_colours(["fcfs", "tiered"]) == {"fcfs": policy_colour("fcfs"), "tiered": policy_colour("tiered")}


def test_the_policies_of_one_figure_get_distinct_colours() -> None:
    # two tiered variants whose specs hash to the same tab20 colour
    assert policy_colour("tiered:aging_per_s=0") == policy_colour("tiered:max_age_boost=1000")
    for group in (STARVATION_POLICIES, TABLE_POLICIES, [f"tiered:rekey_s={i}" for i in range(1, 11)]):
        colours = policy_colours(list(group))
        assert len(set(colours.values())) == len(group), colours
    first, second = policy_colours(["tiered:aging_per_s=0", "tiered:max_age_boost=1000"]).values()
    assert first == policy_colour("tiered:aging_per_s=0") and second != first  # the later one moves on


def _texts(figure: Figure) -> list[str]:
    return sorted(text.get_text() for ax in figure.axes for text in ax.texts)


def test_bars_without_a_value_or_of_zero_are_labelled_and_the_legend_is_outside() -> None:
    # SYSTEM has no SLO (no value for anyone); fcfs met 0 % of PREMIUM's; edf has no STANDARD value
    series = {"fcfs": [None, 0.0, 0.5], "edf": [None, 0.4, None]}
    figure = bar_chart_figure(["SYSTEM", "PREMIUM", "STANDARD"], series, ylabel="fraction", title="t",
                              zero="0 %", missing=NO_SLO)
    assert _texts(figure) == ["0 %", NO_SLO, NO_SLO]  # one over SYSTEM, one on edf's STANDARD bar
    assert figure.axes[0].get_legend() is None and len(figure.legends) == 1
    assert figure.axes[0].get_xlim()[0] < 0  # the SYSTEM group is on the axes though nothing is drawn there
    default = bar_chart_figure(["a"], {"fcfs": [None], "edf": [1.0], "sjf": [0.001]}, ylabel="y", title="t")
    assert _texts(default) == [NOT_AVAILABLE, "≈0"]  # a bar too short to see says it is about zero


def test_log_bars_only_over_a_decade_with_plain_ticks(tmp_path: Path) -> None:
    narrow = bar_chart_figure(["a", "b"], {"fcfs": [11.1, 12.6]}, ylabel="s", title="t", log=True)
    assert narrow.axes[0].get_yscale() == "linear" and narrow.axes[0].get_ylim()[0] == 0.0
    wide = bar_chart_figure(["a", "b"], {"fcfs": [0.5, 40.0]}, ylabel="s", title="t", log=True)
    wide.canvas.draw()
    labels = [t.get_text() for minor in (False, True) for t in wide.axes[0].get_yticklabels(minor=minor)]
    assert wide.axes[0].get_yscale() == "log"
    assert "1" in labels and "10" in labels and not any("10^" in label or "×" in label for label in labels)
    bar_chart(tmp_path / "bars.png", ["a"], {"fcfs": [1.0]}, ylabel="y", title="t")
    assert (tmp_path / "bars.png").read_bytes()[:4] == b"\x89PNG"
