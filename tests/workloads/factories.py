"""Factories shared by the workload tests."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import numpy.typing as npt

from semsched.workloads import Workload

WorkloadFactory = Callable[..., Workload]


def make_workload(
    times_s: npt.ArrayLike = (0.0, 1.0, 2.0, 3.0),
    prompt_tokens: Sequence[int] | None = None,
    output_tokens: Sequence[int] | None = None,
    name: str = "test",
) -> Workload:
    """An untiered workload; lengths default to 10, 20, ... and 1, 2, ...."""
    n = np.asarray(times_s).size
    prompts = np.arange(1, n + 1) * 10 if prompt_tokens is None else np.asarray(prompt_tokens)
    outputs = np.arange(1, n + 1) if output_tokens is None else np.asarray(output_tokens)
    return Workload.untiered(name, np.asarray(times_s, dtype=np.float64), prompts, outputs)
