"""FairBatching (PROSERVE §5.1): an enhanced EDF over per-token deadlines.

The ``j``-th output token of request ``r`` (``j`` from 0) is due at ``arrival + TTFT SLO + j * TPOT SLO``, the
deadline of PROSERVE's TDG (eq. 3, :mod:`semsched.metrics.tdg`); a request without a TTFT SLO, or without a TPOT
SLO for ``j > 0``, has an infinitely late deadline. Each step serves, in this order:

1. **urgent decodes**: running decodes whose next token is due within ``margin_ms`` of now (default: within the
   request's own TPOT SLO), earliest deadline first;
2. **prefills**: running requests in their prompt, earliest deadline first, then waiting requests in deadline
   order (``waiting_key``), admitted by the core;
3. **slack decodes**, earliest deadline first, only with the budget left.

The step's token budget is capped as Sarathi's (:class:`semsched.policies.sarathi.TBTBudget`): urgent decodes plus
the largest prefill priced within the TBT SLO (at least one token), then as many slack decodes as still keep the
priced step within it. With no prefill to serve every decode runs.

**What the core's hooks force.** The core serves running requests (in ``running_order``) before it admits waiting
ones, so slack decodes cannot literally come after waiting prefills. The policy therefore estimates the waiting
prefill demand from its own bookkeeping (the waiting requests, in deadline order, that the free KV blocks and
sequence slots would admit) and lets in only the slack decodes that fit in the budget this demand leaves; if an
admission then takes fewer tokens than estimated, that budget goes unused for a step. For the same reason a
waiting request never overtakes a running prompt with a later deadline.
"""

from __future__ import annotations

import heapq
import itertools
import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import ClassVar

from semsched.core.policy import Policy, PolicyConfig, SchedulerView, SortKey, StepBudget
from semsched.core.request import Request
from semsched.latency import load_profile
from semsched.policies.params import param
from semsched.policies.registry import register_policy
from semsched.policies.sarathi import DEFAULT_PROFILE, TBTBudget, check_slo_ms
from semsched.policies.vllm_fcfs import (
    WaitingBook,
    admission_blocks,
    is_waiting,
    step_blocks,
    whole_sequence_blocks,
)


def token_deadline_s(request: Request, index: int) -> float:
    """When output token ``index`` (from 0) of ``request`` is due: arrival + TTFT SLO + index * TPOT SLO."""
    if request.ttft_slo_s is None or (index > 0 and request.tpot_slo_s is None):
        return math.inf
    decode_s = request.tpot_slo_s * index if index > 0 and request.tpot_slo_s is not None else 0.0
    return request.arrival_time_s + request.ttft_slo_s + decode_s


def _first(item: tuple[float, Request]) -> float:
    return item[0]


def next_deadline_s(request: Request) -> float:
    """When ``request``'s next output token is due."""
    return token_deadline_s(request, request.num_output_tokens)


@dataclass(frozen=True)
class FairBatchingConfig(PolicyConfig):
    margin_ms: float | None = param(
        None, "a decode is urgent (served before prefills) when its next token is due within this many ms "
              "(default: within the request's own TPOT SLO)")
    tbt_slo_ms: float | None = param(
        None, "TBT SLO the step budget is priced against, ms (default: the tightest tpot_slo_s among the running "
              "requests, else default_tbt_slo_ms)")
    default_tbt_slo_ms: float = param(100.0, "TBT SLO when neither tbt_slo_ms nor any running request gives one, "
                                             "ms")
    profile: str = param(DEFAULT_PROFILE, "latency profile that prices each step (use the engine's own)")

    def __post_init__(self) -> None:
        super().__post_init__()
        check_slo_ms("margin_ms", self.margin_ms, optional=True)
        check_slo_ms("tbt_slo_ms", self.tbt_slo_ms, optional=True)
        check_slo_ms("default_tbt_slo_ms", self.default_tbt_slo_ms, optional=False)
        if not isinstance(self.profile, str) or not self.profile:
            raise ValueError(f"profile must be a profile name or path, got {self.profile!r}")


def _fits_in_place(requests: Sequence[Request], view: SchedulerView) -> bool:
    """:func:`~semsched.policies.vllm_fcfs.fits_in_place` (no margin), the engine asked once per priority: the
    blocks a running request may take depend on its priority (the reservations it may not use) alone."""
    if not requests:
        return True
    room: dict[int, int] = {}
    for request in requests:
        if request.priority not in room:
            room[request.priority] = view.available_blocks(request, admission=False)
    return step_blocks(requests, view.block_size) <= min(room.values())


class _OrderedBook(WaitingBook):
    """A :class:`WaitingBook` read lazily from the front: a step looks at the waiting requests it may admit and
    one more, not at every entry (``first`` selects from all of them, stale ones included)."""

    def in_order(self) -> Iterator[Request]:
        """The waiting requests in order (``first(n)`` is the first n), found by walking the heap from its root:
        O(k log k) for the first k."""
        if self.head() is None:
            return
        heap, live = self._heap, self._live
        frontier = [(heap[0], 0)]
        while frontier:
            entry, index = heapq.heappop(frontier)
            _, seq, request = entry
            if live.get(request.request_id) == seq and is_waiting(request):
                yield request
            for child in (2 * index + 1, 2 * index + 2):
                if child < len(heap):
                    heapq.heappush(frontier, (heap[child], child))


@dataclass(frozen=True)
class _StepPlan:
    """What one step serves of the running requests, and its token budget (None: the engine's)."""

    time_s: float
    order: tuple[Request, ...]
    budget: StepBudget | None
    #: nothing to prefill: no running prompt, and no waiting request the free blocks and slots would admit
    idle_prefill: bool = False


@register_policy
class FairBatching(Policy):
    """Enhanced EDF: near-deadline decodes, then prefills by deadline, then the other decodes with what is left.

    starvation: possible for requests without a TTFT SLO (infinitely late deadlines) while requests with one keep
    arriving, and for decodes without a TPOT SLO, which get only the budget prefills leave; a request with
    deadlines is passed only by requests due before it.
    """

    name: ClassVar[str] = "fairbatching"
    config_cls: ClassVar[type[PolicyConfig]] = FairBatchingConfig
    static_victim_key: ClassVar[bool] = True
    config: FairBatchingConfig

    def __init__(self, config: PolicyConfig | None = None) -> None:
        super().__init__(config)
        cfg = self.config
        self.budget = TBTBudget(load_profile(cfg.profile), cfg.tbt_slo_ms, cfg.default_tbt_slo_ms)
        self._waiting = _OrderedBook(lambda request: self.waiting_key(request, 0.0))
        self._plan: _StepPlan | None = None

    # ---- ordering ----------------------------------------------------------------------------------------
    def waiting_key(self, request: Request, now_s: float) -> SortKey:
        return (next_deadline_s(request), request.arrival_time_s)

    def victim_key(self, request: Request) -> SortKey:
        """Under KV pressure the latest first-token deadline goes first (static while the request runs)."""
        return (token_deadline_s(request, 0), request.arrival_time_s)

    def urgent(self, request: Request, now_s: float) -> bool:
        """Whether a decode's next token is due within the margin."""
        margin_ms = self.config.margin_ms
        margin_s = margin_ms / 1000.0 if margin_ms is not None else request.tpot_slo_s
        return margin_s is not None and next_deadline_s(request) - now_s <= margin_s

    @property
    def stable_between_events(self) -> bool:  # type: ignore[override]
        """True after a plan with nothing to prefill: every running request decodes, in an order that changes
        nothing but the order of the batch. Until an event, decodes take blocks and free none, and the waiting
        requests (keyed once) stay out: the admissible ones (whole sequence within the free blocks and slots)
        stay none, and the engine's head, which did not fit, fits less. So each step repeats the plan."""
        plan = self._plan
        return plan is not None and plan.idle_prefill

    # ---- callbacks ---------------------------------------------------------------------------------------
    def on_arrival(self, request: Request, now_s: float) -> None:
        self._waiting.add(request)

    def on_preempt(self, request: Request, now_s: float) -> None:
        self._waiting.add(request)

    # ---- the step ----------------------------------------------------------------------------------------
    def running_order(
        self, running: Sequence[Request], view: SchedulerView, now_s: float
    ) -> Sequence[Request] | None:
        return self._step_plan(view, now_s).order

    def step_budget(self, view: SchedulerView, now_s: float) -> StepBudget | None:
        return self._step_plan(view, now_s).budget

    def _step_plan(self, view: SchedulerView, now_s: float) -> _StepPlan:
        """This step's plan, made once per step (the core asks ``step_budget`` first, the vLLM adapter may ask
        ``running_order`` first)."""
        if self._plan is None or self._plan.time_s != now_s:
            self._plan = self._make_plan(view, now_s)
        return self._plan

    def _make_plan(self, view: SchedulerView, now_s: float) -> _StepPlan:
        running, prompts, urgent, slack = self._partition(view.running_requests(), now_s)
        waiting = self._admissible_waiting(view, prompts)
        demand = sum(r.num_uncomputed_tokens for r in (*prompts, *waiting))
        engine = view.budget
        if demand == 0:  # nothing to prefill: every decode runs
            return _StepPlan(now_s, tuple(urgent + slack), None, idle_prefill=True)
        slo_s = self.budget.slo_s(running)
        context = sum(r.num_computed_tokens for r in urgent)
        cached = max(r.num_computed_tokens for r in (*prompts, *waiting))
        most = engine.max_num_batched_tokens - len(urgent)
        if most <= 0:  # the urgent decodes take the whole budget
            return _StepPlan(now_s, tuple(urgent + prompts + slack), None)
        prefill = min(demand, self.budget.prefill_tokens(slo_s, len(urgent), context, cached, most))
        joining = self.budget.decodes_within(slo_s, prefill, cached, slack, len(urgent), context)
        joining = min(joining, most - prefill)
        budget = StepBudget(len(urgent) + prefill + joining, engine.max_num_seqs)
        order = urgent + prompts + slack[:joining]
        if len(order) < len(running) and not _fits_in_place(order, view):
            # what runs may have to preempt under KV pressure, possibly itself: hold nothing back, so the step
            # cannot come out empty while decodes wait
            return _StepPlan(now_s, tuple(urgent + prompts + slack), None)
        return _StepPlan(now_s, tuple(order), budget)

    def _partition(self, requests: Sequence[Request], now_s: float) -> tuple[
            list[Request], list[Request], list[Request], list[Request]]:
        """The running requests by next deadline (stably), and split into prompts (:func:`in_prompt`), urgent
        decodes (:meth:`urgent`) and slack decodes; one pass, with :func:`next_deadline_s` inlined."""
        keyed: list[tuple[float, Request]] = []
        for request in requests:
            ttft_s, tpot_s, index = request.ttft_slo_s, request.tpot_slo_s, request.num_output_tokens
            if ttft_s is None or (index > 0 and tpot_s is None):
                keyed.append((math.inf, request))
            else:
                decode_s = tpot_s * index if index > 0 and tpot_s is not None else 0.0
                keyed.append((request.arrival_time_s + ttft_s + decode_s, request))
        keyed.sort(key=_first)
        margin_ms = self.config.margin_ms
        margin_s = margin_ms / 1000.0 if margin_ms is not None else None
        prompts: list[Request] = []
        urgent: list[Request] = []
        slack: list[Request] = []
        for deadline_s, request in keyed:
            computed, prompt = request.num_computed_tokens, request.prompt_tokens
            if computed < prompt or prompt + request.num_output_tokens - computed > 1:  # in_prompt
                prompts.append(request)
                continue
            within_s = margin_s if margin_s is not None else request.tpot_slo_s
            (urgent if within_s is not None and deadline_s - now_s <= within_s else slack).append(request)
        return [r for _, r in keyed], prompts, urgent, slack

    def _admissible_waiting(self, view: SchedulerView, prompts: Sequence[Request]) -> list[Request]:
        """The waiting requests, in deadline order, that the free blocks and sequence slots would admit after
        the running ``prompts`` take the blocks of their remaining prompt (the core stops at the first that does
        not fit)."""
        slots = view.budget.max_num_seqs - view.num_running
        block_size = view.block_size
        taken = step_blocks(prompts, block_size)
        admitted: list[Request] = []
        for request in itertools.islice(self._waiting.in_order(), max(slots, 0)):
            taken += whole_sequence_blocks(request, block_size)
            if taken > admission_blocks(view, request, 0):
                break
            admitted.append(request)
        return admitted
