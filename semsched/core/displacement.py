"""The two rules both schedulers apply to waiting requests, as pure functions of plain numbers.

:class:`semsched.core.scheduler.Scheduler` (simulation) and the vLLM adapter (``semsched.vllm.scheduler``) ask the
same questions about the head of their waiting queue; each driver turns its own state (semsched's block manager,
vLLM's KV-cache manager) into the numbers below and acts on the answer, so a rule changes in one place:

* **displacement**: does a waiting request fit in what the running requests leave this step (:func:`fits`), and
  if not, how many of the running requests the policy named (``Policy.victims_for``, most expendable first) must
  give way so that it does (:func:`victims_to_displace`)? Only KV blocks and sequence slots are reasons to
  displace: the caller stops at a spent token budget, since a recompute costs more than a step's wait;
* **class gating** (``Policy.exclusive_class``, seed 000 eq. 2): only the most important class among unfinished
  requests runs (:func:`best_class`, :func:`excluded`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from semsched.core.kv import blocks_for


@dataclass(slots=True, init=False)
class Need:
    """What a waiting request needs to start this step. Its first chunk is as long as the token budget left
    allows (at least one token), so its block need depends on that budget: :meth:`blocks`.

    ``Need``, ``Room`` and ``Release`` are values (nothing changes one once built; :func:`take` and
    :func:`release` build new ones). They are dataclasses with written-out initialisers, not named tuples: the
    core builds them for every waiting request it tries to fit, and compiled, each is a native class whose
    constructor never calls into the interpreter (a named tuple's, or a generated dataclass ``__init__``, does)."""

    computed_tokens: int
    uncomputed_tokens: int
    block_size: int
    #: extra KV slots the chunk reserves (speculative lookahead)
    extra_slots: int = 0
    #: admit only if this many tokens fit whole (vLLM 0.32's ``scheduler_reserve_full_isl``); 0 = first chunk only
    whole_tokens: int = 0
    #: blocks the request holds already
    held_blocks: int = 0

    def __init__(self, computed_tokens: int, uncomputed_tokens: int, block_size: int, extra_slots: int = 0,
                 whole_tokens: int = 0, held_blocks: int = 0) -> None:
        self.computed_tokens = computed_tokens
        self.uncomputed_tokens = uncomputed_tokens
        self.block_size = block_size
        self.extra_slots = extra_slots
        self.whole_tokens = whole_tokens
        self.held_blocks = held_blocks

    def chunk_tokens(self, tokens_left: int) -> int:
        return min(self.uncomputed_tokens, max(tokens_left, 1))

    def blocks(self, tokens_left: int) -> int:
        """KV blocks to allocate for its first chunk with ``tokens_left`` of the step's budget left."""
        needed = blocks_for(self.computed_tokens + self.chunk_tokens(tokens_left) + self.extra_slots,
                            self.block_size)
        if self.whole_tokens:
            needed = max(needed, blocks_for(self.whole_tokens, self.block_size))
        return needed - self.held_blocks


@dataclass(slots=True, init=False)
class Room:
    """What is left for waiting requests at this point of the step, after the running requests' share."""

    free_blocks: int  # KV blocks the candidate may take (less any watermark or reservation it must leave)
    free_seqs: int  # sequence slots
    tokens: int  # token budget

    def __init__(self, free_blocks: int, free_seqs: int, tokens: int) -> None:
        self.free_blocks = free_blocks
        self.free_seqs = free_seqs
        self.tokens = tokens


@dataclass(slots=True, init=False)
class Release:
    """What displacing one running request gives back this step."""

    blocks: int  # the blocks it holds plus those its share of this step would take
    tokens: int  # the budget its share of this step would take

    def __init__(self, blocks: int, tokens: int) -> None:
        self.blocks = blocks
        self.tokens = tokens


def fits(need: Need, room: Room) -> bool:
    """Whether the request gets a sequence slot and its blocks."""
    return room.free_seqs > 0 and need.blocks(room.tokens) <= room.free_blocks


def take(need: Need, room: Room) -> Room:
    """``room`` once the request (which :func:`fits`) has started."""
    return Room(room.free_blocks - need.blocks(room.tokens), room.free_seqs - 1,
                room.tokens - need.chunk_tokens(room.tokens))


def release(room: Room, victim: Release) -> Room:
    """``room`` once ``victim`` has given way."""
    return Room(room.free_blocks + victim.blocks, room.free_seqs + 1, room.tokens + victim.tokens)


def victims_to_displace(need: Need, room: Room, victims: Iterable[Release]) -> int | None:
    """How many of ``victims`` (in the policy's order) must give way, from the front, for the request to fit:
    0 if it fits already; ``None`` if no prefix of them makes room, and then none is displaced (a waiting
    request displaces running ones only if that lets it run now). The budget the victims give back may lengthen
    the request's first chunk, which :func:`fits` accounts for at each step. ``victims`` is read from the front
    only as far as needed (a caller may build each release lazily)."""
    if fits(need, room):
        return 0
    for count, victim in enumerate(victims, start=1):
        room = release(room, victim)
        if fits(need, room):
            return count
    return None


def best_class(class_counts: Mapping[int, int]) -> int | None:
    """The most important (smallest) class with unfinished requests; ``None`` when no request has a class."""
    return min((cls for cls, count in class_counts.items() if count > 0), default=None)


def excluded(request_class: int | None, best: int | None) -> bool:
    """Under class-exclusive batching, whether a request of ``request_class`` is kept out of this step (preempted
    if running, not admitted if waiting) while ``best`` is the best class present."""
    return best is not None and request_class != best
