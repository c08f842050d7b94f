"""LAPS-SD (seed 004): Least-Attained/Perceived-Service scheduling of speculative-decoding requests.

* **Queues.** ``K`` queues; queue ``j`` (1 = served first) holds service in ``[S_(j-1)^up, S_j^up)`` with
  ``S_j^up = M^(j-1)·S_1^up`` (``queues``, ``multiplier``, ``s1_s``); the last queue is unbounded. Service is
  engine time (:mod:`semsched.policies.attained`: speculation and verification of the request's rounds).
* **Non-perceptible** requests (every arrival) sit in the queue of their *attained* service and are demoted after
  each round as it grows; inside a queue they are served first come, first served.
* **Perceptible.** After each round the request's acceptance rate ``A = (tokens per round − 1) / n`` (cumulative
  over its rounds; ``n`` = ``draft_tokens``) is recorded; when the last ``gamma`` values differ by less than
  ``delta`` the request becomes perceptible, with ``A_i`` = their mean. Its execution time is then estimated by
  eq. 6 (:func:`estimated_time_s`) from the predicted output length ``L_i`` (the request's predicted length
  distribution's mean, else its true length) and ``A_i``; it moves to the queue of its *perceived* service (the
  estimate, or its attained service if that is already larger), and inside a queue perceptible requests come
  first, shortest estimated remaining time first (SJF).
* **Preemption.** A waiting request displaces a running non-perceptible one of a lower queue (or of its own queue
  when the waiting one is perceptible); switching costs the swap of the victim's KV, both ways, charged through
  the latency model (``preemption=swap``; the cost grows with the KV). A perceptible request is not preempted once
  placed: only the round in which it becomes perceptible is a decision point (it may then yield to a request
  that ranks before it).
* **Tiers** (``tiers=true``, ours, for seed 003's priority tiers): the request's priority comes first; a waiting
  request of a more important tier displaces any running request of a less important one, perceptible or not,
  and LAPS-SD orders each tier.

Eq. 6 with the labels the paper's text swaps put right: ``T = L/(nA+1) · (n·T_SSM + T_LLM)``, ``T_SSM`` the draft
time per token and ``T_LLM`` the verification time per round. With ``t_ssm_s``/``t_llm_s`` left out the
policy measures the bracket instead, as the request's own mean round time (it holds both terms at whatever batch
the engine runs), so the estimate needs no profile.
"""

from __future__ import annotations

import bisect
import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

from semsched.core.plan import PreemptionMode
from semsched.core.policy import PolicyConfig, SchedulerView, SortKey
from semsched.core.request import Request
from semsched.policies.attained import ServicePolicy
from semsched.policies.params import check_float, check_int, param
from semsched.policies.passes import (
    LAPS_FRESH,
    LAPS_PERCEPTIBLE,
    LAPS_RATE,
    LapsFcfsKey,
    LapsTokens,
    LapsVictimKey,
    laps_fcfs_key,
    laps_perceived_s,
    laps_stable_rate,
    laps_victims,
    queue_of,
)
from semsched.policies.passes import (
    estimated_time_s as estimated_time_s,  # (eq. 6, exported here too)
)
from semsched.policies.passes import (
    is_stable as is_stable,  # (the perceptibility rule, exported here too)
)
from semsched.policies.registry import register_policy

_PERCEPTIBLE = LAPS_PERCEPTIBLE  # 1.0 once perceptible
_FRESH = LAPS_FRESH  # 1.0 in the round the request became perceptible (its last decision point)
_RATE = LAPS_RATE  # A_i, the stable acceptance rate
_RATES = "laps.rates"  # how many cumulative rates were pushed onto the window (see laps_stable_rate)
_SEEN_ROUNDS = "laps.seen_rounds"  # Request.service_rounds at its last on_tokens (the rounds of an emission)
_SEEN_S = "laps.seen_s"  # Request.round_service_s at its last on_tokens (order=predicted: the engine's means)
#: arrivals between two sweeps of the settled set (its requests that ended without ``on_finish``: dropped)
_SWEEP_ARRIVALS = 1024


def queue_bounds_s(queues: int, multiplier: float, s1_s: float) -> tuple[float, ...]:
    """``S_j^up`` for j = 1 .. K−1 (the last queue has no upper bound)."""
    return tuple(s1_s * multiplier**j for j in range(queues - 1))


def _queue_in(bounds: Sequence[float], service_s: float) -> int:
    """:func:`queue_of` with the bounds first (for ``functools.partial``)."""
    return queue_of(service_s, bounds)


@dataclass(frozen=True)
class LapsSDConfig(PolicyConfig):
    queues: int = param(5, "number of priority queues K")
    multiplier: float = param(2.0, "M: queue j holds service below M^(j-1)·s1_s")
    s1_s: float = param(1.0, "S_1^up: the first queue's upper bound on service (engine seconds)")
    delta: float = param(0.05, "a request is perceptible when its acceptance rate varies by less than this ...")
    gamma: int = param(8, "... over this many consecutive rounds")
    draft_tokens: int = param(5, "n: drafts a round proposes (the engine's num_lookahead_tokens)")
    t_ssm_s: float | None = param(None, "eq. 6 T_SSM, draft time per token (None: measured round time)")
    t_llm_s: float | None = param(None, "eq. 6 T_LLM, verification time per round (None: measured round time)")
    preemption: Literal["swap", "recompute"] = param("swap", "how a displaced request gives up the GPU")
    order: Literal["fcfs", "predicted"] = param(
        "fcfs", "inside a queue: perceptible first by eq. 6 then non-perceptible first come first served (paper), "
        "or every request by eq. 6 on its predicted remaining output, non-preemptive inside a queue (ours)")
    tiers: bool = param(False, "priority (tier) first, LAPS-SD inside a tier; more important displaces any less")

    def __post_init__(self) -> None:
        super().__post_init__()
        check_int("queues", self.queues, 1, 64)
        check_float("multiplier", self.multiplier, 1.0, 1e3)
        check_float("s1_s", self.s1_s, 1e-6, 1e6)
        check_float("delta", self.delta, 0.0, 1.0)
        check_int("gamma", self.gamma, 1, 10_000)
        check_int("draft_tokens", self.draft_tokens, 1, 64)
        if (self.t_ssm_s is None) != (self.t_llm_s is None):
            raise ValueError("t_ssm_s and t_llm_s: give both (eq. 6 from a profile) or neither (measured)")
        for name in ("t_ssm_s", "t_llm_s"):
            value = getattr(self, name)
            if value is not None:
                check_float(name, value, 0.0, 3600.0)


@register_policy
class LapsSD(ServicePolicy):
    """LAPS-SD: multi-level queues by attained, then perceived, service; FCFS or SJF inside a queue.

    starvation: possible: a request demoted to a later queue waits while requests of earlier queues keep arriving
    (nothing promotes it back; with ``tiers=true`` less important tiers also wait for more important ones).
    """

    name: ClassVar[str] = "laps-sd"
    config_cls: ClassVar[type[PolicyConfig]] = LapsSDConfig
    config: LapsSDConfig

    def __init__(self, config: PolicyConfig | None = None) -> None:
        super().__init__(config)
        cfg = self.config
        self.bounds = queue_bounds_s(cfg.queues, cfg.multiplier, cfg.s1_s)
        #: :func:`queue_of` on ``bounds``, as a bisection when they ascend (always, but for a pow rounding)
        self._queue_of: Callable[[float], int] = (
            functools.partial(bisect.bisect_right, self.bounds)
            if all(a <= b for a, b in zip(self.bounds, self.bounds[1:], strict=False))
            else functools.partial(_queue_in, self.bounds)
        )
        # engine time and tokens of every round seen (order=predicted prices unstarted requests with them; with
        # order=fcfs nothing reads them, and they are not kept)
        self._seconds, self._tokens, self._rounds = 0.0, 0, 0
        self._predicted = cfg.order == "predicted"
        self._tiers, self._draft_tokens = cfg.tiers, cfg.draft_tokens
        self._profiled: tuple[float, float] | None = None  # eq. 6's (T_SSM, T_LLM) when given
        if cfg.t_ssm_s is not None and cfg.t_llm_s is not None:
            self._profiled = (cfg.t_ssm_s, cfg.t_llm_s)
        self._mode = PreemptionMode.SWAP if cfg.preemption == "swap" else PreemptionMode.RECOMPUTE
        self._victim_key = LapsVictimKey(self.bounds, self._draft_tokens, self._profiled, self._tiers)
        #: the queue order without tiers (:meth:`_laps_key`): compiled for the paper's order
        self._key_of: Callable[[Request], tuple[Any, ...]] = (
            self._laps_key if self._predicted else LapsFcfsKey(self.bounds, self._draft_tokens, self._profiled))
        #: requests ``victims_for`` never names but by tier: perceptible, and past the round they became so
        #: (with ``order=predicted``, from that round). Perceptibility is never lost, so a request stays settled;
        #: one not (yet) in the set is checked in full. The schedulers ask for victims every step while a
        #: request waits and no slot is free: this keeps the walk over the running list in C (a set lookup)
        self._settled: set[Request] = set()
        self._arrivals = 0
        #: on_tokens under order=fcfs, compiled (it shares the settled set)
        self._fcfs_tokens = LapsTokens(self._settled, _rate_keys(cfg.gamma), _RATES, _SEEN_ROUNDS,
                                       self._draft_tokens, cfg.gamma, cfg.delta)
        if not self._predicted:  # (the engines call the compiled hook itself: no interpreted frame per emission)
            self.on_tokens = self._fcfs_tokens.on_tokens  # type: ignore[method-assign]

    @property
    def uses_predicted_lengths(self) -> bool:
        return True

    # ---- what the policy knows of a request -------------------------------------------------------------
    @staticmethod
    def perceptible(request: Request) -> bool:
        return request.policy_state.get(_PERCEPTIBLE, 0.0) == 1.0

    def acceptance_rate(self, request: Request) -> float | None:
        """Cumulative acceptance rate ``(tokens per round − 1)/n`` so far; None before the first round."""
        count = request.service_rounds
        if not count:
            return None
        return (request.round_tokens / count - 1.0) / self.config.draft_tokens

    def estimated_time_s(self, request: Request) -> float | None:
        """Eq. 6 for a perceptible request's whole output (None while it is non-perceptible)."""
        if not self.perceptible(request):
            return None
        return self._perceived_s(request)

    def _perceived_s(self, request: Request) -> float:
        """:meth:`estimated_time_s` of a request known to be perceptible (compiled: the hot path of every
        sort)."""
        return laps_perceived_s(request, self._draft_tokens, self._profiled)

    def estimated_remaining_s(self, request: Request) -> float:
        total = self.estimated_time_s(request)
        assert total is not None
        length = request.predicted_output_tokens()
        if length <= 0:
            return 0.0
        left = max(0.0, 1.0 - request.num_output_tokens / length)
        return total * left

    def queue(self, request: Request) -> int:
        """0-based queue: by attained service, or by perceived service once perceptible."""
        return self._queue(request, request.policy_state.get(_PERCEPTIBLE, 0.0) == 1.0)

    def _queue(self, request: Request, perceptible: bool) -> int:
        service = request.service_s  # (attained_s, inlined: the hot path of every sort)
        if perceptible:
            perceived = self._perceived_s(request) or 0.0
            if perceived > service:  # (max(service, perceived): the first of equals)
                service = perceived
        return self._queue_of(service)

    # ---- hooks --------------------------------------------------------------------------------------------
    def on_tokens(self, request: Request, num_tokens: int, now_s: float) -> None:
        # (the scheduler has charged the emission's service and rounds: Request.service_rounds and the rest)
        if not self._predicted:
            self._fcfs_tokens.on_tokens(request, num_tokens, now_s)  # (the paper's order: compiled)
            return
        state = request.policy_state
        state[_FRESH] = 0.0
        perceptible = state.get(_PERCEPTIBLE, 0.0) == 1.0
        if perceptible:
            self._settled.add(request)
        if perceptible and not self._predicted:
            # nothing changes for it any more: its rate is fixed, it is no longer fresh (order=predicted keeps
            # hearing of it, for the engine's mean round)
            request.notify_tokens_at = request.max_output_tokens + 1
            return
        total_rounds = request.service_rounds
        count = total_rounds - int(state.get(_SEEN_ROUNDS, 0.0))  # the rounds of this emission (0: the first)
        if not count:
            return
        state[_SEEN_ROUNDS] = float(total_rounds)
        if self._predicted:
            self._seconds += request.round_service_s - state.get(_SEEN_S, 0.0)
            state[_SEEN_S] = request.round_service_s
            self._tokens += num_tokens
            self._rounds += count
            if perceptible:
                return
        # the cumulative rate after each of the ``count`` rounds (several: a fast-forwarded stretch of plain
        # decodes, one token each), so the window fills as it would step by step (compiled)
        gamma = self.config.gamma
        rate = laps_stable_rate(state, _rate_keys(gamma), _RATES, request.round_tokens, total_rounds, num_tokens,
                                count, self._draft_tokens, gamma, self.config.delta)
        if rate is not None:
            state[_PERCEPTIBLE] = 1.0
            state[_FRESH] = 1.0
            if self._predicted:  # (its freshness matters to order=fcfs only)
                self._settled.add(request)
            state[_RATE] = rate

    def on_arrival(self, request: Request, now_s: float) -> None:
        self._arrivals += 1
        if self._arrivals % _SWEEP_ARRIVALS == 0:  # (those that ended without on_finish; in place: it is shared)
            self._settled.difference_update([r for r in self._settled if r.state.is_terminal])

    def on_preempt(self, request: Request, now_s: float) -> None:
        state = request.policy_state
        state[_FRESH] = 0.0
        if state.get(_PERCEPTIBLE, 0.0) == 1.0:
            self._settled.add(request)

    def on_finish(self, request: Request, now_s: float) -> None:
        self._settled.discard(request)

    def on_leave(self, request: Request) -> None:
        self._settled.discard(request)

    def _laps_key(self, request: Request) -> tuple[Any, ...]:
        if self.config.order == "predicted":
            return (self.queue(request), self.predicted_remaining_s(request), request.arrival_time_s)
        return laps_fcfs_key(request, self.bounds, self._draft_tokens, self._profiled)  # (compiled)

    def predicted_remaining_s(self, request: Request) -> float:
        """``order=predicted``: eq. 6 for the predicted remaining output, ``(L − g)/(nA + 1)`` rounds at the
        engine's mean round time over every round seen so far (one scale for all requests, whatever batches
        they happened to run in); ``nA + 1`` is the request's stable value once perceptible, its tokens per
        round so far before, and the engine's mean for a request that has run no round."""
        state = request.policy_state
        if self.perceptible(request):
            per_round = self.config.draft_tokens * state[_RATE] + 1.0
        elif request.service_rounds:
            per_round = request.round_tokens / request.service_rounds
        else:
            per_round = self._tokens / self._rounds if self._rounds else 1.0
        round_s = self._seconds / self._rounds if self._rounds else 1.0
        return request.predicted_remaining_tokens() / per_round * round_s

    def waiting_key(self, request: Request, now_s: float) -> SortKey:
        key = self._key_of(request)
        return (request.priority, *key) if self._tiers else key

    @property
    def victim_key(self) -> Callable[[Request], SortKey]:
        """Under KV pressure: non-perceptible before perceptible, lower queues first, latest arrival first. The key
        function is compiled (:func:`~semsched.policies.passes.laps_victim_key` with this policy's settings
        bound): the core sorts its running requests by it every step."""
        return self._victim_key

    def victims_for(
        self, candidate: Request, running: Sequence[Request], view: SchedulerView, now_s: float
    ) -> Sequence[Request]:
        # (a less important tier is named whatever its state, a more important one never; in the candidate's
        # own: those ranked below it, by the queue alone but for a perceptible one; compiled)
        key_of = self._key_of
        victims = laps_victims(candidate, running, self._settled, key_of(candidate), self.bounds,
                               self._tiers, not self._predicted, self._ranks_first_in_queue(candidate), key_of)
        if not victims:
            return victims
        if self._tiers:
            return sorted(victims, key=lambda r: self.waiting_key(r, now_s), reverse=True)
        return sorted(victims, key=key_of, reverse=True)

    def _ranks_first_in_queue(self, candidate: Request) -> bool:
        """Paper: a perceptible candidate displaces a non-perceptible request of its queue. ``order=predicted``:
        nobody displaces a request of its own queue (non-preemptive SJF inside a queue), nor a request in the
        round it became perceptible (a switch the ordering seldom repays)."""
        return self.config.order == "fcfs" and self.perceptible(candidate)

    def preemption_mode(self, request: Request, view: SchedulerView) -> PreemptionMode:
        return self._mode  # (the core recomputes what the CPU pool cannot hold)


@functools.cache
def _rate_keys(gamma: int) -> tuple[str, ...]:
    """The ``policy_state`` keys of a window of ``gamma`` rates."""
    return tuple(f"{_RATES}.{k}" for k in range(gamma))
