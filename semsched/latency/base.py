"""The contract between the simulator and a step-latency model.

A simulated engine step runs one batch of chunks. In PROSERVE's notation (eq. 5-6) a chunk computes ``lq`` new
tokens on top of ``lkv`` tokens already in the KV cache: a prefill chunk (or a recompute) has any ``lq``; a
decode has ``lq == 1``. Decodes are passed as aggregates (count and summed context) because every model here
is linear in them, which keeps the per-step cost O(#prefill chunks) and lets fast-forward use numpy.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]


@runtime_checkable
class LatencyModel(Protocol):
    """How long one engine step, or a KV transfer, takes. All times are seconds.

    Promises every implementation keeps:

    * ``step_time_s([], 0, 0) == 0.0``: an empty step costs nothing.
    * ``decode_times_s(B, S0, k)[i]`` is bit-for-bit equal to ``step_time_s([], B, S0 + i * B)``, so a
      simulator that fast-forwards runs of decode-only steps reproduces per-step results exactly.
    * Inputs are validated: negative token counts raise ``ValueError``.
    """

    @property
    def name(self) -> str:
        """Profile name of this model (e.g. ``"a100-qwen1.5-7b"``)."""
        ...

    def step_time_s(
        self, prefill: Sequence[tuple[int, int]], num_decode: int, decode_context_tokens: int
    ) -> float:
        """Duration of one step.

        ``prefill`` holds one ``(lq, lkv)`` pair per prefill chunk: ``lq`` tokens computed this step on top
        of ``lkv`` cached ones. ``num_decode`` requests decode one token each; ``decode_context_tokens`` is
        the sum of their KV lengths (tokens cached before this step's token).
        """
        ...

    def decode_times_s(self, num_decode: int, decode_context_tokens: int, num_steps: int) -> FloatArray:
        """Durations of ``num_steps`` consecutive decode-only steps of ``num_decode`` requests.

        Step ``i`` (0-based) has ``decode_context_tokens + i * num_decode`` summed context tokens.
        """
        ...

    def swap_time_s(self, num_tokens: int) -> float:
        """Time to move ``num_tokens`` tokens of KV cache between GPU and CPU in one direction."""
        ...


@dataclass(frozen=True, slots=True)
class BatchSample:
    """One measured (or generated) step: its batch composition and how long it took. Used for fitting."""

    prefill: tuple[tuple[int, int], ...]
    num_decode: int
    decode_context_tokens: int
    time_s: float


def validate_step_inputs(prefill: Sequence[tuple[int, int]], num_decode: int, decode_context_tokens: int) -> None:
    """Raise ``ValueError`` if any token count of a step is negative."""
    if num_decode < 0 or decode_context_tokens < 0:
        raise ValueError(
            f"num_decode and decode_context_tokens must be >= 0, got {num_decode} and {decode_context_tokens}"
        )
    _check_no_context_without_decodes(num_decode, decode_context_tokens)
    for query_tokens, cached_tokens in prefill:
        if query_tokens < 0 or cached_tokens < 0:
            raise ValueError(f"prefill chunk (lq, lkv) must be >= 0, got ({query_tokens}, {cached_tokens})")


def decode_context_series(num_decode: int, decode_context_tokens: int, num_steps: int) -> FloatArray:
    """Summed decode context of each step of a decode-only run, as float64 (exact below 2**53 tokens)."""
    if num_decode < 0 or decode_context_tokens < 0 or num_steps < 0:
        raise ValueError(
            "num_decode, decode_context_tokens and num_steps must be >= 0, "
            f"got {num_decode}, {decode_context_tokens}, {num_steps}"
        )
    _check_no_context_without_decodes(num_decode, decode_context_tokens)
    steps = np.arange(num_steps, dtype=np.int64)
    contexts: FloatArray = (decode_context_tokens + steps * num_decode).astype(np.float64)
    return contexts


def _check_no_context_without_decodes(num_decode: int, decode_context_tokens: int) -> None:
    if num_decode == 0 and decode_context_tokens != 0:
        raise ValueError(f"decode_context_tokens must be 0 when num_decode is 0, got {decode_context_tokens}")
