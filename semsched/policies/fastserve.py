"""FastServe's skip-join multi-level feedback queue (Wu et al. 2023), preemptive across levels, FCFS within one.

* **Levels and quanta.** Level ``p`` (0 = served first) has a quantum of ``base_quantum_tokens * 2**p`` decode
  iterations. We count service in iterations, i.e. output tokens, not seconds: FastServe's quanta are multiples
  of one iteration's time, and counting tokens keeps decisions the same on every engine and clock (the simulator,
  vLLM, fast-forward).
* **Skip-join.** An arriving request enters the first level whose quantum covers its first iteration, the
  prefill of its prompt, priced in decode iterations with a latency profile: ``ceil(t_prefill(I) / t_decode)``
  (one decode at context ``I``). The prefill counts that many iterations of service, each later token one.
* **Demotion.** A request that has used its level's quantum moves to the next level (the last level keeps it);
  a waiting request of a lower level displaces running requests of higher levels.
* **Starvation.** A request that has waited ``starve_s`` seconds since it last entered the queue (arrival or
  preemption) is promoted to level 0 with a fresh quantum; waiting requests are checked every ``check_s``
  seconds (the re-key interval). ``starve_s=0`` turns promotion off.

Decisions change inside decode-only stretches (demotion), so the policy is never ``stable_between_events``.
It does not read predictions. A running request's ``victim_key`` changes only when it is demoted, which
``on_tokens`` counts in ``victim_key_changes`` (so the core re-sorts its running requests only then), and
``on_tokens`` asks to hear of a request only when its quantum may be spent (``notify_tokens_at``): the tokens
used at its level are those counted then plus the emissions since (``num_output_tokens``).

**Incremental state.** Under the core scheduler the policy keeps one heap per level of its waiting requests,
ordered (arrival, enqueue order), and gives the core its order through ``waiting_order`` (the head of the lowest
level that has a live one, found afresh at each ``next``): the order the core's keyed queue had, ``(level,
arrival)`` with ties in enqueue order, at the cost of what a step admits. Starvation is checked at the first
step at or after each multiple of ``check_s`` (the core's re-key instants; the policy hears each step through
``step_budget``), from a heap of the waiting requests by the time they entered the queue: only those due are
looked at. Entries go stale (admitted, ended, promoted, handed off) and are dropped when they reach a heap's
front. The vLLM adapter keys its own queue with ``waiting_key`` (re-keyed every ``check_s``); the first call to
it turns these heaps off.
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
from semsched.latency import load_profile
from semsched.policies.kept_keys import KeptVictimKeys
from semsched.policies.passes import StoredLevelHeaps, kept_victims
from semsched.policies.registry import register_policy
from semsched.policies.vllm_fcfs import is_waiting

_LEVEL = "fastserve.level"
_USED = "fastserve.used"  # iterations of service used at the current level, as of ...
_COUNTED = "fastserve.counted"  # ... this many output tokens (the scheduler skips the emissions between)
_QUEUED = "fastserve.queued_s"  # when the request last entered the waiting queue
_ENQUEUED = "fastserve.enqueued"  # the order of its last entry into a waiting queue (its heap entries' mark)

#: enqueue order, shared by every instance (a request handed off to another instance takes a fresh mark there)
_enqueue_counter = itertools.count()

#: ``notify_tokens_at`` of a request at the last level: its emissions change nothing here
_NEVER = 2**62


def _param(default: Any, doc: str) -> Any:
    return field(default=default, metadata={"doc": doc})


def _check_count(name: str, value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 2**31 - 1:
        raise ValueError(f"{name} must be an integer from 1 to {2**31 - 1}, got {value!r}")


@dataclass(frozen=True)
class FastServeConfig(PolicyConfig):
    base_quantum_tokens: int = _param(
        16, "quantum of level 0 in decode iterations (output tokens); level p has base * 2^p"
    )
    levels: int = _param(8, "number of queue levels")
    starve_s: float = _param(10.0, "a request waiting this long is promoted to level 0 (0: never)")
    check_s: float = _param(1.0, "how often waiting requests are checked for starvation")
    profile: str = _param(
        "a100-qwen1.5-4b", "latency profile that prices a prefill in decode iterations (skip-join)"
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        _check_count("base_quantum_tokens", self.base_quantum_tokens)
        _check_count("levels", self.levels)
        if not math.isfinite(self.starve_s) or self.starve_s < 0:
            raise ValueError(f"starve_s must be a finite number >= 0, got {self.starve_s!r}")
        if not math.isfinite(self.check_s) or self.check_s <= 0:
            raise ValueError(f"check_s must be a finite number > 0, got {self.check_s!r}")


@register_policy
class FastServe(Policy):
    """FastServe's skip-join multi-level feedback queue, FCFS within a level.

    starvation: bounded: a request that has waited ``starve_s`` since it entered the queue (arrival or
    preemption) is promoted to level 0 at the next check (every ``check_s``), where only earlier arrivals go
    before it; so it starts once they and the requests running at level 0 are done (``starve_s=0``: possible).
    """

    name: ClassVar[str] = "fastserve"
    config_cls: ClassVar[type[PolicyConfig]] = FastServeConfig
    #: a running request's key (level, arrival) changes only when it is demoted (``victim_key_changes``)
    static_victim_key: ClassVar[bool] = True
    config: FastServeConfig

    def __init__(self, config: PolicyConfig | None = None) -> None:
        super().__init__(config)
        self._latency = load_profile(self.config.profile)
        self._quanta = [self.config.base_quantum_tokens << p for p in range(self.config.levels)]
        #: per level, the waiting requests as (arrival, enqueue mark, request); stale entries dropped at the front
        self._levels: list[list[tuple[float, int, Request]]] = [[] for _ in self._quanta]
        #: the heaps read in order (compiled)
        self._order = StoredLevelHeaps(self._levels, _ENQUEUED, _LEVEL)
        #: the waiting requests as (entered the queue at, enqueue mark, request), for starvation promotion
        self._queued: list[tuple[float, int, Request]] = []
        self._next_check_s = -math.inf
        #: ``waiting_key`` was asked (the vLLM adapter keys its own queue): the heaps are not kept
        self._keyed = False
        self._victim_keys = KeptVictimKeys(lambda request: (self.level(request), request.arrival_time_s))

    def uses_hook(self, hook: str) -> bool:
        if hook == "step_budget":  # (the starvation check's clock)
            return self.config.starve_s > 0
        return super().uses_hook(hook)

    @property
    def rekey_interval_s(self) -> float | None:  # type: ignore[override]
        return self.config.check_s if self.config.starve_s > 0 else None

    def quantum(self, level: int) -> int:
        return self._quanta[level]

    def prefill_iterations(self, prompt_tokens: int) -> int:
        """The first iteration (the prompt's prefill) in decode iterations, at least 1."""
        prefill = self._latency.step_time_s([(prompt_tokens, 0)], 0, 0)
        decode = self._latency.step_time_s([], 1, prompt_tokens)
        return max(1, int(math.ceil(prefill / decode))) if decode > 0 else 1

    def entry_level(self, prompt_tokens: int) -> int:
        """Skip-join: the first level whose quantum covers the prefill."""
        needed = self.prefill_iterations(prompt_tokens)
        return next((p for p, q in enumerate(self._quanta) if q >= needed), len(self._quanta) - 1)

    def level(self, request: Request) -> int:
        state = request.policy_state
        level = state.get(_LEVEL)
        if level is None:
            level = state[_LEVEL] = self.entry_level(request.prompt_tokens)
            state[_USED], state[_COUNTED] = 0, request.num_output_tokens
        return int(level)

    # ---- hooks --------------------------------------------------------------------------------------------
    def on_arrival(self, request: Request, now_s: float) -> None:
        self.level(request)
        request.policy_state[_QUEUED] = now_s
        self._enqueue(request, now_s)
        self._victim_keys.arrived()

    def on_preempt(self, request: Request, now_s: float) -> None:
        self._victim_keys.pop(request, None)
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
        heapq.heappush(self._levels[self.level(request)], (request.arrival_time_s, mark, request))
        if self.config.starve_s > 0:
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
        queued, starve_s, top = self._queued, self.config.starve_s, self._levels[0]
        while queued and now_s - queued[0][0] >= starve_s:
            _, mark, request = heapq.heappop(queued)
            state = request.policy_state
            if state.get(_ENQUEUED) == mark and state[_LEVEL] > 0 and is_waiting(request):
                self._promote(request, now_s)
                heapq.heappush(top, (request.arrival_time_s, mark, request))

    def waiting_order(self, view: SchedulerView, now_s: float) -> Iterator[Request]:
        """The waiting requests in the keyed queue's order, ``(level, arrival)`` then enqueue order: at each
        ``next`` the front of the lowest level with a live entry (requests admitted or displaced meanwhile are
        seen, as the keyed queue's front would show them). One yielded and still waiting at the next ``next``
        (not admitted: the core never asks on then) is held aside and put back when the next order is made."""
        if self._keyed:
            raise RuntimeError("fastserve: waiting_order after waiting_key (one policy serves one engine)")
        return self._order.order()  # (compiled: passes.LevelOrder)

    def _promote(self, request: Request, now_s: float) -> None:
        """Level 0 with a fresh quantum (a starved waiting request)."""
        state = request.policy_state
        state[_LEVEL], state[_USED], state[_COUNTED], state[_QUEUED] = 0, 0, request.num_output_tokens, now_s
        self._victim_keys.pop(request, None)
        request.notify_tokens_at = 0  # (its quantum is counted afresh from its next emission)

    def on_tokens(self, request: Request, num_tokens: int, now_s: float) -> None:
        state = request.policy_state
        emitted = request.num_output_tokens
        stored = state.get(_LEVEL)  # (self.level, inlined)
        if stored is None:  # (never arrived here: its quantum starts with this emission)
            level = self.level(request)
            state[_COUNTED] = emitted - num_tokens
        else:
            level = int(stored)
        # the emissions since the last count (this one's, and those the scheduler skipped)
        used = int(state[_USED]) + emitted - int(state[_COUNTED])
        if emitted == num_tokens:  # the first token came out of the prefill
            used += self.prefill_iterations(request.prompt_tokens) - 1
        quanta = self._quanta
        last = len(quanta) - 1
        if used >= quanta[level]:
            entered = level
            while level < last and used >= quanta[level]:
                used -= quanta[level]
                level += 1
            if level != entered:
                state[_LEVEL] = level
                self._victim_keys[request] = (level, request.arrival_time_s)
                self.victim_key_changes += 1  # demoted: its victim_key rose
        state[_USED], state[_COUNTED] = used, emitted
        # the next emission that may spend the quantum (none at the last level)
        request.notify_tokens_at = emitted + quanta[level] - used if level < last else _NEVER

    def waiting_key(self, request: Request, now_s: float) -> SortKey:
        if not self._keyed:
            self._keyed = True
            self._queued.clear()
            self._order.clear()
        state = request.policy_state
        level = self.level(request)
        queued = state.get(_QUEUED, now_s)
        if self.config.starve_s > 0 and level > 0 and now_s - queued >= self.config.starve_s:
            self._promote(request, now_s)
            level = 0
        return (level, request.arrival_time_s)

    def waiting_key_until(self, request: Request, now_s: float) -> float:
        """A request below the top level is promoted when it has starved (``starve_s`` since it entered the
        queue); one at the top, or any without starvation, keeps its key while it waits."""
        state, starve_s = request.policy_state, self.config.starve_s
        entered = state.get(_QUEUED)
        if starve_s <= 0 or entered is None or self.level(request) == 0:
            return math.inf
        return key_holds_before(entered + starve_s)

    @property
    def victim_key(self) -> Callable[[Request], SortKey]:
        """``(level, arrival)`` of a request: the kept keys' lookup, so the key function the schedulers sort their
        running requests by (after every admission) is a dict's own, not a Python call."""
        return self._victim_keys.__getitem__

    def victims_for(
        self, candidate: Request, running: Sequence[Request], view: SchedulerView, now_s: float
    ) -> Sequence[Request]:
        """The running requests of higher levels, by ``victim_key`` descending, equal keys in running order: their
        kept keys ``(level, arrival)`` compared with ``(mine, inf)`` (an arrival is finite, so a key is above it
        exactly when its level is above the candidate's), then a stable sort by them
        (:func:`~semsched.policies.passes.kept_victims`, compiled)."""
        return kept_victims(running, self._victim_keys, (self.level(candidate), math.inf))
