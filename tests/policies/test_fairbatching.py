"""fairbatching: per-token deadlines (TDG eq. 3); near-deadline decodes, then prefills, then the other decodes."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from semsched.core.plan import StepResult
from semsched.core.request import Request, RequestState
from semsched.core.scheduler import Scheduler
from semsched.policies import PolicyError, make_policy
from semsched.policies.fairbatching import FairBatching, _OrderedBook, next_deadline_s, token_deadline_s
from semsched.policies.vllm_fcfs import WaitingBook, in_prompt, step_blocks
from tests.policies.factories import service_order
from tests.support import make_request, make_scheduler, random_requests, run_checked


def test_token_deadlines_follow_tdg() -> None:
    request = make_request("r", arrival=2.0, ttft_slo_s=1.0, tpot_slo_s=0.1)
    assert [token_deadline_s(request, j) for j in range(3)] == pytest.approx([3.0, 3.1, 3.2])
    no_tpot = make_request("s", arrival=2.0, ttft_slo_s=1.0)
    assert token_deadline_s(no_tpot, 0) == 3.0 and token_deadline_s(no_tpot, 1) == math.inf
    assert token_deadline_s(make_request("t"), 0) == math.inf


def _decoding_scheduler() -> Scheduler:
    """Two requests decoding after one step at t=0: "tight" (TPOT 20 ms) and "slack" (no SLO), and a budget of
    40 tokens that a waiting 400-token prompt would fill."""
    scheduler = make_scheduler("fairbatching:tbt_slo_ms=1000", block_size=4, num_gpu_blocks=1000,
                               max_num_batched_tokens=40, watermark=0.0)
    scheduler.add_request(make_request("tight", prompt=8, output=50, ttft_slo_s=0.5, tpot_slo_s=0.02), 0.0)
    scheduler.add_request(make_request("slack", prompt=8, output=50), 0.0)
    plan = scheduler.schedule(0.0)
    scheduler.update(plan, StepResult(end_time_s=0.01))
    return scheduler


def test_near_deadline_decodes_go_before_prefills_and_slack_decodes_after() -> None:
    scheduler = _decoding_scheduler()
    scheduler.add_request(make_request("prompt", prompt=400, output=5, arrival=0.01, ttft_slo_s=5.0), 0.01)
    # at 0.51 s the tight request's second token (due 0.52 s) is within its TPOT margin (20 ms)
    plan = scheduler.schedule(0.51)
    assert [r.request_id for r in plan.decode] == ["tight"]
    assert [c.request.request_id for c in plan.prefill] == ["prompt"]
    assert plan.prefill[0].num_tokens == 40 - 1  # the slack decode waits: the prefill takes the rest


def test_slack_decodes_run_with_the_budget_left() -> None:
    scheduler = _decoding_scheduler()
    scheduler.add_request(make_request("short", prompt=10, output=5, arrival=0.01, ttft_slo_s=5.0), 0.01)
    plan = scheduler.schedule(0.02)  # nobody near a deadline; the prompt leaves budget for both decodes
    assert sorted(r.request_id for r in plan.decode) == ["slack", "tight"]
    assert [c.request.request_id for c in plan.prefill] == ["short"]


def test_waiting_order_is_the_first_token_deadline() -> None:
    requests = [
        make_request("blocker", output=50, ttft_slo_s=1.0),
        make_request("loose", arrival=0.1, ttft_slo_s=10.0),
        make_request("none", arrival=0.2),
        make_request("tight", arrival=0.3, ttft_slo_s=0.5),
    ]
    assert service_order("fairbatching", requests) == ["blocker", "tight", "loose", "none"]


@pytest.mark.parametrize(("blocks", "budget"), [(12, 2), (40, 16), (400, 512)])
def test_finishes_everything_on_small_engines(blocks: int, budget: int) -> None:
    requests = random_requests(3, 30, rate=30.0, max_prompt=150, max_output=30, with_slos=True)
    for request in requests:
        request.tpot_slo_s = 0.05
    scheduler = make_scheduler("fairbatching", block_size=4, num_gpu_blocks=blocks, max_num_batched_tokens=budget,
                               max_num_seqs=4, watermark=0.0)
    run_checked(scheduler, requests)
    assert len(scheduler.finished) + len(scheduler.rejected) == len(requests)


def test_bad_config_names_the_field() -> None:
    with pytest.raises(PolicyError, match="margin_ms"):
        make_policy("fairbatching:margin_ms=-1")
    assert make_policy("fairbatching:margin_ms=5").describe()["margin_ms"] == 5.0


def _running_mix(seed: int, count: int) -> list[Request]:
    """Running requests in their prompt or decoding, with and without SLOs, some sharing a deadline."""
    rng = np.random.default_rng(seed)
    requests = []
    for i in range(count):
        prompt, output = int(rng.integers(1, 60)), int(rng.integers(1, 40))
        slos = [(None, None), (0.5, None), (0.5, 0.05), (1.0, 0.02)][int(rng.integers(0, 4))]
        request = make_request(str(i), prompt=prompt, output=output, arrival=float(rng.integers(0, 3)) * 0.25,
                               ttft_slo_s=slos[0], tpot_slo_s=slos[1], priority=int(rng.integers(0, 3)))
        request.state = RequestState.RUNNING
        emitted = int(rng.integers(0, output))
        request.num_output_tokens = emitted
        decoding = emitted > 0 and rng.random() < 0.8
        request.num_computed_tokens = prompt + emitted - 1 if decoding else int(rng.integers(0, prompt + emitted))
        requests.append(request)
    return requests


@pytest.mark.parametrize("margin", ["", ":margin_ms=30"])
def test_partition_is_a_sort_by_next_deadline_then_a_split(margin: str) -> None:
    policy = make_policy(f"fairbatching{margin}")
    assert isinstance(policy, FairBatching)
    for seed in range(30):
        requests = _running_mix(seed, int(seed % 7) * 5)
        now_s = 0.3 + 0.05 * seed
        split = policy._partition(requests, now_s, 4)
        ordered = sorted(requests, key=next_deadline_s)
        prompts = [r for r in ordered if in_prompt(r)]
        decodes = [r for r in ordered if not in_prompt(r)]
        urgent = [r for r in decodes if policy.urgent(r, now_s)]
        slack = [r for r in decodes if not policy.urgent(r, now_s)]
        assert (split.prompts, split.urgent, split.slack) == (prompts, urgent, slack)
        assert split.prompt_tokens == sum(r.num_uncomputed_tokens for r in prompts)
        assert split.prompt_cached == max((r.num_computed_tokens for r in prompts), default=0)
        assert split.prompt_blocks == step_blocks(prompts, 4)
        assert split.urgent_context == sum(r.num_computed_tokens for r in urgent)
        contexts = [sum(r.num_computed_tokens for r in slack[:count]) for count in range(len(slack) + 1)]
        assert split.slack_contexts == contexts


def test_ordered_book_reads_as_the_waiting_book() -> None:
    """The sorted-list book gives the heap book's order (ties: first told first), dropping requests that left
    (admitted, ended) or were told again, as requests come and go."""
    rng = np.random.default_rng(5)
    key = lambda request: (request.arrival_time_s // 0.5,)  # noqa: E731 (coarse: many ties)
    ordered, heap = _OrderedBook(key), WaitingBook(key)
    requests = [make_request(str(i), arrival=float(rng.random() * 5)) for i in range(300)]
    told: list[Request] = []
    for step, request in enumerate(requests):
        ordered.add(request)
        heap.add(request)
        told.append(request)
        for other in rng.choice(told, size=min(3, len(told)), replace=False):
            roll = rng.random()
            if roll < 0.3:
                other.state = RequestState.RUNNING
            elif roll < 0.4:
                other.state = RequestState.PREEMPTED_RECOMPUTE
                ordered.add(other)
                heap.add(other)
            elif roll < 0.45:
                other.state = RequestState.FINISHED
        count = int(rng.integers(0, 8))
        assert ordered.head() is heap.head()
        assert ordered.first(count) == heap.first(count)
        if step % 25 == 0:
            assert list(ordered.in_order()) == heap.first(len(requests))


class _RoomView:
    """available_blocks by priority (what the book's demand asks of an engine), and the block size."""

    block_size = 16

    def __init__(self, rooms: dict[int, int]) -> None:
        self.rooms = rooms

    def available_blocks(self, request: Request, *, admission: bool = True) -> int:
        assert admission
        return self.rooms[request.priority]


def test_the_books_demand_is_its_order_read_until_one_does_not_fit() -> None:
    """The compiled demand gives what reading the book in order gives: the uncomputed tokens of the first
    ``slots`` waiting requests while their whole sequences' blocks fit each one's room (the first that does not
    ends it) and the most computed tokens among them, and leaves the book as that reading does (the stale
    entries it met at the front dropped)."""
    rng = np.random.default_rng(11)
    key = lambda request: (request.arrival_time_s // 0.5,)  # noqa: E731 (coarse: many ties)
    books = _OrderedBook(key), _OrderedBook(key)
    requests = [make_request(str(i), prompt=int(rng.integers(1, 400)), arrival=float(rng.random() * 5),
                             priority=int(rng.integers(0, 3))) for i in range(300)]
    for step, request in enumerate(requests):
        for book in books:
            book.add(request)
        for other in rng.choice(requests[:step + 1], size=min(3, step + 1), replace=False):
            roll = rng.random()
            if roll < 0.3:
                other.state = RequestState.RUNNING
            elif roll < 0.4:
                other.state = RequestState.PREEMPTED_RECOMPUTE
                other.num_computed_tokens = int(rng.integers(0, other.prompt_tokens))
                for book in books:
                    book.add(other)
        view = _RoomView({priority: int(rng.integers(0, 60)) for priority in range(3)})
        slots, blocks = int(rng.integers(0, 12)), int(rng.integers(0, 10))
        taken, demand, cached = blocks, 0, 0
        for waiting in itertools.islice(books[1].in_order(), slots):  # the reading it stands for
            taken += -(-waiting.num_tokens // view.block_size)
            if taken > view.rooms[waiting.priority]:
                break
            demand += waiting.num_uncomputed_tokens
            cached = max(cached, waiting.num_computed_tokens)
        assert books[0].demand(slots, blocks, view) == (demand, cached)
        assert (len(books[0]), books[0]._start) == (len(books[1]), books[1]._start)
    assert list(books[0].in_order()) == list(books[1].in_order())
