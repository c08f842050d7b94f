"""Length samplers: how many prompt tokens a request brings and how many output tokens it will generate.

All samplers satisfy the :class:`LengthSampler` protocol: ``sample(n, rng)`` returns two int64 arrays of ``n``
lengths, each >= 1, drawn only from ``rng``.

* :class:`EmpiricalLengths` resamples observed (prompt, output) pairs jointly, keeping their
  dependence exactly.
* :class:`QuantileLengths` draws from stored quantile tables by inverse-CDF sampling. Prompt and output are
  coupled through a Gaussian copula whose correlation reproduces a stored Spearman rank correlation
  (``rho_gaussian = 2 sin(pi rho_spearman / 6)``), so a fit is a few hundred numbers, not the trace itself.
  This is how the packaged default (``data/azure_conv_fit.json``, written by ``fit_default.py``) is used.
* :class:`UniformLengths` draws each length uniformly from an integer range, independently.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from importlib import resources
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt

from semsched.workloads.workload import WorkloadError

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]

FIT_RESOURCE = "azure_conv_fit.json"
"""Packaged quantile fits of the Azure 2023 traces, keyed by workload name ("azure-conv", "azure-code")."""

_erf = np.vectorize(math.erf, otypes=[np.float64])


class LengthError(WorkloadError):
    """A length sampler's parameters are invalid; the message names the field."""


class LengthSampler(Protocol):
    """Draws request sizes: ``sample(n, rng)`` returns ``(prompt_tokens, output_tokens)``, int64 arrays of
    length ``n`` with every entry >= 1, using no randomness other than ``rng``."""

    def sample(self, n: int, rng: np.random.Generator) -> tuple[IntArray, IntArray]: ...


@dataclass(frozen=True, eq=False)
class EmpiricalLengths:
    """Resample (prompt, output) pairs from observed data, with replacement, keeping each pair together."""

    prompt_tokens: IntArray
    output_tokens: IntArray

    def __post_init__(self) -> None:
        for name in ("prompt_tokens", "output_tokens"):
            object.__setattr__(self, name, _positive_ints(name, getattr(self, name)))
        if self.prompt_tokens.size == 0 or self.prompt_tokens.size != self.output_tokens.size:
            raise LengthError(
                "EmpiricalLengths: prompt_tokens and output_tokens must be non-empty and equally long "
                f"(got {self.prompt_tokens.size} and {self.output_tokens.size})"
            )

    def sample(self, n: int, rng: np.random.Generator) -> tuple[IntArray, IntArray]:
        """``n`` pairs drawn uniformly with replacement from the observed pairs."""
        index = rng.integers(0, self.prompt_tokens.size, size=_check_n(n))
        return self.prompt_tokens[index].copy(), self.output_tokens[index].copy()


@dataclass(frozen=True, eq=False)
class QuantileLengths:
    """Inverse-CDF sampling from quantile tables, with a Gaussian copula for the prompt/output dependence.

    ``probabilities`` is an increasing grid from 0 to 1; ``prompt_quantiles[i]`` and ``output_quantiles[i]``
    are the lengths at ``probabilities[i]``. Sampled lengths interpolate linearly between grid points and are
    rounded to integers >= 1. ``spearman_rho`` (in [-1, 1]) is the target rank correlation; 0 samples the
    two lengths independently.
    """

    probabilities: FloatArray
    prompt_quantiles: FloatArray
    output_quantiles: FloatArray
    spearman_rho: float = 0.0

    def __post_init__(self) -> None:
        for name in ("probabilities", "prompt_quantiles", "output_quantiles"):
            object.__setattr__(self, name, _non_decreasing(name, getattr(self, name)))
        probs = self.probabilities
        if probs.size < 2 or probs[0] != 0.0 or probs[-1] != 1.0:
            raise LengthError("probabilities: must have at least two points, start at 0 and end at 1")
        for name in ("prompt_quantiles", "output_quantiles"):
            if getattr(self, name).size != probs.size:
                raise LengthError(f"{name}: must have one value per probability ({probs.size})")
        if not -1.0 <= self.spearman_rho <= 1.0:
            raise LengthError(f"spearman_rho: must lie in [-1, 1] (got {self.spearman_rho!r})")

    @property
    def gaussian_rho(self) -> float:
        """Correlation of the Gaussian copula that yields ``spearman_rho`` for continuous margins."""
        return 2.0 * math.sin(math.pi * self.spearman_rho / 6.0)

    def sample(self, n: int, rng: np.random.Generator) -> tuple[IntArray, IntArray]:
        """``n`` (prompt, output) pairs: correlated uniforms mapped through each inverse CDF."""
        u_prompt, u_output = self._copula_uniforms(_check_n(n), rng)
        return self._invert(u_prompt, self.prompt_quantiles), self._invert(u_output, self.output_quantiles)

    def _copula_uniforms(self, n: int, rng: np.random.Generator) -> tuple[FloatArray, FloatArray]:
        rho = self.gaussian_rho
        z = rng.standard_normal(size=(2, n))
        z_output = rho * z[0] + math.sqrt(max(0.0, 1.0 - rho * rho)) * z[1]
        return _normal_cdf(z[0]), _normal_cdf(z_output)

    def _invert(self, u: FloatArray, quantiles: FloatArray) -> IntArray:
        values = np.interp(u, self.probabilities, quantiles)
        result: IntArray = np.maximum(np.rint(values), 1).astype(np.int64)
        return result

    @classmethod
    def fit(
        cls, prompt_tokens: npt.ArrayLike, output_tokens: npt.ArrayLike, num_points: int = 1001
    ) -> QuantileLengths:
        """Fit quantile tables (``num_points`` evenly spaced probabilities) and the rank correlation."""
        prompt = _positive_ints("prompt_tokens", prompt_tokens)
        output = _positive_ints("output_tokens", output_tokens)
        if prompt.size < 2 or prompt.size != output.size:
            raise LengthError("fit: need at least two (prompt, output) pairs of equal-length arrays")
        probs = np.linspace(0.0, 1.0, num_points)
        return cls(
            probabilities=probs,
            prompt_quantiles=np.asarray(np.quantile(prompt, probs), dtype=np.float64),
            output_quantiles=np.asarray(np.quantile(output, probs), dtype=np.float64),
            spearman_rho=spearman_correlation(prompt, output),
        )

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready description (the format of the packaged fit file)."""
        return {
            "probabilities": [round(float(p), 6) for p in self.probabilities],
            "prompt_quantiles": [round(float(q), 3) for q in self.prompt_quantiles],
            "output_quantiles": [round(float(q), 3) for q in self.output_quantiles],
            "spearman_rho": round(self.spearman_rho, 6),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> QuantileLengths:
        """Inverse of :meth:`to_dict`; :class:`LengthError` names a missing key."""
        try:
            return cls(
                probabilities=np.asarray(data["probabilities"], dtype=np.float64),
                prompt_quantiles=np.asarray(data["prompt_quantiles"], dtype=np.float64),
                output_quantiles=np.asarray(data["output_quantiles"], dtype=np.float64),
                spearman_rho=float(data.get("spearman_rho", 0.0)),
            )
        except KeyError as exc:
            raise LengthError(f"quantile fit: missing key {exc.args[0]!r}") from exc


@dataclass(frozen=True)
class UniformLengths:
    """Prompt and output lengths drawn independently and uniformly from inclusive integer ranges."""

    min_prompt_tokens: int
    max_prompt_tokens: int
    min_output_tokens: int
    max_output_tokens: int

    def __post_init__(self) -> None:
        for kind in ("prompt", "output"):
            low = getattr(self, f"min_{kind}_tokens")
            high = getattr(self, f"max_{kind}_tokens")
            if not 1 <= low <= high:
                raise LengthError(f"{kind}_tokens range: need 1 <= min <= max (got {low} and {high})")

    def sample(self, n: int, rng: np.random.Generator) -> tuple[IntArray, IntArray]:
        """``n`` independent uniform draws of each length."""
        n = _check_n(n)
        prompt = rng.integers(self.min_prompt_tokens, self.max_prompt_tokens, size=n, endpoint=True)
        output = rng.integers(self.min_output_tokens, self.max_output_tokens, size=n, endpoint=True)
        return prompt.astype(np.int64), output.astype(np.int64)


# ---- packaged fits ---------------------------------------------------------------------------------------
def load_fit_table() -> dict[str, Any]:
    """The raw packaged fit file (see ``fit_default.py`` for how it is made)."""
    text = resources.files("semsched.workloads").joinpath("data", FIT_RESOURCE).read_text(encoding="utf-8")
    table: dict[str, Any] = json.loads(text)
    return table


def fitted_lengths(name: str = "azure-conv") -> QuantileLengths:
    """The packaged :class:`QuantileLengths` fit of one trace (``"azure-conv"`` or ``"azure-code"``)."""
    fits = load_fit_table()["fits"]
    if name not in fits:
        raise LengthError(f"fitted_lengths: no packaged fit named {name!r}; known: {sorted(fits)}")
    return QuantileLengths.from_dict(fits[name])


# ---- helpers ---------------------------------------------------------------------------------------------
def spearman_correlation(x: npt.ArrayLike, y: npt.ArrayLike) -> float:
    """Spearman's rank correlation (ties get their average rank); 0 if either input is constant."""
    rank_x, rank_y = _average_ranks(np.asarray(x)), _average_ranks(np.asarray(y))
    if np.ptp(rank_x) == 0 or np.ptp(rank_y) == 0:
        return 0.0
    return float(np.corrcoef(rank_x, rank_y)[0, 1])


def _average_ranks(values: npt.NDArray[Any]) -> FloatArray:
    _, inverse, counts = np.unique(values, return_inverse=True, return_counts=True)
    last_rank = np.cumsum(counts)  # 1-based rank of the last member of each group of ties
    mean_rank = last_rank - (counts - 1) / 2.0
    return np.asarray(mean_rank[inverse], dtype=np.float64)


def _normal_cdf(z: FloatArray) -> FloatArray:
    return np.asarray(0.5 * (1.0 + _erf(z / math.sqrt(2.0))), dtype=np.float64)


def _positive_ints(name: str, values: npt.ArrayLike) -> IntArray:
    array = np.asarray(values)
    if array.ndim != 1 or (array.size and not np.issubdtype(array.dtype, np.integer)):
        raise LengthError(f"{name}: must be a 1-D array of integers (got dtype {array.dtype}, {array.ndim}-D)")
    bad = np.flatnonzero(array < 1)
    if bad.size:
        raise LengthError(f"{name}[{int(bad[0])}]: must be >= 1 (got {int(array[bad[0]])})")
    return array.astype(np.int64)


def _non_decreasing(name: str, values: npt.ArrayLike) -> FloatArray:
    array = np.asarray(values, dtype=np.float64)
    if array.ndim != 1 or not np.all(np.isfinite(array)) or np.any(np.diff(array) < 0):
        raise LengthError(f"{name}: must be a 1-D, finite, non-decreasing array")
    return array


def _check_n(n: int) -> int:
    if isinstance(n, bool) or not isinstance(n, int | np.integer) or n < 0:
        raise LengthError(f"n: must be an integer >= 0 (got {n!r})")
    return int(n)
