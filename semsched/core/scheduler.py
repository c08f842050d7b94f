"""The iteration-level scheduler: state in, typed batch plan out, typed step result back.

Batch formation follows vLLM v1 (``vllm/v1/core/sched/scheduler.py``): there are no prefill and decode
phases. Each step has a token budget and a sequence cap; running requests are served first, each getting up
to ``num_tokens - num_computed_tokens`` tokens (so a long prompt is prefilled in chunks across steps); then
waiting requests are admitted in policy order while budget, sequence slots and KV blocks last. When a running
request needs a block and none is free, the policy's ``victim_key`` picks a victim to preempt (recompute or
swap). Unlike vLLM, a waiting request that does not fit may displace running work when the policy's
``victims_for`` names victims.
"""

from __future__ import annotations

import heapq
import itertools
import math
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from mypy_extensions import mypyc_attr

from semsched.core.displacement import Need, Release, Room, best_class, excluded, fits, victims_to_displace
from semsched.core.emission import record_round, record_tokens
from semsched.core.kv import BlockManager, Reservation, blocks_for
from semsched.core.plan import (
    Admission,
    BatchPlan,
    Preemption,
    PreemptionMode,
    PreemptionReason,
    ScheduledChunk,
    StepResult,
)
from semsched.core.policy import Policy, StepBudget, describes_waiting_keys, next_rekey_s
from semsched.core.request import InvalidRequestError, Request, RequestState, TokenTimeline


@mypyc_attr(native_class=False)  # (frozen: a native class would not unpickle; a process pool ships configs)
@dataclass(frozen=True)
class SchedulerConfig:
    """Engine-side limits (vLLM names where vLLM has them)."""

    max_num_batched_tokens: int = 2048
    max_num_seqs: int = 256
    block_size: int = 16
    num_gpu_blocks: int = 4096
    num_cpu_blocks: int = 0
    watermark: float = 0.01
    reservations: tuple[Reservation, ...] = ()
    #: KV slots reserved per decode for speculative tokens (vLLM's num_lookahead_tokens); 0 = no speculation
    num_lookahead_tokens: int = 0
    #: admit a waiting request only when its whole sequence (prompt plus tokens already generated) fits in free
    #: blocks, not just its first chunk (vLLM >= 0.2x's ``scheduler_reserve_full_isl``, on by default there)
    reserve_full_prompt: bool = False
    #: vLLM's automatic prefix caching: computed full blocks named by a request's ``prefix_hashes`` stay cached
    #: (evictable, LRU) after it leaves, and a request whose leading hashes are cached shares those blocks and
    #: starts with their tokens computed (its prefill costs only the rest). Off: results as without the feature
    enable_prefix_caching: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.num_lookahead_tokens, int) or self.num_lookahead_tokens < 0:
            raise InvalidRequestError(
                f"num_lookahead_tokens: must be an integer >= 0 (got {self.num_lookahead_tokens!r})"
            )
        for name in ("max_num_batched_tokens", "max_num_seqs", "block_size", "num_gpu_blocks"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise InvalidRequestError(f"{name}: must be an integer >= 1 (got {value!r})")


_UNKEYED: tuple[float, ...] = ()


def drop_reason(policy_name: str, request: Request, reason: PreemptionReason) -> str:
    """What a request ended by ``PreemptionMode.DROP`` is told (the core and the vLLM adapter say the same)."""
    cause = "KV cache full" if reason is PreemptionReason.KV_PRESSURE else "displaced by a more important request"
    return (f"dropped: {cause}; {policy_name} ends it rather than preempt it again "
            f"(preempted {request.num_preemptions} times)")


class _WaitingQueue:
    """Min-heap of (policy key, enqueue sequence, request); removal is lazy.

    While every key has the same length, an entry is the key's items followed by the sequence and the request,
    one flat tuple: it orders exactly as the nested (key, sequence, request) does, and a heap comparison is one
    tuple comparison, not three. The first key of another length turns every entry into the nested form for
    good. Either way an entry ends with its sequence and its request (``entry[-2]``, ``entry[-1]``)."""

    def __init__(self) -> None:
        self._heap: list[tuple[Any, ...]] = []
        self._seq = itertools.count()
        self._removed: set[int] = set()
        self._ids: dict[str, int] = {}
        self._width = -1  # the length of every key so far (flat entries); -1: none yet; 0: nested entries

    def __len__(self) -> int:
        return len(self._ids)

    def _entry(self, key: tuple[float, ...], seq: int, request: Request) -> tuple[Any, ...]:
        width = self._width
        if width != len(key):
            if width < 0:
                self._width = width = len(key)
            elif width > 0:
                self._nest()
                width = 0
        if width:
            return key + (seq, request)
        return (key, seq, request)

    def _nest(self) -> None:
        """Every entry in the nested form from now on (a key of another length came)."""
        self._width = 0
        heap = [(entry[:-2], entry[-2], entry[-1]) for entry in self._heap]
        heapq.heapify(heap)  # (the same order: keys of one length compare as their flat items did)
        self._heap = heap

    def push(self, key: tuple[float, ...], request: Request) -> None:
        seq = next(self._seq)
        self._ids[request.request_id] = seq
        entry = self._entry(key, seq, request)  # (first: it may nest the heap, a new list)
        heapq.heappush(self._heap, entry)

    def peek(self) -> Request | None:
        self._drop_removed()
        return self._heap[0][-1] if self._heap else None

    def pop(self) -> Request:
        self._drop_removed()
        request: Request = heapq.heappop(self._heap)[-1]
        del self._ids[request.request_id]
        return request

    def remove(self, request_id: str) -> bool:
        seq = self._ids.pop(request_id, None)
        if seq is None:
            return False
        self._removed.add(seq)
        if len(self._removed) > 64 + len(self._ids):  # (a queue never peeked at drops nothing lazily)
            self._compact()
        return True

    def __iter__(self) -> Iterator[Request]:
        return (e[-1] for e in self._heap if e[-2] not in self._removed)

    def rekey(self, key: Callable[[Request], tuple[float, ...]], now_s: float) -> None:
        """Recompute every live entry's key at ``now_s`` (``key``; O(n)); enqueue order still breaks ties."""
        removed = self._removed
        live = [(e[-2], e[-1]) for e in self._heap if e[-2] not in removed]
        removed.clear()
        self._heap = []
        if self._width > 0:
            self._width = -1  # (the new keys may all have another length)
        for seq, request in live:
            entry = self._entry(key(request), seq, request)  # (which may nest what self._heap holds so far)
            self._heap.append(entry)
        heapq.heapify(self._heap)

    def _compact(self) -> None:
        removed = self._removed
        self._heap = [entry for entry in self._heap if entry[-2] not in removed]
        heapq.heapify(self._heap)
        removed.clear()

    def _drop_removed(self) -> None:
        heap = self._heap
        while heap and heap[0][-2] in self._removed:
            self._removed.discard(heapq.heappop(heap)[-2])


class _ClassedWaitingQueue(_WaitingQueue):
    """The same queue, popping in the same order, for a policy with aging classes (``Policy.aging_class``):
    within a class a re-key never changes the order, which is arrival then enqueue order. Each class is a heap
    on (arrival, enqueue sequence); at a re-key only its first live request is keyed and stands in the main
    heap for the class, beside the requests enqueued since (keyed when enqueued, as in :class:`_WaitingQueue`).
    When a class's first request leaves the main heap the next one is keyed with the last re-key's key and
    takes its place. A re-key costs the requests enqueued since the last one and one key per class, not a walk
    over the queue."""

    def __init__(self, class_of: Callable[[Request], int]) -> None:
        super().__init__()
        self._width = 0  # (nested entries: this queue reads them as such)
        self._class_of = class_of
        self._classes: dict[int, list[tuple[float, int, Request]]] = {}
        self._heads: dict[int, int] = {}  # sequence of a class's entry in the main heap -> its class
        self._key: Callable[[Request], tuple[float, ...]] | None = None  # the last re-key's

    def pop(self) -> Request:
        self._drop_removed()
        entry = heapq.heappop(self._heap)
        seq: int = entry[1]
        request: Request = entry[2]
        del self._ids[request.request_id]
        self._advance(seq)
        return request

    def __iter__(self) -> Iterator[Request]:
        removed, heads = self._removed, self._heads
        yield from (r for _, s, r in self._heap if s not in removed)
        for entries in self._classes.values():
            yield from (r for _, s, r in entries if s not in removed and s not in heads)

    def rekey(self, key: Callable[[Request], tuple[float, ...]], now_s: float) -> None:
        """Move the requests enqueued since the last re-key into their classes, then key each class's first."""
        self._key = key
        removed, heads, classes, class_of = self._removed, self._heads, self._classes, self._class_of
        for _, seq, request in self._heap:
            if seq in heads:
                continue  # (already in its class)
            if seq in removed:
                removed.discard(seq)
                continue
            cls = class_of(request)
            entries = classes.get(cls)
            if entries is None:
                entries = classes[cls] = []
            heapq.heappush(entries, (request.arrival_time_s, seq, request))
        heads.clear()
        self._heap = []
        for cls in classes:
            self._expose(cls)

    def _advance(self, seq: int) -> None:
        """Entry ``seq`` left the main heap: if it stood for its class, the class's next request replaces it."""
        cls = self._heads.pop(seq, None)
        if cls is not None:
            heapq.heappop(self._classes[cls])  # (its first: a class changes only at a re-key)
            self._expose(cls)

    def _expose(self, cls: int) -> None:
        entries, removed = self._classes[cls], self._removed
        while entries and entries[0][1] in removed:
            removed.discard(heapq.heappop(entries)[1])
        if entries:
            key = self._key
            assert key is not None  # (classes are filled at a re-key)
            _, seq, request = entries[0]
            heapq.heappush(self._heap, (key(request), seq, request))
            self._heads[seq] = cls

    def _compact(self) -> None:
        removed, heads = self._removed, self._heads
        gone = [seq for seq in heads if seq in removed]
        classes = [heads.pop(seq) for seq in gone]
        self._heap = [entry for entry in self._heap if entry[1] not in removed]
        heapq.heapify(self._heap)
        for entries in self._classes.values():
            entries[:] = [entry for entry in entries if entry[1] not in removed]
            heapq.heapify(entries)
        removed.clear()
        for cls in classes:
            self._expose(cls)

    def _drop_removed(self) -> None:
        heap, removed = self._heap, self._removed
        while heap and heap[0][1] in removed:
            seq = heapq.heappop(heap)[1]
            removed.discard(seq)
            self._advance(seq)


class _TimedWaitingQueue(_WaitingQueue):
    """The same queue, popping in the same order, for a policy that says until when each waiting key holds
    (``Policy.waiting_key_until``: keys that change at known times). A re-key keys the requests enqueued since the
    last one (as the full re-key does) and those whose time has come, not every waiting one; a second heap holds
    each request's time. Entries are (key, enqueue sequence, version, request): a re-key keeps the sequence, which
    breaks ties as in :class:`_WaitingQueue`, and gives a new version, which tells the live entry from stale ones
    (``_ids`` maps a request to its live entry's version). The base class's heap stays empty."""

    def __init__(self, until: Callable[[Request, float], float]) -> None:
        super().__init__()
        self._width = 0  # (its entries are its own)
        self._until = until
        self._entries: list[tuple[tuple[float, ...], int, int, Request]] = []
        #: (time its key may change, version, entry), for the entries keyed at a re-key
        self._due: list[tuple[float, int, tuple[tuple[float, ...], int, int, Request]]] = []
        self._fresh: list[tuple[tuple[float, ...], int, int, Request]] = []  # enqueued since the last re-key
        self._versions = itertools.count()
        self._stale = 0  # entries made stale since the heaps were last rebuilt (an upper bound)

    def push(self, key: tuple[float, ...], request: Request) -> None:
        version = next(self._versions)
        entry = (key, next(self._seq), version, request)
        self._ids[request.request_id] = version
        heapq.heappush(self._entries, entry)
        self._fresh.append(entry)

    def peek(self) -> Request | None:
        self._drop_removed()
        return self._entries[0][3] if self._entries else None

    def pop(self) -> Request:
        self._drop_removed()
        request = heapq.heappop(self._entries)[3]
        del self._ids[request.request_id]
        self._stale += 1  # (its time, if it has one, stays in the second heap)
        return request

    def remove(self, request_id: str) -> bool:
        if self._ids.pop(request_id, None) is None:
            return False
        self._stale += 1
        if self._stale > 64 + len(self._ids):
            self._compact()
        return True

    def __iter__(self) -> Iterator[Request]:
        ids = self._ids
        return (e[3] for e in self._entries if ids.get(e[3].request_id) == e[2])

    def rekey(self, key: Callable[[Request], tuple[float, ...]], now_s: float) -> None:
        """Key the requests enqueued since the last re-key and those whose time has come, at ``now_s``."""
        ids, due = self._ids, self._due
        todo = [e for e in self._fresh if ids.get(e[3].request_id) == e[2]]
        self._fresh = []
        while due and due[0][0] <= now_s:
            _, version, entry = heapq.heappop(due)
            if ids.get(entry[3].request_id) == version:
                todo.append(entry)
        for entry in todo:  # (timed after the pops: a time given early is asked again at the next re-key)
            request = entry[3]
            fresh = key(request)
            if fresh != entry[0]:
                version = next(self._versions)
                entry = (fresh, entry[1], version, request)
                ids[request.request_id] = version
                heapq.heappush(self._entries, entry)
                self._stale += 1
            heapq.heappush(due, (self._until(request, now_s), entry[2], entry))
        if self._stale > 64 + len(ids):
            self._compact()

    def _compact(self) -> None:
        ids = self._ids
        self._entries = [e for e in self._entries if ids.get(e[3].request_id) == e[2]]
        heapq.heapify(self._entries)
        self._due = [d for d in self._due if ids.get(d[2][3].request_id) == d[1]]
        heapq.heapify(self._due)
        self._fresh = [e for e in self._fresh if ids.get(e[3].request_id) == e[2]]
        self._stale = 0

    def _drop_removed(self) -> None:
        entries, ids = self._entries, self._ids
        while entries and ids.get(entries[0][3].request_id) != entries[0][2]:
            heapq.heappop(entries)


class Scheduler:
    """Owns waiting and running requests and the KV accounting for one engine instance.

    Contract: call :meth:`add_request` on arrival, then alternate :meth:`schedule` (returns a
    :class:`BatchPlan`) and :meth:`update` (consumes the :class:`StepResult` of that plan). For stretches of
    identical decode-only steps, :meth:`steady_decode_steps` says how many may be applied at once with
    :meth:`update_steady`; the result is identical to applying them one by one.
    """

    def __init__(self, config: SchedulerConfig, policy: Policy) -> None:
        self.config = config
        self.policy = policy
        self.kv = BlockManager(
            config.num_gpu_blocks,
            config.block_size,
            num_cpu_blocks=config.num_cpu_blocks,
            watermark=config.watermark,
            reservations=config.reservations + policy.reservations(config.num_gpu_blocks),
            enable_prefix_caching=config.enable_prefix_caching,
        )
        self.timeline = TokenTimeline()
        rekeys = policy.rekey_interval_s is not None and not policy.uses_hook("waiting_order")
        if rekeys and describes_waiting_keys(policy, "aging_class"):
            self._waiting: _WaitingQueue = _ClassedWaitingQueue(policy.aging_class)
        elif rekeys and describes_waiting_keys(policy, "waiting_key_until"):
            self._waiting = _TimedWaitingQueue(policy.waiting_key_until)
        else:
            self._waiting = _WaitingQueue()
        self._running: list[Request] = []
        self._running_sorted = True  # in ascending victim_key order (removals keep it; a late joiner clears it)
        self._static_victim_order = static_victim_order(policy)
        self._sorted_changes = policy.victim_key_changes  # the policy's count of key changes at the last sort
        self._requests: dict[str, Request] = {}
        self._class_counts: Counter[int] = Counter()
        self._default_budget = StepBudget(config.max_num_batched_tokens, config.max_num_seqs)
        # skip the per-token callback on the hot path when the policy does not override it
        self._on_tokens = policy.on_tokens if policy.uses_hook("on_tokens") else None
        #: for a policy that ranks by attained service (``charges_service``): the seconds of the steps not yet
        #: charged, oldest first; each emitting request of a step is charged all of them, then they are cleared.
        #: A step in which nothing emitted (a prompt chunk alone, swaps) stays here and goes to the emitters of
        #: the next one (as the policies' own meter did before the scheduler kept the service: bit for bit)
        self._service: list[float] | None = [] if policy.charges_service else None
        self._step_budget = policy.step_budget if policy.uses_hook("step_budget") else None
        self._on_step = policy.on_step if policy.uses_hook("on_step") else None
        self._waiting_order = policy.waiting_order if policy.uses_hook("waiting_order") else None
        self._orders_running = policy.uses_hook("running_order")  # (the base one answers None: not asked)
        self._next_rekey_s = -math.inf
        self.finished: list[Request] = []
        self.rejected: list[Request] = []

    # ---- SchedulerView -----------------------------------------------------------------------------------
    @property
    def num_waiting(self) -> int:
        return len(self._waiting)

    @property
    def num_running(self) -> int:
        return len(self._running)

    @property
    def num_unfinished(self) -> int:
        return len(self._requests)

    @property
    def num_free_gpu_blocks(self) -> int:
        return self.kv.num_free_gpu_blocks

    @property
    def num_free_cpu_blocks(self) -> int:
        return self.kv.num_free_cpu_blocks

    @property
    def block_size(self) -> int:
        return self.config.block_size

    @property
    def budget(self) -> StepBudget:
        return self._default_budget

    def running_requests(self) -> Sequence[Request]:
        return tuple(self._running)

    def available_blocks(self, request: Request, *, admission: bool) -> int:
        return self.kv.available_for(request, admission=admission)

    def waiting_requests(self) -> list[Request]:
        return list(self._waiting)

    def has_unfinished(self) -> bool:
        return bool(self._requests)

    def could_start_now(self, request: Request) -> bool:
        """Whether waiting ``request`` would get a sequence slot and the KV blocks of its first chunk (its whole
        sequence with ``reserve_full_prompt``) from what is free now. On an instance with nothing running, False
        means it never will: nothing can free a block for it (it is shut out by reservations or too large)."""
        room = Room(self.kv.available_for(request, admission=True), self._default_budget.max_num_seqs
                    - len(self._running), self._default_budget.max_num_batched_tokens)
        return fits(self._need(request), room)

    def block_need(self, request: Request) -> tuple[int, int]:
        """(blocks ``request`` needs to start now, blocks it may ever take): the numbers that prove a request
        that cannot start on an idle instance never will."""
        need = self._need(request).blocks(self._default_budget.max_num_batched_tokens)
        return need, self.kv.available_for(request, admission=True)

    def describe_state(self) -> str:
        """One line of engine state for error messages: free blocks, running, waiting, swapped."""
        swapped = sum(r.state is RequestState.PREEMPTED_SWAPPED for r in self._waiting)
        return (f"{self.kv.num_free_gpu_blocks} of {self.kv.num_gpu_blocks} GPU blocks free, "
                f"{self.kv.num_free_cpu_blocks} CPU blocks free, {len(self._running)} running, "
                f"{len(self._waiting)} waiting ({swapped} swapped out)")

    def strand(self, request_id: str, now_s: float, reason: str) -> Request | None:
        """End a request that its instance left stranded (state STALLED, with ``reason``): a simulation run with
        ``allow_stalls`` counts such requests instead of raising. Returns it, or None if unknown."""
        request = self.abort(request_id, now_s, reason)
        if request is not None:
            request.state = RequestState.STALLED
        return request

    # ---- arrivals and aborts -----------------------------------------------------------------------------
    def add_request(self, request: Request, now_s: float) -> Admission:
        """Admit ``request`` into the waiting queue, or reject it with a reason (state REJECTED)."""
        if request.request_id in self._requests:
            raise InvalidRequestError(f"request_id: duplicate id {request.request_id!r}")
        request.notify_tokens_at = 0  # (another scheduler's policy may have set it)
        lookahead = self.config.num_lookahead_tokens
        if not self.kv.fits_ever(request, lookahead):
            decision = Admission.reject(
                f"prompt_tokens + max_output_tokens{' + lookahead' if lookahead else ''} = "
                f"{request.prompt_tokens + request.max_output_tokens + lookahead} "
                f"exceeds the KV capacity of {self.kv.capacity_for(request) * self.kv.block_size} tokens "
                f"available to priority {request.priority}"
            )
        else:
            decision = self.policy.admit(request, self, now_s)
        if not decision.accepted:
            self._terminate(request, RequestState.REJECTED, decision.reason, now_s)
            self.rejected.append(request)
            return decision
        self._requests[request.request_id] = request
        cls = self.policy.exclusive_class(request)
        if cls is not None:
            self._class_counts[cls] += 1
        self.policy.on_arrival(request, now_s)
        self._enqueue(request, RequestState.WAITING, now_s)
        return decision

    def abort(self, request_id: str, now_s: float, reason: str = "aborted") -> Request | None:
        """Drop a request wherever it is (state DROPPED); returns it, or None if unknown."""
        request = self._requests.get(request_id)
        if request is None:
            return None
        if not self._waiting.remove(request_id):
            self._running.remove(request)
        self._retire(request, RequestState.DROPPED, reason, now_s)
        return request

    # ---- PD disaggregation: a request's KV moves between instances ---------------------------------------
    def hand_off(self, request_id: str) -> Request:
        """Let a running request leave with its KV (the prefill side of PD disaggregation, after its first
        token): every block it holds here (GPU and swap) is freed, and it leaves the running list and this
        scheduler's bookkeeping. It is not terminal: the policy hears ``on_leave``, not ``on_finish``; its
        progress (computed and emitted tokens) stays on the request, whose state becomes WAITING until
        :meth:`add_transferred` on the next instance. :class:`InvalidRequestError` if it is not running here."""
        request = self._requests.get(request_id)
        if request is None or request.state is not RequestState.RUNNING:
            raise InvalidRequestError(f"hand_off: request {request_id!r} is not running on this instance")
        self._running.remove(request)  # (a removal keeps the running list sorted)
        self.kv.free(request)
        del self._requests[request_id]
        cls = self.policy.exclusive_class(request)
        if cls is not None:
            self._class_counts[cls] -= 1
        request.state = RequestState.WAITING
        self.policy.on_leave(request)
        return request

    def add_transferred(self, request: Request, now_s: float) -> Admission:
        """Admit a request that arrives with its KV computed elsewhere (the decode side of PD disaggregation):
        ``num_computed_tokens`` tokens of KV (its prompt) and its first token already emitted. It enters like any
        arrival (:meth:`add_request`: capacity check, the policy's ``admit``, ``on_arrival``, the waiting queue),
        and since only its pending token is uncomputed it is admitted as a decode: the blocks of its whole
        sequence, ``blocks_for(num_tokens)`` (the transferred KV plus its pending token's slot), are allocated at
        once when it is admitted, so its prompt is never recomputed here unless a recompute preemption drops
        its KV (then it is recomputed here like any victim)."""
        if request.num_output_tokens < 1 or request.num_computed_tokens != request.num_tokens - 1:
            raise InvalidRequestError(
                f"add_transferred: request {request.request_id!r} must arrive with its first token emitted and "
                f"every token but the last computed (got {request.num_computed_tokens} computed of "
                f"{request.num_tokens}, {request.num_output_tokens} emitted)"
            )
        return self.add_request(request, now_s)

    # ---- scheduling --------------------------------------------------------------------------------------
    def schedule(self, now_s: float) -> BatchPlan:
        """Form the batch for the step that starts at ``now_s``."""
        budget = (self._step_budget(self, now_s) if self._step_budget else None) or self._default_budget
        plan = BatchPlan(time_s=now_s)
        step = _StepState(budget.max_num_batched_tokens, budget.max_num_seqs)
        self._maybe_rekey(now_s)
        self._enforce_exclusive(plan, step, now_s)
        self._schedule_running(plan, step, now_s)
        # as in vLLM: after a preemption under memory pressure, admit nothing new this step
        if not any(p.reason is PreemptionReason.KV_PRESSURE for p in plan.preempted):
            self._schedule_waiting(plan, step, now_s)
        return plan

    def _schedule_running(self, plan: BatchPlan, step: _StepState, now_s: float) -> None:
        running, block_size = RequestState.RUNNING, self.block_size
        lookahead = self.config.num_lookahead_tokens
        order = self.policy.running_order(self._running, self, now_s) if self._orders_running else None
        if order is None and not self._victim_order_current():
            # most protected first: the budget goes to them first and KV-pressure victims come from the back,
            # the order the vLLM adapter gives vLLM's running list every step
            self._sort_running()
        in_key_order = order is None  # (the running list is in victim_key order now; removals keep it so)
        for request in list(self._running if order is None else order):
            if step.tokens <= 0:
                return
            if request.state is not running:
                continue  # preempted earlier in this loop to make room
            computed = request.num_computed_tokens
            uncomputed = request.prompt_tokens + request.num_output_tokens - computed
            if uncomputed == 1 and computed >= request.prompt_tokens:
                # decode, the bulk of every step, kept inline; a position inside the last block needs no block
                needs_blocks = lookahead or computed % block_size == 0
                if needs_blocks and not self._make_room(request, 1 + lookahead, plan, step, now_s, in_key_order):
                    continue
                plan.decode.append(request)
                plan.decode_context_tokens += computed
                step.tokens -= 1
                continue
            num_new = uncomputed if uncomputed < step.tokens else step.tokens
            if self._make_room(request, num_new, plan, step, now_s, in_key_order):
                self._add_chunk(plan, step, request, num_new)

    def _victim_order_current(self) -> bool:
        """Whether the running list is still in ``victim_key`` order: sorted since the last admission, keys that
        stay put (``static_victim_key``) and none changed since (the policy's ``victim_key_changes``)."""
        return (self._running_sorted and self._static_victim_order
                and self.policy.victim_key_changes == self._sorted_changes)

    def _sort_running(self) -> None:
        key = self.policy.victim_key
        if isinstance(key, NativeVictimKey):
            key.sort(self._running)  # (the same order, natively: no key tuple per request)
        else:
            self._running.sort(key=key)
        self._running_sorted = True
        self._sorted_changes = self.policy.victim_key_changes

    def _make_room(self, request: Request, num_new: int, plan: BatchPlan, step: _StepState, now_s: float,
                   in_key_order: bool) -> bool:
        """Allocate blocks for a running request, preempting victims under pressure (the largest ``victim_key``,
        the first of equals); False if it was the victim itself. ``in_key_order``: the running list is in
        ``victim_key`` order."""
        while not self.kv.try_allocate(request, num_new):
            key = self.policy.victim_key
            if in_key_order and isinstance(key, NativeVictimKey):
                victim = key.last(self._running)  # (read off the sorted list: no key tuple per running request)
            else:
                victim = max(self._running, key=key)
            self._preempt(victim, PreemptionReason.KV_PRESSURE, plan, step, now_s)
            if victim is request:
                return False
        return True

    def _schedule_waiting(self, plan: BatchPlan, step: _StepState, now_s: float) -> None:
        min_class = self._min_class()
        order = None if self._waiting_order is None else iter(self._waiting_order(self, now_s) or ())
        while step.tokens > 0:
            candidate = self._waiting.peek() if order is None else next(order, None)
            if candidate is None:
                return
            if id(candidate) in step.preempted:
                return  # do not re-admit what this step just displaced
            if min_class is not None and excluded(self.policy.exclusive_class(candidate), min_class):
                return
            cached = self._attach_prefix(candidate) if self.config.enable_prefix_caching else 0
            if not self._fit_waiting(candidate, plan, step, now_s):
                if cached:
                    self._detach_prefix(candidate)
                return
            self._waiting.remove(candidate.request_id)
            uncomputed = candidate.prompt_tokens + candidate.num_output_tokens - candidate.num_computed_tokens
            num_new = min(uncomputed, step.tokens)  # (num_uncomputed_tokens, inlined)
            self._start_running(candidate, plan, now_s)
            if not self.kv.try_allocate(candidate, self._slots(candidate, num_new), admission=False):
                raise RuntimeError(f"{candidate.request_id}: admitted without KV room (scheduler bug)")
            self._add_chunk(plan, step, candidate, num_new)

    def _fit_waiting(self, candidate: Request, plan: BatchPlan, step: _StepState, now_s: float) -> bool:
        """Whether ``candidate`` fits now, displacing running work if the policy allows it (the rule is
        :mod:`semsched.core.displacement`'s, shared with the vLLM adapter)."""
        if self._fits(candidate, step):
            return True
        victims = self.policy.victims_for(candidate, self._running, self, now_s)
        if not victims:
            return False
        count = victims_to_displace(self._need(candidate), self._room(candidate, step),
                                    self._releases(victims, plan))
        if not count:
            return False
        for victim in victims[:count]:
            self._preempt(victim, PreemptionReason.PRIORITY, plan, step, now_s)
        return self._fits(candidate, step)

    def _attach_prefix(self, candidate: Request) -> int:
        """Share the cached blocks of ``candidate``'s prefix (one with nothing computed) and count their tokens
        as computed; returns the tokens. Its first admission records them in ``num_cached_tokens``."""
        blocks = self.kv.attach_prefix(candidate)
        tokens = blocks * self.block_size
        candidate.num_computed_tokens = tokens
        if candidate.first_scheduled_time_s is None:
            candidate.num_cached_tokens = tokens
        return tokens

    def _detach_prefix(self, candidate: Request) -> None:
        """Undo :meth:`_attach_prefix` for a candidate that did not fit (its blocks stay cached)."""
        self.kv.free(candidate)
        candidate.num_computed_tokens = 0
        if candidate.first_scheduled_time_s is None:
            candidate.num_cached_tokens = 0

    def _fits(self, candidate: Request, step: _StepState) -> bool:
        return fits(self._need(candidate), self._room(candidate, step))

    def _slots(self, request: Request, num_new: int) -> int:
        """KV slots a chunk of ``num_new`` tokens needs: a decode also reserves the speculative lookahead."""
        return 1 + self.config.num_lookahead_tokens if _is_decode(request, num_new) else num_new

    def _need(self, candidate: Request) -> Need:
        """What ``candidate`` needs to start: swap-in plus its first chunk (a decode, one token, also reserves
        the lookahead; with ``reserve_full_prompt`` its whole sequence unless it was swapped out)."""
        computed = candidate.num_computed_tokens
        uncomputed = candidate.prompt_tokens + candidate.num_output_tokens - computed  # (num_uncomputed_tokens)
        decode = uncomputed == 1 and computed >= candidate.prompt_tokens
        swapped = self.kv.swapped_blocks_of(candidate) > 0
        whole = self.config.reserve_full_prompt and not swapped
        return Need(
            computed, uncomputed, self.block_size,
            extra_slots=self.config.num_lookahead_tokens if decode else 0,
            whole_tokens=candidate.prompt_tokens + candidate.num_output_tokens if whole else 0,
            held_blocks=0 if swapped else self.kv.gpu_blocks_of(candidate),
        )

    def _room(self, candidate: Request, step: _StepState) -> Room:
        """What is left for ``candidate`` now (running requests already hold this step's blocks)."""
        return Room(self.kv.available_for(candidate, admission=True), step.max_seqs - len(self._running),
                    step.tokens)

    def _releases(self, victims: Sequence[Request], plan: BatchPlan) -> Iterator[Release]:
        """What each victim gives back, built as :func:`victims_to_displace` reads them (it stops at the first
        prefix that makes room; a policy may name every running request)."""
        decode, prefill = plan.decode, plan.prefill
        for victim in victims:
            # its share of this step: a decode's token, else its chunk's (a native list scan per victim read,
            # not a dict of every scheduled request per displacement tried)
            tokens = 1 if _position(decode, victim) >= 0 else next(
                (c.num_tokens for c in prefill if c.request is victim), 0)
            yield Release(self.kv.gpu_blocks_of(victim), tokens)

    # ---- state transitions ------------------------------------------------------------------------------
    def _start_running(self, request: Request, plan: BatchPlan, now_s: float) -> None:
        if request.state is RequestState.PREEMPTED_SWAPPED:
            plan.swap_in_tokens += request.num_computed_tokens
            plan.swapped_in.append(request)
            self.kv.try_swap_in(request, admission=False)
        if request.first_scheduled_time_s is None:
            request.first_scheduled_time_s = now_s
        request.state = RequestState.RUNNING
        running = self._running
        if not running:
            self._running_sorted, self._sorted_changes = True, self.policy.victim_key_changes
        elif self._victim_order_current():
            # still in victim_key order if it joins at the back (a stable sort would leave it there), as an
            # admission in arrival order does under fcfs: the next step sorts nothing
            key = self.policy.victim_key
            self._running_sorted = not key(request) < key(running[-1])
        else:
            self._running_sorted = False
        running.append(request)

    def _add_chunk(self, plan: BatchPlan, step: _StepState, request: Request, num_new: int) -> None:
        computed = request.num_computed_tokens
        if _is_decode(request, num_new):
            plan.decode.append(request)
            plan.decode_context_tokens += computed
        else:
            plan.prefill.append(ScheduledChunk(request, num_new, computed))
        step.tokens -= num_new

    def _preempt(
        self, victim: Request, reason: PreemptionReason, plan: BatchPlan, step: _StepState, now_s: float
    ) -> None:
        del self._running[_position(self._running, victim)]
        self._unschedule(victim, plan, step)
        mode = self.policy.preemption_mode(victim, self)
        if mode is PreemptionMode.DROP:
            self._drop(victim, reason, plan, step, now_s)
            return
        saved = self._tokens_to_save(victim) if mode is PreemptionMode.SWAP else 0
        if saved > 0:
            self.kv.swap_out(victim, blocks_for(saved, self.block_size))
            victim.num_computed_tokens = saved
            plan.swap_out_tokens += saved
            new_state = RequestState.PREEMPTED_SWAPPED
        else:
            mode, saved = PreemptionMode.RECOMPUTE, 0
            self.kv.free(victim)
            victim.num_computed_tokens = 0
            new_state = RequestState.PREEMPTED_RECOMPUTE
        victim.num_preemptions += 1
        step.preempted.add(id(victim))
        plan.preempted.append(Preemption(victim, mode, reason, saved))
        self.policy.on_preempt(victim, now_s)
        self._enqueue(victim, new_state, now_s)

    def _drop(self, victim: Request, reason: PreemptionReason, plan: BatchPlan, step: _StepState,
              now_s: float) -> None:
        """End ``victim`` (DROPPED, with the reason its client is told) instead of preempting it again."""
        self._retire(victim, RequestState.DROPPED, drop_reason(self.policy.name, victim, reason), now_s)
        step.preempted.add(id(victim))
        plan.preempted.append(Preemption(victim, PreemptionMode.DROP, reason, 0))

    def _tokens_to_save(self, victim: Request) -> int:
        """Tokens a SWAP victim keeps (policy's choice, capped by what is computed and by CPU space)."""
        wanted = min(max(self.policy.swap_tokens(victim, self), 0), victim.num_computed_tokens)
        fits = self.kv.num_free_cpu_blocks * self.block_size
        return min(wanted, fits)

    def _unschedule(self, victim: Request, plan: BatchPlan, step: _StepState) -> None:
        index = _position(plan.decode, victim)
        if index >= 0:
            del plan.decode[index]
            plan.decode_context_tokens -= victim.num_computed_tokens
            step.tokens += 1
            return
        for chunk in plan.prefill:
            if chunk.request is victim:
                plan.prefill.remove(chunk)
                step.tokens += chunk.num_tokens
                return

    def _enqueue(self, request: Request, state: RequestState, now_s: float) -> None:
        request.state = state
        # a policy that orders the waiting requests itself needs no key: the queue keeps them in enqueue order
        key = _UNKEYED if self._waiting_order is not None else self.policy.waiting_key(request, now_s)
        self._waiting.push(key, request)

    def _maybe_rekey(self, now_s: float) -> None:
        interval = self.policy.rekey_interval_s
        if interval is None or self._waiting_order is not None or now_s < self._next_rekey_s:
            return
        self._next_rekey_s = next_rekey_s(now_s, interval)
        self._waiting.rekey(lambda request: self.policy.waiting_key(request, now_s), now_s)

    def _enforce_exclusive(self, plan: BatchPlan, step: _StepState, now_s: float) -> None:
        """Class-exclusive batching: preempt running requests of a less important class than the best
        unfinished one (seed 000 eq. 2: nothing less urgent finishes while something more urgent waits)."""
        min_class = self._min_class()
        if min_class is None:
            return
        for request in [r for r in self._running if excluded(self.policy.exclusive_class(r), min_class)]:
            self._preempt(request, PreemptionReason.PRIORITY, plan, step, now_s)

    def _min_class(self) -> int | None:
        return best_class(self._class_counts) if self._class_counts else None

    # ---- step results ------------------------------------------------------------------------------------
    def update(self, plan: BatchPlan, result: StepResult) -> list[Request]:
        """Apply the outcome of ``plan``: advance computed tokens, emit tokens, finish requests."""
        now_s = result.end_time_s
        step_index = self.timeline.append(now_s)
        if self._on_step is not None:
            prefill = [(chunk.num_tokens, chunk.context_tokens) for chunk in plan.prefill]
            self._on_step(prefill, len(plan.decode), plan.decode_context_tokens, now_s - plan.time_s, now_s)
        service = self._service
        if service is not None:
            service.append(float(now_s - plan.time_s))
        for request_id in result.aborted_request_ids:
            self.abort(request_id, now_s, "aborted by engine")
        finished: list[Request] = []
        running = RequestState.RUNNING
        offer = self.kv.offer_blocks if self.config.enable_prefix_caching else None
        emitted = False
        for chunk in plan.prefill:
            request = chunk.request
            if request.state is not running:
                continue
            request.num_computed_tokens += chunk.num_tokens
            if offer is not None:
                offer(request)
            if request.num_computed_tokens == request.prompt_tokens + request.num_output_tokens:
                self._emit(request, step_index, 1, now_s)
                emitted = True
                if request.num_output_tokens >= request.target_output_tokens:
                    finished.append(request)
        if result.accepted_tokens:
            emitted = self._update_speculative_decodes(plan, result, step_index, finished) or emitted
        else:
            emitted = self._update_decodes(plan, step_index, now_s, finished) or emitted
        if emitted and service is not None:
            service.clear()
        if finished:
            self._finish(finished, now_s)
        return finished

    def _update_decodes(self, plan: BatchPlan, step_index: int, now_s: float, finished: list[Request]) -> bool:
        """The step's decodes, one token each; whether any emitted."""
        running = RequestState.RUNNING
        timeline, on_tokens, service = self.timeline, self._on_tokens, self._service
        step_s = service[0] if service is not None and len(service) == 1 else None  # (one step: the usual)
        emitted = False
        for request in plan.decode:  # a decode always catches up, so it always emits (_emit, inlined)
            if request.state is not running:
                continue
            request.num_computed_tokens += 1
            request.num_output_tokens += 1
            if step_s is not None:  # (charge_service for one step and one token, inlined)
                request.service_s += step_s
                if request.num_output_tokens != 1:  # (not its first token: a round)
                    request.round_service_s += step_s
                    request.service_rounds += 1
                    request.round_tokens += 1
            elif service is not None:
                charge_service(request, service, 1)
            emitted = True
            record_tokens(request, timeline, step_index, 1)  # (a native call)
            if on_tokens is not None and request.num_output_tokens >= request.notify_tokens_at:
                on_tokens(request, 1, now_s)
            if request.num_output_tokens >= request.target_output_tokens:
                finished.append(request)
        return emitted

    def _update_speculative_decodes(
        self, plan: BatchPlan, result: StepResult, step_index: int, finished: list[Request]
    ) -> bool:
        """Decodes that emitted several tokens in one step (accepted draft tokens plus the bonus token); whether
        any emitted."""
        limit = 1 + self.config.num_lookahead_tokens
        service = self._service
        emitted = False
        for request in plan.decode:
            if request.state is not RequestState.RUNNING:
                continue
            accepted = result.accepted_tokens.get(request.request_id, 1)
            if not 1 <= accepted <= limit:
                raise ValueError(
                    f"accepted_tokens[{request.request_id!r}]: must be in [1, {limit}] (got {accepted})"
                )
            count = min(accepted, request.target_output_tokens - request.num_output_tokens)
            request.num_computed_tokens += count
            # the round's tokens share one emission time (one timeline step each); on_tokens hears of them together
            request.num_output_tokens += count
            if service is not None:
                charge_service(request, service, count)
            emitted = True
            record_round(request, self.timeline, step_index, count)  # (a native call)
            if self._on_tokens is not None and request.num_output_tokens >= request.notify_tokens_at:
                self._on_tokens(request, count, result.end_time_s)
            if request.num_output_tokens >= request.target_output_tokens:
                finished.append(request)
        return emitted

    def _emit(self, request: Request, step_index: int, count: int, now_s: float) -> None:
        request.num_output_tokens += count
        if self._service is not None:
            charge_service(request, self._service, count)
        record_tokens(request, self.timeline, step_index, count)  # (a native call)
        if self._on_tokens is not None and request.num_output_tokens >= request.notify_tokens_at:
            self._on_tokens(request, count, now_s)

    def _finish(self, finished: list[Request], now_s: float) -> None:
        done = {id(r) for r in finished}
        self._running = [r for r in self._running if id(r) not in done]
        for request in finished:
            reason = "length" if request.num_output_tokens >= request.max_output_tokens else "stop"
            self._retire(request, RequestState.FINISHED, reason, now_s)
            self.finished.append(request)

    def _retire(self, request: Request, state: RequestState, reason: str, now_s: float) -> None:
        self.kv.free(request)
        del self._requests[request.request_id]
        cls = self.policy.exclusive_class(request)
        if cls is not None:
            self._class_counts[cls] -= 1
        self._terminate(request, state, reason, now_s)
        if state is RequestState.FINISHED:
            self.policy.on_finish(request, now_s)

    @staticmethod
    def _terminate(request: Request, state: RequestState, reason: str, now_s: float) -> None:
        request.state = state
        request.finish_reason = reason
        request.finish_time_s = now_s

    # ---- fast-forward ------------------------------------------------------------------------------------
    def steady_decode_steps(self, plan: BatchPlan, limit: int, accepted: np.ndarray | None = None) -> int:
        """How many consecutive steps (this plan's included, at most ``limit``) would repeat ``plan``'s
        decode-only batch unchanged: it serves every running request, nobody finishes before the last of them, no
        block runs out, and either nothing waits or the policy is stable between events. Returns 1 when the plan
        cannot be fast-forwarded.

        With speculative decoding (``num_lookahead_tokens``) a step is a verification round whose yield the
        executor knows ahead (each request's acceptance is its own log or its own seeded draws): ``accepted``
        holds the tokens each decode (a column, in ``plan.decode``'s order) would emit in each of the next rounds
        (a row). Without it, or when the policy picks its running requests itself (``running_order``), such a plan
        is not fast-forwarded."""
        if limit <= 1 or not plan.is_pure_decode:
            return 1
        if accepted is None and self.config.num_lookahead_tokens:
            return 1  # (the executor decides how many tokens a round emits)
        if len(self._waiting) and not self.policy.stable_between_events:
            return 1
        requests = plan.decode
        if len(requests) != len(self._running):
            return 1  # a running request left out of this step (held back, out of budget) may run in the next
        if accepted is not None:
            if self._orders_running:
                return 1  # its order of each round is its own (update_steady replays the default one)
            return self._steady_rounds(requests, accepted[:limit])

        # requests may finish only in the last step of a stretch (update_steady finishes them then)
        steps = min(limit, min(r.target_output_tokens - r.num_output_tokens for r in requests))
        if steps <= 1:
            return 1
        return self._steps_within_blocks(requests, steps)

    def _steps_within_blocks(self, requests: list[Request], steps: int) -> int:
        """Largest k <= steps such that steps 2..k find a free block for every request that needs one."""
        computed = [r.num_computed_tokens for r in requests]
        block_size = self.block_size
        free = self._free_blocks_for(requests)
        if _extra_blocks(computed, steps, block_size) <= free:
            return steps
        lo, hi = 1, steps  # extra(lo) <= free < extra(hi)
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if _extra_blocks(computed, mid, block_size) <= free:
                lo = mid
            else:
                hi = mid
        return lo

    def _steady_rounds(self, requests: list[Request], accepted: np.ndarray) -> int:
        """Speculative rounds (at most ``len(accepted)``) before any request reaches its target (it may in the
        last round) while each round finds the blocks of its decodes' lookahead."""
        num = len(requests)
        emitted = np.cumsum(accepted, axis=0)  # row j: tokens each request has emitted after round j + 1
        remaining = np.fromiter((r.target_output_tokens - r.num_output_tokens for r in requests), np.int64, num)
        # the round in which each request reaches its target: the rounds before it, plus one
        steps = min(len(accepted), int((emitted < remaining).sum(axis=0).min()) + 1)
        if steps <= 1:
            return 1
        # round j >= 2 is scheduled with rounds 1 .. j-1's tokens computed and reserves 1 + lookahead slots
        computed = np.fromiter((r.num_computed_tokens for r in requests), np.int64, num)
        held = np.fromiter((self.kv.gpu_blocks_of(r) for r in requests), np.int64, num)
        slots = computed + emitted[: steps - 1] + (1 + self.config.num_lookahead_tokens)
        demand = np.maximum(-(-slots // self.block_size) - held, 0).sum(axis=1)  # non-decreasing
        return 1 + int(np.searchsorted(demand, self._free_blocks_for(requests), side="right"))

    def _free_blocks_for(self, requests: list[Request]) -> int:
        """Free blocks every one of ``requests`` may grow into (bounded by the tightest under reservations)."""
        if self.kv.reservations:
            return min(self.kv.available_for(r, admission=False) for r in requests)
        return self.kv.num_free_gpu_blocks

    def update_steady(
        self, plan: BatchPlan, end_times_s: Sequence[float], accepted: np.ndarray | None = None
    ) -> None:
        """Apply ``len(end_times_s)`` repetitions of decode-only ``plan`` (as checked by
        :meth:`steady_decode_steps`, with the same ``accepted`` for speculative rounds): identical to calling
        schedule/update that many times."""
        if accepted is not None:
            self._update_rounds(plan, end_times_s, accepted)
            return
        count = len(end_times_s)
        first_step = self.timeline.extend(end_times_s)
        now_s = end_times_s[-1]
        if self._on_step is not None:
            self._report_steady_steps(plan, end_times_s)
        service = self._service
        if service is not None:  # (each step starts when the one before it ended)
            start_s = plan.time_s
            for end_s in end_times_s:
                service.append(float(end_s - start_s))
                start_s = end_s
        finished: list[Request] = []
        try_allocate, timeline, on_tokens = self.kv.try_allocate, self.timeline, self._on_tokens
        for request in plan.decode:  # (_emit, inlined)
            # step 1's blocks were allocated by schedule(); steps 2..count allocate here
            try_allocate(request, count)
            request.num_computed_tokens += count
            request.num_output_tokens += count
            if service is not None:
                charge_service(request, service, count)
            record_tokens(request, timeline, first_step, count)  # (a native call)
            if on_tokens is not None and request.num_output_tokens >= request.notify_tokens_at:
                on_tokens(request, count, now_s)
            if request.num_output_tokens >= request.target_output_tokens:
                finished.append(request)
        if service is not None:
            service.clear()  # (a stretch has decodes: every step emits)
        if finished:
            self._finish(finished, now_s)

    def _report_steady_steps(self, plan: BatchPlan, end_times_s: Sequence[float]) -> None:
        """``on_step`` for each repetition of ``plan``: the calls per-step updates would make (each step starts
        when the one before it ended; its context grows by one token per decode)."""
        assert self._on_step is not None
        num_decode, context = len(plan.decode), plan.decode_context_tokens
        start_s = plan.time_s
        for index, end_s in enumerate(end_times_s):
            self._on_step([], num_decode, context + index * num_decode, end_s - start_s, end_s)
            start_s = end_s

    def _update_rounds(self, plan: BatchPlan, end_times_s: Sequence[float], accepted: np.ndarray) -> None:
        """Speculative rounds of ``plan``, each as schedule() and update() would apply it: the running list
        re-sorted before each round (unless its order is static), ``on_step``, then each decode's tokens in that
        order (one timeline step per round, ``on_tokens`` per round). The blocks rounds 2.. reserve are taken
        at once before the last round (only their count matters)."""
        count = len(end_times_s)
        first_step = self.timeline.extend(end_times_s)
        columns = accepted[:count].T.tolist()
        yields = {id(request): column for request, column in zip(plan.decode, columns, strict=True)}
        order, context, start_s = plan.decode, plan.decode_context_tokens, plan.time_s
        finished: list[Request] = []
        for index, end_s in enumerate(end_times_s):
            if index and not self._victim_order_current():
                self._sort_running()
                order = self._running
            if index == count - 1 and index:
                slots = 1 + self.config.num_lookahead_tokens
                for request in order:
                    self.kv.try_allocate(request, slots)  # (steady_decode_steps checked that they fit)
            if self._on_step is not None:
                self._on_step([], len(order), context, end_s - start_s, end_s)
            if self._service is not None:
                self._service.append(float(end_s - start_s))
            context += self._emit_round(order, yields, index, first_step + index, end_s, finished)
            if self._service is not None:
                self._service.clear()  # (a round has decodes: it emits)
            start_s = end_s
        if finished:
            self._finish(finished, end_times_s[-1])

    def _emit_round(self, order: list[Request], yields: dict[int, list[int]], index: int, step_index: int,
                    end_s: float, finished: list[Request]) -> int:
        """Round ``index`` of a stretch for each decode in ``order`` (its tokens share one timeline step, as in
        :meth:`_update_speculative_decodes`); returns the tokens emitted."""
        timeline, on_tokens, service = self.timeline, self._on_tokens, self._service
        emitted = 0
        for request in order:
            left = request.target_output_tokens - request.num_output_tokens
            count = yields[id(request)][index]
            if count > left:
                count = left
            request.num_computed_tokens += count
            request.num_output_tokens += count
            if service is not None:
                charge_service(request, service, count)
            record_round(request, timeline, step_index, count)  # (a native call)
            if on_tokens is not None and request.num_output_tokens >= request.notify_tokens_at:
                on_tokens(request, count, end_s)
            if count == left:
                finished.append(request)
            emitted += count
        return emitted


def static_victim_order(policy: Policy) -> bool:
    """Whether ``policy``'s ``victim_key`` stays put while requests run, so a sorted running list stays sorted
    until the next admission: its ``static_victim_key`` promise, if the class that makes it also defines the
    ``victim_key`` in use (or derives from the one that does). A subclass that overrides ``victim_key`` does not
    inherit its parent's promise (``priority-preempt``'s key reads progress; ``priority``'s does not)."""
    mro = type(policy).__mro__
    promised_by = next(i for i, cls in enumerate(mro) if "static_victim_key" in vars(cls))
    defined_by = next(i for i, cls in enumerate(mro) if "victim_key" in vars(cls))
    return bool(policy.static_victim_key) and promised_by <= defined_by


class NativeVictimKey:
    """A ``victim_key`` object that also sorts a running list by itself: :meth:`sort` leaves ``requests`` in the
    order ``requests.sort(key=self)`` gives (stable), and :meth:`last` picks from a list in that order what
    ``max(requests, key=self)`` would. The core sorts its running requests by the policy's ``victim_key`` at
    every step; a key of this kind sorts them natively. A subclass (compiled) defines ``__call__`` and, to compare
    two requests' fields in place rather than their key tuples, :meth:`after`. Its key must be a function of the
    request alone (its fields and its state), so that a list sorted at the start of a step stays sorted while the
    step is planned (a preempted request leaves it)."""

    def __call__(self, request: Request) -> Any:
        raise NotImplementedError

    def after(self, a: Request, b: Request) -> bool:
        """``self(a) > self(b)``."""
        return bool(self(a) > self(b))

    def sort(self, requests: list[Request]) -> None:
        """A stable insertion sort by :meth:`after` (the running list between two steps is sorted but for a few
        requests). Past a bound on the moves it hands what it has to ``list.sort``, which gives the same result
        from any stable rearrangement of the list."""
        limit = 8 * len(requests) + 64
        moves = 0
        for i in range(1, len(requests)):
            request = requests[i]
            j = i - 1
            while j >= 0 and self.after(requests[j], request):
                requests[j + 1] = requests[j]
                j -= 1
                moves += 1
            requests[j + 1] = request
            if moves > limit:
                requests.sort(key=self)
                return

    def last(self, requests: list[Request]) -> Request:
        """``max(requests, key=self)`` of a non-empty list in this key's order: the first of the requests equal
        to the last one."""
        index = len(requests) - 1
        last = requests[index]
        while index > 0 and not self.after(last, requests[index - 1]):
            index -= 1
        return requests[index]


class ServiceThenArrival(NativeVictimKey):
    """Attained-service order, (``service_s``, ``arrival_time_s``): las's ``victim_key``
    (:data:`by_service_then_arrival`)."""

    def __call__(self, request: Request) -> tuple[float, float]:
        return (request.service_s, request.arrival_time_s)

    def after(self, a: Request, b: Request) -> bool:
        """The two fields as the tuples compare them: the first unless equal, then the second."""
        a_s, b_s = a.service_s, b.service_s
        if a_s != b_s:
            return a_s > b_s
        return a.arrival_time_s > b.arrival_time_s


#: the attained-service key, ``(service_s, arrival_time_s)`` of a request; it sorts a running list natively
by_service_then_arrival = ServiceThenArrival()


def sort_by_service_then_arrival(requests: list[Request]) -> None:
    """``requests.sort(key=by_service_then_arrival)``, natively (:meth:`NativeVictimKey.sort`)."""
    by_service_then_arrival.sort(requests)


def last_by_service_then_arrival(requests: list[Request]) -> Request:
    """``max(requests, key=by_service_then_arrival)`` of a non-empty list sorted by that key."""
    return by_service_then_arrival.last(requests)


def charge_service(request: Request, durations_s: list[float], num_tokens: int) -> None:
    """``request`` has just emitted ``num_tokens`` (counted in ``num_output_tokens``) in the steps of
    ``durations_s``: add their seconds to its ``service_s`` one step at a time, and unless they were its first
    token, count them as rounds (``service_rounds``, ``round_service_s``, ``round_tokens``)."""
    service_s = request.service_s
    for duration_s in durations_s:
        service_s += duration_s
    request.service_s = service_s
    if request.num_output_tokens == num_tokens:
        return  # its first token (the prompt's): not a round
    round_s = request.round_service_s
    for duration_s in durations_s:
        round_s += duration_s
    request.round_service_s = round_s
    request.service_rounds += len(durations_s)
    request.round_tokens += num_tokens


def charge_emissions(scheduled: Iterable[str], tracked: Mapping[str, Any],
                     on_tokens: Callable[[Request, int, float], None] | None, charged: list[float] | None,
                     now_s: float) -> tuple[bool, list[Any] | None]:
    """An engine adapter's report of a step (the vLLM one's, compiled here: it runs over every scheduled request
    at every step). ``tracked`` maps a request id to its entry: ``.request`` the engine's request (its
    ``num_output_tokens``, ``num_computed_tokens``), ``.shadow`` the policy's :class:`Request`,
    ``.reported_tokens`` the output tokens reported so far. For every scheduled request that emitted since: its
    shadow's progress refreshed and the step's service charged to it (``charged``, the timed steps since the
    last emission: one is added in place, several through :func:`charge_service`; None: nothing charged), then
    ``on_tokens`` (when the policy asked to hear of this count: ``notify_tokens_at``). Returns whether any service
    was charged and the engine requests whose shadows were refreshed, in order (None once a scheduled request's
    was not)."""
    step_s = charged[0] if charged is not None and len(charged) == 1 else None  # (one timed step: the usual)
    emitted_any = False
    refreshed: list[Any] | None = []
    for request_id in scheduled:
        entry = tracked.get(request_id)
        if entry is None:
            refreshed = None
            continue
        request = entry.request
        count: int = request.num_output_tokens
        emitted = count - entry.reported_tokens
        if emitted > 0:
            entry.reported_tokens = count
            shadow: Request = entry.shadow
            # (the policy's promise, notify_tokens_at, kept as the core keeps it)
            notify = on_tokens is not None and count >= shadow.notify_tokens_at
            if notify or charged is not None:
                shadow.num_computed_tokens = request.num_computed_tokens
                shadow.num_output_tokens = count
                if refreshed is not None:
                    refreshed.append(request)
                if step_s is not None:  # (charge_service for one step, inlined)
                    shadow.service_s += step_s
                    if count != emitted:  # (not its first token: a round)
                        shadow.round_service_s += step_s
                        shadow.service_rounds += 1
                        shadow.round_tokens += emitted
                    emitted_any = True
                elif charged is not None:
                    charge_service(shadow, charged, emitted)
                    emitted_any = True
                if notify and on_tokens is not None:
                    on_tokens(shadow, emitted, now_s)
                continue
        refreshed = None
    return emitted_any, refreshed


def _extra_blocks(computed: list[int], steps: int, block_size: int) -> int:
    """The blocks decodes with ``computed`` tokens hold after ``steps`` steps (1-based) beyond those they hold
    after the first: a sum of integer ceilings, in a native loop (a stretch is checked before every
    fast-forward, over every running request)."""
    extra = 0
    for tokens in computed:
        extra += (tokens + steps + block_size - 1) // block_size - (tokens + block_size) // block_size
    return extra


def _position(requests: list[Request], request: Request) -> int:
    """Where ``request`` is in ``requests`` (-1: absent), by identity, searched from the back in a native loop:
    ``list.index`` and ``in`` compare each request before it by ``==``, a rich comparison per request. A victim
    is most often near the back (the running order is victim order)."""
    index = len(requests) - 1
    while index >= 0:
        if requests[index] is request:
            return index
        index -= 1
    return -1


def _is_decode(request: Request, num_new: int) -> bool:
    """A decode computes the one token sampled last. A one-token chunk of a longer recompute is a prefill:
    it must not emit a token."""
    computed = request.num_computed_tokens
    prompt = request.prompt_tokens
    return num_new == 1 and computed >= prompt and prompt + request.num_output_tokens - computed == 1


class _StepState:
    """Budget left while forming one plan."""

    __slots__ = ("tokens", "max_seqs", "preempted")

    def __init__(self, tokens: int, max_seqs: int) -> None:
        self.tokens = tokens
        self.max_seqs = max_seqs
        self.preempted: set[int] = set()
