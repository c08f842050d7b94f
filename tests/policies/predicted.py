"""A random workload with predicted output-length distributions, run in both simulator modes."""

from __future__ import annotations

import numpy as np

from semsched.core.request import LengthDistribution, Request, RequestState
from tests.support import random_requests, simulate

Outcome = list[tuple[RequestState, int, list[float]]]


def with_predictions(requests: list[Request], seed: int) -> list[Request]:
    """Attach a prediction to most requests: none, a (wrong) point, a bimodal one (its expected remaining
    output and Gittins index jump once the short mode has passed), or the empirical distribution of samples."""
    rng = np.random.default_rng(seed)
    for request in requests:
        kind, truth = rng.integers(4), request.target_output_tokens
        if kind == 1:
            request.predicted_output = LengthDistribution.point(int(rng.integers(1, 2 * truth + 2)))
        elif kind == 2:
            short = int(rng.integers(1, 20))
            p_short = float(rng.uniform(0.05, 0.95))
            request.predicted_output = LengthDistribution(
                (short, short + int(rng.integers(1, 300))), (p_short, 1.0 - p_short)
            )
        elif kind == 3:
            samples = rng.integers(1, 250, rng.integers(1, 8)).tolist()
            request.predicted_output = LengthDistribution.from_samples(samples)
    return requests


def outcomes_of_both_modes(policy: str, seed: int, **config: int) -> tuple[Outcome, Outcome]:
    """Each request's (state, preemptions, token times) with fast-forward on, then off; 80 requests at 10/s."""
    outcomes = []
    for fast_forward in (True, False):
        requests = with_predictions(random_requests(seed, 80, rate=10.0, max_prompt=400, max_output=120), seed)
        simulate(requests, policy, fast_forward=fast_forward, **config)  # type: ignore[arg-type]
        outcomes.append([(r.state, r.num_preemptions, r.token_times_s().tolist()) for r in requests])
    return outcomes[0], outcomes[1]


def check_complete_and_exact(policy: str, seeds: range = range(3), **config: int) -> int:
    """Every request finishes with all its tokens in both modes, which agree to the bit; returns the number of
    preemptions seen (so a caller can insist that the workload exercised them)."""
    preemptions = 0
    for seed in seeds:
        fast, slow = outcomes_of_both_modes(policy, seed, **config)
        assert fast == slow
        assert all(state is RequestState.FINISHED for state, _, _ in fast)
        preemptions += sum(count for _, count, _ in fast)
    return preemptions
