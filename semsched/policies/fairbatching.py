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

import bisect
import itertools
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import ClassVar, NamedTuple

from semsched.core.policy import Policy, PolicyConfig, SchedulerView, SortKey, StepBudget
from semsched.core.request import WAITING_STATES, Request
from semsched.latency import load_profile
from semsched.policies.params import param
from semsched.policies.passes import (
    DeadlineSplit,
    next_deadline,
    sorted_book_demand,
    split_by_deadline,
    token_deadline,
)
from semsched.policies.registry import register_policy
from semsched.policies.sarathi import DEFAULT_PROFILE, TBTBudget, check_slo_ms
from semsched.policies.vllm_fcfs import WaitingBook

#: when output token ``index`` (from 0) of a request is due, and when its next one is (compiled passes)
token_deadline_s = token_deadline
next_deadline_s = next_deadline


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


def _fits_in_place(requests: Sequence[Request], blocks: int, view: SchedulerView,
                   one_priority: Request | None = None) -> bool:
    """:func:`~semsched.policies.vllm_fcfs.fits_in_place` (no margin) for running ``requests`` that may allocate
    ``blocks`` (their :func:`~semsched.policies.vllm_fcfs.step_blocks`, counted by the caller), the engine asked
    once per priority: the blocks a running request may take depend on its priority (the reservations it may
    not use) alone. ``one_priority``: a request of the only priority among ``requests`` (the engine is asked
    for it), when the caller knows one."""
    if not requests:
        return True
    if one_priority is not None:
        return blocks <= view.available_blocks(one_priority, admission=False)
    one_per_priority = {request.priority: request for request in requests}.values()
    return blocks <= min(view.available_blocks(request, admission=False) for request in one_per_priority)


class _OrderedBook(WaitingBook):
    """A :class:`WaitingBook` kept as a sorted list, read lazily from the front: a step looks at the waiting
    requests it may admit and one more, not at every entry. Entries of requests no longer waiting leave when they
    come to the front (the core admits from the front, in the same order), as from the heap."""

    def __init__(self, key: Callable[[Request], SortKey]) -> None:
        super().__init__(key)
        #: (key, sequence number, request) in ascending order from ``_start`` (the heap's pop order)
        self._sorted: list[tuple[SortKey, int, Request]] = []
        self._start = 0

    def add(self, request: Request) -> None:
        seq = next(self._seq)
        self._live[request.request_id] = seq
        entries = self._sorted
        if self._start > 64 and 2 * self._start > len(entries):  # (the stale front, dropped in one go)
            del entries[:self._start]
            self._start = 0
        bisect.insort(entries, (self._key(request), seq, request), lo=self._start)

    def head(self) -> Request | None:
        return next(self.in_order(), None)

    def demand(self, slots: int, taken: int, view: SchedulerView) -> tuple[int, int]:
        """The uncomputed tokens of the first ``slots`` waiting requests, in order, while their whole sequences'
        blocks, added to ``taken``, fit the blocks an admission may take (the first that does not fit ends it),
        and the most computed tokens among them (compiled: :func:`~semsched.policies.passes.sorted_book_demand`,
        which drops the stale entries it meets at the front, as :meth:`in_order` does)."""
        demand, cached, self._start = sorted_book_demand(self._sorted, self._start, self._live, slots, taken, view,
                                                         view.block_size)
        return demand, cached

    def first(self, count: int) -> list[Request]:
        return list(itertools.islice(self.in_order(), count)) if count > 0 else []

    def in_order(self) -> Iterator[Request]:
        """The waiting requests in order (``first(n)`` is the first n); stale entries at the front are dropped."""
        entries, live = self._sorted, self._live
        index = self._start
        while index < len(entries):
            _, seq, request = entries[index]
            index += 1
            if live.get(request.request_id) == seq and request.state in WAITING_STATES:  # (is_waiting)
                yield request
            elif index - 1 == self._start:  # stale at the front: it leaves the book
                self._start = index
                if live.get(request.request_id) == seq:
                    del live[request.request_id]


class _RunningFacts(NamedTuple):
    """What a plan reads of the running requests that stays while they stay the same (their SLOs and priorities
    do not change)."""

    running: tuple[Request, ...]
    #: their TBT SLO (:meth:`TBTBudget.slo_s`)
    slo_s: float
    #: one of them when they all share one priority, else None
    one_priority: Request | None


class _StepPlan(NamedTuple):
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
        self._facts: _RunningFacts | None = None
        self._margin_s = cfg.margin_ms / 1000.0 if cfg.margin_ms is not None else None

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
        running = view.running_requests()
        split = self._partition(running, now_s, view.block_size)
        prompts, urgent, slack = split.prompts, split.urgent, split.slack
        waiting_demand, waiting_cached = self._waiting_demand(view, split.prompt_blocks)
        demand, cached = split.prompt_tokens + waiting_demand, max(split.prompt_cached, waiting_cached)
        engine = view.budget
        if demand == 0:  # nothing to prefill: every decode runs
            return _StepPlan(now_s, tuple(urgent + slack), None, idle_prefill=True)
        facts = self._running_facts(running)
        slo_s = facts.slo_s
        context = split.urgent_context
        most = engine.max_num_batched_tokens - len(urgent)
        if most <= 0:  # the urgent decodes take the whole budget
            return _StepPlan(now_s, tuple(urgent + prompts + slack), None)
        prefill = min(demand, self.budget.prefill_tokens(slo_s, len(urgent), context, cached, most))
        joining = self.budget.summed_decodes_within(slo_s, prefill, cached, len(urgent), context,
                                                    split.slack_contexts)
        joining = min(joining, most - prefill)
        budget = StepBudget(len(urgent) + prefill + joining, engine.max_num_seqs)
        order = urgent + prompts + slack[:joining]
        if len(order) < len(running) and not _fits_in_place(order, len(urgent) + split.prompt_blocks + joining,
                                                            view, facts.one_priority):
            # what runs may have to preempt under KV pressure, possibly itself: hold nothing back, so the step
            # cannot come out empty while decodes wait
            return _StepPlan(now_s, tuple(urgent + prompts + slack), None)
        return _StepPlan(now_s, tuple(order), budget)

    def _running_facts(self, running: Sequence[Request]) -> _RunningFacts:
        """The running requests' TBT SLO and shared priority, kept while the running requests stay the same."""
        facts = self._facts
        if facts is None or running != facts.running:  # (a tuple, the core's, or a copy)
            running = tuple(running)
            one_priority = running[0] if len({request.priority for request in running}) == 1 else None
            facts = _RunningFacts(running, self.budget.slo_s(running), one_priority)
            self._facts = facts
        return facts

    def _partition(self, requests: Sequence[Request], now_s: float, block_size: int) -> DeadlineSplit:
        """The running requests by next deadline (stably), split into prompts (:func:`in_prompt`), urgent
        decodes (:meth:`urgent`) and slack decodes, with the sums the step's budget needs (a compiled pass)."""
        return split_by_deadline(requests, now_s, self._margin_s, block_size)

    def _waiting_demand(self, view: SchedulerView, prompt_blocks: int) -> tuple[int, int]:
        """The uncomputed tokens of the waiting requests, in deadline order, that the free blocks and sequence
        slots would admit after the running prompts take the blocks of their remaining prompt (``prompt_blocks``;
        the core stops at the first that does not fit), and the most computed tokens among them (0 if none)."""
        slots = view.budget.max_num_seqs - view.num_running
        if slots <= 0:
            return 0, 0
        return self._waiting.demand(slots, prompt_blocks, view)
