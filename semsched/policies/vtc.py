"""Weighted Virtual Token Counter (VTC; Sheng et al., "Fairness in Serving LLMs", OSDI'24, Algorithm 2), as
PROSERVE's §5.1 "Weighted VTC" baseline.

* **Counters.** One counter per client. Admitting a request adds ``input_cost`` per prompt token, each output
  token ``output_cost`` (the paper's w_p = 1, w_q = 2), both divided by the weight of the request's priority:
  ``weights[priority]`` when given, else PROSERVE's weights (§5.1: the most important priority weighs 2, every
  other 1; "most important" is the smallest priority value among the requests seen so far). A client's weight is
  thus found from the priority of its requests, charge by charge.
* **Client.** ``Request.client``; a request without one belongs to the client named after its priority
  (``priority:N``), so on a workload without clients VTC shares tokens between priority classes.
* **Order.** Waiting requests of the client with the smallest counter first, FCFS within a client. Admitting a
  request raises its client's counter, so the key of a client's ``k``-th waiting request is its counter plus the
  (weighted) input cost of the ``k - 1`` before it: admitting in key order within one step is exactly the
  paper's loop (pick the smallest counter, admit its oldest request, charge, repeat). Counters move with every
  token, so the queue is re-keyed every ``rekey_s`` (default 1 ms: every step of a real engine).
* **Counter lift** (the paper's rule): when a request arrives from a client with no waiting request, its counter
  is raised to at least the smallest counter among clients with waiting requests, or, when no request waits, to
  the counter of the client whose request left the queue last; a returning client cannot claim service for the
  time it was away.
* **Non-preemptive**: no displacement; under KV pressure vLLM's FCFS victim (latest arrival).

Hook mapping. The policy learns of admissions from the running list at the next step's ``step_budget`` (which
both engines ask first in every step, before the core re-keys), and charges each request's prompt once (a request
readmitted after a KV-pressure preemption is not charged again); output tokens are charged in ``on_tokens``.

Fairness bound (tested in tests/policies/test_vtc.py): while two clients f and g both have waiting requests,
``|c_f - c_g| <= (I + B * O) / w_min``, where ``I`` is the largest input cost of one request, ``O`` the largest
output cost of one request, ``B`` the engine's sequence cap and ``w_min`` the smaller weight: a client is admitted
only while its counter (plus what it admits ahead in the same step) is at most the other's, and from then on only
its at most ``B`` running requests raise it. The weighted tokens actually served differ from the counters by at
most the prompts admitted but not yet computed, ``B * I / w_min`` per client.
"""

from __future__ import annotations

import functools
import heapq
import itertools
import math
from collections import deque
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import ClassVar

from semsched.core.policy import Policy, PolicyConfig, SchedulerView, SortKey, StepBudget
from semsched.core.request import Request
from semsched.policies.params import param
from semsched.policies.registry import register_policy
from semsched.policies.vllm_fcfs import is_waiting

#: ``Request.policy_state`` key: the request's prompt has been charged to its client
CHARGED_KEY = "vtc.charged"
#: PROSERVE §5.1: high- and low-priority weights
HIGH_PRIORITY_WEIGHT = 2.0
LOW_PRIORITY_WEIGHT = 1.0
#: largest cost or weight a config may name
MAX_COST = 1e6
#: ``Request.policy_state`` key: the order in which the request (re-)entered this policy's waiting requests
ENQUEUED_KEY = "vtc.enqueued"
#: a ``rekey_s`` this short means every step: the core then asks :meth:`VTC.waiting_order`, which walks only the
#: front of each client's queue, instead of re-keying every waiting request each step
EVERY_STEP_S = 0.001


def client_of(request: Request) -> str:
    """The client a request is counted under: its ``client``, else its priority class."""
    return request.client if request.client is not None else _priority_client(request.priority)


@functools.lru_cache(maxsize=256)
def _priority_client(priority: int) -> str:
    """The client name of a priority class (a request that names no client)."""
    return f"priority:{priority}"


def _check_number(name: str, value: object, *, low: float, high: float, low_open: bool) -> None:
    number = value if isinstance(value, int | float) and not isinstance(value, bool) else math.nan
    if not math.isfinite(number) or not (low < number <= high if low_open else low <= number <= high):
        bound = "above" if low_open else "from"
        raise ValueError(f"{name} must be a number {bound} {low:g} {'and at most' if low_open else 'to'} "
                         f"{high:g}, got {value!r}")


@dataclass(frozen=True)
class VTCConfig(PolicyConfig):
    input_cost: float = param(1.0, "counter cost of one prompt token (the paper's w_p), before the weight")
    output_cost: float = param(2.0, "counter cost of one output token (the paper's w_q), before the weight")
    weights: tuple[float, ...] | None = param(
        None, "weight of priority 0/1/2/..., '/'-separated; priorities past the end weigh 1 (default: "
              "PROSERVE's, the most important priority seen weighs 2, others 1)")
    rekey_s: float = param(0.001, "how often the waiting queue is re-ordered by the moving counters (seconds)")

    def __post_init__(self) -> None:
        super().__post_init__()
        _check_number("input_cost", self.input_cost, low=0.0, high=MAX_COST, low_open=False)
        _check_number("output_cost", self.output_cost, low=0.0, high=MAX_COST, low_open=False)
        if self.input_cost == 0 and self.output_cost == 0:
            raise ValueError("input_cost and output_cost must not both be 0 (no token would count)")
        for i, weight in enumerate(self.weights or ()):
            _check_number(f"weights[{i}]", weight, low=0.0, high=MAX_COST, low_open=True)
        _check_number("rekey_s", self.rekey_s, low=0.0, high=3600.0, low_open=True)


class _Client:
    """One client's counter and its waiting requests in arrival order (stale entries dropped lazily)."""

    __slots__ = ("counter", "waiting")

    def __init__(self) -> None:
        self.counter = 0.0
        self.waiting: deque[Request] = deque()

    def prune_front(self) -> None:
        waiting = self.waiting
        while waiting and not is_waiting(waiting[0]):
            waiting.popleft()

    @property
    def active(self) -> bool:
        """Whether the client has a waiting request (the paper's ``u in Q``)."""
        self.prune_front()
        return bool(self.waiting)


@register_policy
class VTC(Policy):
    """Weighted VTC: the waiting request of the least-served client (weighted token counter) first.

    starvation: bounded: while a client waits, no other client with waiting requests gets more than
    ``(I + B * O) / w_min`` counter units ahead of it (the module docstring's fairness bound); within a client,
    arrival order.
    """

    name: ClassVar[str] = "vtc"
    config_cls: ClassVar[type[PolicyConfig]] = VTCConfig
    static_victim_key: ClassVar[bool] = True
    waiting_order_fixed: ClassVar[bool] = True  # (the fronts of the clients' queues, merged; admitting moves none)
    config: VTCConfig

    def __init__(self, config: PolicyConfig | None = None) -> None:
        super().__init__(config)
        self._clients: dict[str, _Client] = {}
        self._top_priority: int | None = None
        #: each running request's client entry and weight() (as it answers until the most important priority
        #: seen changes), kept for on_tokens from the request's first tokens to its end
        self._charging: dict[Request, tuple[_Client, float]] = {}
        self._last_left: str | None = None  # client whose request left the waiting queue last
        #: waiting keys computed at counter version ``_keys_version`` (arrivals since added at their client's
        #: tail), and per client, the key its next arrival gets while they stand
        self._keys: dict[str, float] = {}
        self._keys_version = -1
        self._tails: dict[_Client, float] = {}
        self._version = 0  # bumped whenever a counter moves
        self._output_cost = self.config.output_cost  # (read by on_tokens, for every running request per step)
        self._enqueued = itertools.count()
        #: the core asks waiting_order (it keys nothing): arrivals need no key of their own
        self._ordered_by_core = False
        self._left: set[str] = set()  # handed off to another instance while counted here as waiting

    @property
    def rekey_interval_s(self) -> float | None:  # type: ignore[override]
        return self.config.rekey_s

    def uses_hook(self, hook: str) -> bool:
        if hook == "waiting_order":
            return self.config.rekey_s <= EVERY_STEP_S
        return super().uses_hook(hook)

    # ---- counters ----------------------------------------------------------------------------------------
    def weight(self, priority: int) -> float:
        weights = self.config.weights
        if weights is not None:
            return weights[priority] if 0 <= priority < len(weights) else LOW_PRIORITY_WEIGHT
        return HIGH_PRIORITY_WEIGHT if priority == self._top_priority else LOW_PRIORITY_WEIGHT

    def counter(self, client: str) -> float:
        """The client's virtual token counter (0 for a client never seen)."""
        entry = self._clients.get(client)
        return entry.counter if entry is not None else 0.0

    def input_charge(self, request: Request) -> float:
        return self.config.input_cost * request.prompt_tokens / self.weight(request.priority)

    def _client(self, request: Request) -> _Client:
        name = client_of(request)
        entry = self._clients.get(name)
        if entry is None:
            entry = self._clients[name] = _Client()
        return entry

    def _charge(self, entry: _Client, amount: float) -> None:
        entry.counter += amount
        self._version += 1

    def _charge_admissions(self, running: Sequence[Request]) -> None:
        """Charge the prompt of every running request not charged yet (admitted since the last step)."""
        for request in running:
            if CHARGED_KEY not in request.policy_state:
                request.policy_state[CHARGED_KEY] = 1.0
                entry = self._client(request)
                self._charge(entry, self.input_charge(request))
                if not entry.active:
                    self._last_left = client_of(request)

    # ---- hooks -------------------------------------------------------------------------------------------
    def on_arrival(self, request: Request, now_s: float) -> None:
        if self.config.weights is None and (self._top_priority is None or request.priority < self._top_priority):
            self._top_priority = request.priority
            self._charging.clear()
        entry = self._client(request)
        if not entry.active:
            self._lift(entry)
        entry.waiting.append(request)
        request.policy_state[ENQUEUED_KEY] = float(next(self._enqueued))
        tail = self._tails.get(entry) if self._keys_version == self._version else None
        if tail is not None and not self._ordered_by_core:
            # its key: where the client's keys stand after its requests waiting ahead (what a rebuild would
            # accumulate to), so a burst of arrivals costs O(1) each, not a walk over the client's queue
            self._keys[request.request_id] = tail
            self._tails[entry] = tail + self.input_charge(request)

    def _lift(self, entry: _Client) -> None:
        """VTC's counter lift for a client that had no waiting request."""
        active = [c.counter for c in self._clients.values() if c is not entry and c.active]
        if active:
            floor = min(active)
        elif self._last_left is not None and self._last_left in self._clients:
            floor = self._clients[self._last_left].counter
        else:
            return
        if floor > entry.counter:
            self._charge(entry, floor - entry.counter)

    def on_preempt(self, request: Request, now_s: float) -> None:
        entry = self._client(request)
        position = next((i for i, r in enumerate(entry.waiting) if r.arrival_time_s > request.arrival_time_s),
                        len(entry.waiting))
        entry.waiting.insert(position, request)
        request.policy_state[ENQUEUED_KEY] = float(next(self._enqueued))
        self._keys_version = -1  # its place among the client's requests changes the keys behind it

    def on_leave(self, request: Request) -> None:
        self._left.add(request.request_id)  # its entry still counts ahead of later ones while it is WAITING
        self._charging.pop(request, None)

    def on_finish(self, request: Request, now_s: float) -> None:
        self._charging.pop(request, None)

    def on_tokens(self, request: Request, num_tokens: int, now_s: float) -> None:
        # (called for every running request at every step: its client and weight looked up once)
        kept = self._charging.get(request)
        if kept is None:
            kept = self._charging[request] = (self._client(request), self.weight(request.priority))
        entry, weight = kept
        cost = self._output_cost * num_tokens / weight
        if cost:
            entry.counter += cost  # (_charge, inlined: a call per running request per step costs more)
            self._version += 1

    def step_budget(self, view: SchedulerView, now_s: float) -> StepBudget | None:
        """Charges this step's newly running requests before the core re-keys (the budget is the engine's). Both
        engines ask it first in every step, before the running order, so no other hook needs to charge them."""
        self._charge_admissions(view.running_requests())
        return None

    def waiting_order(self, view: SchedulerView, now_s: float) -> Iterator[Request]:
        """The waiting requests in the order re-keying all of them now would give (the smallest of (the client's
        counter plus the input cost of its requests waiting ahead, arrival, enqueue order) first), merged lazily
        from the front of each client's queue: a step costs what it admits and the number of clients."""
        if not self._ordered_by_core:
            self._ordered_by_core = True
            self._keys_version = -1
        heap: list[tuple[float, float, float, int]] = []
        fronts: list[tuple[Iterator[tuple[float, Request]], Request]] = []
        for entry in self._clients.values():
            entry.prune_front()
            keyed = self._keyed(entry)
            first = next(keyed, None)
            if first is not None:
                key, request = first
                heap.append((key, request.arrival_time_s, request.policy_state[ENQUEUED_KEY], len(fronts)))
                fronts.append((keyed, request))
        heapq.heapify(heap)
        while heap:
            index = heap[0][3]
            keyed, request = fronts[index]
            yield request
            following = next(keyed, None)
            if following is None:
                heapq.heappop(heap)
                continue
            key, request = following
            heapq.heapreplace(heap, (key, request.arrival_time_s, request.policy_state[ENQUEUED_KEY], index))
            fronts[index] = (keyed, request)

    def _keyed(self, entry: _Client) -> Iterator[tuple[float, Request]]:
        """A client's waiting requests in its order with their keys, accumulated as :meth:`_rebuild_keys` does
        (a request handed off elsewhere still counts ahead of the later ones, but is not offered)."""
        level = entry.counter
        left = self._left
        for request in entry.waiting:
            if not is_waiting(request):
                left.discard(request.request_id)
                continue
            if request.request_id not in left:
                yield level, request
            level += self.input_charge(request)

    def waiting_key(self, request: Request, now_s: float) -> SortKey:
        """(the client's counter once its waiting requests ahead are admitted, arrival)."""
        if self._keys_version != self._version or request.request_id not in self._keys:
            self._rebuild_keys()
        key = self._keys.get(request.request_id)
        return (self.counter(client_of(request)) if key is None else key, request.arrival_time_s)

    def _rebuild_keys(self) -> None:
        """Every waiting request's key from the current counters: prefix sums of input cost per client."""
        keys: dict[str, float] = {}
        tails: dict[_Client, float] = {}
        for entry in self._clients.values():
            live = deque(r for r in entry.waiting if is_waiting(r))
            entry.waiting = live
            level = entry.counter
            for request in live:
                keys[request.request_id] = level
                level += self.input_charge(request)
            tails[entry] = level
        self._keys, self._tails = keys, tails
        self._keys_version = self._version
