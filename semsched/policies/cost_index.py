"""Order by an index of each request's remaining cost distribution, refreshed at bucket boundaries (seed 002 §3.3).

The base of ``gittins`` (SageSched) and ``mean`` (its Fig. 11 baseline): a subclass says how a cost distribution
(:mod:`semsched.policies.cost_model`) and the cost attained so far become one number, :meth:`cost_index`; the
smallest index runs first.

* **Preemption.** The paper preempts at refresh: a waiting request with a smaller index displaces running ones
  with larger indices, and under KV pressure the largest index goes first (``displace=true;victim=index``). In an
  engine that recomputes a preempted request (vLLM's default; the simulator's without swap space) that
  thrashes: on AlpacaEval prompts with Llama-3-8B lengths on the A100/Qwen1.5-7B batch profile, near saturation,
  oracle-length Gittins with the paper's preemption had a mean TTLT 1.4-1.6x FCFS's, and without displacement
  but evicting the largest index still 1.1x. By default the cost-index policies therefore do not displace, and
  under KV pressure evict the request with the least progress, the cheapest to recompute (as ``sjf``); then
  oracle-length Gittins is 0.90x FCFS's (these figures were measured on the A100/Qwen1.5-7B profile before its
  prefill coefficient was corrected, issue 30, and not re-measured since).
* **Tier SLOs on top of the index** (``slo_slack``, off by default; issue 16's "Gittins with tiers"). A waiting
  request of a protected tier (priority <= ``protect_priority``: SYSTEM and PREMIUM) that has not started and has
  used ``1 - slo_slack`` of its TTFT SLO, but not all of it, goes before every other waiting request, earliest TTFT
  deadline first; the rest keep the index order. The queue is re-keyed every ``check_s``. Protecting every tier
  this way lowers attainment under overload (the index order, cheap first, already serves TTFT well), so only the
  important tiers are protected.
* **Refresh at bucket boundaries.** Recomputing every request's index after every token costs time and lets
  two close requests swap places back and forth, so the paper divides each request's cost range into buckets
  and refreshes its index only when its attained cost crosses into a new one. ``buckets=N`` (default 10) splits
  the predicted range ``[C(0), C(L_max)]`` (``L_max`` the largest predicted length) into N equal cost buckets,
  continued at the same width past it. ``bucket_tokens=S`` instead puts the boundaries every S generated tokens,
  i.e. at costs ``C(S), C(2S), ...``: the unit we read the paper's "bucket size of 200" in (§4.4), since 200
  units of ``O²/2 + I·O`` is less than one token for any prompt over 200 tokens. A refresh conditions on the cost
  attained at the first token of the bucket, so the index does not depend on how tokens were reported (one per
  step, or a fast-forwarded stretch at once). ``refresh=false`` computes the index once, at attained cost 0
  (Fig. 11's "Gittins" without refresh). Each request keeps the token count of its next boundary (the cost
  model's inverse, checked against the bucket arithmetic itself), so ``on_tokens`` between boundaries is one
  comparison.
* **Outlived predictions.** A request that has generated its largest predicted length has no cost left in its
  distribution; its index becomes :func:`~semsched.policies.cost_model.one_token_floor` (as if one more token,
  the cheapest there is, remained), a lower bound of every index, and stays there: it keeps running rather than
  starving behind fresh arrivals or being displaced again and again, as ``srpt``'s remaining of 1 token does.
* **Fast-forward.** A refresh can raise an index in the middle of a decode-only stretch (a bimodal prediction
  whose short mode has passed) and let a waiting request displace the running one. The policy is therefore
  stable only while no unfinished request may still change its index upward: with ``refresh=false``, when all
  predictions are points (a point's index, its remaining cost, only falls), or once each multi-point request has
  passed its largest predicted length. Without a prediction a request's true length is its point.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

from semsched.core.policy import Policy, PolicyConfig, SchedulerView, SortKey, key_holds_before
from semsched.core.request import LengthDistribution, Request
from semsched.policies.cost_model import (
    CostDistribution,
    CostModel,
    cost_distribution,
    one_token_floor,
    request_cost,
)
from semsched.policies.passes import CostIndexTokens

_MAX_INT = 2**31 - 1
#: a request's cost distribution and the prediction it was computed from
#: a request's cost distribution, kept with the request and the prediction it is of
_CachedCosts = tuple[Request, LengthDistribution | None, CostDistribution]
#: the cost cache is swept of ended requests (those that ended without ``on_finish``) when it holds this many more
#: entries than at its last sweep
_SWEEP_EVERY = 4096


def _param(default: Any, doc: str) -> Any:
    return field(default=default, metadata={"doc": doc})


@dataclass(frozen=True)
class CostIndexConfig(PolicyConfig):
    refresh: bool = _param(
        True,
        "refresh a request's index when its attained cost crosses a bucket boundary "
        "(false: computed once, at arrival)",
    )
    cost: CostModel = _param(
        "resource",
        "service cost of O output tokens after I prompt tokens: O^2/2 + I*O "
        "(resource), O (output) or I + 2*O (weighted)",
    )
    buckets: int = _param(10, "equal cost buckets over each request's predicted cost range")
    bucket_tokens: int | None = _param(
        None, "instead of buckets: a boundary every this many generated tokens (the paper's bucket size, 200)"
    )
    displace: bool = _param(
        False,
        "a waiting request displaces running requests with larger indices (the paper's preemption at refresh); "
        "off by default: where a preempted request is recomputed, displacing costs more than it saves",
    )
    victim: Literal["progress", "index"] = _param(
        "progress",
        "under KV pressure preempt the request with the least progress, cheapest to recompute (progress), or "
        "the one with the largest index (index, the paper's order)",
    )
    slo_slack: float | None = _param(
        None,
        "tier SLOs on top of the index: a protected request that has used (1 - slo_slack) of its TTFT SLO, but "
        "not all of it, and has not started runs first, earliest TTFT deadline first (None: off)",
    )
    protect_priority: int = _param(1, "with slo_slack: requests of this priority or more important are protected "
                                      "(1: SYSTEM and PREMIUM)")
    check_s: float = _param(0.1, "with slo_slack: how often the waiting queue is re-keyed (s)")

    def __post_init__(self) -> None:
        super().__post_init__()
        _check_count("buckets", self.buckets)
        if self.bucket_tokens is not None:
            _check_count("bucket_tokens", self.bucket_tokens)
        slack = self.slo_slack
        if slack is not None and (isinstance(slack, bool) or not isinstance(slack, int | float)
                                  or not math.isfinite(slack) or not 0.0 <= slack <= 1.0):
            raise ValueError(f"slo_slack must be a number from 0 to 1, got {slack!r}")
        if isinstance(self.protect_priority, bool) or not isinstance(self.protect_priority, int):
            raise ValueError(f"protect_priority must be an integer, got {self.protect_priority!r}")
        if isinstance(self.check_s, bool) or not isinstance(self.check_s, int | float) \
                or not math.isfinite(self.check_s) or self.check_s <= 0:
            raise ValueError(f"check_s must be a finite number > 0, got {self.check_s!r}")


def _check_count(name: str, value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= _MAX_INT:
        raise ValueError(f"{name} must be an integer from 1 to {_MAX_INT}, got {value!r}")


class CostIndexPolicy(Policy):
    """Smallest :meth:`cost_index` first, preemptive; subclasses define the index. Per request the index, its
    bucket and the bucket width live in ``Request.policy_state`` under keys prefixed by the policy's name."""

    config_cls: ClassVar[type[PolicyConfig]] = CostIndexConfig
    config: CostIndexConfig

    def __init__(self, config: PolicyConfig | None = None) -> None:
        super().__init__(config)
        self._index_key = f"{self.name}.index"
        self._bucket_key = f"{self.name}.bucket"
        self._width_key = f"{self.name}.width"
        self._last_key = f"{self.name}.last_length"
        #: on_tokens has nothing to do while low <= generated < high (the same bucket, and not yet past the last
        #: predicted length while that still matters)
        self._low_key = f"{self.name}.window_low"
        self._high_key = f"{self.name}.window_high"
        #: each live request's cost distribution, by request id, with the request and the prediction it is of
        #: (a request leaves at its finish, or at the sweep after it ended otherwise)
        self._cost_cache: dict[str, _CachedCosts] = {}
        self._swept_at = 0
        #: ids of unfinished requests whose index may still rise (see the module doc)
        self._changing: set[str] = set()
        #: the buckets, the window and on_tokens, compiled
        self._tokens = CostIndexTokens(
            (self._low_key, self._high_key, self._last_key, self._bucket_key, self._width_key), self._changing,
            self.config.bucket_tokens or 0, self.config.cost, _MAX_INT, self._start, self._compute_at)
        if self.config.refresh:  # (the engines call the compiled hook itself: no interpreted frame per call)
            self.on_tokens = self._tokens.on_tokens  # type: ignore[method-assign]

    def cost_index(self, costs: CostDistribution, attained: float) -> float | None:
        """The index of ``costs`` after ``attained`` cost; None when no support point exceeds it."""
        raise NotImplementedError

    @property
    def stable_between_events(self) -> bool:  # type: ignore[override]
        return not self._changing and self.config.slo_slack is None

    @property
    def rekey_interval_s(self) -> float | None:  # type: ignore[override]
        """With ``slo_slack``, a waiting request's key changes as its TTFT deadline nears: re-keyed every
        ``check_s``."""
        return None if self.config.slo_slack is None else self.config.check_s

    @property
    def uses_predicted_lengths(self) -> bool:
        return True

    def uses_hook(self, hook: str) -> bool:
        if hook == "on_tokens":
            return self.config.refresh
        if hook == "victims_for":
            return self.config.displace
        return super().uses_hook(hook)

    # ---- the cached index ---------------------------------------------------------------------------------
    def index(self, request: Request) -> float:
        """The request's current index (computed on first use)."""
        value = request.policy_state.get(self._index_key)
        return self._start(request) if value is None else value

    def _start(self, request: Request) -> float:
        costs = self._costs(request)
        generated = request.num_output_tokens if self.config.refresh else 0
        state = request.policy_state
        state[self._last_key] = costs.last_length
        state[self._width_key] = (costs.costs[-1] - self._cost(request, 0)) / self.config.buckets
        bucket = self._bucket_of(request, generated)
        state[self._bucket_key] = bucket
        if self.config.refresh and not costs.is_point and generated < costs.last_length:
            self._changing.add(request.request_id)
        self._set_window(request, bucket, generated)
        return self._compute(request, costs, generated)

    def _costs(self, request: Request) -> CostDistribution:
        """The request's cost distribution, computed once per prediction (a new ``predicted_output`` object
        computes it again)."""
        cache = self._cost_cache
        cached = cache.get(request.request_id)
        if cached is not None and cached[0] is request and cached[1] is request.predicted_output:
            return cached[2]
        costs = cost_distribution(request, self.config.cost)
        if len(cache) >= self._swept_at + _SWEEP_EVERY:
            for request_id in [i for i, entry in cache.items() if entry[0].state.is_terminal]:
                del cache[request_id]
            self._swept_at = len(cache)
        cache[request.request_id] = (request, request.predicted_output, costs)
        return costs

    def _set_window(self, request: Request, bucket: int, generated: int) -> None:
        """Store the token counts ``[low, high)`` over which :meth:`on_tokens` would change nothing: ``low`` is
        ``generated`` (counts only grow while a request lives), ``high`` the first count in a later bucket, or
        the last predicted length while the request may still change its index upward (``_changing``)."""
        self._tokens.set_window(request, bucket, generated)

    def _compute_at(self, request: Request, generated: int) -> float:
        return self._compute(request, self._costs(request), generated)

    def _compute(self, request: Request, costs: CostDistribution, generated: int) -> float:
        value = self.cost_index(costs, self._cost(request, generated))
        if value is None:
            value = one_token_floor(request.prompt_tokens, self.config.cost)
        request.policy_state[self._index_key] = value
        return value

    def _cost(self, request: Request, generated: int) -> float:
        return request_cost(float(generated), request.prompt_tokens, self.config.cost)

    def _bucket_of(self, request: Request, generated: int) -> int:
        return self._tokens.bucket_of(request, generated)

    # ---- hooks --------------------------------------------------------------------------------------------
    def on_arrival(self, request: Request, now_s: float) -> None:
        self.index(request)

    def on_tokens(self, request: Request, num_tokens: int, now_s: float) -> None:
        """A token count past the window: the bucket again, the index at its first count when it moved, the next
        window (compiled: :class:`~semsched.policies.passes.CostIndexTokens`, which the engines call)."""
        self._tokens.on_tokens(request, num_tokens, now_s)

    def on_finish(self, request: Request, now_s: float) -> None:
        self._changing.discard(request.request_id)
        self._forget_costs(request)

    def on_leave(self, request: Request) -> None:
        self._forget_costs(request)

    def _forget_costs(self, request: Request) -> None:
        cached = self._cost_cache.get(request.request_id)
        if cached is not None and cached[0] is request:
            del self._cost_cache[request.request_id]

    def waiting_key(self, request: Request, now_s: float) -> SortKey:
        if self._slo_at_risk(request, now_s):
            return (0.0, request.ttft_deadline_s, request.arrival_time_s)
        return (1.0, self.index(request), request.arrival_time_s)

    def waiting_key_until(self, request: Request, now_s: float) -> float:
        """With ``slo_slack``, a protected request not yet started changes key when (1 - slo_slack) of its TTFT
        SLO has passed and when all of it has; any other keeps its key while it waits."""
        slack, slo = self.config.slo_slack, request.ttft_slo_s
        if slack is None or slo is None or request.num_output_tokens > 0 \
                or request.priority > self.config.protect_priority:
            return math.inf
        waited = now_s - request.arrival_time_s
        turns = [edge for edge in ((1.0 - slack) * slo, slo) if waited < edge]
        return key_holds_before(request.arrival_time_s + min(turns)) if turns else math.inf

    def _slo_at_risk(self, request: Request, now_s: float) -> bool:
        """Whether protected ``request`` has not started and has used (1 - slo_slack) of its TTFT SLO by
        ``now_s``, but not all of it (one past its deadline goes back to the index order)."""
        slack, slo = self.config.slo_slack, request.ttft_slo_s
        if slack is None or slo is None or request.num_output_tokens > 0:
            return False
        if request.priority > self.config.protect_priority:
            return False
        waited = now_s - request.arrival_time_s
        return (1.0 - slack) * slo <= waited < slo

    def victim_key(self, request: Request) -> SortKey:
        if self.config.victim == "progress":  # as sjf: evicting long, advanced requests re-queues them to thrash
            return (-request.num_computed_tokens, request.arrival_time_s)
        return (self.index(request), request.arrival_time_s)

    def victims_for(
        self, candidate: Request, running: Sequence[Request], view: SchedulerView, now_s: float
    ) -> Sequence[Request]:
        if not self.config.displace:
            return ()
        mine = self.index(candidate)
        larger = [r for r in running if self.index(r) > mine]
        return sorted(larger, key=self.victim_key, reverse=True)
