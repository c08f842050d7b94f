"""PROSERVE's service-level routers (seed 001 §4.3): ``min-load`` and ``go-routing`` (Algorithm 2).

Both keep what a gateway can: the **PrefillQueueMap**, per prefill instance the requests dispatched to it that have
not sent their first token yet (added on dispatch, removed on the first token or when the request ends), each
update timestamped, and in a co-located cluster the decode counter ``n_d`` (requests past their first token and
not finished). Instance metrics come only from :class:`~semsched.sim.router.InstanceView` (free KV blocks, for the
decode instance of a PD cluster). Execution times come from the cluster's latency model, given by
``bind(RouterContext)``:

* a prefill's ``exec`` is its prompt as one chunk alone in a step, ``step_time_s([(prompt, 0)], 0, 0)``; for the
  batch model (eq. 4-7) that is ``T̃_p(r) + t_c``, so summed over a queue it is φp(r, Q) = Σ r.exec + |Q|·t_c
  (§4.2, "For the PD disaggregation setting": each batch assumed to hold one request);
* **ESTIMATEEXEC(p)** = that sum over ``PrefillQueueMap[p]`` (plus ``n_d·b_d`` co-located), less the time elapsed
  since the queue's last update (timestamp-lag compensation). The elapsed time is charged to the in-flight
  request only (the earliest dispatched one still queued: a prefill instance works through its queue), and never
  below 0: requests that have not started have not progressed;
* **ESTIMATEGAIN(Q)** = the TDG first-token gain (``w_p × w_prio``, :class:`~semsched.metrics.tdg.TDGWeights`) of
  the requests of Q whose estimated first token meets their TTFT deadline. PD: the in-flight request first, then
  the rest in the order the local scheduler would run them, conservatively deadline (EDF) or FCFS order
  (``order``), each finishing after the ones before it (φp). Co-located (§4.3, last paragraph): the
  request-agnostic φa (eq. 8), every request of Q done after ``t_budget / (t_budget - t_c) · Σ T̃(r)`` plus
  ``n_d·b_d``, with ``t_budget`` = min(smallest time to deadline among the queued prefills, the smallest TPOT
  SLO), floored at ``min_budget_s`` (SlideBatching's η); a budget no larger than ``t_c`` leaves no time for
  prefills (nothing meets).
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import ClassVar, Literal

from semsched.core.request import Request
from semsched.latency.base import LatencyModel
from semsched.latency.batch import BatchLatencyModel
from semsched.metrics.tdg import TDGWeights
from semsched.sim.router import InstanceView, RouterContext, RouterError, most_free_blocks, register_router


@dataclass(frozen=True)
class _Queued:
    """One prefill in a PrefillQueueMap entry: its estimated execution time alone (``exec_s``, t_c included), its
    TTFT deadline and first-token gain weight."""

    request_id: str
    exec_s: float
    prompt_tokens: int
    deadline_s: float
    tpot_slo_s: float
    weight: float
    seq: int


@dataclass(frozen=True)
class _Estimates:
    """How a bound router prices work: the latency model, its per-step constant ``t_c`` and per-decode ``b_d``."""

    latency: LatencyModel
    t_c: float
    b_d: float
    weights: TDGWeights

    @classmethod
    def of(cls, context: RouterContext) -> _Estimates:
        latency = context.latency
        if isinstance(latency, BatchLatencyModel):
            t_c, b_d = latency.config.t_c, latency.config.b_d
        else:  # any latency model: the marginal cost of a decode, and what a one-decode step costs beyond it
            one, two = latency.step_time_s([], 1, 0), latency.step_time_s([], 2, 0)
            b_d = two - one
            t_c = max(one - b_d, 0.0)
        weights = context.tdg_weights or TDGWeights(first_token=1.0, decode_token=1.0)
        return cls(latency, t_c, b_d, weights)

    def exec_s(self, request: Request) -> float:
        """The request's prefill alone in a step (φp's ``r.exec + t_c``)."""
        return self.latency.step_time_s([(request.prompt_tokens, 0)], 0, 0)

    def weight(self, request: Request) -> float:
        return self.weights.first_token * self.weights.priority_weight(request.priority)


class PrefillQueue:
    """``PrefillQueueMap[p]`` of one instance, with its update timestamp and (co-located) decode counter ``n_d``.

    ``progress_s`` is the lag already charged to the in-flight request (the earliest dispatched one queued) at the
    last update; each update folds the time elapsed since the one before into it, so an estimate made between
    updates subtracts only the time since the last one, as §4.3 does."""

    def __init__(self) -> None:
        self.queued: dict[str, _Queued] = {}  # in dispatch order
        self.updated_s = 0.0
        self.progress_s = 0.0
        self.decoding: set[str] = set()  # requests past their first token (co-located n_d)
        self._seq = 0

    @property
    def num_decoding(self) -> int:
        return len(self.decoding)

    @property
    def queued_prompt_tokens(self) -> int:
        return sum(item.prompt_tokens for item in self.queued.values())

    def add(self, item: _Queued, now_s: float) -> None:
        self._fold(now_s)
        self.queued[item.request_id] = item

    def next_seq(self) -> int:
        self._seq += 1
        return self._seq

    def remove(self, request_id: str, now_s: float) -> None:
        """The request left the queue (its first token, or its end): the next one is in flight from now."""
        if request_id not in self.queued:
            return
        self._fold(now_s)
        if request_id == next(iter(self.queued)):
            self.progress_s = 0.0
        del self.queued[request_id]

    def _fold(self, now_s: float) -> None:
        if self.queued:
            head = next(iter(self.queued.values()))
            self.progress_s = min(self.progress_s + max(now_s - self.updated_s, 0.0), head.exec_s)
        self.updated_s = now_s

    def remaining(self, now_s: float) -> list[_Queued]:
        """The queue with the in-flight request's estimate lag-compensated (never below 0), dispatch order."""
        items = list(self.queued.values())
        if items:
            head = items[0]
            elapsed_s = self.progress_s + max(now_s - self.updated_s, 0.0)
            items[0] = _Queued(head.request_id, max(head.exec_s - elapsed_s, 0.0), head.prompt_tokens,
                               head.deadline_s, head.tpot_slo_s, head.weight, head.seq)
        return items


@dataclass(frozen=True)
class RoutingDecision:
    """What :class:`GoRoutingRouter` computed for one request (kept as ``last_decision`` for inspection): per
    prefill instance the gain change ``deltas`` and ``execs`` (ESTIMATEEXEC before the request), the candidate set
    C, its light subset L and heavy subset H, the choice, and whether it was the random fallback (Δmax <= 0)."""

    instance: int
    deltas: tuple[float, ...]
    execs: tuple[float, ...]
    candidates: tuple[int, ...] = ()
    light: tuple[int, ...] = ()
    heavy: tuple[int, ...] = ()
    fallback: bool = False


class _QueueRouter:
    """What both routers share: the PrefillQueueMap, kept from dispatches and the stream's notifications."""

    name: ClassVar[str]

    def __init__(self) -> None:
        self._queues: dict[int, PrefillQueue] = {}
        self._estimates: _Estimates | None = None
        self._disaggregated = False
        self._needs_latency = True  # False: the queue's execution times are never read (they are 0 unbound)

    def bind(self, context: RouterContext) -> None:
        self._estimates = _Estimates.of(context)
        self._disaggregated = context.disaggregated

    @property
    def estimates(self) -> _Estimates:
        if self._estimates is None:
            raise RouterError(
                f"router {self.name!r} is not bound to a cluster: call bind(RouterContext(latency)) before routing"
            )
        return self._estimates

    def queue(self, instance: int) -> PrefillQueue:
        """``PrefillQueueMap[instance]`` (created empty on first use)."""
        return self._queues.setdefault(instance, PrefillQueue())

    def record_dispatch(self, request: Request, instance: int, now_s: float) -> None:
        """``PrefillQueueMap[instance].add(request)`` at ``now_s`` (what ``route`` does with its choice)."""
        queue = self.queue(instance)
        queue.add(self._item(request, queue.next_seq()), now_s)

    def _item(self, request: Request, seq: int) -> _Queued:
        if self._estimates is None and not self._needs_latency:
            exec_s, weight = 0.0, 1.0
        else:
            exec_s, weight = self.estimates.exec_s(request), self.estimates.weight(request)
        tpot_slo_s = request.tpot_slo_s if request.tpot_slo_s is not None else math.inf
        return _Queued(request.request_id, exec_s, request.prompt_tokens, request.ttft_deadline_s, tpot_slo_s,
                       weight, seq)

    def route_decode(self, request: Request, instances: Sequence[InstanceView], now_s: float) -> int:
        """GoRouting's LOADBALANCE(D): the decode instance with the most free KV blocks."""
        return most_free_blocks(instances)

    def on_first_token(self, request: Request, instance: InstanceView, now_s: float) -> None:
        if instance.role == "decode":
            return
        queue = self.queue(instance.index)
        queue.remove(request.request_id, now_s)
        if instance.role == "mixed":
            queue.decoding.add(request.request_id)

    def on_finish(self, request: Request, instance: InstanceView, now_s: float) -> None:
        if instance.role == "decode":
            return
        queue = self.queue(instance.index)
        queue.remove(request.request_id, now_s)  # (ended before its first token: rejected or dropped)
        queue.decoding.discard(request.request_id)

    def exec_s(self, instance: int, now_s: float) -> float:
        """ESTIMATEEXEC(p): φp of the queue, lag-compensated, plus ``n_d·b_d`` in a co-located cluster."""
        queue = self.queue(instance)
        total_s = sum(item.exec_s for item in queue.remaining(now_s))
        if not self._disaggregated:
            total_s += queue.num_decoding * self.estimates.b_d
        return total_s


@dataclass(frozen=True)
class MinLoadConfig:
    """``min-load`` parameters."""

    load: Literal["work", "tokens"] = field(
        default="work",
        metadata={"doc": "work: estimated outstanding work (ESTIMATEEXEC, s); tokens: queued prefill tokens"},
    )

    def __post_init__(self) -> None:
        if self.load not in ("work", "tokens"):
            raise ValueError(f"load: must be 'work' or 'tokens' (got {self.load!r})")


@register_router
class MinLoadRouter(_QueueRouter):
    """The least-loaded instance (the paper's Min-Load baseline, §3.3: "dispatches each request to the
    least-loaded instance"), lowest index on ties. Load is the estimated outstanding work, GoRouting's
    ESTIMATEEXEC (``load=work``, the default), or the prefill tokens dispatched and not yet at their first token
    (``load=tokens``, which needs no latency model); the decode instance of a PD cluster has the most free
    blocks."""

    name: ClassVar[str] = "min-load"
    config_class: ClassVar[type[MinLoadConfig]] = MinLoadConfig

    def __init__(self, config: MinLoadConfig | None = None) -> None:
        super().__init__()
        self.config = config or MinLoadConfig()
        self._needs_latency = self.config.load == "work"

    def route(self, request: Request, instances: Sequence[InstanceView], now_s: float) -> int:
        if self.config.load == "tokens":
            loads = [float(self.queue(i).queued_prompt_tokens) for i in range(len(instances))]
        else:
            loads = [self.exec_s(i, now_s) for i in range(len(instances))]
        choice = min(range(len(instances)), key=lambda i: (loads[i], i))
        self.record_dispatch(request, choice, now_s)
        return choice


@dataclass(frozen=True)
class GoRoutingConfig:
    """``go-routing`` parameters. The paper gives no values for α, µ, λ; the defaults are ours: α = 0.9 keeps
    the instances whose gain is within 10 % of the best; µ = 0.1 counts an instance as light (L) only while its
    queued work is under a tenth of the TTFT SLO, i.e. nearly idle, so idle instances are filled first and never
    left unused; λ = 0.9 counts it as heavy (H) only when the request would finish there in the last tenth of its
    TTFT SLO, leaving room for estimation error. With them the toy example of Fig. 8 comes out as the paper
    says."""

    alpha: float = field(default=0.9, metadata={"doc": "candidates: gain change >= alpha x the best (0 to 1)"})
    mu: float = field(default=0.1, metadata={"doc": "light: estimated work < mu x TTFT SLO (0 to lam)"})
    lam: float = field(default=0.9, metadata={"doc": "heavy: work with the request > lam x TTFT SLO (>= mu)"})
    order: Literal["deadline", "fcfs"] = field(
        default="deadline", metadata={"doc": "PD: the local order ESTIMATEGAIN assumes after the in-flight one"}
    )
    min_budget_s: float = field(default=0.05, metadata={"doc": "co-located: floor of phi_a's t_budget (eta), s"})
    seed: int = field(default=0, metadata={"doc": "seed of the random fallback when no instance gains"})

    def __post_init__(self) -> None:
        if not (isinstance(self.alpha, int | float) and 0.0 <= self.alpha <= 1.0):
            raise ValueError(f"alpha: must be from 0 to 1 (got {self.alpha!r})")
        if not (isinstance(self.mu, int | float) and math.isfinite(self.mu) and self.mu >= 0.0):
            raise ValueError(f"mu: must be a finite number >= 0 (got {self.mu!r})")
        if not (isinstance(self.lam, int | float) and math.isfinite(self.lam) and self.lam >= self.mu):
            raise ValueError(f"lam: must be a finite number >= mu ({self.mu}) (got {self.lam!r})")
        if self.order not in ("deadline", "fcfs"):
            raise ValueError(f"order: must be 'deadline' or 'fcfs' (got {self.order!r})")
        if not (isinstance(self.min_budget_s, int | float) and math.isfinite(self.min_budget_s)
                and self.min_budget_s > 0):
            raise ValueError(f"min_budget_s: must be a finite number > 0 (got {self.min_budget_s!r})")
        if isinstance(self.seed, bool) or not isinstance(self.seed, int):
            raise ValueError(f"seed: must be an integer (got {self.seed!r})")


@register_router
class GoRoutingRouter(_QueueRouter):
    """GoRouting, Algorithm 2 (and its co-located variant): among the prefill instances whose gain change Δp is
    within ``alpha`` of the best (C), the least-loaded light one (L: ESTIMATEEXEC(p) < µ·TTFT_SLO), else the
    most-loaded one that is not heavy (H: ESTIMATEEXEC(p, req) > λ·TTFT_SLO), else the least-loaded candidate;
    when no instance gains (Δmax <= 0), a random one from the router's own seeded generator. The decode instance
    of a PD cluster has the most free blocks. Ties go to the lowest index."""

    name: ClassVar[str] = "go-routing"
    config_class: ClassVar[type[GoRoutingConfig]] = GoRoutingConfig

    def __init__(self, config: GoRoutingConfig | None = None) -> None:
        super().__init__()
        self.config = config or GoRoutingConfig()
        self._rng = random.Random(self.config.seed)
        self.last_decision: RoutingDecision | None = None

    def route(self, request: Request, instances: Sequence[InstanceView], now_s: float) -> int:
        decision = self.decide(request, len(instances), now_s)
        self.last_decision = decision
        self.record_dispatch(request, decision.instance, now_s)
        return decision.instance

    def decide(self, request: Request, num_instances: int, now_s: float) -> RoutingDecision:
        """Algorithm 2's choice for ``request`` among ``num_instances`` prefill instances (nothing recorded)."""
        new = self._item(request, seq=1 << 62)  # (after every queued request on ties)
        instances = range(num_instances)
        deltas = tuple(self.gain(i, now_s, new) - self.gain(i, now_s) for i in instances)
        execs = tuple(self.exec_s(i, now_s) for i in instances)
        best = max(deltas)
        if not best > 0:
            return RoutingDecision(self._rng.randrange(num_instances), deltas, execs, fallback=True)
        candidates = tuple(i for i in instances if deltas[i] >= self.config.alpha * best)
        slo_s = request.ttft_slo_s if request.ttft_slo_s is not None else math.inf
        light = tuple(i for i in candidates if execs[i] < _times(self.config.mu, slo_s))
        heavy = tuple(i for i in candidates if execs[i] + new.exec_s > _times(self.config.lam, slo_s))
        rest = [i for i in candidates if i not in heavy]
        if light:
            choice = min(light, key=lambda i: (execs[i], i))
        elif rest:
            choice = max(rest, key=lambda i: (execs[i], -i))
        else:
            choice = min(candidates, key=lambda i: (execs[i], i))
        return RoutingDecision(choice, deltas, execs, candidates, light, heavy)

    def gain(self, instance: int, now_s: float, extra: _Queued | None = None) -> float:
        """ESTIMATEGAIN(PrefillQueueMap[instance] (with ``extra``)) at ``now_s``."""
        items = self.queue(instance).remaining(now_s)
        if extra is not None:
            items.append(extra)
        if not items:
            return 0.0
        if self._disaggregated:
            return self._gain_in_order(items, now_s)
        return self._gain_phi_a(items, self.queue(instance).num_decoding, now_s)

    def _gain_in_order(self, items: list[_Queued], now_s: float) -> float:
        """φp: the in-flight request first, the rest in the local order, one request per step."""
        head, rest = items[0], items[1:]
        if self.config.order == "deadline":
            rest.sort(key=lambda item: (item.deadline_s, item.seq))
        gain, done_s = 0.0, now_s
        for item in (head, *rest):
            done_s += item.exec_s
            if done_s <= item.deadline_s:
                gain += item.weight
        return gain

    def _gain_phi_a(self, items: list[_Queued], num_decoding: int, now_s: float) -> float:
        """φa (eq. 8): every queued prefill done after t_budget / (t_budget - t_c) · Σ T̃(r), plus n_d·b_d."""
        t_c, b_d = self.estimates.t_c, self.estimates.b_d
        budget_s = min(min(item.deadline_s - now_s for item in items), min(item.tpot_slo_s for item in items))
        budget_s = max(budget_s, self.config.min_budget_s)
        work_s = sum(max(item.exec_s - t_c, 0.0) for item in items)
        if math.isinf(budget_s):
            done_s = now_s + work_s + num_decoding * b_d
        elif budget_s <= t_c:
            return 0.0
        else:
            done_s = now_s + budget_s / (budget_s - t_c) * work_s + num_decoding * b_d
        return sum(item.weight for item in items if done_s <= item.deadline_s)


def _times(factor: float, slo_s: float) -> float:
    """``factor × slo_s``, infinite for a request without a TTFT SLO (0 × inf would be NaN)."""
    return math.inf if math.isinf(slo_s) else factor * slo_s
