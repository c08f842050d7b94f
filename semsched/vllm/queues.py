"""The adapter's waiting queues: vLLM's ``RequestQueue`` interface, in a policy's order.

:class:`PolicyQueue` orders by ``waiting_key`` (smallest first), keyed when a request is added. For a policy
whose keys drift with time (``rekey_interval_s``) the adapter re-keys it once per interval, and what a re-key
costs depends on what the policy says of its keys:

* keys that change at times known in advance (``Policy.waiting_key_until``: a starvation threshold, a deadline):
  a second heap holds each request's time, and a re-key keys only the requests whose time has come;
* aging classes (``Policy.aging_class``: tiers that age at one rate): :class:`ClassedPolicyQueue` keys one
  request per class at a re-key, as the core's queue does;
* neither: every waiting request is keyed again (a walk over the queue).

Each pops what re-keying every request would pop, in the same order (ties in insertion order).
:class:`PlanQueue` instead reads a policy's ``waiting_order``, a plan made afresh each step, lazily.
"""

from __future__ import annotations

import heapq
import itertools
import math
from collections import Counter
from collections.abc import Callable, Generator, Iterable, Iterator

from vllm.v1.core.sched.request_queue import RequestQueue
from vllm.v1.request import Request as VllmRequest

from semsched.core.policy import SortKey

#: a keyed entry: (key, insertion sequence, version, request). The sequence orders equal keys (a re-key keeps
#: it); the version is new at every push, so no two entries compare equal and a request is never compared
_Entry = tuple[SortKey, int, int, VllmRequest]
#: a class member: (arrival, insertion sequence, request)
_Member = tuple[float, int, VllmRequest]

_STALE_SLACK = 64  # stale entries tolerated beyond one per live request before the heaps are rebuilt

_BROUGHT_FORWARD: SortKey = (-math.inf,)


class _AdapterQueue(RequestQueue):
    """What the adapter's waiting queues share: vLLM's prepends (preempted and skipped requests) go where the
    policy puts them, and removal is by request id."""

    def prepend_request(self, request: VllmRequest) -> None:
        self.add_request(request)

    def prepend_requests(self, requests: Iterable[VllmRequest]) -> None:
        for request in requests:
            self.add_request(request)

    def remove_request(self, request: VllmRequest) -> None:
        if not self._holds(request.request_id):
            raise ValueError(f"request {request.request_id} is not in the queue")
        self._discard(request)

    def remove_requests(self, requests: Iterable[VllmRequest]) -> None:
        for request in requests:
            if self._holds(request.request_id):
                self._discard(request)

    def _holds(self, request_id: str) -> bool:
        raise NotImplementedError

    def _discard(self, request: VllmRequest) -> None:
        raise NotImplementedError


class PolicyQueue(_AdapterQueue):
    """vLLM's waiting-queue interface, ordered by a policy key (smallest first); removal is lazy.

    ``key(request, now_s)`` is evaluated when a request is added (at ``clock()``) and on :meth:`rekey`; ties keep
    insertion order. With ``until(request, now_s)`` (``Policy.waiting_key_until``, asked right after the key),
    a re-key keys only the requests whose time has come; without, every one. ``priority_counts`` tracks queue
    depth per vLLM priority in O(1) per operation (for metrics). While ``gate`` is set, the queue reads as empty
    (``bool``) when its head fails the gate, which stops vLLM's admission loop there; the adapter sets it for
    one ``schedule()`` to keep other classes out under class-exclusive batching.
    """

    def __init__(self, key: Callable[[VllmRequest, float], SortKey], clock: Callable[[], float], *,
                 until: Callable[[VllmRequest, float], float] | None = None) -> None:
        self._key = key
        self._clock = clock
        self._until = until
        self._heap: list[_Entry] = []
        #: request id -> its live entry (an entry of ``_heap``, or of a class in the subclass); any other entry
        #: of the request is stale, dropped when it reaches a front
        self._live: dict[str, _Entry | _Member] = {}
        #: (time its key may change, insertion sequence, request), with ``until``: the next re-key's work
        self._due: list[tuple[float, int, VllmRequest]] = []
        self._seq = itertools.count()
        self._version = itertools.count()
        self._stale = 0  # entries made stale since the heaps were last rebuilt (an upper bound)
        self._iterating = 0  # open in_order iterators (which hold entries out of the heaps: no rebuild then)
        self.priority_counts: Counter[int] = Counter()
        self.gate: Callable[[VllmRequest], bool] | None = None

    def add_request(self, request: VllmRequest) -> None:
        if request.request_id in self._live:
            self._discard(request)
        now = self._clock()
        key = self._key(request, now)
        self._enter(request, key, self._until(request, now) if self._until is not None else math.inf)

    def pop_request(self) -> VllmRequest:
        self._drop_dead()
        if not self._heap:
            raise IndexError("pop from an empty queue")
        entry = heapq.heappop(self._heap)
        request = entry[3]
        del self._live[request.request_id]
        self.priority_counts[request.priority] -= 1
        if self._until is not None:
            self._stale += 1  # (its time stays in the second heap)
        self._left(entry)
        return request

    def peek_request(self) -> VllmRequest:
        self._drop_dead()
        if not self._heap:
            raise IndexError("peek from an empty queue")
        return self._heap[0][3]

    def bring_forward(self, request: VllmRequest) -> None:
        """Put a live request ahead of every policy key (after those brought forward before it), for one step;
        :meth:`rekey_request` (or the next re-key) puts it back."""
        if request.request_id in self._live:
            self._discard(request)
            self._enter(request, _BROUGHT_FORWARD, -math.inf)

    def rekey_request(self, request: VllmRequest) -> None:
        """Recompute one live request's key (e.g. once its preemption count has changed); queued last among
        equal keys, as a request enqueued now would be."""
        if request.request_id in self._live:
            self.add_request(request)

    def rekey(self) -> None:
        """Recompute the live keys that may have changed by ``clock()`` (see the class docstring)."""
        now = self._clock()
        if self._until is None:
            self._rekey_all(now)
            return
        due, live = self._due, self._live
        todo: list[_Entry] = []
        while due and due[0][0] <= now:
            _, seq, request = heapq.heappop(due)
            entry = live.get(request.request_id)
            if entry is not None and entry[1] == seq:
                todo.append(entry)  # type: ignore[arg-type]  # (no classes here: every live entry is keyed)
        for entry in todo:  # (keyed after the pops: a key asked too early is asked again at the next re-key)
            request = entry[3]
            key = self._key(request, now)
            if key != entry[0]:
                fresh = (key, entry[1], next(self._version), request)
                live[request.request_id] = fresh
                heapq.heappush(self._heap, fresh)
                self._stale += 1
            heapq.heappush(due, (self._until(request, now), entry[1], request))
        self._maybe_compact()

    def __bool__(self) -> bool:
        if self.gate is None or not self._live:
            return bool(self._live)
        self._drop_dead()
        return self.gate(self._heap[0][3])

    def __len__(self) -> int:
        return len(self._live)

    def __iter__(self) -> Iterator[VllmRequest]:
        return (entry[3] for entry in self._sorted_entries())

    def in_order(self) -> Generator[VllmRequest, None, None]:
        """Live requests in queue order, lazily: O(log n) per request taken (use with
        ``contextlib.closing``; the queue is restored when the iterator is closed or exhausted)."""
        taken: list[_Entry] = []
        self._iterating += 1
        try:
            while True:
                self._drop_dead()
                if not self._heap:
                    return
                entry = heapq.heappop(self._heap)
                taken.append(entry)
                yield entry[3]
        finally:
            self._iterating -= 1
            for entry in taken:
                heapq.heappush(self._heap, entry)

    # ---- internals -----------------------------------------------------------------------------------------
    def _enter(self, request: VllmRequest, key: SortKey, until: float) -> None:
        seq = next(self._seq)
        entry = (key, seq, next(self._version), request)
        self._live[request.request_id] = entry
        self.priority_counts[request.priority] += 1
        heapq.heappush(self._heap, entry)
        if self._until is not None:
            heapq.heappush(self._due, (until, seq, request))
        self._maybe_compact()

    def _rekey_all(self, now: float) -> None:
        live, key, version = self._live, self._key, self._version
        fresh: list[_Entry] = []
        for entry in self._heap:
            request = entry[3]
            if live.get(request.request_id) is entry:
                entry = (key(request, now), entry[1], next(version), request)
                live[request.request_id] = entry
                fresh.append(entry)
        heapq.heapify(fresh)
        self._heap = fresh
        self._stale = 0

    def _sorted_entries(self) -> list[_Entry]:
        live = self._live
        return sorted((e for e in self._heap if live.get(e[3].request_id) is e), key=lambda e: (e[0], e[1]))

    def _holds(self, request_id: str) -> bool:
        return request_id in self._live

    def _discard(self, request: VllmRequest) -> None:
        del self._live[request.request_id]
        self.priority_counts[request.priority] -= 1
        self._stale += 1

    def _drop_dead(self) -> None:
        heap, live = self._heap, self._live
        while heap and live.get(heap[0][3].request_id) is not heap[0]:
            self._left(heapq.heappop(heap))

    def _left(self, entry: _Entry) -> None:
        """``entry`` left the heap (popped, or dropped as stale)."""

    def _maybe_compact(self) -> None:
        if self._stale > len(self._live) + _STALE_SLACK and not self._iterating:
            self._compact()

    def _compact(self) -> None:
        """Rebuild the heaps from the live entries (amortized: after as many stale entries as live ones)."""
        live = self._live
        self._heap = [e for e in self._heap if live.get(e[3].request_id) is e]
        heapq.heapify(self._heap)
        self._due = [d for d in self._due if (e := live.get(d[2].request_id)) is not None and e[1] == d[1]]
        heapq.heapify(self._due)
        self._stale = 0


class ClassedPolicyQueue(PolicyQueue):
    """A :class:`PolicyQueue` for a policy with aging classes (``Policy.aging_class``): within a class, a re-key
    never changes the order, which is arrival then insertion order. Each class is a heap on (arrival, insertion
    sequence); at a re-key only its first live request is keyed (at the re-key's time) and stands in the main
    heap for the class, beside the requests added since (keyed when added). When a class's first request leaves
    the main heap, the next one is keyed at the last re-key's time and takes its place. A re-key costs the
    requests added since the last one and one key per class, not a walk over the queue (the core's
    ``_ClassedWaitingQueue``, for vLLM's queue interface)."""

    def __init__(self, key: Callable[[VllmRequest, float], SortKey], clock: Callable[[], float], *,
                 class_of: Callable[[VllmRequest], tuple[int, float]]) -> None:
        super().__init__(key, clock)
        self._class_of = class_of  # (class, arrival) of a request
        self._classes: dict[int, list[_Member]] = {}
        self._heads: dict[int, int] = {}  # version of a main-heap entry standing for its class -> the class
        self._rekey_now = -math.inf

    def rekey(self) -> None:
        """Move the requests added since the last re-key into their classes, then key each class's first."""
        self._rekey_now = self._clock()
        live, heads, classes = self._live, self._heads, self._classes
        added: list[_Entry] = []
        for entry in self._heap:
            request = entry[3]
            if live.get(request.request_id) is not entry:
                continue  # (stale: a stale head's class entry is dropped below, as dead)
            cls = heads.get(entry[2])
            if cls is None:
                added.append(entry)
            else:  # its class entry is its class's first (until the added ones join): it is that again
                live[request.request_id] = classes[cls][0]
        for entry in added:
            request = entry[3]
            cls, arrival = self._class_of(request)
            member = (arrival, entry[1], request)
            members = classes.get(cls)
            if members is None:
                members = classes[cls] = []
            heapq.heappush(members, member)
            live[request.request_id] = member
        heads.clear()
        self._heap = []
        for cls in list(classes):
            self._expose(cls)
        self._maybe_compact()

    def in_order(self) -> Generator[VllmRequest, None, None]:
        """As :meth:`PolicyQueue.in_order`. Once a class's first is taken, the rest of the class follow from
        its heap, read without popping (each keyed at the last re-key's time as it is reached), merged with the
        main heap; the classes are not touched, and the main heap is restored when the iterator ends."""
        live, heads, classes = self._live, self._heads, self._classes
        taken: list[_Entry] = []
        # class members reached after a taken first: (key, insertion sequence, version, request, class, index)
        below: list[tuple[SortKey, int, int, VllmRequest, list[_Member], int]] = []
        self._iterating += 1
        try:
            while True:
                self._drop_dead()
                while below:  # (a member removed meanwhile is passed over; what follows it in its class is not)
                    _, _, _, request, members, index = below[0]
                    if live.get(request.request_id) is members[index]:
                        break
                    heapq.heappop(below)
                    self._reach(below, members, index)
                heap = self._heap
                if heap and (not below or (heap[0][0], heap[0][1]) < (below[0][0], below[0][1])):
                    entry = heapq.heappop(heap)
                    taken.append(entry)
                    cls = heads.get(entry[2])
                    if cls is not None:
                        self._reach(below, classes[cls], 0)
                    yield entry[3]
                elif below:
                    _, _, _, request, members, index = heapq.heappop(below)
                    self._reach(below, members, index)
                    yield request
                else:
                    return
        finally:
            self._iterating -= 1
            for entry in taken:
                heapq.heappush(self._heap, entry)

    def _reach(self, below: list[tuple[SortKey, int, int, VllmRequest, list[_Member], int]],
               members: list[_Member], index: int) -> None:
        """Add the children of ``members[index]`` in its class's heap to ``below``, keyed."""
        for child in (2 * index + 1, 2 * index + 2):
            if child < len(members):
                _, seq, request = members[child]
                key = self._key(request, self._rekey_now)
                heapq.heappush(below, (key, seq, next(self._version), request, members, child))

    def _sorted_entries(self) -> list[_Entry]:
        live, now = self._live, self._rekey_now
        entries = [e for e in self._heap if live.get(e[3].request_id) is e]
        for members in self._classes.values():
            entries.extend((self._key(m[2], now), m[1], -1, m[2])
                           for m in members if live.get(m[2].request_id) is m)
        return sorted(entries, key=lambda e: (e[0], e[1]))

    def _left(self, entry: _Entry) -> None:
        cls = self._heads.pop(entry[2], None)
        if cls is not None:  # it stood for its class: the class's next takes its place
            heapq.heappop(self._classes[cls])  # (its class entry, the class's first)
            self._expose(cls)

    def _expose(self, cls: int) -> _Entry | None:
        """Key the class's first live member at the last re-key's time and put it in the main heap."""
        members, live = self._classes[cls], self._live
        while members and live.get(members[0][2].request_id) is not members[0]:
            heapq.heappop(members)
        if not members:
            del self._classes[cls]
            return None
        _, seq, request = members[0]
        entry = (self._key(request, self._rekey_now), seq, next(self._version), request)
        live[request.request_id] = entry
        self._heads[entry[2]] = cls
        heapq.heappush(self._heap, entry)
        return entry

    def _compact(self) -> None:
        live, heads, classes = self._live, self._heads, self._classes
        kept: list[_Entry] = []
        standing: dict[int, int] = {}  # class -> insertion sequence of the live entry standing for it
        orphaned: list[int] = []  # classes whose standing entry is stale
        for entry in self._heap:
            cls = heads.get(entry[2])
            if live.get(entry[3].request_id) is entry:
                kept.append(entry)
                if cls is not None:
                    standing[cls] = entry[1]
            elif cls is not None:
                del heads[entry[2]]
                orphaned.append(cls)
        heapq.heapify(kept)
        self._heap = kept
        for cls, members in classes.items():
            head = standing.get(cls)
            members[:] = [m for m in members if live.get(m[2].request_id) is m or m[1] == head]
            heapq.heapify(members)
        for cls in orphaned:
            if cls in classes:
                self._expose(cls)
        self._stale = 0


class PlanQueue(_AdapterQueue):
    """vLLM's waiting-queue interface, in the order of a policy's ``waiting_order`` (a plan made afresh each step),
    taken lazily: a step costs what vLLM reads of the queue, not a key for every waiting request.

    ``order`` gives the policy's order (an iterator over requests, made at each call); the queue reads it from
    the front at its first read after any change (an addition, a re-key), skipping what is not in this queue,
    and then offers what the order missed, oldest first, so no request is ever stranded. Requests brought forward
    (:meth:`bring_forward`) come first, for one step. ``priority_counts`` and ``gate`` as in :class:`PolicyQueue`.

    The order is read within one ``schedule()`` of vLLM's, during which the adapter updates no shadow, so it is
    used for a policy whose order is fixed when made (``Policy.waiting_order_fixed``: vtc, slide-batching).
    utility's lazy walk, for one, asks the head again after each admission: it keeps the keyed queue.
    """

    def __init__(self, order: Callable[[], Iterable[VllmRequest]]) -> None:
        self._order = order
        self._members: dict[str, VllmRequest] = {}  # in the order they were added
        self._forward: dict[str, VllmRequest] = {}
        self._cursor: Iterator[VllmRequest] | None = None
        self._head: VllmRequest | None = None
        self.priority_counts: Counter[int] = Counter()
        self.gate: Callable[[VllmRequest], bool] | None = None

    def add_request(self, request: VllmRequest) -> None:
        if request.request_id in self._members:
            self._discard(request)
        self._members[request.request_id] = request
        self.priority_counts[request.priority] += 1
        self.rekey()

    def pop_request(self) -> VllmRequest:
        request = self._peek()
        if request is None:
            raise IndexError("pop from an empty queue")
        self._discard(request)
        return request

    def peek_request(self) -> VllmRequest:
        request = self._peek()
        if request is None:
            raise IndexError("peek from an empty queue")
        return request

    def bring_forward(self, request: VllmRequest) -> None:
        """Put a queued request ahead of the policy's order (after those brought forward before it), for one step;
        :meth:`rekey_request` puts it back."""
        if request.request_id in self._members:
            self._forward[request.request_id] = request
            self.rekey()

    def rekey_request(self, request: VllmRequest) -> None:
        """Back to the policy's order (from :meth:`bring_forward`, or after its progress changed)."""
        self._forward.pop(request.request_id, None)
        self.rekey()

    def rekey(self) -> None:
        """Read the policy's order afresh at the next read."""
        self._cursor = None
        self._head = None

    def in_order(self) -> Generator[VllmRequest, None, None]:
        """The queued requests in order, lazily (a pass of its own: the queue's reads do not move)."""
        return self._ordered()

    def __bool__(self) -> bool:
        if self.gate is None or not self._members:
            return bool(self._members)
        head = self._peek()
        return head is not None and self.gate(head)

    def __len__(self) -> int:
        return len(self._members)

    def __iter__(self) -> Iterator[VllmRequest]:
        return iter(list(self._ordered()))

    def _peek(self) -> VllmRequest | None:
        head = self._head
        if head is not None and head.request_id in self._members:
            return head
        if self._cursor is None:
            self._cursor = self._ordered()
        self._head = next(self._cursor, None)
        return self._head

    def _ordered(self) -> Generator[VllmRequest, None, None]:
        members, seen = self._members, set()
        for request in itertools.chain(list(self._forward.values()), self._order(), _listed_later(members)):
            request_id = request.request_id
            if request_id not in seen and request_id in members:
                seen.add(request_id)
                yield request

    def _holds(self, request_id: str) -> bool:
        return request_id in self._members

    def _discard(self, request: VllmRequest) -> None:
        held = self._members.pop(request.request_id)
        self._forward.pop(request.request_id, None)
        self.priority_counts[held.priority] -= 1


def _listed_later(members: dict[str, VllmRequest]) -> Iterator[VllmRequest]:
    """``members``' requests as they stand once the iteration reaches them (a step that reads only the head of
    a queue walks none of it)."""
    yield from list(members.values())
