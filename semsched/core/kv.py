"""Paged KV-cache accounting: GPU blocks, CPU swap blocks, per-request block tables, reservations.

Like vLLM's block manager, a request holds ``ceil(tokens / block_size)`` blocks for the tokens whose KV is
cached. Block ids are real (a free list), so tests can check that no block is held twice. Only accounting
lives here; which request gets blocks is the scheduler's business.

Prefix caching (``enable_prefix_caching``, vLLM's automatic prefix caching; off by default): a full block of a
request whose ``prefix_hashes`` name it is registered under its hash once its tokens are computed. A cached block
is shared (reference-counted) by every request whose leading hashes match (:meth:`BlockManager.attach_prefix`);
when no request holds it any more it stays cached but evictable, and counts as free: an allocation that finds the
free list empty evicts the least recently released cached block. Every operation costs what it touches (dicts and
an ``OrderedDict`` in LRU order), never a walk over the cache.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

from mypy_extensions import mypyc_attr

from semsched.core.request import InvalidRequestError, Request


@mypyc_attr(native_class=False)  # (frozen: a native class would not unpickle; a process pool ships configs)
@dataclass(frozen=True, slots=True)
class Reservation:
    """Keep ``num_blocks`` GPU blocks out of reach of requests whose priority value exceeds ``max_priority``.

    Seed 003's capacity reservation: lower tiers cannot fill the last blocks, so a premium request that
    arrives under load still finds room.
    """

    max_priority: int
    num_blocks: int


def blocks_for(num_tokens: int, block_size: int) -> int:
    """Blocks needed to hold ``num_tokens`` tokens of KV."""
    return -(-num_tokens // block_size)


@mypyc_attr(allow_interpreted_subclasses=True)  # a test overrides fits_ever in a subclass
class BlockManager:
    """GPU and CPU (swap) block pools with per-request block tables.

    Invariant: ``num_free_gpu_blocks + sum(len(table) for table in GPU tables) == num_gpu_blocks`` and the same
    for CPU blocks, at all times. With prefix caching a cached block may sit in several tables: then the
    distinct blocks the tables hold count once, each held cached block's reference count is the number of tables
    that hold it, and the free blocks are the free list plus the evictable cached blocks.
    """

    def __init__(
        self,
        num_gpu_blocks: int,
        block_size: int,
        *,
        num_cpu_blocks: int = 0,
        watermark: float = 0.01,
        reservations: tuple[Reservation, ...] = (),
        enable_prefix_caching: bool = False,
    ) -> None:
        if num_gpu_blocks < 1:
            raise InvalidRequestError(f"num_gpu_blocks: must be >= 1 (got {num_gpu_blocks})")
        if block_size < 1:
            raise InvalidRequestError(f"block_size: must be >= 1 (got {block_size})")
        if num_cpu_blocks < 0:
            raise InvalidRequestError(f"num_cpu_blocks: must be >= 0 (got {num_cpu_blocks})")
        if not 0.0 <= watermark < 1.0:
            raise InvalidRequestError(f"watermark: must be in [0, 1) (got {watermark})")
        self.num_gpu_blocks = num_gpu_blocks
        self.num_cpu_blocks = num_cpu_blocks
        self.block_size = block_size
        self.watermark_blocks = int(watermark * num_gpu_blocks)
        self.reservations = reservations
        # pop() from the end hands out low ids first
        self._free_gpu: list[int] = list(range(num_gpu_blocks - 1, -1, -1))
        self._free_cpu: list[int] = list(range(num_cpu_blocks - 1, -1, -1))
        self._gpu_tables: dict[str, list[int]] = {}
        self._cpu_tables: dict[str, list[int]] = {}
        self.enable_prefix_caching = enable_prefix_caching
        self._block_of_hash: dict[int, int] = {}
        self._hash_of_block: dict[int, int] = {}
        #: cached blocks that some table holds: how many tables hold each
        self._refs: dict[int, int] = {}
        #: cached blocks no table holds (free, evicted first-in first-out: least recently released first)
        self._evictable: OrderedDict[int, None] = OrderedDict()
        #: per request: how many leading blocks of its GPU table were offered to the cache already
        self._num_offered: dict[str, int] = {}

    # ---- queries -----------------------------------------------------------------------------------------
    @property
    def num_free_gpu_blocks(self) -> int:
        return len(self._free_gpu) + len(self._evictable)

    @property
    def num_free_cpu_blocks(self) -> int:
        return len(self._free_cpu)

    @property
    def num_used_gpu_blocks(self) -> int:
        return self.num_gpu_blocks - len(self._free_gpu) - len(self._evictable)

    @property
    def num_cached_blocks(self) -> int:
        """Blocks registered under a prefix hash (held or evictable)."""
        return len(self._hash_of_block)

    def cache_state(self) -> tuple[dict[int, int], dict[int, int], tuple[int, ...]]:
        """(hash of each cached block, reference count of each held cached block, the evictable blocks in
        eviction order): for invariant checks."""
        return dict(self._hash_of_block), dict(self._refs), tuple(self._evictable)

    def gpu_blocks_of(self, request: Request) -> int:
        table = self._gpu_tables.get(request.request_id)
        return len(table) if table is not None else 0

    def block_table(self, request: Request) -> tuple[int, ...]:
        return tuple(self._gpu_tables.get(request.request_id, ()))

    def cpu_block_table(self, request: Request) -> tuple[int, ...]:
        return tuple(self._cpu_tables.get(request.request_id, ()))

    def gpu_tables(self) -> dict[str, tuple[int, ...]]:
        return {rid: tuple(t) for rid, t in self._gpu_tables.items()}

    def blocks_needed(self, request: Request, num_new_tokens: int) -> int:
        """Extra GPU blocks needed to cache ``num_new_tokens`` more tokens of ``request``."""
        total = blocks_for(request.num_computed_tokens + num_new_tokens, self.block_size)
        return max(0, total - self.gpu_blocks_of(request))

    def available_for(self, request: Request, *, admission: bool) -> int:
        """Free GPU blocks this request may use: minus reservations it is not entitled to, and minus the
        watermark when admitting new work (so running requests keep room to grow)."""
        available = len(self._free_gpu) + len(self._evictable)
        for reservation in self.reservations:
            if request.priority > reservation.max_priority:
                available -= reservation.num_blocks
        if admission:
            available -= self.watermark_blocks
        return available

    def capacity_for(self, request: Request) -> int:
        """Most GPU blocks ``request`` could ever hold: all of them, less the watermark and the reservations
        it is not entitled to."""
        capacity = self.num_gpu_blocks - self.watermark_blocks
        for reservation in self.reservations:
            if request.priority > reservation.max_priority:
                capacity -= reservation.num_blocks
        return capacity

    def fits_ever(self, request: Request, extra_tokens: int = 0) -> bool:
        """Whether ``request`` at its longest (prompt plus ``max_output_tokens`` plus ``extra_tokens`` of
        speculative lookahead) could be held on the GPU."""
        num_tokens = request.prompt_tokens + request.max_output_tokens + extra_tokens
        return blocks_for(num_tokens, self.block_size) <= self.capacity_for(request)

    # ---- GPU allocation ----------------------------------------------------------------------------------
    def try_allocate(self, request: Request, num_new_tokens: int, *, admission: bool = False) -> bool:
        """Grow ``request``'s table to cover ``num_new_tokens`` more tokens; False (and no change) if short."""
        # hot path (every running request, every step): inline blocks_needed
        table = self._gpu_tables.get(request.request_id)
        held = len(table) if table is not None else 0
        needed = -(-(request.num_computed_tokens + num_new_tokens) // self.block_size) - held
        if needed <= 0:
            return True
        if needed > self.available_for(request, admission=admission):
            return False
        self._take_gpu(request.request_id, needed)
        return True

    def allocate_blocks(self, request: Request, num_blocks: int) -> None:
        """Append exactly ``num_blocks`` blocks (caller has checked availability)."""
        if num_blocks > self.num_free_gpu_blocks:
            raise RuntimeError(f"allocate_blocks: {num_blocks} requested, {self.num_free_gpu_blocks} free")
        self._take_gpu(request.request_id, num_blocks)

    def _take_gpu(self, request_id: str, count: int) -> None:
        table = self._gpu_tables.get(request_id)
        if table is None:  # (not setdefault: its default list would be built at every call)
            table = self._gpu_tables[request_id] = []
        if count <= 0:
            return
        free = self._free_gpu
        if count > len(free):
            self._evict(count - len(free))
        if count == 1:  # (a decode's next block, the usual case: no slices)
            table.append(free.pop())
            return
        table.extend(free[-count:][::-1])
        del free[-count:]

    def free(self, request: Request) -> int:
        """Release every GPU and CPU block of ``request`` (its computed full blocks offered to the prefix cache
        first); returns the GPU blocks it held."""
        if self.enable_prefix_caching:
            self.offer_blocks(request)
            self._num_offered.pop(request.request_id, None)
        table = self._gpu_tables.pop(request.request_id, None)
        cpu = self._cpu_tables.pop(request.request_id, None)
        if cpu:
            self._free_cpu.extend(reversed(cpu))
        if not table:
            return 0
        self._release(table)
        return len(table)

    def _release(self, table: list[int]) -> None:
        """Give back a table's blocks: uncached ones to the free list, cached ones lose a reference (and become
        evictable at none). The last block goes first, so a request's tail is evicted before its head."""
        if not self._refs:
            self._free_gpu.extend(reversed(table))
            return
        free, refs, evictable = self._free_gpu, self._refs, self._evictable
        for block in reversed(table):
            count = refs.get(block, 0)
            if count == 0:
                free.append(block)
            elif count > 1:
                refs[block] = count - 1
            else:
                del refs[block]
                evictable[block] = None

    def _evict(self, count: int) -> None:
        """Move the ``count`` least recently released cached blocks to the free list (caller checked room)."""
        for _ in range(count):
            block, _ = self._evictable.popitem(last=False)
            del self._block_of_hash[self._hash_of_block.pop(block)]
            self._free_gpu.append(block)

    # ---- prefix caching ----------------------------------------------------------------------------------
    def offer_blocks(self, request: Request) -> None:
        """Register ``request``'s computed full blocks that its ``prefix_hashes`` name and that are not cached
        yet (a block whose hash another block holds stays private, as in vLLM). Costs the blocks not offered
        before."""
        hashes = request.prefix_hashes
        if not self.enable_prefix_caching or hashes is None:
            return
        table = self._gpu_tables.get(request.request_id)
        if not table:
            return
        upto = min(len(table), request.num_computed_tokens // self.block_size, len(hashes))
        start = self._num_offered.get(request.request_id, 0)
        if upto <= start:
            return
        for i in range(start, upto):
            block, key = table[i], hashes[i]
            if block in self._refs or key in self._block_of_hash:
                continue
            self._block_of_hash[key] = block
            self._hash_of_block[block] = key
            self._refs[block] = 1
        self._num_offered[request.request_id] = upto

    def cached_prefix_blocks(self, request: Request) -> int:
        """How many leading blocks of ``request`` are cached now (at most all but its last token's)."""
        hashes = request.prefix_hashes
        if not self.enable_prefix_caching or hashes is None:
            return 0
        limit = min(len(hashes), (request.num_tokens - 1) // self.block_size)
        count = 0
        while count < limit and hashes[count] in self._block_of_hash:
            count += 1
        return count

    def attach_prefix(self, request: Request) -> int:
        """Share the cached blocks of ``request``'s longest cached prefix (a request that holds no block and has
        nothing computed; the caller sets its computed tokens); returns the blocks attached. At least its last
        token is left to compute, as in vLLM, so it samples its next token itself."""
        rid = request.request_id
        if request.num_computed_tokens or rid in self._gpu_tables or rid in self._cpu_tables:
            return 0
        count = self.cached_prefix_blocks(request)
        if not count:
            return 0
        assert request.prefix_hashes is not None
        table: list[int] = []
        refs, evictable = self._refs, self._evictable
        for key in request.prefix_hashes[:count]:
            block = self._block_of_hash[key]
            if block in evictable:
                del evictable[block]
                refs[block] = 1
            else:
                refs[block] += 1
            table.append(block)
        self._gpu_tables[rid] = table
        self._num_offered[rid] = count
        return count

    # ---- swap ------------------------------------------------------------------------------------------------
    def can_swap_out(self, request: Request) -> bool:
        return self.gpu_blocks_of(request) <= len(self._free_cpu)

    def swap_out(self, request: Request, num_blocks: int | None = None) -> int:
        """Move the first ``num_blocks`` (default: all) of ``request``'s GPU blocks to CPU swap space and free
        the rest; returns the number of blocks moved."""
        table = self._gpu_tables.get(request.request_id, [])
        keep = len(table) if num_blocks is None else min(num_blocks, len(table))
        if keep > len(self._free_cpu):
            raise RuntimeError("swap_out: not enough CPU blocks (check can_swap_out first)")
        if self.enable_prefix_caching:
            self.offer_blocks(request)
            self._num_offered.pop(request.request_id, None)
        self._gpu_tables.pop(request.request_id, None)
        self._cpu_tables[request.request_id] = [self._free_cpu.pop() for _ in range(keep)]
        self._release(table)
        return keep

    def swapped_blocks_of(self, request: Request) -> int:
        return len(self._cpu_tables.get(request.request_id, ()))

    def try_swap_in(self, request: Request, *, admission: bool = True) -> bool:
        """Move ``request``'s swapped blocks back to the GPU; False (and no change) if there is no room."""
        cpu_table = self._cpu_tables.get(request.request_id)
        if cpu_table is None:
            return True
        if len(cpu_table) > self.available_for(request, admission=admission):
            return False
        del self._cpu_tables[request.request_id]
        self._free_cpu.extend(reversed(cpu_table))
        self._take_gpu(request.request_id, len(cpu_table))
        return True
