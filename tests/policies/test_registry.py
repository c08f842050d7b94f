"""Policy specs: ``name:key=value;key=value`` everywhere, with errors that name the parameter."""

from __future__ import annotations

import pytest

from semsched.policies import POLICIES, PolicyError, make_policy
from semsched.policies.registry import parse_spec


def test_spec_parameters_are_separated_by_semicolons() -> None:
    assert parse_spec("edf:deadline=ttft;preempt=true") == ("edf", {"deadline": "ttft", "preempt": "true"})
    policy = make_policy("edf:deadline=ttft;preempt=true")
    assert policy.config.deadline == "ttft"  # type: ignore[attr-defined]
    assert policy.config.preempt is True  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("spec", "needle"),
    [
        ("edf:deadline=ttft,preempt=true", "separate parameters with ';'"),
        ("edf:deadline=ttft;deadline=e2e", "'deadline' given twice"),
        ("edf:deadline", "must look like key=value"),
        (":deadline=ttft", "name is empty"),
        ("edf:nope=1", "unknown parameter 'nope'"),
        ("nope", "unknown policy 'nope'"),
    ],
)
def test_bad_specs_name_the_problem(spec: str, needle: str) -> None:
    with pytest.raises(PolicyError, match=needle.replace("(", r"\(")):
        POLICIES.create(spec)


def test_preemption_swap_works_on_every_policy_without_a_preemption_mode_of_its_own() -> None:
    from semsched.core.plan import PreemptionMode

    for spec in ("fcfs", "ssjf", "ltr", "trail", "gittins", "fastserve"):
        policy = make_policy(f"{spec}:preemption=swap")
        assert policy.swap_victims, spec
        assert policy.preemption_mode(None, None) is PreemptionMode.SWAP  # type: ignore[arg-type]
        recompute = make_policy(f"{spec}:preemption=recompute")
        assert recompute.preemption_mode(None, None) is PreemptionMode.RECOMPUTE  # type: ignore[arg-type]
    assert make_policy("fcfs").preemption_mode(None, None) is PreemptionMode.RECOMPUTE  # type: ignore[arg-type]
    las = make_policy("las:preemption=recompute")  # its own parameter, not the generic one
    assert not las.swap_victims and las.config.preemption == "recompute"  # type: ignore[attr-defined]
    with pytest.raises(PolicyError, match="'preemption' must be one of recompute, swap"):
        make_policy("fcfs:preemption=sometimes")
    with pytest.raises(PolicyError, match="chooses each victim's preemption mode itself"):
        make_policy("semantic:preemption=swap")  # decides per victim (cache or recompute)
