"""Every registered policy (and a few configurations) gives, bit for bit, the results checked in before the speed
work of issue 29 (tests/sim/golden.py says how the file was written and when to rewrite it)."""

from __future__ import annotations

import json

import pytest

from tests.sim.golden import GOLDEN_PATH, GOLDEN_SCENARIOS, run, specs

GOLDEN = json.loads(GOLDEN_PATH.read_text())


def test_the_golden_file_covers_every_registered_policy_and_scenario() -> None:
    assert sorted(GOLDEN) == sorted(specs()), "rewrite tests/sim/golden.json for a new policy (golden.py --write)"
    for spec, scenarios in GOLDEN.items():
        assert sorted(scenarios) == sorted(s.name for s in GOLDEN_SCENARIOS), spec


@pytest.mark.slow
@pytest.mark.parametrize("spec", specs())
def test_a_policy_gives_its_golden_results(spec: str) -> None:
    now = {s.name: run(spec, s) for s in GOLDEN_SCENARIOS}
    moved = {name: (GOLDEN[spec][name], now[name]) for name in now if GOLDEN[spec].get(name) != now[name]}
    assert not moved, f"{spec}: results moved from the golden ones (golden, now): {moved}"
