"""The one place the CLI says what a policy does with predictions a workload does not carry."""

from __future__ import annotations

from collections.abc import Sequence

from rich.console import Console

from semsched.policies import make_policy
from semsched.workloads import Workload


def warn_about_missing_predictions(console: Console, policies: Sequence[str], workload: Workload) -> None:
    """A policy that orders by predicted output lengths, on a workload that carries none, falls back to the true
    lengths (an oracle): say so plainly, once per policy, before the run."""
    if any(request.predicted_output is not None for request in workload.to_requests()):
        return
    for spec in policies:
        if make_policy(spec).uses_predicted_lengths:
            console.print(
                f"[yellow]note:[/] {spec}: workload {workload.name!r} carries no predicted output lengths, so "
                "this policy orders by the true lengths (as length=oracle would)",
                highlight=False,
            )
