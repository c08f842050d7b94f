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
import heapq
import itertools
import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import ClassVar, NamedTuple

from semsched.core.kv import blocks_for
from semsched.core.policy import Policy, PolicyConfig, SchedulerView, SortKey, StepBudget
from semsched.core.request import WAITING_STATES, Request
from semsched.latency import AnalyticLatencyModel, load_profile
from semsched.policies.params import param
from semsched.policies.registry import register_policy
from semsched.policies.sarathi import DEFAULT_PROFILE, TBTBudget, check_slo_ms, last_within
from semsched.policies.vllm_fcfs import WaitingBook, admission_blocks, whole_sequence_blocks

#: :func:`~semsched.policies.vllm_fcfs.is_waiting`'s states, as a tuple: ``in`` compares them by identity (a
#: frozenset hashes each state with Enum.__hash__, a Python call)


def token_deadline_s(request: Request, index: int) -> float:
    """When output token ``index`` (from 0) of ``request`` is due: arrival + TTFT SLO + index * TPOT SLO."""
    if request.ttft_slo_s is None or (index > 0 and request.tpot_slo_s is None):
        return math.inf
    decode_s = request.tpot_slo_s * index if index > 0 and request.tpot_slo_s is not None else 0.0
    return request.arrival_time_s + request.ttft_slo_s + decode_s


def next_deadline_s(request: Request) -> float:
    """When ``request``'s next output token is due."""
    return token_deadline_s(request, request.num_output_tokens)


def _next_deadlines_s(requests: Sequence[Request]) -> list[float]:
    """:func:`next_deadline_s` of each of ``requests``, inlined (this runs every step)."""
    return [
        math.inf if r.ttft_slo_s is None or (r.num_output_tokens > 0 and r.tpot_slo_s is None)
        else r.arrival_time_s + r.ttft_slo_s
        + (r.tpot_slo_s * r.num_output_tokens if r.num_output_tokens > 0 and r.tpot_slo_s is not None else 0.0)
        for r in requests]


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


def _fits_in_place(requests: Sequence[Request], blocks: int, view: SchedulerView) -> bool:
    """:func:`~semsched.policies.vllm_fcfs.fits_in_place` (no margin) for running ``requests`` that may allocate
    ``blocks`` (their :func:`~semsched.policies.vllm_fcfs.step_blocks`, counted by the caller), the engine asked
    once per priority: the blocks a running request may take depend on its priority (the reservations it may
    not use) alone."""
    if not requests:
        return True
    one_per_priority = {request.priority: request for request in requests}.values()
    return blocks <= min(view.available_blocks(request, admission=False) for request in one_per_priority)


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
            if live.get(request.request_id) == seq and request.state in WAITING_STATES:  # (is_waiting)
                yield request
            for child in (2 * index + 1, 2 * index + 2):
                if child < len(heap):
                    heapq.heappush(frontier, (heap[child], child))


class _StepPlan(NamedTuple):
    """What one step serves of the running requests, and its token budget (None: the engine's)."""

    time_s: float
    order: tuple[Request, ...]
    budget: StepBudget | None
    #: nothing to prefill: no running prompt, and no waiting request the free blocks and slots would admit
    idle_prefill: bool = False


@dataclass(slots=True)
class _Split:
    """The running requests of one step split into prompts, urgent and slack decodes (each by next deadline), and
    the sums the step's budget needs."""

    prompts: list[Request]
    urgent: list[Request]
    slack: list[Request]
    #: the prompts' uncomputed tokens, the most computed tokens among them (0 without prompts), their step_blocks
    prompt_tokens: int
    prompt_cached: int
    prompt_blocks: int
    #: the urgent decodes' summed context
    urgent_context: int
    #: entry ``k``: the summed context of the first ``k`` slack decodes
    slack_contexts: list[int]


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
        self._slo_of: tuple[tuple[Request, ...], float] | None = None  # (running requests, their TBT SLO)
        self._margin_s = cfg.margin_ms / 1000.0 if cfg.margin_ms is not None else None
        latency = self.budget.latency
        #: the analytic model, whose decode part _decodes_within prices itself (None: any other model)
        self._analytic = latency if isinstance(latency, AnalyticLatencyModel) else None

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
        waiting = self._admissible_waiting(view, split.prompt_blocks)
        demand, cached = split.prompt_tokens, split.prompt_cached
        for request in waiting:
            demand += request.num_uncomputed_tokens
            cached = max(cached, request.num_computed_tokens)
        engine = view.budget
        if demand == 0:  # nothing to prefill: every decode runs
            return _StepPlan(now_s, tuple(urgent + slack), None, idle_prefill=True)
        slo_s = self._slo_s(running)
        context = split.urgent_context
        most = engine.max_num_batched_tokens - len(urgent)
        if most <= 0:  # the urgent decodes take the whole budget
            return _StepPlan(now_s, tuple(urgent + prompts + slack), None)
        prefill = min(demand, self.budget.prefill_tokens(slo_s, len(urgent), context, cached, most))
        joining = self._decodes_within(slo_s, prefill, cached, split)
        joining = min(joining, most - prefill)
        budget = StepBudget(len(urgent) + prefill + joining, engine.max_num_seqs)
        order = urgent + prompts + slack[:joining]
        if len(order) < len(running) and not _fits_in_place(order, len(urgent) + split.prompt_blocks + joining,
                                                            view):
            # what runs may have to preempt under KV pressure, possibly itself: hold nothing back, so the step
            # cannot come out empty while decodes wait
            return _StepPlan(now_s, tuple(urgent + prompts + slack), None)
        return _StepPlan(now_s, tuple(order), budget)

    def _slo_s(self, running: Sequence[Request]) -> float:
        """:meth:`TBTBudget.slo_s` of ``running``, kept while the running requests stay the same (it reads only
        their SLOs, which do not change)."""
        if self._slo_of is None or running != self._slo_of[0]:  # (a tuple, the core's, or a copy)
            running = tuple(running)
            self._slo_of = (running, self.budget.slo_s(running))
        return self._slo_of[1]

    def _partition(self, requests: Sequence[Request], now_s: float, block_size: int) -> _Split:
        """The running requests by next deadline (stably), split into prompts (:func:`in_prompt`), urgent
        decodes (:meth:`urgent`) and slack decodes, with the sums the step's budget needs; one pass after the
        sort."""
        deadlines = _next_deadlines_s(requests)
        margin_s = self._margin_s
        split = _Split([], [], [], 0, 0, 0, 0, [0])
        prompts, urgent, slack, slack_contexts = split.prompts, split.urgent, split.slack, split.slack_contexts
        urgent_context = slack_context = 0
        for index in sorted(range(len(requests)), key=deadlines.__getitem__):  # (stable, as a sort by deadline)
            request = requests[index]
            computed, prompt = request.num_computed_tokens, request.prompt_tokens
            if computed < prompt or prompt + request.num_output_tokens - computed > 1:  # in_prompt
                prompts.append(request)
                continue
            within_s = margin_s if margin_s is not None else request.tpot_slo_s
            if within_s is not None and deadlines[index] - now_s <= within_s:
                urgent.append(request)
                urgent_context += computed
            else:
                slack.append(request)
                slack_context += computed
                slack_contexts.append(slack_context)
        split.urgent_context = urgent_context
        for request in prompts:
            computed = request.num_computed_tokens
            split.prompt_tokens += request.num_uncomputed_tokens
            split.prompt_cached = max(split.prompt_cached, computed)
            # step_blocks: the prompt's whole remaining sequence
            split.prompt_blocks += whole_sequence_blocks(request, block_size) - blocks_for(computed, block_size)
        return split

    def _decodes_within(self, slo_s: float, prefill: int, cached: int, split: _Split) -> int:
        """:meth:`TBTBudget.decodes_within` for the slack decodes beside the urgent ones, from the summed
        contexts the partition kept; for the analytic model the prefill part is priced once, and each count
        adds the decode part as ``step_time_s`` does (same floats: its sum of one chunk is ``0.0 +`` the
        chunk), without its per-call checks (the counts are not negative)."""
        model, slack, num_urgent, context = self._analytic, split.slack, len(split.urgent), split.urgent_context
        if model is None:
            return self.budget.decodes_within(slo_s, prefill, cached, slack, num_urgent, context)
        config, slack_contexts = model.config, split.slack_contexts
        prefill_s = 0.0 + model.chunk_time_s(prefill, cached) if prefill else 0.0

        def within(count: int) -> bool:
            if num_urgent + count == 0:
                return prefill_s <= slo_s
            decode_s = float(context + slack_contexts[count]) * config.gamma1 + config.gamma2
            return (prefill_s + decode_s if prefill else decode_s) <= slo_s

        if within(len(slack)):
            return len(slack)
        guess = None
        if slack and config.gamma1 > 0:  # (TBTBudget._analytic_decodes)
            most_context = (slo_s - prefill_s - config.gamma2) / config.gamma1
            if math.isfinite(most_context):  # (the summed contexts are context + slack_contexts)
                guess = bisect.bisect_right(slack_contexts, most_context, key=context.__add__) - 1
        return last_within(within, len(slack), guess)

    def _admissible_waiting(self, view: SchedulerView, prompt_blocks: int) -> list[Request]:
        """The waiting requests, in deadline order, that the free blocks and sequence slots would admit after
        the running prompts take the blocks of their remaining prompt (``prompt_blocks``; the core stops at the
        first that does not fit). The head is checked before the book is walked: most steps stop there."""
        slots = view.budget.max_num_seqs - view.num_running
        head = self._waiting.head() if slots > 0 else None
        if head is None:
            return []
        block_size = view.block_size
        taken = prompt_blocks + whole_sequence_blocks(head, block_size)
        if taken > admission_blocks(view, head, 0):
            return []
        admitted = [head]
        waiting = self._waiting.in_order()
        next(waiting)  # (the head)
        for request in itertools.islice(waiting, slots - 1):
            taken += whole_sequence_blocks(request, block_size)
            if taken > admission_blocks(view, request, 0):
                break
            admitted.append(request)
        return admitted
