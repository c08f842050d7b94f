"""The displacement and class-gating rules both schedulers share (semsched/core/displacement.py)."""

from dataclasses import replace

from hypothesis import given
from hypothesis import strategies as st

from semsched.core.displacement import (
    Need,
    Release,
    Room,
    best_class,
    excluded,
    fits,
    release,
    take,
    victims_to_displace,
)


def test_a_need_is_its_first_chunk_sized_by_the_budget_left() -> None:
    need = Need(computed_tokens=0, uncomputed_tokens=100, block_size=16)
    assert need.blocks(tokens_left=40) == 3  # a 40-token chunk
    assert need.blocks(tokens_left=500) == 7  # the whole prompt
    assert need.blocks(tokens_left=0) == 1  # at least one token
    assert replace(need, whole_tokens=100).blocks(tokens_left=40) == 7  # vLLM's whole-prompt admission
    assert replace(need, extra_slots=20).blocks(tokens_left=40) == 4
    assert replace(need, held_blocks=2).blocks(tokens_left=40) == 1


def test_fits_needs_a_slot_and_the_blocks() -> None:
    need = Need(0, 64, 16)  # 4 blocks
    assert fits(need, Room(free_blocks=4, free_seqs=1, tokens=64))
    assert not fits(need, Room(free_blocks=3, free_seqs=1, tokens=64))
    assert not fits(need, Room(free_blocks=100, free_seqs=0, tokens=64))


def test_take_and_release_move_blocks_slots_and_budget() -> None:
    room = Room(free_blocks=10, free_seqs=2, tokens=100)
    assert take(Need(0, 64, 16), room) == Room(6, 1, 36)
    assert release(room, Release(blocks=3, tokens=1)) == Room(13, 3, 101)


def test_the_fewest_victims_from_the_front() -> None:
    need = Need(0, 64, 16)  # 4 blocks
    room = Room(free_blocks=1, free_seqs=0, tokens=64)
    victims = [Release(2, 1), Release(2, 1), Release(5, 1)]
    assert victims_to_displace(need, room, victims) == 2  # 1 + 2 + 2 >= 4 after two
    assert victims_to_displace(need, replace(room, free_blocks=4, free_seqs=1), victims) == 0  # fits already


def test_slot_bound_one_victim_per_candidate() -> None:
    """Plenty of KV, no sequence slot: one victim gives the slot (the case the adapter got wrong, issue 13)."""
    need = Need(0, 32, 16)
    room = Room(free_blocks=1000, free_seqs=0, tokens=512)
    assert victims_to_displace(need, room, [Release(3, 1), Release(3, 1)]) == 1


def test_nothing_is_displaced_when_no_prefix_makes_room() -> None:
    need = Need(0, 64, 16)
    room = Room(free_blocks=0, free_seqs=0, tokens=64)
    assert victims_to_displace(need, room, [Release(1, 1), Release(1, 1)]) is None
    assert victims_to_displace(need, room, []) is None


def test_returned_budget_can_lengthen_the_chunk_beyond_what_victims_free() -> None:
    """A victim's budget lengthens the candidate's first chunk; if its blocks do not cover that, no victim goes."""
    need = Need(0, 64, 16)
    room = Room(free_blocks=1, free_seqs=0, tokens=16)  # a 16-token chunk needs 1 block
    assert victims_to_displace(need, room, [Release(blocks=1, tokens=48)]) is None  # now 64 tokens: 4 blocks
    assert victims_to_displace(need, room, [Release(blocks=3, tokens=48)]) == 1


@given(
    need_tokens=st.integers(1, 400),
    free_blocks=st.integers(-5, 30),
    free_seqs=st.integers(-2, 3),
    tokens=st.integers(1, 256),
    victims=st.lists(st.tuples(st.integers(0, 10), st.integers(0, 64)), max_size=6),
)
def test_the_count_is_the_shortest_prefix_that_fits(
    need_tokens: int, free_blocks: int, free_seqs: int, tokens: int, victims: list[tuple[int, int]]
) -> None:
    need = Need(0, need_tokens, 16)
    room = Room(free_blocks, free_seqs, tokens)
    releases = [Release(*v) for v in victims]
    count = victims_to_displace(need, room, releases)
    rooms = [room]
    for victim in releases:
        rooms.append(release(rooms[-1], victim))
    fitting = [k for k, r in enumerate(rooms) if fits(need, r)]
    assert count == (fitting[0] if fitting else None)


def test_class_gating() -> None:
    assert best_class({}) is None
    assert best_class({2: 1, 0: 0, 1: 3}) == 1  # classes with no unfinished request do not count
    assert not excluded(1, best=1)
    assert excluded(2, best=1)
    assert excluded(None, best=1)  # a request without a class does not run beside a class that is present
    assert not excluded(2, best=None)  # no class present: nothing is gated
