"""fair_share.ShareMeter: served-token shares per class over a window of engine time."""

from __future__ import annotations

import pytest

from semsched.policies.fair_share import ShareMeter


def test_shares_over_the_window() -> None:
    meter = ShareMeter({1: 0.5, 3: 0.2}, window_s=10.0)
    assert meter.shares(0.0) == {} and meter.short(0.0) == frozenset()  # nothing served: no one is short
    meter.record(1, 90, 0.5)
    meter.record(3, 10, 0.7)
    assert meter.shares(1.0) == {1: 0.9, 3: 0.1}
    assert meter.short(1.0) == frozenset({3})  # 10 % against 20 %
    meter.record(3, 40, 5.2)
    assert meter.shares(6.0) == pytest.approx({1: 90 / 140, 3: 50 / 140})
    assert meter.short(6.0) == frozenset()
    # the first second's bucket leaves the window ten seconds on
    assert meter.shares(10.5) == {3: 1.0}
    assert meter.short(10.5) == frozenset({1})
    assert meter.shares(16.0) == {}


@pytest.mark.parametrize(("targets", "window_s"), [({1: 0.7, 2: 0.4}, 10.0), ({1: -0.1}, 10.0), ({1: 0.5}, 0.5)])
def test_bad_settings_are_refused(targets: dict[int, float], window_s: float) -> None:
    with pytest.raises(ValueError, match="fair_shares|share_window_s"):
        ShareMeter(targets, window_s)
