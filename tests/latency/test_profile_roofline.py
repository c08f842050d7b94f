"""Every packaged latency profile against the roofline of the hardware it describes (issue 30).

A coefficient copied from a paper can carry a slip (seed 000 printed the A100/Qwen1.5-7B prefill coefficient
100x too large, and three reproductions ran on it). Physics bounds what a step can cost: a prefill of ``n``
tokens and a decode at context ``n`` on a known GPU and model are held within a factor of 3 of
:class:`~semsched.latency.roofline.RooflineLatencyModel` (half of peak FLOP/s, 80 % of memory bandwidth), so a
slip of 10x or more cannot pass silently again.
"""

from __future__ import annotations

import pytest

from semsched.latency.profiles import load_profile, packaged_profiles
from semsched.latency.roofline import PROFILE_HARDWARE, profile_roofline

TOKENS = (512, 2048, 8192)
FACTOR = 3.0
#: the one profile that keeps a printed slip on purpose, to show what it does
AS_PRINTED = "a100-qwen1.5-7b-as-printed"


def _ratios(profile: str) -> dict[str, float]:
    """Profile step time / roofline step time for a lone prefill of n tokens and a lone decode at context n."""
    model, roofline = load_profile(profile), profile_roofline(profile)
    ratios = {}
    for n in TOKENS:
        ratios[f"prefill {n}"] = model.step_time_s([(n, 0)], 0, 0) / roofline.step_time_s([(n, 0)], 0, 0)
        ratios[f"decode at {n}"] = model.step_time_s([], 1, n) / roofline.step_time_s([], 1, n)
    return ratios


def test_every_packaged_profile_names_its_hardware() -> None:
    missing = sorted(set(packaged_profiles()) - set(PROFILE_HARDWARE))
    assert not missing, f"packaged profiles with no GPU and model in PROFILE_HARDWARE: {missing}"


@pytest.mark.parametrize("profile", sorted(set(packaged_profiles()) - {AS_PRINTED}))
def test_profile_within_a_factor_of_the_roofline(profile: str) -> None:
    outside = {what: ratio for what, ratio in _ratios(profile).items() if not 1 / FACTOR <= ratio <= FACTOR}
    assert not outside, f"{profile}: step time / roofline outside [1/{FACTOR:g}, {FACTOR:g}]: {outside}"


def test_the_printed_slip_is_caught() -> None:
    """The check above would have failed on seed 000's printed coefficient: an 8k-token prefill costs over 30x
    the roofline (the corrected profile stays within 2x)."""
    assert AS_PRINTED in packaged_profiles()
    printed, corrected = _ratios(AS_PRINTED), _ratios("a100-qwen1.5-7b")
    assert printed["prefill 8192"] > 10 * FACTOR
    assert corrected["prefill 8192"] < 2
    assert printed["decode at 8192"] == corrected["decode at 8192"]  # only alpha1 differs


def test_unknown_profile_has_no_roofline() -> None:
    with pytest.raises(ValueError, match="no GPU and model on record"):
        profile_roofline("cpu-tiny")
