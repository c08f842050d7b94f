"""What preempting a running request costs, by strategy: seed 003's cost model (§1.3), made physical.

A running request holds the KV cache of ``context`` tokens (its prompt and the tokens generated so far). To free
its blocks the engine may

* **SWAP** it: copy the KV cache to host memory and back when it resumes. The cost is the transfer both ways:
  ``2 · context · kv_bytes_per_token / link_bytes_per_s``, where the bytes per token come from the model's
  shape (:class:`ModelShape`: K and V, for every layer and KV head, ``head_dim`` values of ``dtype_bytes``)
  and the link is the host interconnect (PCIe 4.0 x16 moves about 25 GB/s in practice). Without a shape the
  latency model's own ``swap_time_s`` prices one direction.
* **RECOMPUTE** it: drop the cache and prefill prompt and generated tokens again when it resumes, one prefill
  of ``context`` tokens as the latency model prices it.
* **DROP** it: end it with an error; the client retries from scratch. The cost is the work lost (prefill of the
  prompt and the decodes of the generated tokens, as the latency model prices them alone) plus the client's
  own cost of a failed request, ``drop_penalty_s``, which no model knows and a deployment sets.

The seed's own code prices swap with 512 bytes "per token per layer" over 32 Gb/s and recompute at a fixed
10,000 prefill tokens/s; its table (Llama 3 70B on A100) does not follow from that code. Here every number comes
from the model's shape, the link's bandwidth and a latency profile, so a different GPU, model or link changes
the answer the way it would change on real hardware.

Costs are latency added to the preempted request, in seconds; the scheduler compares them per victim
(:meth:`PreemptionCostModel.cheapest`).
"""

from __future__ import annotations

import enum
import math
import numbers
from collections.abc import Iterable
from dataclasses import dataclass

from semsched.core.errors import SemschedError
from semsched.latency.base import LatencyModel

#: largest token count priced (vLLM counts tokens in 32-bit integers)
MAX_TOKENS = 2**31 - 1


class PreemptionCostError(SemschedError):
    """A model shape, link or request size outside its limits; the message names the field and the limit."""


class PreemptionStrategy(enum.Enum):
    SWAP = "swap"
    RECOMPUTE = "recompute"
    DROP = "drop"


@dataclass(frozen=True)
class ModelShape:
    """The part of a transformer's shape that sets the size of its KV cache."""

    num_layers: int
    num_kv_heads: int
    head_dim: int
    dtype_bytes: int = 2

    def __post_init__(self) -> None:
        for name, limit in (("num_layers", 10_000), ("num_kv_heads", 10_000), ("head_dim", 100_000),
                            ("dtype_bytes", 16)):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= limit:
                raise PreemptionCostError(f"model shape: {name} must be an integer from 1 to {limit:,}, "
                                          f"got {value!r}")

    @property
    def kv_bytes_per_token(self) -> int:
        """Bytes of KV cache per token: K and V, every layer, every KV head."""
        return 2 * self.num_layers * self.num_kv_heads * self.head_dim * self.dtype_bytes


#: shapes from the models' published configurations (fp16/bf16 KV cache)
KNOWN_SHAPES: dict[str, ModelShape] = {
    "llama-3-70b": ModelShape(num_layers=80, num_kv_heads=8, head_dim=128),
    "llama-3-8b": ModelShape(num_layers=32, num_kv_heads=8, head_dim=128),
    "qwen1.5-4b": ModelShape(num_layers=40, num_kv_heads=20, head_dim=128),
    "qwen1.5-7b": ModelShape(num_layers=32, num_kv_heads=32, head_dim=128),
}

#: practical host-link bandwidths, bytes per second, one direction
PCIE4_X16_BYTES_PER_S = 25e9
PCIE5_X16_BYTES_PER_S = 50e9


@dataclass(frozen=True)
class PreemptionCosts:
    """Added latency of each strategy for one request, in seconds."""

    swap_s: float
    recompute_s: float
    drop_s: float

    def of(self, strategy: PreemptionStrategy) -> float:
        return {PreemptionStrategy.SWAP: self.swap_s, PreemptionStrategy.RECOMPUTE: self.recompute_s,
                PreemptionStrategy.DROP: self.drop_s}[strategy]


@dataclass(frozen=True)
class PreemptionCostModel:
    """Prices SWAP, RECOMPUTE and DROP for a request of ``prompt_tokens`` + ``generated_tokens``.

    ``shape`` and ``link_bytes_per_s`` go together: with both, a swap moves ``shape.kv_bytes_per_token`` bytes
    per token over the link each way; with neither, the latency model's ``swap_time_s`` prices each direction.
    ``drop_penalty_s`` is what a failed request costs its client beyond the lost work (a retry's queueing, a
    user who gave up); it is 0 unless set, so DROP is never cheaper than the work it throws away.
    """

    latency: LatencyModel
    shape: ModelShape | None = None
    link_bytes_per_s: float | None = None
    drop_penalty_s: float = 0.0

    def __post_init__(self) -> None:
        if (self.shape is None) != (self.link_bytes_per_s is None):
            raise PreemptionCostError("shape and link_bytes_per_s: give both (a swap over the link) or neither "
                                      "(the latency model's swap_time_s)")
        if self.link_bytes_per_s is not None and not (
            isinstance(self.link_bytes_per_s, int | float) and math.isfinite(self.link_bytes_per_s)
            and 1e6 <= self.link_bytes_per_s <= 1e15
        ):
            raise PreemptionCostError(f"link_bytes_per_s must be a number from 1e6 to 1e15 bytes/s, "
                                      f"got {self.link_bytes_per_s!r}")
        if not (isinstance(self.drop_penalty_s, int | float) and math.isfinite(self.drop_penalty_s)
                and 0 <= self.drop_penalty_s <= 86_400):
            raise PreemptionCostError(f"drop_penalty_s must be a number of seconds from 0 to 86,400, "
                                      f"got {self.drop_penalty_s!r}")

    def swap_s(self, context_tokens: int) -> float:
        """Copy the KV cache of ``context_tokens`` tokens out to the host and back."""
        context_tokens = _check_tokens("context_tokens", context_tokens)
        if self.shape is not None and self.link_bytes_per_s is not None:
            return 2 * context_tokens * self.shape.kv_bytes_per_token / self.link_bytes_per_s
        return 2 * self.latency.swap_time_s(context_tokens)

    def recompute_s(self, context_tokens: int) -> float:
        """Prefill ``context_tokens`` tokens again (prompt and generated), as one chunk in a step of its own."""
        context_tokens = _check_tokens("context_tokens", context_tokens)
        return self.latency.step_time_s([(context_tokens, 0)], 0, 0) if context_tokens else 0.0

    def drop_s(self, prompt_tokens: int, generated_tokens: int) -> float:
        """The work lost (prefill of the prompt, then each generated token decoded alone) plus the penalty."""
        prompt_tokens = _check_tokens("prompt_tokens", prompt_tokens)
        generated_tokens = _check_tokens("generated_tokens", generated_tokens)
        prefill = self.latency.step_time_s([(prompt_tokens, 0)], 0, 0) if prompt_tokens else 0.0
        decodes = float(self.latency.decode_times_s(1, prompt_tokens, generated_tokens).sum()) \
            if generated_tokens else 0.0
        return prefill + decodes + self.drop_penalty_s

    def costs(self, prompt_tokens: int, generated_tokens: int) -> PreemptionCosts:
        prompt_tokens = _check_tokens("prompt_tokens", prompt_tokens)
        generated_tokens = _check_tokens("generated_tokens", generated_tokens)
        context = int(prompt_tokens) + int(generated_tokens)
        return PreemptionCosts(swap_s=self.swap_s(context), recompute_s=self.recompute_s(context),
                               drop_s=self.drop_s(prompt_tokens, generated_tokens))

    def cheapest(
        self, prompt_tokens: int, generated_tokens: int,
        allowed: Iterable[PreemptionStrategy] = (PreemptionStrategy.SWAP, PreemptionStrategy.RECOMPUTE),
    ) -> tuple[PreemptionStrategy, PreemptionCosts]:
        """The cheapest allowed strategy (ties: the order of ``allowed``) and every strategy's cost.

        DROP is not allowed unless asked for: it ends the request, which only a policy's explicit option may do.
        """
        choices = list(allowed)
        if not choices:
            raise PreemptionCostError("allowed: name at least one strategy")
        costs = self.costs(prompt_tokens, generated_tokens)
        return min(choices, key=costs.of), costs


def _check_tokens(name: str, value: int) -> int:
    """``value`` as a Python int (a NumPy integer is taken)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or not 0 <= value <= MAX_TOKENS:
        raise PreemptionCostError(f"{name} must be an integer from 0 to {MAX_TOKENS:,}, got {value!r}")
    return int(value)
