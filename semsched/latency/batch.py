"""PROSERVE's batch latency estimator (seed 001, eq. 4-7) and its least-squares fit."""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass, fields
from typing import TypeVar

import numpy as np

from semsched.latency.base import BatchSample, FloatArray, decode_context_series, validate_step_inputs

_Context = TypeVar("_Context", float, FloatArray)

FEATURE_NAMES: tuple[str, ...] = (
    "constant",
    "sum_lq_squared",
    "sum_lq_times_lkv",
    "sum_lq",
    "sum_decode_lkv",
    "num_decode",
)
"""Columns of the fit's design matrix, in the order of the coefficients t_c, a_p, b_p, c_p, a_d, b_d."""
CHUNK_FEATURE = "num_prefill_chunks"
"""The extra column of a fit with ``per_chunk_constant=True`` (coefficient ``d_p``)."""


@dataclass(frozen=True, slots=True)
class BatchConfig:
    """Coefficients of PROSERVE eq. 4-7; units follow from the terms they multiply.

    * ``t_c`` (s): constant overhead of a non-empty step (kernel launches, input/output processing).
    * ``a_p`` (s/token²), ``b_p`` (s/token²), ``c_p`` (s/token): a prefill chunk costs
      ``a_p·lq² + b_p·lq·lkv + c_p·lq``.
    * ``a_d`` (s/token), ``b_d`` (s): a decode request costs ``a_d·lkv + b_d``.
    * ``kv_transfer_s_per_token`` (s/token): swap cost, not part of PROSERVE. The default 0 makes swapping
      free, which is only right when the simulator does not model transfer time.
    * ``d_p`` (s): a fixed cost per prefill chunk, not part of PROSERVE (0, the default, is eq. 5 exactly).
      Measured engines have one (per-request input preparation, the sampler and the first-token output of a
      prompt); without it a fit folds that cost into ``t_c`` and overcharges small decode-only steps.

    Fitted coefficients are unconstrained, so they may be negative; they must be finite.
    """

    t_c: float
    a_p: float
    b_p: float
    c_p: float
    a_d: float
    b_d: float
    kv_transfer_s_per_token: float = 0.0
    d_p: float = 0.0

    def __post_init__(self) -> None:
        for field in fields(self):
            value = getattr(self, field.name)
            if not math.isfinite(value):
                raise ValueError(f"BatchConfig.{field.name} must be finite, got {value!r}")
        if self.kv_transfer_s_per_token < 0:
            raise ValueError(f"kv_transfer_s_per_token must be >= 0, got {self.kv_transfer_s_per_token!r}")


def _step_s(config: BatchConfig, prefill_s: float, num_decode: int, context_tokens: _Context) -> _Context:
    """Eq. 7 from aggregates; the single definition shared by the scalar and the array (fast-forward) path."""
    return config.t_c + prefill_s + (context_tokens * config.a_d + num_decode * config.b_d)


@dataclass(frozen=True, slots=True)
class BatchLatencyModel:
    """``T(B) = t_c + Σ_prefill (a_p·lq² + b_p·lq·lkv + c_p·lq + d_p) + Σ_decode (a_d·lkv + b_d)`` (PROSERVE
    eq. 7, plus the optional per-chunk constant ``d_p``).

    The decode sum is computed from aggregates as ``a_d·Σlkv + b_d·num_decode``. An empty step costs 0 (no
    ``t_c``). ``swap_time_s(n) = kv_transfer_s_per_token·n``.
    """

    config: BatchConfig
    name: str = "batch"

    def step_time_s(
        self, prefill: Sequence[tuple[int, int]], num_decode: int, decode_context_tokens: int
    ) -> float:
        """Duration of one step (see :class:`~semsched.latency.base.LatencyModel`)."""
        validate_step_inputs(prefill, num_decode, decode_context_tokens)
        if not prefill and num_decode == 0:
            return 0.0
        prefill_s = sum((self.chunk_time_s(lq, lkv) for lq, lkv in prefill), 0.0)
        return _step_s(self.config, prefill_s, num_decode, float(decode_context_tokens))

    def decode_times_s(self, num_decode: int, decode_context_tokens: int, num_steps: int) -> FloatArray:
        """Durations of consecutive decode-only steps, bit-for-bit equal to :meth:`step_time_s`."""
        contexts = decode_context_series(num_decode, decode_context_tokens, num_steps)
        if num_decode == 0:
            return contexts * 0.0
        return _step_s(self.config, 0.0, num_decode, contexts)

    def swap_time_s(self, num_tokens: int) -> float:
        """``kv_transfer_s_per_token·n`` (0 by default: swapping is free unless configured)."""
        if num_tokens < 0:
            raise ValueError(f"num_tokens must be >= 0, got {num_tokens}")
        return self.config.kv_transfer_s_per_token * num_tokens

    def chunk_time_s(self, query_tokens: int, cached_tokens: int) -> float:
        """Eq. 5 for one prefill chunk: ``a_p·lq² + b_p·lq·lkv + c_p·lq`` (+ ``d_p``)."""
        config = self.config
        return (
            config.a_p * query_tokens**2 + config.b_p * query_tokens * cached_tokens + config.c_p * query_tokens
            + config.d_p
        )


@dataclass(frozen=True, slots=True)
class FitReport:
    """Quality of a model on a set of samples. APEs (absolute percentage errors) are fractions (0.045 means
    4.5 %); ``p90_ape`` is the 90th percentile, linearly interpolated."""

    num_samples: int
    mape: float
    max_ape: float
    residual_rms_s: float
    residual_sum_squares_s2: float
    median_ape: float
    p90_ape: float


def batch_features(
    prefill: Sequence[tuple[int, int]], num_decode: int, decode_context_tokens: int, *, per_chunk: bool = False
) -> tuple[float, ...]:
    """One row of the design matrix, in the order of :data:`FEATURE_NAMES` (then :data:`CHUNK_FEATURE` with
    ``per_chunk=True``)."""
    row = (
        1.0,
        float(sum(lq * lq for lq, _ in prefill)),
        float(sum(lq * lkv for lq, lkv in prefill)),
        float(sum(lq for lq, _ in prefill)),
        float(decode_context_tokens),
        float(num_decode),
    )
    return (*row, float(len(prefill))) if per_chunk else row


def fit(
    samples: Sequence[BatchSample],
    *,
    name: str = "fitted-batch",
    kv_transfer_s_per_token: float = 0.0,
    relative_error: bool = False,
    nonnegative: bool = False,
    per_chunk_constant: bool = False,
) -> tuple[BatchLatencyModel, FitReport]:
    """Least-squares fit of eq. 4-7 to measured steps (with ``per_chunk_constant=True``, also ``d_p``: the
    samples then need steps with and without prefill, and with different numbers of chunks or tokens).

    ``relative_error=True`` weights each sample by ``1/time_s``, minimising squared relative error (closer to
    the MAPE that PROSERVE reports) instead of squared seconds. Coefficients are unconstrained unless
    ``nonnegative=True``, which solves the exact non-negative least-squares problem instead: every term of eq.
    4-7 is a cost, a profile file accepts only coefficients >= 0, and noisy measurements (a term too small to
    resolve) can otherwise come out negative. Raises ``ValueError`` with fewer samples than parameters (six,
    seven with ``d_p``), a non-positive ``time_s``, or a design whose features cannot all be identified (for
    example a feature that never varies).
    """
    names = (*FEATURE_NAMES, CHUNK_FEATURE) if per_chunk_constant else FEATURE_NAMES
    _check_samples(samples, len(names))
    design = np.array([
        batch_features(s.prefill, s.num_decode, s.decode_context_tokens, per_chunk=per_chunk_constant)
        for s in samples
    ])
    times_s = np.array([s.time_s for s in samples], dtype=np.float64)
    _check_design(design, names)
    weights = 1.0 / times_s if relative_error else np.ones_like(times_s)
    solve = _nonnegative_lstsq if nonnegative else _weighted_lstsq
    coefficients = [float(c) for c in solve(design, times_s, weights)]
    t_c, a_p, b_p, c_p, a_d, b_d = coefficients[:6]
    d_p = coefficients[6] if per_chunk_constant else 0.0
    config = BatchConfig(t_c, a_p, b_p, c_p, a_d, b_d, kv_transfer_s_per_token=kv_transfer_s_per_token, d_p=d_p)
    model = BatchLatencyModel(config=config, name=name)
    return model, evaluate(model, samples)


def evaluate(model: BatchLatencyModel, samples: Sequence[BatchSample]) -> FitReport:
    """Errors of ``model`` on ``samples`` (which must have positive ``time_s``)."""
    predicted_s = np.array(
        [model.step_time_s(s.prefill, s.num_decode, s.decode_context_tokens) for s in samples],
        dtype=np.float64,
    )
    measured_s = np.array([s.time_s for s in samples], dtype=np.float64)
    residuals_s = predicted_s - measured_s
    ape = np.abs(residuals_s) / measured_s
    residual_ss = float(residuals_s @ residuals_s)
    return FitReport(
        num_samples=len(samples),
        mape=float(ape.mean()),
        max_ape=float(ape.max()),
        residual_rms_s=math.sqrt(residual_ss / len(samples)),
        residual_sum_squares_s2=residual_ss,
        median_ape=float(np.median(ape)),
        p90_ape=float(np.percentile(ape, 90)),
    )


def _check_samples(samples: Sequence[BatchSample], num_parameters: int) -> None:
    if len(samples) < num_parameters:
        raise ValueError(
            f"need at least {num_parameters} samples to fit {num_parameters} parameters, got {len(samples)}"
        )
    for index, sample in enumerate(samples):
        if not (math.isfinite(sample.time_s) and sample.time_s > 0):
            raise ValueError(f"sample {index} has time_s={sample.time_s!r}; every sample needs time_s > 0")
        validate_step_inputs(sample.prefill, sample.num_decode, sample.decode_context_tokens)


def _check_design(design: FloatArray, names: Sequence[str]) -> None:
    """Raise ``ValueError`` naming the culprit features if the design matrix is rank deficient."""
    scaled = design / _column_scale(design)
    rank = int(np.linalg.matrix_rank(scaled))
    if rank == design.shape[1]:
        return
    constant = [
        f"'{names[j]}' never varies (always {design[0, j]:g})"
        for j in range(1, design.shape[1])
        if np.all(design[:, j] == design[0, j])
    ]
    if constant:
        raise ValueError("degenerate design: " + "; ".join(constant) + ". Add samples where it varies.")
    dependent = [
        names[j]
        for j in range(design.shape[1])
        if int(np.linalg.matrix_rank(np.delete(scaled, j, axis=1))) == rank
    ]
    raise ValueError(f"degenerate design: features {dependent} are linearly dependent in these samples.")


def _column_scale(design: FloatArray) -> FloatArray:
    scale: FloatArray = np.abs(design).max(axis=0)
    scale[scale == 0.0] = 1.0
    return scale


def _weighted_lstsq(design: FloatArray, times_s: FloatArray, weights: FloatArray) -> FloatArray:
    """Solve min ‖w·(X·c − y)‖² with columns scaled to unit max for conditioning."""
    scale = _column_scale(design)
    weighted = design * weights[:, np.newaxis] / scale
    solution, _residuals, _rank, _singular = np.linalg.lstsq(weighted, times_s * weights, rcond=None)
    coefficients: FloatArray = solution / scale
    return coefficients


def _nonnegative_lstsq(design: FloatArray, times_s: FloatArray, weights: FloatArray) -> FloatArray:
    """Solve min ‖w·(X·c − y)‖² subject to c >= 0, exactly.

    The optimum is the unconstrained least-squares solution restricted to its own support (the coefficients it
    leaves positive), so the best non-negative solution over all supports is the optimum. With six features
    that is 63 small solves (127 with ``d_p``), simpler and more exact than an iterative active-set method.
    """
    scale = _column_scale(design)
    weighted = design * weights[:, np.newaxis] / scale
    target = times_s * weights
    num_features = design.shape[1]
    best: FloatArray = np.zeros(num_features)
    best_residual = float(target @ target)
    for size in range(1, num_features + 1):
        for support in itertools.combinations(range(num_features), size):
            columns = list(support)
            solution, _residuals, _rank, _singular = np.linalg.lstsq(weighted[:, columns], target, rcond=None)
            if np.any(solution < 0):
                continue
            residual = target - weighted[:, columns] @ solution
            residual_ss = float(residual @ residual)
            if residual_ss < best_residual:
                best = np.zeros(num_features)
                best[columns] = solution
                best_residual = residual_ss
    coefficients: FloatArray = best / scale
    return coefficients
