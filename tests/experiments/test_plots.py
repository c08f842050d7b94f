"""Policy colours in the experiment figures (semsched/experiments/plots.py)."""

from __future__ import annotations

from semsched.experiments.plots import policy_colour, policy_colours
from semsched.experiments.tiers import STARVATION_POLICIES, TABLE_POLICIES


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
