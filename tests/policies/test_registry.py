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
