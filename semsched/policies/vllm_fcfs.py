"""vLLM v0's default scheduler (PROSERVE §5.1 "vLLM-FCFS"): first come, first served, prefill first.

Whenever the head of the FCFS queue can be admitted (its whole sequence fits in the KV blocks an admission may
take, and a sequence slot is free), the step runs prefills only: running decodes are held back through
``running_order`` (running requests still in their prompt, a chunked prefill, go on), and the core admits waiting
requests in arrival order with the whole token budget. Otherwise the step runs every running request: a head
that does not fit never holds the decodes back, so the engine cannot deadlock.

The policy knows the waiting queue only through its own bookkeeping (:class:`WaitingBook`): ``on_arrival`` and
``on_preempt`` add a request, and a request leaves the book lazily, when it is found at the head in another state
(running, or ended: a request can end REJECTED or DROPPED without ``on_finish``).

How many blocks an admission may take: the view's ``available_blocks`` (free blocks less the watermark and the
reservations the request may not use), less ``margin_blocks``. The estimate must not be optimistic: a step that
held every decode back for a head the engine then refuses would be empty.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import ClassVar

from semsched.core.kv import blocks_for
from semsched.core.policy import Policy, PolicyConfig, SchedulerView, SortKey
from semsched.core.request import WAITING_STATES, Request
from semsched.policies.params import param
from semsched.policies.registry import register_policy


def is_waiting(request: Request) -> bool:
    """Whether ``request`` is in a waiting queue (arrived or preempted, not running, not ended)."""
    return request.state in WAITING_STATES


def in_prompt(request: Request) -> bool:
    """Whether ``request``'s next chunk is a prefill (its prompt, or a recompute), not a decode: the core's rule,
    so the last token of a prompt is a prefill too."""
    computed = request.num_computed_tokens
    return computed < request.prompt_tokens or request.prompt_tokens + request.num_output_tokens - computed > 1


class WaitingBook:
    """The waiting requests a policy has been told of, in its own order (smallest ``key`` first; ties: first
    told first, as the core's queue breaks them).

    ``add`` on arrival and on preemption; entries of requests no longer waiting (running, ended) are dropped
    lazily, when they come to the front. ``key`` must not change while a request waits.
    """

    def __init__(self, key: Callable[[Request], SortKey]) -> None:
        self._key = key
        self._heap: list[tuple[SortKey, int, Request]] = []
        self._live: dict[str, int] = {}  # request id -> sequence number of its current entry
        self._seq = itertools.count()

    def add(self, request: Request) -> None:
        seq = next(self._seq)
        self._live[request.request_id] = seq
        heapq.heappush(self._heap, (self._key(request), seq, request))

    def head(self) -> Request | None:
        """The first request still waiting, or None."""
        heap, live = self._heap, self._live
        while heap:
            _, seq, request = heap[0]
            if live.get(request.request_id) == seq and is_waiting(request):
                return request
            heapq.heappop(heap)
            if live.get(request.request_id) == seq:
                del live[request.request_id]
        return None

    def first(self, count: int) -> list[Request]:
        """Up to ``count`` waiting requests from the front, in order (O(n log count))."""
        if count <= 0 or self.head() is None:
            return []
        live = self._live
        entries = heapq.nsmallest(count, (e for e in self._heap
                                          if live.get(e[2].request_id) == e[1] and is_waiting(e[2])))
        return [request for _, _, request in entries]

    def __len__(self) -> int:
        """Entries held (an upper bound on the waiting requests: stale ones go lazily)."""
        return len(self._live)


def admission_blocks(view: SchedulerView, request: Request, margin_blocks: int, *, admission: bool = True) -> int:
    """KV blocks ``request`` may take now, to be admitted (or, ``admission=False``, to grow while running):
    the view's (watermark and reservations included) less ``margin_blocks``."""
    return view.available_blocks(request, admission=admission) - margin_blocks


def fits_in_place(requests: Sequence[Request], view: SchedulerView, margin_blocks: int = 0) -> bool:
    """Whether running ``requests`` surely get this step's blocks without a preemption under KV pressure (the
    bound :func:`step_blocks` against the blocks the least entitled of them may use)."""
    if not requests:
        return True
    room = min(admission_blocks(view, r, margin_blocks, admission=False) for r in requests)
    return step_blocks(requests, view.block_size) <= room


def whole_sequence_blocks(request: Request, block_size: int) -> int:
    """Blocks a waiting request needs to hold its whole sequence (prompt and tokens generated so far), as vLLM
    v0 asks before it admits a prefill; at least what the core asks for its first chunk."""
    return blocks_for(request.prompt_tokens + request.num_output_tokens, block_size)


def step_blocks(requests: Sequence[Request], block_size: int) -> int:
    """An upper bound on the blocks ``requests`` may allocate in one step: each prompt's whole remaining
    sequence, one block per decode (a new block at a block boundary, or for speculative lookahead). When it fits
    in the free blocks, none of them is preempted under KV pressure."""
    total = 0
    for request in requests:
        held = blocks_for(request.num_computed_tokens, block_size)
        total += whole_sequence_blocks(request, block_size) - held if in_prompt(request) else 1
    return total


@dataclass(frozen=True)
class VllmFCFSConfig(PolicyConfig):
    margin_blocks: int = param(
        0, "blocks an admission must leave free beyond what the engine's view says it may take")

    def __post_init__(self) -> None:
        super().__post_init__()
        value = self.margin_blocks
        if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= 2**31 - 1:
            raise ValueError(f"margin_blocks must be an integer from 0 to {2**31 - 1:,}, got {value!r}")


@register_policy
class VllmFCFS(Policy):
    """Prefill-first FCFS (vLLM v0): prefills whenever the FCFS head can be admitted, decodes otherwise.

    starvation: none: requests start in arrival order; running decodes pause only while the FCFS head can be
    admitted (a free sequence slot and blocks for its whole sequence), which each admission uses up.
    """

    name: ClassVar[str] = "vllm-fcfs"
    config_cls: ClassVar[type[PolicyConfig]] = VllmFCFSConfig
    static_victim_key: ClassVar[bool] = True
    config: VllmFCFSConfig

    def __init__(self, config: PolicyConfig | None = None) -> None:
        super().__init__(config)
        self._waiting = WaitingBook(lambda request: (request.arrival_time_s,))

    def on_arrival(self, request: Request, now_s: float) -> None:
        self._waiting.add(request)

    def on_preempt(self, request: Request, now_s: float) -> None:
        self._waiting.add(request)

    def head_admissible(self, view: SchedulerView, prefilling: Sequence[Request] = ()) -> bool:
        """Whether the FCFS head would be admitted this step, after the running ``prefilling`` requests take
        the blocks of their remaining prompt."""
        head = self._waiting.head()
        if head is None or view.num_running >= view.budget.max_num_seqs:
            return False
        block_size = view.block_size
        if not fits_in_place(prefilling, view, self.config.margin_blocks):
            return False  # a prompt may go under KV pressure: hold no decode back
        need = whole_sequence_blocks(head, block_size) + step_blocks(prefilling, block_size)
        return need <= admission_blocks(view, head, self.config.margin_blocks)

    def running_order(
        self, running: Sequence[Request], view: SchedulerView, now_s: float
    ) -> Sequence[Request] | None:
        """Prefill first: while the FCFS head can be admitted, only running requests in their prompt compute
        (decodes wait); otherwise ``None``, every running request in arrival order."""
        prefilling = sorted((r for r in running if in_prompt(r)), key=self.victim_key)
        if not self.head_admissible(view, prefilling):
            return None
        return prefilling
