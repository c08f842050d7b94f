"""Token-level Deadline-aware Gain (TDG), PROSERVE (seed 001) eq. 3, and the TDG ratio of §5.1.

For request ``r`` with output tokens emitted at ``t_{r,1}, t_{r,2}, ...`` (seconds after arrival)::

    f_TDG(r) = sum_i w_r(i) * I[t_{r,i} < deadline_{r,i}]
    deadline_{r,i} = TTFT_SLO(r) + (i - 1) * TPOT_SLO(r)
    w_r(1) = w_p * w_prio(r),   w_r(i > 1) = w_d * w_prio(r)

The TDG ratio (§5.1) is ``sum_r f_TDG(r) / Ideal_Gain``, where the ideal gain delivers every token of every
request on time, rejected and dropped requests included with their would-be output length. A request without
a TTFT (TPOT) SLO has an infinitely late first-token (decode-token) deadline. Tokens a request emitted before
being dropped keep their gain: dropping forfeits only the future tokens, which makes discarding unattractive.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from semsched.core.request import Request

# PROSERVE §5.1 "Details": high- and low-priority requests weigh 2 and 1.
PAPER_HIGH_PRIORITY_WEIGHT = 2.0
PAPER_LOW_PRIORITY_WEIGHT = 1.0

_CHUNK_TOKENS = 1 << 18


@dataclass(frozen=True)
class TDGWeights:
    """The weights of eq. 3: ``first_token`` is w_p, ``decode_token`` is w_d, ``per_priority`` maps a request
    priority (vLLM convention, lower is more important) to w_prio; unlisted priorities get
    ``default_priority_weight``."""

    first_token: float
    decode_token: float
    per_priority: Mapping[int, float] = field(default_factory=dict)
    default_priority_weight: float = 1.0

    def __post_init__(self) -> None:
        weights = [
            self.first_token,
            self.decode_token,
            self.default_priority_weight,
            *self.per_priority.values(),
        ]
        if any(not np.isfinite(w) or w < 0 for w in weights):
            raise ValueError(f"TDGWeights: every weight must be finite and >= 0 (got {self})")

    def priority_weight(self, priority: int) -> float:
        return float(self.per_priority.get(priority, self.default_priority_weight))

    @classmethod
    def paper_defaults(cls, requests: Sequence[Request]) -> TDGWeights:
        """The experimental setting of PROSERVE §5.1: the most important priority present weighs 2, every
        other priority 1, and w_p / w_d is the workload's mean input length over mean output length (w_d = 1).

        Only workload fields are read (prompt and target output lengths, priorities), so every policy run on
        the same workload gets the same weights.
        """
        if not requests:
            return cls(first_token=1.0, decode_token=1.0)
        prompt_tokens = np.fromiter((r.prompt_tokens for r in requests), dtype=np.float64)
        output_tokens = np.fromiter((r.target_output_tokens for r in requests), dtype=np.float64)
        top_priority = min(r.priority for r in requests)
        return cls(
            first_token=float(prompt_tokens.mean() / output_tokens.mean()),
            decode_token=1.0,
            per_priority={top_priority: PAPER_HIGH_PRIORITY_WEIGHT},
            default_priority_weight=PAPER_LOW_PRIORITY_WEIGHT,
        )


@dataclass(frozen=True)
class TDGTotals:
    """Achieved and ideal TDG of a set of requests; ``ratio`` is ``None`` when the ideal gain is zero."""

    gain: float
    ideal_gain: float

    @property
    def ratio(self) -> float | None:
        if self.ideal_gain <= 0:
            return None
        return min(self.gain / self.ideal_gain, 1.0)  # gain <= ideal_gain up to summation rounding

    @property
    def miss_ratio(self) -> float | None:
        """PROSERVE's Miss_TDG_Ratio: the share of the ideal gain that was lost."""
        ratio = self.ratio
        return None if ratio is None else 1.0 - ratio


def request_tdg_gains(requests: Sequence[Request], weights: TDGWeights) -> np.ndarray:
    """f_TDG(r) for every request (eq. 3), vectorised over the tokens of consecutive chunks of requests."""
    gains = np.zeros(len(requests), dtype=np.float64)
    for start, stop in _chunk_bounds(requests):
        gains[start:stop] = _chunk_gains(requests[start:stop], weights)
    return gains


def _chunk_bounds(requests: Sequence[Request]) -> list[tuple[int, int]]:
    """Split ``requests`` into runs of about :data:`_CHUNK_TOKENS` emitted tokens each.

    Why: the per-token arrays of a whole run (tens of millions of tokens) fall out of cache; chunks that fit
    make the computation several times faster and bound its memory.
    """
    counts = np.fromiter((r.num_recorded_tokens() for r in requests), dtype=np.int64, count=len(requests))
    chunk_of_request = np.cumsum(counts) // _CHUNK_TOKENS
    edges = [0, *(np.flatnonzero(np.diff(chunk_of_request)) + 1).tolist(), len(requests)]
    return [(a, b) for a, b in zip(edges[:-1], edges[1:], strict=True) if b > a]


def _chunk_gains(requests: Sequence[Request], weights: TDGWeights) -> np.ndarray:
    times_per_request = [r.token_times_s() for r in requests]
    token_counts = np.fromiter((t.size for t in times_per_request), dtype=np.int64, count=len(requests))
    if token_counts.sum() == 0:
        return np.zeros(len(requests), dtype=np.float64)
    owner = np.repeat(np.arange(len(requests)), token_counts)
    token_index = _index_within_request(token_counts)
    on_time = np.concatenate(times_per_request) < _token_deadlines_s(requests, owner, token_index)
    token_weights = _token_weights(requests, weights, owner, token_index)
    return np.bincount(owner, weights=on_time * token_weights, minlength=len(requests))


def request_ideal_gains(requests: Sequence[Request], weights: TDGWeights) -> np.ndarray:
    """The gain of each request had every token it would emit (``target_output_tokens``, or what it actually
    emitted if more) met its deadline."""
    emitted = np.fromiter((r.num_recorded_tokens() for r in requests), dtype=np.float64, count=len(requests))
    target = np.fromiter((r.target_output_tokens for r in requests), dtype=np.float64, count=len(requests))
    n_tokens = np.maximum(emitted, target)
    per_token = weights.first_token + (n_tokens - 1.0) * weights.decode_token
    return _priority_weights(requests, weights) * per_token


def tdg_totals(requests: Sequence[Request], weights: TDGWeights) -> TDGTotals:
    """Summed achieved and ideal TDG over ``requests``."""
    return TDGTotals(
        gain=float(request_tdg_gains(requests, weights).sum()),
        ideal_gain=float(request_ideal_gains(requests, weights).sum()),
    )


def _index_within_request(token_counts: np.ndarray) -> np.ndarray:
    """0-based position of each concatenated token within its request (``i - 1`` in eq. 3)."""
    starts = np.cumsum(token_counts) - token_counts
    index: np.ndarray = np.arange(int(token_counts.sum())) - np.repeat(starts, token_counts)
    return index


def _token_deadlines_s(requests: Sequence[Request], owner: np.ndarray, token_index: np.ndarray) -> np.ndarray:
    arrival_s = np.fromiter((r.arrival_time_s for r in requests), dtype=np.float64, count=len(requests))
    first_deadline_s = arrival_s + _slo_array(r.ttft_slo_s for r in requests)
    tpot_slo_s = _slo_array(r.tpot_slo_s for r in requests)
    with np.errstate(invalid="ignore"):  # index 0 times a missing TPOT SLO (inf) is NaN; replaced below
        decode_offset_s = token_index * tpot_slo_s[owner]
    deadlines_s: np.ndarray = first_deadline_s[owner] + np.where(token_index > 0, decode_offset_s, 0.0)
    return deadlines_s


def _token_weights(
    requests: Sequence[Request], weights: TDGWeights, owner: np.ndarray, token_index: np.ndarray
) -> np.ndarray:
    position_weight = np.where(token_index == 0, weights.first_token, weights.decode_token)
    token_weights: np.ndarray = position_weight * _priority_weights(requests, weights)[owner]
    return token_weights


def _priority_weights(requests: Sequence[Request], weights: TDGWeights) -> np.ndarray:
    return np.fromiter(
        (weights.priority_weight(r.priority) for r in requests), dtype=np.float64, count=len(requests)
    )


def _slo_array(slos_s: Iterable[float | None]) -> np.ndarray:
    return np.fromiter((np.inf if s is None else s for s in slos_s), dtype=np.float64)
