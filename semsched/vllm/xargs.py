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
``predicted_output_tokens``  point prediction of the output length, integer >= 1
``predicted_lengths``      with ``predicted_probs``: a predicted output-length distribution (ascending
                           integer lengths >= 1, probabilities >= 0 summing to 1, at most 64 points)
=========================  ==========================================================================

Other keys are left alone (vLLM and other plugins use ``extra_args`` too). This module is plain Python so the
API-server middleware, the engine-side scheduler and tests share one validator.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from semsched.core.request import InvalidRequestError, LengthDistribution
from semsched.core.tiers import DEFAULT_TIERS

MAX_SLO_MS = 86_400_000.0  # one day
MAX_TIER_CHARS = 64
MAX_URGENCY = 100
MAX_DISTRIBUTION_POINTS = 64
PRIORITY_LIMIT = 2**31  # vLLM stores priority as a Python int; keep it in a sane, sortable range

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


@dataclass(frozen=True)
class RequestOptions:
    """Validated scheduling inputs of one request, in semsched's units (seconds, tokens)."""

    priority: int = 0
    tier: str = "default"
    urgency: int | None = None
    ttft_slo_s: float | None = None
    tpot_slo_s: float | None = None
    e2e_slo_s: float | None = None
    predicted_output: LengthDistribution | None = None


def parse_request_options(priority: object, extra_args: Mapping[str, Any] | None) -> RequestOptions:
    """Validate ``priority`` and the semsched keys of ``extra_args``.

    Raises :class:`InvalidRequestError`; its message starts with the field (``priority`` or
    ``vllm_xargs.<key>``) and states the limit.
    """
    checked_priority = _priority(priority)
    args = _args(extra_args)
    tier = _tier(args.get("tier"))
    defaults = _KNOWN_TIERS.get(tier.lower())
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
        raise InvalidRequestError(f"priority: must be an integer (got {value!r})")
    if not -PRIORITY_LIMIT < value < PRIORITY_LIMIT:
        raise InvalidRequestError(f"priority: must be between -2**31 and 2**31 (got {value})")
    return value


def _args(extra_args: Mapping[str, Any] | None) -> Mapping[str, Any]:
    if extra_args is None:
        return {}
    if not isinstance(extra_args, Mapping):
        raise InvalidRequestError(f"vllm_xargs: must be a JSON object (got {type(extra_args).__name__})")
    return extra_args


def _tier(value: object) -> str:
    if value is None:
        return "default"
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
            f"vllm_xargs.urgency: must be an integer from 0 (most urgent) to {MAX_URGENCY} (got {value!r})"
        )
    return value


def _slo_s(args: Mapping[str, Any], key: str, default_s: float | None) -> float | None:
    value = args.get(key)
    if value is None:
        return default_s
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise InvalidRequestError(f"vllm_xargs.{key}: must be a finite number of milliseconds (got {value!r})")
    if not 0 < value <= MAX_SLO_MS:
        raise InvalidRequestError(f"vllm_xargs.{key}: must be > 0 and <= {MAX_SLO_MS:.0f} ms (got {value})")
    return float(value) / 1000.0


def _prediction(args: Mapping[str, Any]) -> LengthDistribution | None:
    point = args.get("predicted_output_tokens")
    lengths, probs = args.get("predicted_lengths"), args.get("predicted_probs")
    if point is not None and (lengths is not None or probs is not None):
        raise InvalidRequestError(
            "vllm_xargs.predicted_output_tokens: give either it or predicted_lengths/predicted_probs, not both"
        )
    if point is not None:
        if isinstance(point, bool) or not isinstance(point, int) or point < 1:
            raise InvalidRequestError(
                f"vllm_xargs.predicted_output_tokens: must be an integer >= 1 (got {point!r})"
            )
        return LengthDistribution.point(point)
    if lengths is None and probs is None:
        return None
    if not isinstance(lengths, list) or not isinstance(probs, list):
        raise InvalidRequestError("vllm_xargs.predicted_lengths: needs predicted_probs, both lists of numbers")
    if len(lengths) > MAX_DISTRIBUTION_POINTS:
        raise InvalidRequestError(
            f"vllm_xargs.predicted_lengths: at most {MAX_DISTRIBUTION_POINTS} points (got {len(lengths)})"
        )
    if any(isinstance(n, bool) or not isinstance(n, int) for n in lengths):
        raise InvalidRequestError("vllm_xargs.predicted_lengths: every length must be an integer")
    if any(isinstance(p, bool) or not isinstance(p, int | float) for p in probs):
        raise InvalidRequestError("vllm_xargs.predicted_probs: every probability must be a number")
    try:
        return LengthDistribution(tuple(lengths), tuple(float(p) for p in probs))
    except InvalidRequestError as error:
        message = str(error)
        for old, new in (("predicted_output.lengths", "predicted_lengths"), ("predicted_output.probs",
                         "predicted_probs"), ("predicted_output", "predicted_lengths")):
            message = message.replace(old, new, 1)
        raise InvalidRequestError(f"vllm_xargs.{message}") from None
