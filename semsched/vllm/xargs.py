"""Per-request scheduling inputs carried by vLLM requests, and their validation.

A client states who it is and what it needs through two fields of vLLM's OpenAI API (and of
``vllm.SamplingParams``): ``priority`` (an integer; lower is more important, as everywhere in vLLM) and
``vllm_xargs`` (``SamplingParams.extra_args``), a flat JSON object whose semsched keys are:

=========================  ==========================================================================
``tier``                   service tier label (string, at most 64 characters); a known tier name
                           (``SYSTEM``, ``PREMIUM``, ``STANDARD``, ``BACKGROUND``, any case) fills in that
                           tier's SLOs where the request gives none. It never changes ``priority``.
``urgency``                semantic urgency, integer 0..100 (0 = most urgent; e.g. a triage level)
``ttft_slo_ms``            time-to-first-token target, number > 0 and <= 86,400,000
``tpot_slo_ms``            time-per-output-token target, same limits
``e2e_slo_ms``             end-to-end latency target, same limits
``predicted_output_tokens``  point prediction of the output length, integer from 1 to 2**31 - 1
``predicted_lengths``      with ``predicted_probs``: a predicted output-length distribution (strictly
                           ascending integer lengths from 1 to 2**31 - 1, each once; probabilities from 0
                           to 1 summing to 1; at most 64 points)
=========================  ==========================================================================

Other keys are left alone (vLLM and other plugins use ``extra_args`` too), except a near miss of one of the keys
above (``ttft_slo`` for ``ttft_slo_ms``, ``Tier`` for ``tier``): that is an error naming the key it probably
meant, since a typo would otherwise be ignored silently. Numbers are checked against their limits before any
conversion, so an integer of any size is an error naming its field, never an ``OverflowError``. This module is
plain Python so the API-server middleware, the engine-side scheduler and tests share one validator.
"""

from __future__ import annotations

import difflib
import functools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeGuard

from semsched.core.request import InvalidRequestError, LengthDistribution
from semsched.core.tiers import DEFAULT_TIERS, TierSpec

MAX_SLO_MS = 86_400_000.0  # one day
MAX_TIER_CHARS = 64
MAX_URGENCY = 100
MAX_DISTRIBUTION_POINTS = 64
MAX_PREDICTED_TOKENS = 2**31 - 1
PRIORITY_LIMIT = 2**31  # vLLM stores priority as a Python int; keep it in a sane, sortable range
NEAR_MISS_CUTOFF = 0.8  # difflib similarity from which an unknown key is taken for a typo of a semsched key
NO_TIER = "default"  # the tier of a request that names none
# how the adapter's rejection messages (``stop_reason``) begin; the API-server side (frontend.py) reads them
INVALID_REQUEST_PREFIX = "semsched: invalid request: "
REJECTED_PREFIX = "semsched: rejected by "

SEMSCHED_KEYS = frozenset(
    {
        "tier",
        "urgency",
        "ttft_slo_ms",
        "tpot_slo_ms",
        "e2e_slo_ms",
        "predicted_output_tokens",
        "predicted_lengths",
        "predicted_probs",
    }
)
_KNOWN_TIERS = {tier.name.lower(): tier for tier in DEFAULT_TIERS}


@functools.lru_cache(maxsize=8)
def _tiers_by_name(tiers: tuple[TierSpec, ...]) -> dict[str, TierSpec]:
    """A tier table by lower-case name (tables are tuples of frozen specs: hashable, cached)."""
    return {tier.name.lower(): tier for tier in tiers}


@dataclass(frozen=True)
class RequestOptions:
    """Validated scheduling inputs of one request, in semsched's units (seconds, tokens)."""

    priority: int = 0
    tier: str = NO_TIER
    urgency: int | None = None
    ttft_slo_s: float | None = None
    tpot_slo_s: float | None = None
    e2e_slo_s: float | None = None
    predicted_output: LengthDistribution | None = None


def parse_request_options(
    priority: object, extra_args: Mapping[str, Any] | None, tiers: Sequence[TierSpec] = DEFAULT_TIERS
) -> RequestOptions:
    """Validate ``priority`` and the semsched keys of ``extra_args``.

    A request naming a tier of ``tiers`` (any case) gets that tier's SLOs where it gives none.
    Raises :class:`InvalidRequestError`; its message starts with the field (``priority`` or
    ``vllm_xargs.<key>``) and states the limit.
    """
    checked_priority = _priority(priority)
    args = _args(extra_args)
    _check_near_misses(args)
    tier = _tier(args.get("tier"))
    known = _KNOWN_TIERS if tiers is DEFAULT_TIERS else _tiers_by_name(tuple(tiers))
    defaults = known.get(tier.lower())
    return RequestOptions(
        priority=checked_priority,
        tier=tier,
        urgency=_urgency(args.get("urgency")),
        ttft_slo_s=_slo_s(args, "ttft_slo_ms", defaults.ttft_slo_s if defaults else None),
        tpot_slo_s=_slo_s(args, "tpot_slo_ms", defaults.tpot_slo_s if defaults else None),
        e2e_slo_s=_slo_s(args, "e2e_slo_ms", defaults.e2e_slo_s if defaults else None),
        predicted_output=_prediction(args),
    )


def _priority(value: object) -> int:
    if value is None:
        return 0
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidRequestError(f"priority: must be an integer (got {_short(value)})")
    if not -PRIORITY_LIMIT < value < PRIORITY_LIMIT:
        raise InvalidRequestError(f"priority: must be between -2**31 and 2**31 (got {_short(value)})")
    return value


def _args(extra_args: Mapping[str, Any] | None) -> Mapping[str, Any]:
    if extra_args is None:
        return {}
    if not isinstance(extra_args, Mapping):
        raise InvalidRequestError(f"vllm_xargs: must be a JSON object (got {type(extra_args).__name__})")
    return extra_args


def _check_near_misses(args: Mapping[str, Any]) -> None:
    """A key that is not semsched's but nearly is (a typo, another case) is an error naming the likely key."""
    for key in args:
        if not isinstance(key, str) or key in SEMSCHED_KEYS:
            continue
        match = key.lower() if key.lower() in SEMSCHED_KEYS else None
        if match is None:
            close = difflib.get_close_matches(key.lower(), SEMSCHED_KEYS, n=1, cutoff=NEAR_MISS_CUTOFF)
            match = close[0] if close else None
        if match is not None:
            raise InvalidRequestError(
                f"vllm_xargs.{key}: not a semsched key; did you mean {match!r}? (semsched keys: "
                f"{', '.join(sorted(SEMSCHED_KEYS))}; keys far from these are passed on to vLLM untouched)"
            )


def _is_int(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


def _tier(value: object) -> str:
    if value is None:
        return NO_TIER
    if not isinstance(value, str) or not value.strip():
        raise InvalidRequestError(f"vllm_xargs.tier: must be a non-empty string (got {value!r})")
    if len(value) > MAX_TIER_CHARS:
        raise InvalidRequestError(f"vllm_xargs.tier: at most {MAX_TIER_CHARS} characters (got {len(value)})")
    return value.strip()


def _urgency(value: object) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_URGENCY:
        raise InvalidRequestError(
            f"vllm_xargs.urgency: must be an integer from 0 (most urgent) to {MAX_URGENCY} (got {_short(value)})"
        )
    return value


def _slo_s(args: Mapping[str, Any], key: str, default_s: float | None) -> float | None:
    value = args.get(key)
    if value is None:
        return default_s
    if not (_is_int(value) or isinstance(value, float)) or (isinstance(value, float) and not math.isfinite(value)):
        raise InvalidRequestError(f"vllm_xargs.{key}: must be a finite number of milliseconds (got {value!r})")
    if not 0 < value <= MAX_SLO_MS:  # compared before any conversion: an int of any size is just too large
        raise InvalidRequestError(
            f"vllm_xargs.{key}: must be > 0 and <= {MAX_SLO_MS:.0f} ms (got {_short(value)})"
        )
    return float(value) / 1000.0


def _short(value: object, limit: int = 40) -> str:
    """A value for an error message, cut short (an integer may have thousands of digits)."""
    if _is_int(value) and value.bit_length() > 64:
        return f"an integer of {value.bit_length()} bits"
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _token_count(value: object, field: str) -> int:
    if not _is_int(value) or not 1 <= value <= MAX_PREDICTED_TOKENS:
        raise InvalidRequestError(
            f"vllm_xargs.{field}: must be an integer from 1 to {MAX_PREDICTED_TOKENS} (got {_short(value)})"
        )
    return value


def _prediction(args: Mapping[str, Any]) -> LengthDistribution | None:
    point = args.get("predicted_output_tokens")
    lengths, probs = args.get("predicted_lengths"), args.get("predicted_probs")
    if point is not None and (lengths is not None or probs is not None):
        raise InvalidRequestError(
            "vllm_xargs.predicted_output_tokens: give either it or predicted_lengths/predicted_probs, not both"
        )
    if point is not None:
        return LengthDistribution.point(_token_count(point, "predicted_output_tokens"))
    if lengths is None and probs is None:
        return None
    if not isinstance(lengths, list) or not isinstance(probs, list):
        raise InvalidRequestError("vllm_xargs.predicted_lengths: needs predicted_probs, both lists of numbers")
    if len(lengths) > MAX_DISTRIBUTION_POINTS:
        raise InvalidRequestError(
            f"vllm_xargs.predicted_lengths: at most {MAX_DISTRIBUTION_POINTS} points (got {len(lengths)})"
        )
    checked = [_token_count(n, "predicted_lengths") for n in lengths]
    repeated = next((a for a, b in zip(checked, checked[1:], strict=False) if b <= a), None)
    if repeated is not None:
        raise InvalidRequestError(
            "vllm_xargs.predicted_lengths: must be strictly ascending, each length once "
            f"(got {repeated} followed by {checked[checked.index(repeated) + 1]})"
        )
    if any(not (_is_int(p) or isinstance(p, float)) or not 0 <= p <= 1 for p in probs):
        raise InvalidRequestError("vllm_xargs.predicted_probs: every probability must be a number from 0 to 1")
    try:
        return LengthDistribution(tuple(checked), tuple(float(p) for p in probs))
    except InvalidRequestError as error:
        message = str(error)
        for old, new in (("predicted_output.lengths", "predicted_lengths"), ("predicted_output.probs",
                         "predicted_probs"), ("predicted_output", "predicted_lengths")):
            message = message.replace(old, new, 1)
        raise InvalidRequestError(f"vllm_xargs.{message}") from None
