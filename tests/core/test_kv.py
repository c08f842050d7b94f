import pytest
from hypothesis import given
from hypothesis import strategies as st

from semsched.core.kv import BlockManager, Reservation, blocks_for
from semsched.core.request import InvalidRequestError
from tests.support import make_request


def test_blocks_for_rounds_up() -> None:
    assert [blocks_for(n, 16) for n in (1, 16, 17, 32, 33)] == [1, 1, 2, 2, 3]


def test_allocate_grows_table_and_free_returns_blocks() -> None:
    kv = BlockManager(10, 4)
    request = make_request(prompt=9)
    assert kv.try_allocate(request, 9)
    assert kv.gpu_blocks_of(request) == blocks_for(9, 4)
    request.num_computed_tokens = 9
    assert kv.try_allocate(request, 3)  # 12 tokens still fit in the 3 blocks held
    assert kv.gpu_blocks_of(request) == blocks_for(12, 4)
    assert kv.free(request) == blocks_for(12, 4)
    assert kv.num_free_gpu_blocks == 10


def test_allocation_failure_changes_nothing() -> None:
    kv = BlockManager(2, 4)
    request = make_request(prompt=20)
    assert not kv.try_allocate(request, 20)
    assert kv.num_free_gpu_blocks == 2 and kv.gpu_blocks_of(request) == 0


def test_watermark_applies_to_admission_only() -> None:
    kv = BlockManager(100, 1, watermark=0.1)
    request = make_request(prompt=95)
    assert not kv.try_allocate(request, 95, admission=True)
    assert kv.try_allocate(request, 95, admission=False)


def test_reservation_keeps_blocks_for_important_requests() -> None:
    kv = BlockManager(10, 1, watermark=0.0, reservations=(Reservation(max_priority=0, num_blocks=4),))
    low = make_request("low", prompt=8, priority=2)
    high = make_request("high", prompt=8, priority=0)
    assert not kv.try_allocate(low, 8)
    assert kv.try_allocate(high, 8)


def test_swap_round_trip() -> None:
    kv = BlockManager(8, 4, num_cpu_blocks=8)
    request = make_request(prompt=16)
    kv.try_allocate(request, 16)
    assert kv.can_swap_out(request)
    assert kv.swap_out(request) == 4
    assert kv.num_free_gpu_blocks == 8 and kv.swapped_blocks_of(request) == 4
    assert kv.try_swap_in(request)
    assert kv.gpu_blocks_of(request) == 4 and kv.num_free_cpu_blocks == 8


@pytest.mark.parametrize("field", ["num_gpu_blocks", "block_size", "watermark"])
def test_bad_config_names_field(field: str) -> None:
    args = {"num_gpu_blocks": 4, "block_size": 4, "watermark": 0.0}
    args[field] = -1
    with pytest.raises(InvalidRequestError, match=field):
        BlockManager(args["num_gpu_blocks"], args["block_size"], watermark=args["watermark"])


@given(st.lists(st.tuples(st.integers(1, 40), st.booleans()), min_size=1, max_size=40))
def test_allocated_plus_free_is_total(ops: list[tuple[int, bool]]) -> None:
    kv = BlockManager(32, 4, num_cpu_blocks=16)
    requests = []
    for i, (tokens, release) in enumerate(ops):
        request = make_request(str(i), prompt=tokens)
        if kv.try_allocate(request, tokens):
            requests.append(request)
        if release and requests:
            victim = requests.pop(0)
            if kv.can_swap_out(victim) and i % 2:
                kv.swap_out(victim)
            kv.free(victim)
        held = [b for t in kv.gpu_tables().values() for b in t]
        assert len(held) == len(set(held))
        assert len(held) + kv.num_free_gpu_blocks == kv.num_gpu_blocks
        assert kv.num_free_cpu_blocks == kv.num_cpu_blocks - sum(len(kv.cpu_block_table(r)) for r in requests)
