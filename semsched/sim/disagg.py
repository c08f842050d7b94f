"""PD disaggregation (seed 001 §4.3, DistServe-style): prefill instances, decode instances and the KV link between.

A request is routed to a prefill instance, runs its prompt there and emits its first token there; then its KV
leaves that instance (every block freed, :meth:`~semsched.core.scheduler.Scheduler.hand_off`) and crosses the
link for :meth:`KVLink.transfer_time_s` of its computed tokens, and it enters the decode instance chosen at the
hand-off already holding its KV (:meth:`~semsched.core.scheduler.Scheduler.add_transferred`), which decodes the
rest. :class:`PDSpec` is what a :class:`~semsched.sim.runner.ClusterSpec` says about it; :class:`Disaggregation`
is what :class:`~semsched.sim.engine.Simulation` needs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from semsched.core.errors import SemschedError
from semsched.latency.preemption import KNOWN_SHAPES

#: a 200 Gb/s RDMA NIC (InfiniBand HDR / RoCE) between a prefill and a decode node moves about 25 GB/s: the common
#: inter-node link of disaggregated deployments (NVLink within a node is an order of magnitude faster)
DEFAULT_KV_LINK_GBPS = 25.0
#: the shape of the default profile's model (``a100-qwen1.5-4b``)
DEFAULT_MODEL_SHAPE = "qwen1.5-4b"
MAX_POOL_INSTANCES = 1024
MAX_LINK_GBPS = 100_000.0


class DisaggregationError(SemschedError):
    """A PD cluster setting outside its limits; the message names the field and the limit."""


@dataclass(frozen=True)
class KVLink:
    """The link a request's KV crosses from its prefill instance to its decode instance: ``gbps`` gigabytes (10^9
    bytes) per second, ``kv_bytes_per_token`` bytes of KV cache per token (:class:`ModelShape`)."""

    kv_bytes_per_token: int
    gbps: float

    def __post_init__(self) -> None:
        if not (isinstance(self.kv_bytes_per_token, int) and self.kv_bytes_per_token >= 1):
            raise DisaggregationError(
                f"kv_bytes_per_token: must be an integer >= 1 (got {self.kv_bytes_per_token!r})"
            )
        _check_gbps("kv_link_gbps", self.gbps)

    def transfer_time_s(self, num_tokens: int) -> float:
        """Seconds to move the KV cache of ``num_tokens`` tokens."""
        return num_tokens * self.kv_bytes_per_token / (self.gbps * 1e9)


@dataclass(frozen=True)
class Disaggregation:
    """A simulation's PD split: its first ``num_prefill`` instances prefill, the others decode; ``link`` carries
    the KV between them."""

    num_prefill: int
    link: KVLink


@dataclass(frozen=True)
class PDSpec:
    """A PD-disaggregated cluster (``ClusterSpec.pd``): ``num_prefill_instances`` prefill and
    ``num_decode_instances`` decode instances, a KV link of ``kv_link_gbps`` GB/s (gigabytes per second; default
    25, one 200 Gb/s RDMA NIC), and the model whose KV crosses it (``model_shape``, a name of
    :data:`~semsched.latency.preemption.KNOWN_SHAPES`, default the default profile's Qwen1.5-4B)."""

    num_prefill_instances: int
    num_decode_instances: int
    kv_link_gbps: float = DEFAULT_KV_LINK_GBPS
    model_shape: str = DEFAULT_MODEL_SHAPE

    def __post_init__(self) -> None:
        for name in ("num_prefill_instances", "num_decode_instances"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_POOL_INSTANCES:
                raise DisaggregationError(
                    f"pd.{name}: must be an integer from 1 to {MAX_POOL_INSTANCES:,} (got {value!r})"
                )
        _check_gbps("pd.kv_link_gbps", self.kv_link_gbps)
        if self.model_shape not in KNOWN_SHAPES:
            raise DisaggregationError(
                f"pd.model_shape: unknown model {self.model_shape!r}; known: {', '.join(sorted(KNOWN_SHAPES))}"
            )

    @property
    def num_instances(self) -> int:
        return self.num_prefill_instances + self.num_decode_instances

    def disaggregation(self) -> Disaggregation:
        link = KVLink(KNOWN_SHAPES[self.model_shape].kv_bytes_per_token, float(self.kv_link_gbps))
        return Disaggregation(self.num_prefill_instances, link)


def _check_gbps(name: str, value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not (
        math.isfinite(value) and 0 < value <= MAX_LINK_GBPS
    ):
        raise DisaggregationError(f"{name}: must be a number > 0 and <= {MAX_LINK_GBPS:,.0f} GB/s (got {value!r})")
