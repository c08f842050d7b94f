"""Analytic step-latency model of "Semantic Scheduling for LLM Inference" (seed 000, Sec. KV cache, App. B).

Also holds the paper's cache-or-recompute rules (eq. 3) and the optimal partial save of decoded tokens
(minimiser of eq. 5; the printed eq. 6 does not follow from eq. 5, so it is re-derived here).
"""

from __future__ import annotations

import math
import operator
from collections.abc import Sequence
from dataclasses import dataclass, fields
from typing import SupportsIndex, TypeVar, cast

from mypy_extensions import mypyc_attr

from semsched.latency.base import FloatArray, decode_context_series, validate_step_inputs

_Context = TypeVar("_Context", float, FloatArray)


@dataclass(frozen=True, slots=True)
class AnalyticConfig:
    """Coefficients of the analytic model; every one is in seconds (per token, or per token squared).

    * ``alpha1`` (s/token²), ``alpha2`` (s/token): prefill of ``n`` tokens costs ``alpha1·n² + alpha2·n``.
    * ``gamma1`` (s/token), ``gamma2`` (s): decoding the token at context length ``c`` costs
      ``gamma1·c + gamma2``.
    * ``beta`` (s/token): loading or saving one token of KV cache (one direction).
    """

    alpha1: float
    alpha2: float
    gamma1: float
    gamma2: float
    beta: float

    def __post_init__(self) -> None:
        for field in fields(self):
            value = getattr(self, field.name)
            if not math.isfinite(value) or value < 0:
                raise ValueError(f"AnalyticConfig.{field.name} must be finite and >= 0, got {value!r}")

    def __reduce__(self) -> tuple[object, ...]:
        """Pickled as its constructor's arguments (compiled and frozen, it takes no assignment after it)."""
        return (AnalyticConfig, (self.alpha1, self.alpha2, self.gamma1, self.gamma2, self.beta))


def _decode_step_s(gamma1: float, gamma2: float, context_tokens: _Context) -> _Context:
    """Decode part of a step from summed context; the single definition shared by scalar and array paths."""
    return cast(_Context, context_tokens * gamma1 + gamma2)  # type: ignore[redundant-cast,unused-ignore] # (for mypyc)


@mypyc_attr(allow_interpreted_subclasses=True)  # (a test prices through a subclass)
@dataclass(frozen=True, slots=True)
class AnalyticLatencyModel:
    """The paper's single-request cost model, extended to batches of chunks.

    Single request (paper): prefill of ``n`` tokens costs ``α1·n² + α2·n``; decoding the token at context
    length ``c`` costs ``γ1·c + γ2``; moving KV costs ``β`` per token.

    Batch extension (ours):

    * A prefill chunk ``(lq, lkv)`` costs ``α1·((lkv+lq)² − lkv²) + α2·lq``: the increment of the whole-prompt
      cost, so the chunks of one prompt add up to the cost of prefilling it at once.
    * Decodes cost ``γ1·Σctx + γ2`` per step when ``num_decode > 0``. Assumption: a batched decode step reads
      the weights once, so the constant ``γ2`` (the feed-forward / weight-read cost of a token) is paid once
      per step, while attention (``γ1``) scales with the total context read.
    * The step time is the sum of its prefill chunks and its decode part; chunks do not overlap.
    * ``swap_time_s(n) = β·n``.

    Token counts may be any integers (NumPy's too: each is read with ``operator.index``, so a float count is a
    TypeError). The model is compiled with the core (``semsched.compiled``).
    """

    config: AnalyticConfig
    name: str = "analytic"

    def __reduce__(self) -> tuple[object, ...]:
        """Pickled as its constructor's arguments (compiled and frozen, it takes no assignment after it)."""
        return (type(self), (self.config, self.name))

    def step_time_s(
        self, prefill: Sequence[tuple[SupportsIndex, SupportsIndex]], num_decode: SupportsIndex,
        decode_context_tokens: SupportsIndex
    ) -> float:
        """Duration of one step (see :class:`~semsched.latency.base.LatencyModel`). Called for every simulated
        step, so written out: the chunks' times added left to right from 0.0 (``sum``'s order), the decode part
        as :func:`_decode_step_s` gives it, and every count checked (:func:`validate_step_inputs` raises). A chunk
        equal to the one before it adds the time computed for that one (a speculative round's verification is one
        ``(drafts, 0)`` chunk per decode)."""
        decodes, context = operator.index(num_decode), operator.index(decode_context_tokens)
        if decodes < 0 or context < 0 or (decodes == 0 and context != 0):
            validate_step_inputs([], decodes, context)
        config = self.config
        if not prefill:
            if decodes == 0:
                return 0.0
            return float(context) * config.gamma1 + config.gamma2  # (_decode_step_s)
        prefill_s = chunk_s = 0.0
        last = None
        for chunk in prefill:
            if chunk != last:
                query, cached = chunk
                lq, lkv = operator.index(query), operator.index(cached)
                if lq < 0 or lkv < 0:
                    validate_step_inputs([(lq, lkv)], decodes, context)
                chunk_s = self._chunk_s(lq, lkv)
                last = chunk
            prefill_s += chunk_s
        if decodes == 0:
            return prefill_s
        return prefill_s + _decode_step_s(config.gamma1, config.gamma2, float(context))

    def decode_time_s(self, decode_context_tokens: SupportsIndex) -> float:
        """The decode part of a step whose decodes (at least one) sum ``decode_context_tokens`` of context: what
        :meth:`step_time_s` adds for them, bit for bit, without its checks (for a caller that made them)."""
        return _decode_step_s(self.config.gamma1, self.config.gamma2, float(operator.index(decode_context_tokens)))

    def decode_times_s(self, num_decode: SupportsIndex, decode_context_tokens: SupportsIndex,
                       num_steps: SupportsIndex) -> FloatArray:
        """Durations of consecutive decode-only steps, bit-for-bit equal to :meth:`step_time_s`."""
        decodes = operator.index(num_decode)
        contexts = decode_context_series(decodes, operator.index(decode_context_tokens), operator.index(num_steps))
        if decodes == 0:
            return contexts * 0.0
        return _decode_step_s(self.config.gamma1, self.config.gamma2, contexts)

    def swap_time_s(self, num_tokens: SupportsIndex) -> float:
        """``β·n``: moving ``num_tokens`` tokens of KV in one direction."""
        tokens = operator.index(num_tokens)
        if tokens < 0:
            raise ValueError(f"num_tokens must be >= 0, got {tokens}")
        return self.config.beta * tokens

    def chunk_time_s(self, query_tokens: SupportsIndex, cached_tokens: SupportsIndex) -> float:
        """One prefill chunk: ``α1·((lkv+lq)² − lkv²) + α2·lq`` (the quadratic term in exact integers)."""
        return self._chunk_s(operator.index(query_tokens), operator.index(cached_tokens))

    def _chunk_s(self, query_tokens: int, cached_tokens: int) -> float:
        attention_pairs = (cached_tokens + query_tokens) ** 2 - cached_tokens**2
        return self.config.alpha1 * attention_pairs + self.config.alpha2 * query_tokens


def prefill_time_s(config: AnalyticConfig, prompt_tokens: int) -> float:
    """``α1·n² + α2·n``: prefilling (or recomputing in one pass) ``n`` prompt tokens."""
    return config.alpha1 * prompt_tokens**2 + config.alpha2 * prompt_tokens


def should_save_prefill_kv(config: AnalyticConfig, prompt_tokens: int) -> bool:
    """Eq. 3: keep (offload) the KV of ``n`` prefilled tokens iff reloading beats recomputing.

    Save iff ``β·n < α1·n² + α2·n``. (The paper prints the inequality the other way round next to "caching is
    more efficient"; saving is cheaper exactly when its cost ``β·n`` is the smaller one.)
    """
    if prompt_tokens < 0:
        raise ValueError(f"prompt_tokens must be >= 0, got {prompt_tokens}")
    return config.beta * prompt_tokens < prefill_time_s(config, prompt_tokens)


def partial_save_cost_s(
    config: AnalyticConfig, prompt_tokens: int, decoded_tokens: int, saved_tokens: int
) -> float:
    """Eq. 5: cost after preemption of saving ``x`` of ``m′`` decoded tokens and recomputing ``m′−x``.

    ``f(x) = β·x + γ1·(½·y² + n·y + ½·y) + γ2·y`` with ``y = m′ − x``: reload ``x`` tokens, re-decode ``y``
    tokens one by one (eq. 4's sum). Eq. 5 models recompute token by token, as the paper does; a real engine
    recomputes in one prefill pass, which is usually cheaper.
    """
    if not 0 <= saved_tokens <= decoded_tokens or prompt_tokens < 0:
        raise ValueError(
            f"need 0 <= saved_tokens <= decoded_tokens and prompt_tokens >= 0, "
            f"got n={prompt_tokens}, m'={decoded_tokens}, x={saved_tokens}"
        )
    recomputed = decoded_tokens - saved_tokens
    decode_cost = 0.5 * recomputed**2 + prompt_tokens * recomputed + 0.5 * recomputed
    return config.beta * saved_tokens + config.gamma1 * decode_cost + config.gamma2 * recomputed


def optimal_saved_decode_tokens(config: AnalyticConfig, prompt_tokens: int, decoded_tokens: int) -> int:
    """How many of ``m′`` decoded tokens to save so that eq. 5 is smallest (replaces the printed eq. 6).

    Derivation. Write ``x`` for the saved count and ``y = m′ − x``. Then
    ``f(x) = β·x + γ1·(½y² + n·y + ½y) + γ2·y`` and, since ``dy/dx = −1``,
    ``f′(x) = β − γ1·(y + n + ½) − γ2`` and ``f″(x) = γ1 ≥ 0``: ``f`` is a convex quadratic. With ``γ1 > 0``
    the stationary point is ``y* = (β − γ2)/γ1 − n − ½``, i.e. ``x* = m′ + n + ½ − (β − γ2)/γ1``. Clamp ``x*``
    to ``[0, m′]``; by convexity the best integer is ``floor(x*)`` or ``ceil(x*)``, whichever gives the
    smaller ``f`` (ties go to the smaller ``x``, i.e. less transfer). With ``γ1 = 0``, ``f`` is linear and an
    endpoint wins.
    """
    if decoded_tokens < 0 or prompt_tokens < 0:
        raise ValueError(f"need prompt_tokens, decoded_tokens >= 0, got {prompt_tokens}, {decoded_tokens}")
    if config.gamma1 == 0.0:
        candidates = [0, decoded_tokens]
    else:
        stationary = decoded_tokens + prompt_tokens + 0.5 - (config.beta - config.gamma2) / config.gamma1
        clamped = min(max(stationary, 0.0), float(decoded_tokens))
        candidates = sorted({math.floor(clamped), math.ceil(clamped)})
    return min(candidates, key=lambda x: partial_save_cost_s(config, prompt_tokens, decoded_tokens, x))


@dataclass(frozen=True, slots=True)
class CacheDecision:
    """What to do with an evicted request's KV: keep the prompt part or not, and how many decoded tokens."""

    save_prompt: bool
    saved_decode_tokens: int


def cache_or_recompute(config: AnalyticConfig, prompt_tokens: int, decoded_tokens: int) -> CacheDecision:
    """Combine eq. 3 (prompt KV) and the eq. 5 minimiser (decoded-token KV) for one evicted request."""
    return CacheDecision(
        save_prompt=should_save_prefill_kv(config, prompt_tokens),
        saved_decode_tokens=optimal_saved_decode_tokens(config, prompt_tokens, decoded_tokens),
    )
