"""Learning to rank (LTR, Fu et al. 2024): order by a predicted rank score, re-ranked and preemptive, with
starvation prevention.

LTR's predictor scores each prompt so that the scores rank requests by output length; the scheduler
(hao-ai-lab/vllm-ltr) sorts waiting and running requests together by score at every iteration and runs the top
ones, preempting running requests that rank lower. Here the predictor that feeds ``Request.predicted_output``
plays the ranker: the score is the predicted distribution's mean (only its order matters), the true length
without a prediction. A waiting request displaces running requests whose key is larger.

Starvation prevention, as vllm-ltr's: a request that has gone unserved too long is promoted above every
unpromoted one for a quantum of service, then ranks by its score again. vllm-ltr counts unscheduled iterations
and scheduled ones; we count seconds waiting since the request last entered the queue (arrival or preemption),
``starve_s``, checked every ``check_s`` (the re-key interval), and a quantum of ``quantum_tokens`` output tokens.
``starve_s=0`` turns it off; the key is then fixed and the policy stable between events.

**Incremental state.** Under the core scheduler the policy keeps two heaps of its waiting requests, the promoted
and the others, each ordered (score, arrival, enqueue order), and gives the core its order through
``waiting_order`` (the front of the promoted heap while it has a live one, then the other's, found afresh at each
``next``): the order the core's keyed queue had, ``(promoted first, score, arrival)`` with ties in enqueue order,
at the cost of what a step admits. Starvation is checked at the first step at or after each multiple of
``check_s`` (the core's re-key instants; the policy hears each step through ``step_budget``), from a heap of the
unpromoted waiting requests by the time they entered the queue: only those due are looked at. A waiting
request's rank changes only by promotion (its score is fixed, its quantum is spent only while it runs). Entries
go stale (admitted, ended, promoted, handed off) and are dropped when they reach a heap's front. The vLLM
adapter keys its own queue with ``waiting_key`` (re-keyed every ``check_s``); the first call to it turns these
heaps off.
"""

from __future__ import annotations

import heapq
import itertools
import math
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

from semsched.core.policy import (
    Policy,
    PolicyConfig,
    SchedulerView,
    SortKey,
    StepBudget,
    key_holds_before,
    next_rekey_s,
)
from semsched.core.request import Request
from semsched.policies.kept_keys import KeptVictimKeys
from semsched.policies.passes import PromotedHeaps, kept_victims
from semsched.policies.registry import register_policy
from semsched.policies.vllm_fcfs import is_waiting

_LEFT = "ltr.promoted_tokens"  # output tokens of promotion left (0: not promoted), as of ...
_COUNTED = "ltr.counted"  # ... this many output tokens (the scheduler skips the emissions between)
_QUEUED = "ltr.queued_s"  # when the request last entered the waiting queue
_ENQUEUED = "ltr.enqueued"  # the order of its last entry into a waiting queue (its heap entries' mark)
_SCORE = "ltr.score"  # its score, kept at arrival (a prediction is made before; the mean is a sum over it)

#: ``notify_tokens_at`` of a request without a promotion: its emissions change nothing here
_NEVER = 2**62

#: enqueue order, shared by every instance (a request handed off to another instance takes a fresh mark there)
_enqueue_counter = itertools.count()


def _param(default: Any, doc: str) -> Any:
    return field(default=default, metadata={"doc": doc})


@dataclass(frozen=True)
class LTRConfig(PolicyConfig):
    starve_s: float = _param(10.0, "a request waiting this long is promoted above unpromoted ones (0: never)")
    quantum_tokens: int = _param(32, "output tokens a promoted request keeps its promotion for")
    check_s: float = _param(1.0, "how often waiting requests are checked for starvation")

    def __post_init__(self) -> None:
        super().__post_init__()
        if not math.isfinite(self.starve_s) or self.starve_s < 0:
            raise ValueError(f"starve_s must be a finite number >= 0, got {self.starve_s!r}")
        if not math.isfinite(self.check_s) or self.check_s <= 0:
            raise ValueError(f"check_s must be a finite number > 0, got {self.check_s!r}")
        tokens = self.quantum_tokens
        if isinstance(tokens, bool) or not isinstance(tokens, int) or not 1 <= tokens <= 2**31 - 1:
            raise ValueError(f"quantum_tokens must be an integer from 1 to {2**31 - 1}, got {tokens!r}")


@register_policy
class LTR(Policy):
    """Learning to rank: smallest predicted score first, preemptive, with vllm-ltr's starvation prevention.

    starvation: possible under overload: a request that has waited ``starve_s`` (checked every ``check_s``) is
    promoted above every unpromoted one for ``quantum_tokens``, but promoted requests rank by score among
    themselves, so a long one can wait behind a stream of shorter promoted ones (``starve_s=0``: no promotion).
    """

    name: ClassVar[str] = "ltr"
    config_cls: ClassVar[type[PolicyConfig]] = LTRConfig
    #: a running request's key (promoted, score, arrival) changes only when its promotion's quantum is spent,
    #: which ``on_tokens`` counts in ``victim_key_changes``
    static_victim_key: ClassVar[bool] = True
    config: LTRConfig

    def __init__(self, config: PolicyConfig | None = None) -> None:
        super().__init__(config)
        #: the waiting requests as (score, arrival, enqueue mark, request): [0] promoted, [1] the others; stale
        #: entries are dropped at the front
        self._ranks: tuple[list[tuple[float, float, int, Request]], ...] = ([], [])
        #: the heaps read in order (compiled)
        self._order = PromotedHeaps(list(self._ranks), _ENQUEUED, _LEFT)
        #: the unpromoted waiting requests as (entered the queue at, enqueue mark, request), for promotion
        self._queued: list[tuple[float, int, Request]] = []
        self._next_check_s = -math.inf
        #: ``waiting_key`` was asked (the vLLM adapter keys its own queue): the heaps are not kept
        self._keyed = False
        self._victim_keys = KeptVictimKeys(self._victim_key_of)

    @property
    def stable_between_events(self) -> bool:  # type: ignore[override]
        return self.config.starve_s == 0

    @property
    def rekey_interval_s(self) -> float | None:  # type: ignore[override]
        return self.config.check_s if self.config.starve_s > 0 else None

    @property
    def uses_predicted_lengths(self) -> bool:
        return True

    def uses_hook(self, hook: str) -> bool:
        if hook in ("on_tokens", "step_budget"):  # (step_budget: the starvation check's clock)
            return self.config.starve_s > 0
        return super().uses_hook(hook)

    @staticmethod
    def score(request: Request) -> float:
        return request.predicted_output_tokens()

    def rank(self, request: Request) -> tuple[float, float]:
        """(0 while promoted, else 1; score): the part of the key that decides displacement."""
        return (0.0 if request.policy_state.get(_LEFT, 0.0) > 0 else 1.0, self.score(request))

    # ---- hooks --------------------------------------------------------------------------------------------
    def on_arrival(self, request: Request, now_s: float) -> None:
        self._victim_keys.pop(request, None)
        self._victim_keys.arrived()
        request.policy_state[_SCORE] = self.score(request)
        if self.config.starve_s > 0:
            request.policy_state[_QUEUED] = now_s
            if request.policy_state.get(_LEFT, 0.0) <= 0:
                request.notify_tokens_at = _NEVER  # on_tokens only spends a promotion's quantum
        self._enqueue(request, now_s)

    def on_preempt(self, request: Request, now_s: float) -> None:
        self._victim_keys.pop(request, None)
        if self.config.starve_s > 0:
            request.policy_state[_QUEUED] = now_s
        self._enqueue(request, now_s)

    def on_finish(self, request: Request, now_s: float) -> None:
        self._victim_keys.pop(request, None)

    def on_leave(self, request: Request) -> None:
        self._victim_keys.pop(request, None)
        request.policy_state.pop(_ENQUEUED, None)  # its entries here are stale, though it reads as waiting

    def _enqueue(self, request: Request, now_s: float) -> None:
        if self._keyed:
            return
        mark = next(_enqueue_counter)
        request.policy_state[_ENQUEUED] = mark
        promoted = request.policy_state.get(_LEFT, 0.0) > 0
        entry = (self.score(request), request.arrival_time_s, mark, request)
        heapq.heappush(self._ranks[0 if promoted else 1], entry)
        if self.config.starve_s > 0 and not promoted:  # (a promoted request keeps its promotion while it waits)
            heapq.heappush(self._queued, (now_s, mark, request))

    def step_budget(self, view: SchedulerView, now_s: float) -> StepBudget | None:
        """Changes no budget: at the core's re-key instants (the first step at or after each multiple of
        ``check_s``), promotes the waiting requests that have starved."""
        if not self._keyed and now_s >= self._next_check_s:
            self._next_check_s = next_rekey_s(now_s, self.config.check_s)
            self._promote_starved(now_s)
        return None

    def _promote_starved(self, now_s: float) -> None:
        """What re-keying every waiting request at ``now_s`` does (``waiting_key``), for only those due: the
        heap's front, by the time they entered the queue."""
        queued, starve_s, promoted = self._queued, self.config.starve_s, self._ranks[0]
        quantum = float(self.config.quantum_tokens)
        while queued and now_s - queued[0][0] >= starve_s:
            _, mark, request = heapq.heappop(queued)
            state = request.policy_state
            if state.get(_ENQUEUED) == mark and state.get(_LEFT, 0.0) <= 0 and is_waiting(request):
                state[_LEFT], state[_QUEUED] = quantum, now_s
                self._count_quantum_from(request)
                heapq.heappush(promoted, (self.score(request), request.arrival_time_s, mark, request))

    def waiting_order(self, view: SchedulerView, now_s: float) -> Iterator[Request]:
        """The waiting requests in the keyed queue's order, ``(promoted first, score, arrival)`` then enqueue
        order: at each ``next`` the front of the promoted heap if it has a live entry, else the other's
        (requests admitted or displaced meanwhile are seen, as the keyed queue's front would show them). One
        yielded and still waiting at the next ``next`` (not admitted: the core never asks on then) is held aside
        and put back when the next order is made."""
        if self._keyed:
            raise RuntimeError("ltr: waiting_order after waiting_key (one policy serves one engine)")
        return self._order.order()  # (compiled: passes.LevelOrder)

    def _count_quantum_from(self, request: Request) -> None:
        """A fresh promotion (its victim key changes): its quantum is spent by the emissions after now, and
        ``on_tokens`` needs to hear of none before the last of them."""
        self._victim_keys.pop(request, None)
        emitted = request.num_output_tokens
        request.policy_state[_COUNTED] = emitted
        request.notify_tokens_at = emitted + int(request.policy_state[_LEFT])

    def on_tokens(self, request: Request, num_tokens: int, now_s: float) -> None:
        """Spends a promotion's quantum by the emissions since it was last counted (this one's, and those the
        scheduler skipped: ``notify_tokens_at`` is where it runs out). The quantum and the tokens are whole
        numbers, so one subtraction of their sum is exact, as one per emission was."""
        state = request.policy_state
        left = state.get(_LEFT, 0.0)
        if left > 0:
            emitted = request.num_output_tokens
            counted = state.get(_COUNTED)
            used = num_tokens if counted is None else emitted - int(counted)
            left = max(left - used, 0.0)
            state[_LEFT], state[_COUNTED] = left, emitted
            if left <= 0:
                request.notify_tokens_at = _NEVER  # the quantum is spent: nothing to count until a promotion
                self._victim_keys.pop(request, None)
                self.victim_key_changes += 1  # its rank fell back to its score
            else:
                request.notify_tokens_at = emitted + int(left)

    def waiting_key(self, request: Request, now_s: float) -> SortKey:
        if not self._keyed:
            self._keyed = True
            self._queued.clear()
            self._order.clear()
        state = request.policy_state
        starve_s = self.config.starve_s
        if starve_s > 0 and state.get(_LEFT, 0.0) <= 0 and now_s - state.get(_QUEUED, now_s) >= starve_s:
            state[_LEFT] = float(self.config.quantum_tokens)
            state[_QUEUED] = now_s
            self._count_quantum_from(request)
        return (*self.rank(request), request.arrival_time_s)

    def waiting_key_until(self, request: Request, now_s: float) -> float:
        """An unpromoted request's key changes when it has starved (``starve_s`` since it entered the queue);
        a promoted one's, or any without starvation, holds while it waits."""
        state, starve_s = request.policy_state, self.config.starve_s
        entered = state.get(_QUEUED)
        if starve_s <= 0 or entered is None or state.get(_LEFT, 0.0) > 0:
            return math.inf
        return key_holds_before(entered + starve_s)

    @property
    def victim_key(self) -> Callable[[Request], SortKey]:
        """``(*rank, arrival)`` of a request: the kept keys' lookup (:mod:`semsched.policies.kept_keys`), so the
        key function the schedulers sort their running requests by (after every admission) is a dict's own."""
        return self._victim_keys.__getitem__

    def _victim_key_of(self, request: Request) -> SortKey:
        """``(*rank, arrival)`` from the request's state, without the calls."""
        state = request.policy_state
        score = state.get(_SCORE)
        return (
            0.0 if state.get(_LEFT, 0.0) > 0 else 1.0,
            self.score(request) if score is None else score,
            request.arrival_time_s,
        )

    def victims_for(
        self, candidate: Request, running: Sequence[Request], view: SchedulerView, now_s: float
    ) -> Sequence[Request]:
        """The running requests ranked below ``candidate``, largest ``victim_key`` first (ties: running order):
        their kept keys compared with the candidate's rank (an arrival is finite, so a key is above
        ``(*rank, inf)`` exactly when its rank is above the candidate's), then a stable sort by them
        (:func:`~semsched.policies.passes.kept_victims`, compiled)."""
        mine_promoted, mine_score, _ = self._victim_key_of(candidate)
        return kept_victims(running, self._victim_keys, (mine_promoted, mine_score, math.inf))
