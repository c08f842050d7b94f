"""SlideBatching (seed 001, PROSERVE §4.2, Algorithm 1): a time-budgeted batch whose order slides between
deadline-first and density-first with the load.

Every step, for every unfinished request ``r`` (running or waiting):

* ``r.exec``: the estimated cost of its next work in the batch model of eq. 4-7, corrected online (§4.1,
  :class:`~semsched.latency.correction.CorrectedEstimator`, fed by the :meth:`on_step` callback with the steps
  the engine really ran): a decode costs ``a_d·lkv + b_d``; a request in its prompt (or recomputing after a
  preemption) costs its whole remaining prefill ``a_p·lq² + b_p·lq·lkv + c_p·lq``.
* ``r.remain``: the time left until its next token's TDG deadline (eq. 3): arrival + TTFT SLO + (i-1)·TPOT SLO
  for its i-th token. A token already past its deadline has a negative ``remain``; it stays in the queue (its
  later tokens can still be on time: deadlines are fixed, so a late request can catch up).
* ``r.density``: the gain of that token, ``w_r(i)`` (first-token or decode weight times the priority weight),
  over ``r.exec``.

The time budget is ``t_budget = max(min_r remain, η)`` (line 7; η defaults to the smallest TPOT SLO queued;
``max_budget_ms`` caps it when no request has a deadline soon, and with no deadline at all the engine's token
budget is the only limit). A request is URGENT when ``remain < γ·φ`` where φ is the load judgement: ``aggressive``
(φa, eq. 8: the batches the whole queue needs, ``t_budget / (t_budget - t_c) · Σ exec``), ``conservative`` (φc, eq.
9: the same up to the request's own position in deadline order) or ``prefill`` (φp, for prefill instances of a PD-
disaggregated cluster: ``Σ exec + |Q|·t_c``). URGENT requests go first by descending density, NORMAL ones by
ascending ``remain``; the batch is filled in that order from ``t_c`` until the budget is spent, a prompt taking the
largest chunk that fits what is left (GETMAXCHUNK). Ablations (the paper's Fig. 15): ``order=deadline`` (no
partition: everything NORMAL), ``order=density`` (everything URGENT), ``latency_aware=false`` (no time budget: the
engine's token budget; the order still uses the estimator).

How the plan reaches the engine through the core's hooks (the same in the simulator and inside vLLM):
``step_budget`` is the planned tokens, ``running_order`` the planned running requests in plan order (the others
hold their KV and compute nothing this step), and the waiting queue is re-keyed every step with each request's
position in the plan. The core serves running requests before waiting ones; the one place that matters is a
running prompt cut by GETMAXCHUNK (always the plan's last item): if waiting requests precede it in the plan it is
left out of this step, so it cannot take their tokens.

Weights: ``priority_weights`` per priority (0 most important; priorities past the list take its last value),
the paper's 2 and 1 by default. The first-token weight is ``first_token_weight``, or when unset the mean prompt
length over the mean output length of the requests seen so far (the paper's w_p:w_d setting, learned online).
"""

from __future__ import annotations

import bisect
import functools
import itertools
import math
import operator
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Literal, NamedTuple

import numpy as np

from semsched.core.policy import Policy, PolicyConfig, SchedulerView, SortKey, StepBudget
from semsched.core.request import Request, RequestState
from semsched.latency import AnalyticLatencyModel, load_profile
from semsched.latency.batch import BatchConfig, BatchLatencyModel
from semsched.latency.correction import CorrectedEstimator, CorrectionConfig
from semsched.latency.derive_profiles import derive_batch_profile
from semsched.policies.params import check_float, check_int, param
from semsched.policies.registry import register_policy
from semsched.policies.vllm_fcfs import is_waiting

#: η when neither the configuration nor any queued request's TPOT SLO gives one (ms)
DEFAULT_ETA_MS = 25.0
#: re-key the waiting queue at every step (its order is the plan's, which moves with time and load)
EVERY_STEP_S = 1e-6


@dataclass(frozen=True)
class SlideBatchingConfig(PolicyConfig):
    profile: str = param("a100-qwen1.5-7b-batch",
                         "latency profile the estimator starts from: a batch one (PROSERVE eq. 4-7), or an "
                         "analytic one it is fitted to; use the engine's own (semsched profile)")
    eta_ms: float | None = param(None, "lower bound of the time budget, η (ms), so batches stay efficient when a "
                                       "deadline is near or past; None: the smallest TPOT SLO in the queue "
                                       f"({DEFAULT_ETA_MS:g} ms when none has one)")
    max_budget_ms: float | None = param(None, "upper bound of the time budget (ms); None: the nearest deadline, "
                                              "or only the engine's token budget when no request has one")
    gamma: float = param(1.0, "aggressiveness γ: URGENT when remain < γ·φ (larger: more density-first)")
    phi: Literal["aggressive", "conservative", "prefill"] = param(
        "aggressive", "load judgement: aggressive (φa, eq. 8), conservative (φc, eq. 9), prefill (φp, PD prefill "
                      "instances)")
    order: Literal["slide", "deadline", "density"] = param(
        "slide", "slide (Alg. 1), or the ablations: deadline (all NORMAL) or density (all URGENT)")
    latency_aware: bool = param(True, "cap each step at the time budget (false: the engine's token budget, the "
                                      "paper's 'w/o latency-aware' ablation)")
    priority_weights: tuple[float, ...] = param((2.0, 1.0), "TDG weight of priority 0/1/2/... (the last applies "
                                                            "to every less important priority)")
    first_token_weight: float | None = param(None, "w_p, the first token's weight relative to a decode token "
                                                   "(None: mean prompt / mean output length, learned online)")
    min_chunk_tokens: int = param(32, "smallest prompt chunk worth a step unless it completes the prompt")
    correction: bool = param(True, "correct the estimator online from the steps the engine ran (§4.1)")
    momentum: float = param(0.9, "momentum θ of the correction factor")
    window_s: float = param(1.0, "engine time (s) whose steps the correction averages")

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.eta_ms is not None:
            check_float("eta_ms", self.eta_ms, 0.0, 3_600_000.0)
        if self.max_budget_ms is not None:
            check_float("max_budget_ms", self.max_budget_ms, max(self.eta_ms or 0.0, 1e-3), 3_600_000.0)
        check_float("gamma", self.gamma, 0.0, 1e6)
        if not self.priority_weights:
            raise ValueError("priority_weights must list at least one weight")
        for index, weight in enumerate(self.priority_weights):
            check_float(f"priority_weights[{index}]", weight, 0.0, 1e9)
        if self.first_token_weight is not None:
            check_float("first_token_weight", self.first_token_weight, 0.0, 1e9)
        check_int("min_chunk_tokens", self.min_chunk_tokens, 1, 2**31 - 1)
        self.correction_config()  # its own checks, now

    def correction_config(self) -> CorrectionConfig:
        return CorrectionConfig(momentum=self.momentum, window_s=self.window_s, enabled=self.correction)


@dataclass(frozen=True, slots=True)
class SlidePlan:
    """One step's plan: what Algorithm 1 chose at ``time_s`` (read by tests and the experiment's timelines)."""

    time_s: float
    budget_s: float  # t_budget (inf: no time limit)
    estimated_s: float  # t_batch of the chosen requests, t_c included
    tokens: int  # planned tokens (a decode counts one)
    running: tuple[Request, ...]  # the chosen running requests, in plan order
    chosen: tuple[tuple[str, int], ...]  # (request id, tokens) of every chosen request, in plan order
    rank: dict[str, int]  # each unfinished request's position in the sorted queue (complete: every one)
    ranked: tuple[Request, ...]  # those requests in that order
    num_urgent: int
    num_normal: int
    #: False for a plan made on the running requests alone (none waiting could start): ``rank`` and ``ranked``
    #: then hold only the running ones, and ``waiting`` gives the waiting ones in order, when asked
    complete: bool = True
    waiting: Callable[[], Iterator[Request]] | None = None


_FIRST, _SECOND, _REQUEST_ID = operator.itemgetter(0), operator.itemgetter(1), operator.attrgetter("request_id")


@functools.cache
def batch_model(profile: str) -> BatchLatencyModel:
    """The estimator's starting model: a batch profile as it is, or eq. 4-7 least-squares fitted to an analytic
    profile's step times on a fixed grid of batches (``semsched.latency.derive_profiles``; once per process)."""
    model = load_profile(profile)  # an unknown profile fails here, when the policy is built
    if isinstance(model, BatchLatencyModel):
        return model
    if isinstance(model, AnalyticLatencyModel):
        fitted, _report = derive_batch_profile(profile)
        return fitted
    raise ValueError(f"profile {profile!r}: slide-batching needs a batch profile (PROSERVE eq. 4-7) or an "
                     "analytic one to fit it to")


@register_policy
class SlideBatching(Policy):
    """PROSERVE's SlideBatching (Algorithm 1): a time-budgeted batch ordered by density or by deadline.

    starvation: possible: URGENT requests go by density, so a long prompt (low density) yields to every denser
    urgent request, and NORMAL ones by deadline, so a request without SLOs waits behind every one with them.
    """

    name: ClassVar[str] = "slide-batching"
    config_cls: ClassVar[type[PolicyConfig]] = SlideBatchingConfig
    rekey_interval_s: ClassVar[float | None] = EVERY_STEP_S
    waiting_order_fixed: ClassVar[bool] = True  # (the plan's order, made once per instant)
    config: SlideBatchingConfig

    def __init__(self, config: PolicyConfig | None = None) -> None:
        super().__init__(config)
        cfg = self.config
        self.estimator = CorrectedEstimator(batch_model(cfg.profile), cfg.correction_config())
        self._live: dict[str, Request] = {}
        self._rows: dict[str, _Row] = {}  # each live request's unchanging columns (its arrival order among them)
        self._num_always_due = 0  # live requests with a deadline on every token (_always_due)
        self._next_seq = 0
        #: the live requests not running as far as the policy knows (arrived or preempted; those the engine has
        #: admitted since leave at the next plan, which reads the running ones from the engine's view)
        self._waiting: dict[str, Request] = {}
        self._waiting_version = 0
        self._waiting_stats: _WaitingStats | None = None
        #: each waiting request's columns as last computed (:class:`_WaitingEntry`; with the block size they
        #: count in), so a change to the waiting set computes only the requests that joined it
        self._entries: tuple[int, dict[str, _WaitingEntry]] = (0, {})
        self._running_cache: tuple[tuple[int, ...], list[Request], list[_Row]] | None = None
        #: the order that merges the running requests' columns with the waiting ones' (arrival at this policy),
        #: kept while both sets stay
        self._merge_cache: tuple[tuple[tuple[int, ...], int], _Merge] | None = None
        self._running_seen: tuple[tuple[Request, ...], tuple[int, ...]] | None = None  # (requests, their id()s)
        self._deadline_free: tuple[tuple[int, ...], _DeadlineFree] | None = None  # (key, what it keeps)
        #: the running requests (their id()s) that the waiting set was last brought up to date with; None after a
        #: preemption or a request left (the only events that can make the next sync differ for the same set)
        self._synced_running: tuple[int, ...] | None = None
        self._plan: SlidePlan | None = None
        self._engine_budget: StepBudget | None = None  # the last one a hook was given (waiting_key has none)
        self._view: SchedulerView | None = None  # the engine's state, from the last hook that gave it
        self._prompt_tokens_seen = 0
        self._arrivals_seen = 0
        self._output_tokens_finished = 0
        self._finished_seen = 0

    # ---- bookkeeping -------------------------------------------------------------------------------------
    def on_arrival(self, request: Request, now_s: float) -> None:
        self._live[request.request_id] = request
        self._keep_row(request.request_id, _row(request, self._next_seq, self))
        self._next_seq += 1
        self._waiting[request.request_id] = request
        self._waiting_version += 1
        self._plan = None  # (several arrivals may share an instant: the next hook plans with all of them)
        self._prompt_tokens_seen += request.prompt_tokens
        self._arrivals_seen += 1

    def on_finish(self, request: Request, now_s: float) -> None:
        self._forget(request.request_id)
        self._output_tokens_finished += request.num_output_tokens
        self._finished_seen += 1

    def on_leave(self, request: Request) -> None:
        self._forget(request.request_id)
        self._plan = None

    def on_preempt(self, request: Request, now_s: float) -> None:
        if request.request_id in self._live:
            self._waiting[request.request_id] = request
            self._waiting_version += 1
            self._synced_running = None

    def _forget(self, request_id: str) -> None:
        self._synced_running = None
        self._live.pop(request_id, None)
        self._keep_row(request_id, None)
        if self._waiting.pop(request_id, None) is not None:
            self._waiting_version += 1

    def _keep_row(self, request_id: str, row: _Row | None) -> None:
        """Keep ``row`` as the request's (None: forget it), counting the live requests that are always due."""
        old = self._rows.pop(request_id, None)
        self._entries[1].pop(request_id, None)
        if old is not None and _always_due(old):
            self._num_always_due -= 1
        if row is not None:
            self._rows[request_id] = row
            self._num_always_due += _always_due(row)

    def on_step(self, prefill: Sequence[tuple[int, int]], num_decode: int, decode_context_tokens: int,
                duration_s: float, now_s: float) -> None:
        self.estimator.observe(prefill, num_decode, decode_context_tokens, duration_s, now_s)

    def first_token_weight(self) -> float:
        """w_p: configured, or mean prompt over mean output length so far (1 before anything finished)."""
        if self.config.first_token_weight is not None:
            return self.config.first_token_weight
        if not self._finished_seen or not self._output_tokens_finished:
            return 1.0
        mean_prompt = self._prompt_tokens_seen / self._arrivals_seen
        return mean_prompt / (self._output_tokens_finished / self._finished_seen)

    def priority_weight(self, priority: int) -> float:
        weights = self.config.priority_weights
        return weights[min(max(priority, 0), len(weights) - 1)]

    # ---- hooks -------------------------------------------------------------------------------------------
    def waiting_key(self, request: Request, now_s: float) -> SortKey:
        rank = self._complete_plan(now_s).rank.get(request.request_id)
        return (math.inf if rank is None else float(rank), request.arrival_time_s)

    def waiting_order(self, view: SchedulerView, now_s: float) -> Iterator[Request]:
        """The waiting requests in plan order (those chosen first): the order ``waiting_key`` gives, without
        re-keying the queue every step."""
        plan = self.plan(now_s, view.budget, view)
        if plan.waiting is not None:
            return plan.waiting()
        return (r for r in plan.ranked if is_waiting(r))

    def step_budget(self, view: SchedulerView, now_s: float) -> StepBudget | None:
        plan = self.plan(now_s, view.budget, view)
        if not self.config.latency_aware or not plan.rank:
            return None
        return StepBudget(max(1, plan.tokens), view.budget.max_num_seqs)

    def running_order(self, running: Sequence[Request], view: SchedulerView, now_s: float) -> Sequence[Request]:
        plan = self.plan(now_s, view.budget, view)
        if not self.config.latency_aware:  # no time budget: every running request, in plan order
            return sorted(running, key=lambda r: plan.rank.get(r.request_id, len(plan.rank)))
        chosen = plan.running
        if chosen == tuple(running):  # (requests compare by identity)
            return running  # (already in plan order, every one chosen: the caller need not reorder)
        here = set(map(id, running))
        return list(itertools.compress(chosen, map(here.__contains__, map(id, chosen))))  # (those in running)

    def victim_key(self, request: Request) -> SortKey:
        """Under KV pressure the request that ranks last in the current plan goes first."""
        plan = self._plan
        rank = plan.rank.get(request.request_id) if plan is not None else None
        if rank is None and plan is not None and not plan.complete:
            rank = self._complete_plan(plan.time_s).rank.get(request.request_id)
        return (math.inf if rank is None else float(rank), request.arrival_time_s)

    # ---- Algorithm 1 -------------------------------------------------------------------------------------
    @property
    def last_plan(self) -> SlidePlan | None:
        """The plan of the latest step (None before the first)."""
        return self._plan

    def plan(self, now_s: float, budget: StepBudget | None = None, view: SchedulerView | None = None) -> SlidePlan:
        """The plan at ``now_s`` (computed once per instant; ``budget`` is the engine's token budget and
        sequence cap, ``view`` its KV state, each remembered from the last call that gave one)."""
        if budget is not None:
            self._engine_budget = budget
        if view is not None:
            self._view = view
        if self._plan is None or self._plan.time_s != now_s:
            self._plan = self._make_plan(now_s)
        return self._plan

    def _complete_plan(self, now_s: float) -> SlidePlan:
        """The plan at ``now_s`` with every unfinished request ranked (a plan made on the running requests
        alone is made again on all of them: the same choice, the waiting requests' ranks added)."""
        plan = self._plan
        if plan is None or plan.time_s != now_s or not plan.complete:
            plan = self._plan = self._full_plan(now_s)
        return plan

    def _unfinished(self) -> list[Request]:
        live = self._live
        ended = [i for i, r in live.items() if r.state.is_terminal]
        for request_id in ended:  # rejected, dropped or aborted requests end without on_finish
            self._forget(request_id)
        return list(live.values())

    def _make_plan(self, now_s: float) -> SlidePlan:
        view = self._view
        if view is not None:
            try:
                plan = self._running_plan(now_s, view)
            except _NeedsFullPlan:
                plan = None
            if plan is not None:
                return plan
        return self._full_plan(now_s)

    def _full_plan(self, now_s: float) -> SlidePlan:
        requests = self._unfinished()
        if not requests:
            return SlidePlan(now_s, math.inf, 0.0, 0, (), (), {}, (), 0, 0)
        return self._plan_of(requests, _Queue.of(requests, self, now_s), now_s)

    def _plan_of(self, requests: Sequence[Request], queue: _Queue, now_s: float,
                 request_ids: list[str] | None = None) -> SlidePlan:
        """Algorithm 1 on every unfinished request (``requests``, in arrival order at this policy; ``request_ids``:
        their ids, when kept)."""
        budget_s = self._budget_s(queue)
        urgent = self._urgent(queue, budget_s)
        order = _sorted(queue, urgent)
        chosen, estimated_s = self._fill(requests, queue, order, budget_s)
        chosen = self._cut_last(requests, chosen, queue)
        running = [requests[i] for i, _ in chosen if requests[i].state is RequestState.RUNNING]
        if len(running) < len(chosen) and running and self._is_cut(requests, chosen[-1]) \
                and requests[chosen[-1][0]].state is RequestState.RUNNING:
            chosen, running = chosen[:-1], running[:-1]  # a cut running prompt would take waiting tokens
        first = list(map(_FIRST, chosen))
        left = [True] * len(order)  # (not chosen)
        for i in first:
            left[i] = False
        ranked = first + list(itertools.compress(order, map(left.__getitem__, order)))
        in_order = tuple(map(requests.__getitem__, ranked))
        ids = list(map(_REQUEST_ID, in_order) if request_ids is None else map(request_ids.__getitem__, ranked))
        num_urgent = urgent.count(True)
        tokens = list(map(_SECOND, chosen))
        return SlidePlan(
            time_s=now_s, budget_s=budget_s, estimated_s=estimated_s, tokens=sum(tokens),
            running=tuple(running), chosen=tuple(zip(ids, tokens, strict=False)),
            rank=dict(zip(ids, range(len(ids)), strict=True)), ranked=in_order,
            num_urgent=num_urgent, num_normal=len(requests) - num_urgent,
        )

    def _running_plan(self, now_s: float, view: SchedulerView) -> SlidePlan | None:
        """The plan of :meth:`_full_plan`, made on the running requests alone when no waiting request can be in
        it (no sequence slot is free, or none's whole sequence fits the blocks it may take), so a step costs
        O(running + log waiting), not a walk over the queue. What the waiting requests add to it comes from
        :class:`_WaitingStats` (kept while the waiting set does not change): the nearest deadline and smallest
        TPOT SLO exactly, and the URGENT threshold's sum of costs within a bound on its rounding; when a request's
        ``remain`` lies within that bound of the threshold (or a case only the full plan covers comes up), None
        or :class:`_NeedsFullPlan`: the full plan decides. None when this shortcut does not apply."""
        cfg = self.config
        if not hasattr(view, "running_requests"):
            return None  # a partial view (a test's): only the full plan, which reads each request's state
        running = view.running_requests()
        key = self._running_key(running)
        if not self._sync_waiting(running, view, key):
            return None
        stats = self._current_waiting_stats(view.block_size)
        requests, rows = self._running_rows(running, key)
        n = len(requests)
        computed = [r.num_computed_tokens for r in requests]
        outputs = [r.num_output_tokens for r in requests]
        engine = self._engine_budget
        max_num_seqs = engine.max_num_seqs if engine is not None else 2**31
        if not n or (cfg.order == "slide" and cfg.phi != "aggressive") \
                or _waiting_may_start(requests, stats, view, max_num_seqs):
            return self._merged_plan(now_s, rows, computed, outputs, stats)
        if stats.size and not self.estimator.beta * stats.min_cost_s >= 1e-9:
            return None  # a waiting cost floored at 1e-9: the sum below would not be beta times theirs
        if cfg.order != "density":
            plan = self._deadline_free_plan(now_s, key, rows, computed, outputs, stats)
            if plan is not None:
                return plan
        queue = _Queue.build(rows, computed, outputs, [True] * n, self, now_s)
        room = _StartRoom(queue, None, max_num_seqs)  # (all started: no KV check is asked of it)
        budget_s = self._budget_s_with(queue, stats, now_s)
        urgent, threshold_s, num_urgent_waiting = self._urgent_with(queue, stats, budget_s, now_s)
        order = _sorted(queue, urgent)
        chosen, estimated_s = self._fill(requests, queue, order, budget_s, room=room)
        chosen = self._cut_last(requests, chosen, queue)
        first = list(map(_FIRST, chosen))
        if len(first) < n:
            taken = set(first)
            first += [i for i in order if i not in taken]
        ranked = tuple(map(requests.__getitem__, first))  # (all running: a cut prompt takes no waiting tokens)
        ids = list(map(_REQUEST_ID, ranked))
        num_urgent = urgent.count(True) + num_urgent_waiting
        size = queue.size + stats.size
        tokens = list(map(_SECOND, chosen))
        return SlidePlan(
            time_s=now_s, budget_s=budget_s, estimated_s=estimated_s, tokens=sum(tokens),
            running=ranked[:len(chosen)], chosen=tuple(zip(ids, tokens, strict=False)),
            rank=dict(zip(ids, range(n), strict=True)), ranked=ranked, num_urgent=num_urgent,
            num_normal=size - num_urgent, complete=False,
            waiting=functools.partial(self._waiting_in_order, stats, now_s, threshold_s),
        )

    def _deadline_free_plan(self, now_s: float, key: tuple[int, ...], rows: list[_Row], computed: list[int],
                            outputs: list[int], stats: _WaitingStats) -> SlidePlan | None:
        """The running-only plan when no queued request has a deadline and every running one decodes (None
        otherwise): every ``remain`` is +inf, so the time budget is too (unless ``max_budget_ms`` caps it: then
        None), no request is URGENT or within the rounding bound of the threshold (``inf < x`` never holds,
        ``|inf - x|`` is inf or nan), the order is by arrival whatever the step (:func:`_by_deadline` on equal
        ``remain``), and the fill takes every decode in that order while the engine's tokens and sequences
        last. What moves from step to step is only ``estimated_s``, the costs summed in that order; the rest is
        kept while the running set stays (:class:`_DeadlineFree`). Not for ``order=density`` (all URGENT)."""
        if (stats.size and stats.deadlines_s[0] != math.inf) or self._num_always_due:
            return None  # (a waiting request's deadline bounds the budget; one always due is running)
        kept = self._deadline_free
        if kept is None or kept[0] != key:
            kept = self._deadline_free = (key, _DeadlineFree.of(rows))
        free = kept[1]
        if not all(outputs[i] for i in free.first_token_due):
            return None
        size = len(rows)
        computed_array = np.fromiter(computed, np.int64, size)  # (cheaper than np.array for a list of ints)
        if _in_prompt(free.prompt, computed_array, np.fromiter(outputs, np.int64, size)).any():
            return None
        budget_s = self._budget_s_within(math.inf, free.min_tpot_s, stats, now_s)
        if budget_s != math.inf:
            return None
        engine = self._engine_budget
        count = size
        if engine is not None:
            count = min(count, engine.max_num_batched_tokens, engine.max_num_seqs)
        if count <= 0:
            return None  # (the fill's progress rule)
        exec_s = np.maximum(self.estimator.decode_times_s(computed_array), 1e-9)
        threshold_s, num_urgent = math.nan, 0
        if self.config.order == "slide":
            threshold_s, slack_s = self._threshold_with(float(exec_s.sum()), size, stats, budget_s)
            num_urgent = self._urgent_waiting(stats, threshold_s, slack_s, now_s)
        # the fill's sum, one by one from t_c (accumulate adds in order; the fill stops past the budget only once
        # the sum is inf)
        terms = np.concatenate(([self.estimator.t_c], exec_s[free.order[:count]]))
        estimated_s = float(np.add.accumulate(terms)[-1])
        if not math.isfinite(estimated_s):
            return None
        running, chosen = free.chosen(count)
        return SlidePlan(
            time_s=now_s, budget_s=budget_s, estimated_s=estimated_s, tokens=count, running=running, chosen=chosen,
            rank=free.rank, ranked=free.ranked, num_urgent=num_urgent,
            num_normal=size + stats.size - num_urgent,
            complete=False, waiting=functools.partial(self._waiting_in_order, stats, now_s, threshold_s),
        )

    def _merged_plan(self, now_s: float, rows: list[_Row], computed: list[int], outputs: list[int],
                     stats: _WaitingStats) -> SlidePlan:
        """The full plan, its queue put together from the running requests' columns and the waiting ones'
        (kept while the waiting set stays), in the full plan's order (arrival at this policy)."""
        if stats.size >= _NUMPY_WAITING_FROM:
            merge = self._merge(rows, stats)
            running = _Queue.build(rows, computed, outputs, [True] * len(rows), self, now_s)
            queue = _Queue.merged(running, stats, merge, self, now_s)
            return self._plan_of(merge.requests, queue, now_s, merge.request_ids)
        every = rows + stats.rows
        if not every:
            return SlidePlan(now_s, math.inf, 0.0, 0, (), (), {}, (), 0, 0)
        seqs = [row.seq for row in every]
        order = sorted(range(len(every)), key=seqs.__getitem__)
        all_computed, all_outputs = computed + stats.computed, outputs + stats.outputs
        started = [True] * len(rows) + [False] * stats.size
        queue = _Queue.build([every[i] for i in order], [all_computed[i] for i in order],
                             [all_outputs[i] for i in order], [started[i] for i in order], self, now_s)
        return self._plan_of([row.request for row in queue.rows], queue, now_s)

    def _merge(self, rows: list[_Row], stats: _WaitingStats) -> _Merge:
        """The order that merges the running requests (``rows``) with the waiting ones (``stats``), kept while
        both sets stay."""
        key = (tuple(map(id, rows)), stats.version)
        if self._merge_cache is None or self._merge_cache[0] != key:
            every = rows + stats.rows
            seqs = [row.seq for row in every]
            positions = sorted(range(len(every)), key=seqs.__getitem__)
            take = operator.itemgetter(*positions)
            requests = list(take([row.request for row in every]))
            self._merge_cache = (key, _Merge(
                take, np.array(positions), requests, list(map(_REQUEST_ID, requests)),
                list(take([True] * len(rows) + [False] * stats.size)),
                np.concatenate(([row.arrival_s for row in rows], stats.arrival_s))[positions],
                min(min((row.tpot_s for row in rows), default=math.inf), stats.min_tpot_s)))
        return self._merge_cache[1]

    def _running_key(self, running: Sequence[Request]) -> tuple[int, ...]:
        """The running requests' id()s, the key of what is kept of the running set: kept with the requests
        themselves while the engine gives the same ones in the same order (requests compare by identity)."""
        members = tuple(running)
        seen = self._running_seen
        if seen is None or seen[0] != members:
            seen = self._running_seen = (members, tuple(map(id, members)))
        return seen[1]

    def _running_rows(self, running: Sequence[Request], key: tuple[int, ...]) -> tuple[list[Request], list[_Row]]:
        """The running requests in the full plan's index order (arrival at this policy) and their rows, kept
        while the running set (``key``: their id()s) does not change."""
        cached = self._running_cache
        if cached is None or cached[0] != key:
            rows = self._rows
            ordered = sorted((rows[r.request_id] for r in running), key=_SEQ_OF)
            cached = self._running_cache = (key, [row.request for row in ordered], ordered)
        return cached[1], cached[2]

    def _sync_waiting(self, running: Sequence[Request], view: SchedulerView, key: tuple[int, ...]) -> bool:
        """Bring the waiting set up to date with the engine's running requests (``key``: their id()s); False when
        the two do not add up to the live requests (then the full plan, which reads every request's state,
        decides). The same running requests as at the last sync, with no preemption or departure since, need no
        walk: each is live and none is waiting (arrivals only add waiting requests)."""
        live, waiting = self._live, self._waiting
        if key == self._synced_running and len(waiting) + len(running) == len(live) \
                and len(waiting) == view.num_waiting:
            return True
        for request in running:
            request_id = request.request_id
            if request_id not in live:
                return False
            if waiting.pop(request_id, None) is not None:
                self._waiting_version += 1
        if len(waiting) + len(running) == len(live) and len(waiting) == view.num_waiting:
            self._synced_running = key
            return True
        self._unfinished()  # requests ended without on_finish (aborted, dropped) leave
        waiting = self._waiting
        if len(waiting) + len(running) == len(self._live) and len(waiting) == view.num_waiting:
            self._synced_running = key
            return True
        return False

    def _waiting_entries(self, block_size: int) -> list[_WaitingEntry]:
        """The waiting requests' entries in their order, each computed again only when its request is new to
        them or has made progress since (a preempted request; an entry is kept while its request is live)."""
        kept_block_size, kept = self._entries
        if kept_block_size != block_size:
            kept = {}
            self._entries = (block_size, kept)
        rows, config = self._rows, self.estimator.model.config
        entries = []
        for request_id in self._waiting:
            entry = kept.get(request_id)
            if entry is None or entry.computed != entry.request.num_computed_tokens \
                    or entry.outputs != entry.request.num_output_tokens:
                entry = kept[request_id] = _WaitingEntry.of(rows[request_id], config, block_size)
            entries.append(entry)
        return entries

    def _current_waiting_stats(self, block_size: int) -> _WaitingStats:
        stats = self._waiting_stats
        if stats is None or stats.version != self._waiting_version or stats.block_size != block_size:
            stats = self._waiting_stats = _WaitingStats.of(self, block_size)
        return stats

    def _budget_s_with(self, queue: _Queue, stats: _WaitingStats, now_s: float) -> float:
        """:meth:`_budget_s` of the whole queue: the running requests' ``queue`` and the waiting ``stats``."""
        return self._budget_s_within(min(queue.remain), min(queue.tpot_s), stats, now_s)

    def _budget_s_within(self, min_remain_s: float, min_tpot_s: float, stats: _WaitingStats,
                         now_s: float) -> float:
        """:meth:`_budget_s_with` from the running requests' smallest ``remain`` and TPOT SLO."""
        if stats.size:
            min_remain_s = min(min_remain_s, stats.deadlines_s[0] - now_s)  # (x - now is monotone in x)
        return self._budget_s_of(min_remain_s, min(min_tpot_s, stats.min_tpot_s))

    def _urgent_with(self, queue: _Queue, stats: _WaitingStats, budget_s: float,
                     now_s: float) -> tuple[list[bool], float, int]:
        """:meth:`_urgent` of the whole queue: the running requests' flags, the threshold ``remain`` is held
        against (nan: none urgent, -inf: all) and how many waiting requests are URGENT."""
        cfg = self.config
        if cfg.order != "slide":
            every = cfg.order == "density"
            return [every] * queue.size, (math.inf if every else math.nan), stats.size if every else 0
        threshold_s, slack_s = self._threshold_with(pairwise_sum(queue.exec_s), queue.size, stats, budget_s)
        remain = queue.remain
        urgent = [r < threshold_s for r in remain]
        if slack_s and any(abs(r - threshold_s) <= slack_s for r in remain):
            raise _NeedsFullPlan
        return urgent, threshold_s, self._urgent_waiting(stats, threshold_s, slack_s, now_s)

    def _threshold_with(self, running_total_s: float, num_running: int, stats: _WaitingStats,
                        budget_s: float) -> tuple[float, float]:
        """The aggressive φ's URGENT threshold of the whole queue (``running_total_s``: the running requests'
        ``exec`` summed as numpy sums them) and the bound on its rounding."""
        t_c = self.estimator.t_c
        scale = budget_s / (budget_s - t_c) if budget_s > t_c else math.inf
        if math.isinf(budget_s):
            scale = 1.0
        # the full plan's sum runs over every request in its own order: this one is equal up to rounding, so a
        # request within the rounding bound of the threshold is left to the full plan
        total_s = running_total_s + self.estimator.beta * stats.cost_s
        threshold_s = self.config.gamma * (scale * total_s)
        if math.isinf(scale) or threshold_s == 0.0:
            return threshold_s, 0.0  # the threshold is exact: inf, nan or 0 whatever the sum
        return threshold_s, abs(threshold_s) * (8 * (num_running + stats.size + 16) * 2.0**-53)

    @staticmethod
    def _urgent_waiting(stats: _WaitingStats, threshold_s: float, slack_s: float, now_s: float) -> int:
        """How many waiting requests are URGENT against ``threshold_s`` (:class:`_NeedsFullPlan` when one lies
        within ``slack_s`` of it)."""
        num_urgent = stats.count_remain_below(threshold_s, now_s)
        if slack_s and stats.count_remain_below(threshold_s - slack_s, now_s) != \
                stats.count_remain_at_most(threshold_s + slack_s, now_s):
            raise _NeedsFullPlan
        return num_urgent

    def _waiting_in_order(self, stats: _WaitingStats, now_s: float, threshold_s: float) -> Iterator[Request]:
        """The waiting requests of a running-only plan in the full plan's order (URGENT by density, then by
        deadline), sorted when first asked for: the core asks only when it has tokens left to admit with."""
        if not stats.size:
            return
        remain = [deadline_s - now_s for deadline_s in stats.deadlines_unsorted_s]
        if self.config.order != "slide":
            urgent = [self.config.order == "density"] * stats.size
        else:
            urgent = [r < threshold_s for r in remain]
        beta, first_weight = self.estimator.beta, self.first_token_weight()
        keys = []
        for index, (row, cost_s, outputs) in enumerate(zip(stats.rows, stats.costs_s, stats.outputs, strict=True)):
            if urgent[index]:
                exec_s = beta * cost_s
                if exec_s < 1e-9:
                    exec_s = 1e-9
                secondary = -((first_weight * row.weight if outputs == 0 else row.weight) / exec_s)
            else:
                secondary = remain[index]
            keys.append((not urgent[index], secondary, row.arrival_s, row.seq, index))
        keys.sort()
        for key in keys:
            request = stats.rows[key[-1]].request
            if is_waiting(request):
                yield request

    @staticmethod
    def _is_cut(requests: Sequence[Request], item: tuple[int, int]) -> bool:
        index, tokens = item
        return tokens < requests[index].num_uncomputed_tokens and requests[index].num_uncomputed_tokens > 1

    def _cut_last(self, requests: Sequence[Request], chosen: list[tuple[int, int]],
                  queue: _Queue) -> list[tuple[int, int]]:
        """The core gives a request ``min(uncomputed, tokens left)``: a prompt cut by GETMAXCHUNK must come last,
        or it takes the tokens planned for those after it (decodes that still fitted the budget). Only a
        request in its prompt can be cut."""
        if not queue.any_prefill:
            return chosen
        flags = queue.prefill
        cut = [item for item in chosen if flags[item[0]] and self._is_cut(requests, item)]
        if not cut:
            return chosen
        return [item for item in chosen if item not in cut] + cut

    def _budget_s(self, queue: _Queue) -> float:
        """t_budget = max(min remain, η), capped by ``max_budget_ms``; inf when nothing has a deadline."""
        min_remain_s = min(queue.remain) if queue.arrays is None else float(queue.arrays.remain.min())
        return self._budget_s_of(min_remain_s, min(queue.tpot_s) if queue.arrays is None else
                                 queue.arrays.min_tpot_s)

    def _budget_s_of(self, min_remain_s: float, min_tpot_s: float) -> float:
        """:meth:`_budget_s` from the queue's smallest ``remain`` and TPOT SLO."""
        cfg = self.config
        budget_s = min_remain_s
        if cfg.max_budget_ms is not None:
            budget_s = min(budget_s, cfg.max_budget_ms / 1e3)
        return max(budget_s, self._eta_s_of(min_tpot_s))

    def eta_s(self, queue: _Queue) -> float:
        """η: configured, else the smallest TPOT SLO among the queued requests. The paper keeps t_budget within
        [η, max TPOT SLO]; with η below the TPOT SLO a late token shrinks every step to η, and the per-step
        constant t_c then eats the engine (azure-conv at 0.8x capacity, TTFT 3.4 s / TPOT 69 ms SLOs: η = 25 ms
        attained 37 % of SLOs, η = the TPOT SLO 74 %, FCFS 53 %)."""
        return self._eta_s_of(min(queue.tpot_s) if queue.arrays is None else queue.arrays.min_tpot_s)

    def _eta_s_of(self, min_tpot_s: float) -> float:
        """:meth:`eta_s` from the queue's smallest TPOT SLO (inf: none)."""
        if self.config.eta_ms is not None:
            return self.config.eta_ms / 1e3
        return min_tpot_s if math.isfinite(min_tpot_s) else DEFAULT_ETA_MS / 1e3

    def _urgent(self, queue: _Queue, budget_s: float) -> list[bool]:
        cfg = self.config
        if cfg.order != "slide":
            return [cfg.order == "density"] * queue.size
        t_c = self.estimator.t_c
        remain = queue.remain
        if cfg.phi == "prefill":
            threshold_s = cfg.gamma * (_total_s(queue) + queue.size * t_c)
            return _below(queue, threshold_s)
        # steps per unit of work: a step holds budget - t_c of it (eq. 8-9); none when budget <= t_c
        scale = budget_s / (budget_s - t_c) if budget_s > t_c else math.inf
        if math.isinf(budget_s):
            scale = 1.0
        if cfg.phi == "aggressive":
            threshold_s = cfg.gamma * (scale * _total_s(queue))
            return _below(queue, threshold_s)  # (inf remain against an inf threshold: not urgent)
        urgent = [False] * queue.size  # conservative: the work up to each request's own place in deadline order
        exec_s, gamma, total_s = queue.exec_s, cfg.gamma, 0.0
        for i in _by_deadline(queue):
            total_s += exec_s[i]
            urgent[i] = remain[i] < gamma * (scale * total_s)
        return urgent

    def _fill(self, requests: Sequence[Request], queue: _Queue, order: list[int], budget_s: float,
              room: _StartRoom | None = None) -> tuple[list[tuple[int, int]], float]:
        """Lines 14-18: take requests in order from t_c until the time budget (and the engine's token budget
        and sequence cap) is spent; a prompt takes the largest chunk that fits (GETMAXCHUNK)."""
        engine = self._engine_budget
        tokens_left = engine.max_num_batched_tokens if engine is not None else 2**31
        seqs_left = engine.max_num_seqs if engine is not None else 2**31
        if not self.config.latency_aware:
            budget_s = math.inf
        estimated_s = self.estimator.t_c
        chosen: list[tuple[int, int]] = []
        partial = room is not None  # the queue holds the running requests only
        if room is None:
            room = _StartRoom(queue, self._view, seqs_left)
        started, prefill, exec_s = queue.started, queue.prefill, queue.exec_s
        # after a prompt cut to the budget, only decodes (one fractional item, as in a knapsack): the fill goes on
        # over the decodes after it alone (a prompt there takes no token, and admits changes nothing)
        items: list[int] | None = order
        while items:
            candidates, items = items, None
            for position, i in enumerate(candidates):
                if estimated_s >= budget_s or tokens_left <= 0 or seqs_left <= 0:
                    break
                if not started[i] and not room.admits(i, requests[i]):
                    continue  # the KV cache could not hold its whole prompt beside the prompts already started
                left_s = budget_s - estimated_s
                if not prefill[i]:
                    if exec_s[i] > left_s:
                        continue
                    room.take(i)
                    chosen.append((i, 1))
                    estimated_s += exec_s[i]
                    tokens_left -= 1
                    seqs_left -= 1
                    continue
                request = requests[i]
                tokens = self._max_chunk(request, left_s, tokens_left)
                if tokens == 0:
                    continue
                room.take(i)
                chosen.append((i, tokens))
                estimated_s += self.estimator.chunk_time_s(tokens, request.num_computed_tokens)
                tokens_left -= tokens
                seqs_left -= 1
                if tokens < request.num_uncomputed_tokens:  # cut
                    rest = candidates[position + 1:]
                    items = list(itertools.compress(rest, map(operator.not_, map(prefill.__getitem__, rest))))
                    break
        if not chosen and queue.size:  # progress: the first request in order that can start, even past the budget
            i = next((j for j in order if started[j] or room.admits(j, requests[j])), order[0])
            request = requests[i]
            if partial and prefill[i]:
                raise _NeedsFullPlan  # the overrun chunk reads every request's deadline
            tokens = 1 if not prefill[i] else self._overrun_chunk(request, queue, tokens_left)
            chosen.append((i, tokens))
            estimated_s += exec_s[i] if not prefill[i] else \
                self.estimator.chunk_time_s(tokens, request.num_computed_tokens)
        return chosen, estimated_s

    def _overrun_chunk(self, request: Request, queue: _Queue, tokens_left: int) -> int:
        """The chunk of a prompt that must run although no chunk fits the time budget (its smallest chunk costs
        more than the budget at its context). While a decode waits, ``min_chunk_tokens`` (the least delay for it);
        with none, the step delays only first tokens, so the chunk may last until the nearest first-token deadline
        still ahead (the engine's token budget when every one has passed): a long prompt then needs a few steps,
        not thousands of ``min_chunk_tokens`` each."""
        smallest = min(request.num_uncomputed_tokens, max(1, tokens_left), self.config.min_chunk_tokens)
        if not all(queue.prefill):
            return smallest
        limit_s = min((r for r in queue.remain if r > 0), default=math.inf)
        return max(smallest, self._max_chunk(request, limit_s - self.estimator.t_c, tokens_left))

    def _max_chunk(self, request: Request, left_s: float, tokens_left: int) -> int:
        """GETMAXCHUNK: the most prompt tokens whose estimated chunk time fits ``left_s`` (0 when fewer than
        ``min_chunk_tokens`` fit and they would not complete the prompt)."""
        cached, most = request.num_computed_tokens, min(request.num_uncomputed_tokens, tokens_left)
        chunk_s = self.estimator.chunk_time_s
        if math.isinf(left_s) or chunk_s(most, cached) <= left_s:
            return most
        low = self._chunk_within(left_s, cached, most)
        return low if low >= min(self.config.min_chunk_tokens, most) else 0

    def _chunk_within(self, left_s: float, cached: int, most: int) -> int:
        """The largest chunk c < ``most`` with ``chunk_time_s(c, cached) <= left_s`` (0 if none), where
        ``chunk_time_s(most)`` does not fit: eq. 5 is a quadratic in c, solved, then the root's neighbours checked
        with the estimator itself, so the answer is the one a search with it would find. A model that is not
        increasing in c (a negative fitted coefficient) is searched."""
        chunk_s = self.estimator.chunk_time_s
        config, beta = self.estimator.model.config, self.estimator.beta
        quad, lin = config.a_p, config.b_p * cached + config.c_p
        if quad >= 0 and lin >= 0 and quad + lin > 0 and beta > 0:
            const = config.d_p - left_s / beta
            if quad > 0:
                root = (-lin + math.sqrt(max(lin * lin - 4 * quad * const, 0.0))) / (2 * quad)
            else:
                root = -const / lin
            low = min(max(int(root), 0), most - 1)
            while low > 0 and chunk_s(low, cached) > left_s:
                low -= 1
            while low + 1 < most and chunk_s(low + 1, cached) <= left_s:
                low += 1
            return low if low > 0 or chunk_s(0, cached) <= left_s else 0
        low, high = 0, most  # chunk_s(low) fits, chunk_s(high) does not
        while high - low > 1:
            mid = (low + high) // 2
            if chunk_s(mid, cached) <= left_s:
                low = mid
            else:
                high = mid
        return low


class _Row(NamedTuple):
    """A live request's columns that do not change while it is queued (taken when it arrives)."""

    request: Request
    seq: int  # arrival order at this policy (the sort's last tie)
    prompt: int
    arrival_s: float
    first_deadline_s: float  # arrival + TTFT SLO (inf: none)
    tpot_s: float  # inf: none
    weight: float  # the priority's


_SEQ_OF = operator.itemgetter(1)


def _row(request: Request, seq: int, policy: SlideBatching) -> _Row:
    ttft_s = math.inf if request.ttft_slo_s is None else request.ttft_slo_s
    tpot_s = math.inf if request.tpot_slo_s is None else request.tpot_slo_s
    arrival_s = request.arrival_time_s
    return _Row(request, seq, request.prompt_tokens, arrival_s, arrival_s + ttft_s, tpot_s,
                policy.priority_weight(request.priority))


def _in_prompt(prompt: Any, computed: Any, outputs: Any) -> Any:
    """Whether a request's next work is prompt tokens (in its prompt, or recomputing after a preemption), not one
    decode: of integers, or element by element of integer arrays."""
    return (prompt + outputs - computed > 1) | (computed < prompt)


def _always_due(row: _Row) -> bool:
    """Whether every token of the request has a deadline: a first-token one and a TPOT SLO (without the first,
    none has one; without the second, none after the first token)."""
    return row.first_deadline_s != math.inf and row.tpot_s != math.inf


def _base_cost_s(config: BatchConfig, prompt: int, computed: int, outputs: int) -> tuple[bool, float]:
    """A request's next work (prefill or not) and its cost in the base model, before the correction beta: its
    whole remaining prefill (eq. 5 with ``d_p``) while it is in its prompt or recomputing, else one decode."""
    uncomputed = prompt + outputs - computed
    if _in_prompt(prompt, computed, outputs):
        return True, (config.a_p * (uncomputed * uncomputed) + config.b_p * uncomputed * computed
                      + config.c_p * uncomputed + config.d_p)
    return False, config.a_d * computed + config.b_d


def _deadline_s(row: _Row, outputs: int) -> float:
    """The next token's deadline (eq. 3): arrival + TTFT SLO + outputs·TPOT SLO (no 0 times a missing TPOT)."""
    return row.first_deadline_s + (outputs * row.tpot_s if outputs > 0 else 0.0)


@dataclass(frozen=True, slots=True)
class _DeadlineFree:
    """What a deadline-free plan (:meth:`SlideBatching._deadline_free_plan`) keeps of a running set (in the full
    plan's index order): their prompts, the order by arrival and the plan's tuples of it (``ranked``, ``rank``
    and ``chosen`` are shared by the plans made from it, which only read them)."""

    prompt: np.ndarray
    first_token_due: list[int]  # those with a first-token deadline only (none once they have a token)
    min_tpot_s: float
    order: np.ndarray  # by arrival, then position (every ``remain`` is equal)
    ranked: tuple[Request, ...]
    rank: dict[str, int]
    _chosen: dict[int, tuple[tuple[Request, ...], tuple[tuple[str, int], ...]]]

    @classmethod
    def of(cls, rows: list[_Row]) -> _DeadlineFree:
        """What a deadline-free plan keeps of ``rows`` (none of them :func:`_always_due`)."""
        due = [i for i, row in enumerate(rows) if row.first_deadline_s != math.inf]
        arrival = [row.arrival_s for row in rows]
        order = sorted(range(len(rows)), key=arrival.__getitem__)  # (stable: position breaks ties)
        ranked = tuple(rows[i].request for i in order)
        return cls(np.array([row.prompt for row in rows], dtype=np.int64), due,
                   min((row.tpot_s for row in rows), default=math.inf), np.array(order, dtype=np.intp), ranked,
                   {request.request_id: index for index, request in enumerate(ranked)}, {})

    def chosen(self, count: int) -> tuple[tuple[Request, ...], tuple[tuple[str, int], ...]]:
        """The first ``count`` requests in order, and the plan's ``chosen`` of them (one token each)."""
        kept = self._chosen.get(count)
        if kept is None:
            running = self.ranked[:count]
            kept = self._chosen[count] = (running, tuple((request.request_id, 1) for request in running))
        return kept


class _Arrays(NamedTuple):
    exec_s: np.ndarray
    remain: np.ndarray
    density: np.ndarray
    arrival_s: np.ndarray
    min_tpot_s: float  # the smallest TPOT SLO (inf: none)


class _Merge(NamedTuple):
    """The order that merges the running requests' columns with the waiting ones' (arrival at this policy)."""

    take: Callable[[list[Any]], tuple[Any, ...]]  # that order's items of a list
    positions: np.ndarray  # that order
    requests: list[Request]  # the requests in that order (a plan's index order: read only)
    request_ids: list[str]  # their ids
    started: list[bool]  # whether each is running, in that order
    arrival_s: np.ndarray  # their arrival times, in that order
    min_tpot_s: float  # the smallest TPOT SLO among them (inf: none)


@dataclass(frozen=True, slots=True)
class _Queue:
    """Per-request columns of one plan (lines 2-6 of Algorithm 1). Plain lists and floats: a plan's queue holds
    tens of requests, where a numpy call costs more than the arithmetic; every value is the same IEEE operations
    in the same order as eq. 3-7 (sums of several values by :func:`pairwise_sum`, numpy's order)."""

    size: int
    rows: list[_Row]
    computed: list[int]
    outputs: list[int]
    started: list[bool]  # running, so it holds KV blocks
    prefill: list[bool]  # the next work is prompt (or recompute) tokens, not one decode
    any_prefill: bool
    exec_s: list[float]
    remain: list[float]
    density: list[float]
    arrival_s: list[float]
    tpot_s: list[float]
    arrays: _Arrays | None = None  # a long queue's columns as numpy arrays too, for its sorts and sums
    #: a merged queue's KV needs (its ``rows``, ``computed``, ``outputs`` and ``tpot_s`` are left empty, and
    #: ``density`` and ``arrival_s``, which its sorts read from ``arrays``): the blocks each request's whole
    #: sequence needs, and those the started prompts still need to complete
    blocks: tuple[list[int], int] | None = None

    @classmethod
    def of(cls, requests: Sequence[Request], policy: SlideBatching, now_s: float) -> _Queue:
        rows = [_row(r, 0, policy) for r in requests]
        return cls.build(rows, [r.num_computed_tokens for r in requests], [r.num_output_tokens for r in requests],
                         [r.state is RequestState.RUNNING for r in requests], policy, now_s)

    @classmethod
    def build(cls, rows: list[_Row], computed: list[int], outputs: list[int], started: list[bool],
              policy: SlideBatching, now_s: float) -> _Queue:
        """``exec`` (beta times the base cost, at least 1e-9: a fitted model may price a tiny step at zero or
        less), ``remain`` (the next token's deadline minus now) and ``density`` (its weight over ``exec``)."""
        estimator = policy.estimator
        beta, config = estimator.beta, estimator.model.config
        a_p, b_p, c_p, d_p, a_d, b_d = config.a_p, config.b_p, config.c_p, config.d_p, config.a_d, config.b_d
        first_weight = policy.first_token_weight() if 0 in outputs else 1.0
        prefill: list[bool] = []
        exec_list: list[float] = []
        remain: list[float] = []
        density: list[float] = []
        for (_request, _seq, prompt, _arrival_s, first_deadline_s, tpot_s, weight), done, emitted in zip(
                rows, computed, outputs, strict=True):
            # (_base_cost_s and _deadline_s inlined: this loop is the plan's hot path)
            uncomputed = prompt + emitted - done
            if uncomputed > 1 or done < prompt:
                prefill.append(True)
                exec_s = beta * (a_p * (uncomputed * uncomputed) + b_p * uncomputed * done + c_p * uncomputed
                                 + d_p)
            else:
                prefill.append(False)
                exec_s = beta * (a_d * done + b_d)
            if exec_s < 1e-9:
                exec_s = 1e-9
            exec_list.append(exec_s)
            if emitted > 0:
                remain.append(first_deadline_s + emitted * tpot_s - now_s)
                density.append(weight / exec_s)
            else:
                remain.append(first_deadline_s + 0.0 - now_s)
                density.append(first_weight * weight / exec_s)
        return cls(len(rows), rows, computed, outputs, started, prefill, True in prefill, exec_list, remain,
                   density, [row.arrival_s for row in rows], [row.tpot_s for row in rows])

    @classmethod
    def merged(cls, running: _Queue, stats: _WaitingStats, merge: _Merge, policy: SlideBatching,
               now_s: float) -> _Queue:
        """The queue of the running requests (``running``, every one started) and the waiting ones (``stats``), in
        ``merge``'s order (arrival at this policy). The waiting requests' columns come from their kept base costs
        and deadlines, by numpy for a long queue: the same operations as :meth:`build`, element by element."""
        exec_w = np.maximum(policy.estimator.beta * stats.costs_array_s, 1e-9)
        remain_w = stats.deadlines_array_s - now_s
        if stats.first_token.any():
            weights = np.where(stats.first_token, policy.first_token_weight() * stats.weights, stats.weights)
        else:
            weights = stats.weights
        positions, take = merge.positions, merge.take
        block_size, committed = stats.block_size, 0
        whole_running = []
        for row, in_prompt, done, emitted in zip(running.rows, running.prefill, running.computed, running.outputs,
                                                 strict=True):
            whole = -(-(row.prompt + emitted) // block_size)
            whole_running.append(whole)
            if in_prompt and whole - -(-done // block_size) > 0:  # (as _StartRoom counts a started prompt's)
                committed += whole - -(-done // block_size)
        arrays = _Arrays(np.concatenate((running.exec_s, exec_w))[positions],
                         np.concatenate((running.remain, remain_w))[positions],
                         np.concatenate((running.density, weights / exec_w))[positions], merge.arrival_s,
                         merge.min_tpot_s)
        prefill = list(take(running.prefill + stats.prefill))
        return cls(
            running.size + stats.size, [], [], [], merge.started, prefill,
            True in prefill, arrays.exec_s.tolist(), arrays.remain.tolist(), [], [], [], arrays,
            (list(take(whole_running + stats.whole_blocks)), committed),
        )


def pairwise_sum(values: Sequence[float]) -> float:
    """``float(numpy.sum(values))`` to the last bit, without building an array for a short list: numpy sums
    float64 pairwise (fewer than 8 values one by one from 0.0; up to 128 in 8 interleaved partial sums, combined
    as ((0+1)+(2+3))+((4+5)+(6+7)), the rest added after; more split in halves, the first a multiple of 8).
    Past 2048 values numpy itself (it also cuts long arrays into buffers)."""
    size = len(values)
    if size > 2048:
        return float(np.sum(np.asarray(values, dtype=np.float64)))
    return _pairwise(values, 0, size)


def _pairwise(values: Sequence[float], start: int, size: int) -> float:
    if size < 8:
        total = 0.0
        for index in range(start, start + size):
            total += values[index]
        return total
    if size <= 128:
        r0, r1, r2, r3, r4, r5, r6, r7 = values[start:start + 8]
        index, stop = start + 8, start + size - size % 8
        while index < stop:
            r0 += values[index]
            r1 += values[index + 1]
            r2 += values[index + 2]
            r3 += values[index + 3]
            r4 += values[index + 4]
            r5 += values[index + 5]
            r6 += values[index + 6]
            r7 += values[index + 7]
            index += 8
        total = ((r0 + r1) + (r2 + r3)) + ((r4 + r5) + (r6 + r7))
        for index in range(stop, start + size):
            total += values[index]
        return total
    half = size // 2
    half -= half % 8
    return _pairwise(values, start, half) + _pairwise(values, start + half, size - half)


class _NeedsFullPlan(Exception):
    """A running-only plan met a case it cannot decide exactly: the full plan decides."""


@dataclass(frozen=True, slots=True)
class _WaitingStats:
    """What the waiting requests add to a plan while none of them can be in it, kept until the waiting set
    changes (their deadlines and costs do not move while they wait; only ``now`` and beta do)."""

    version: int
    block_size: int
    size: int
    rows: list[_Row]
    deadlines_s: list[float]  # ascending
    deadlines_unsorted_s: list[float]  # in ``rows`` order, as the lists below
    computed: list[int]
    outputs: list[int]
    costs_s: list[float]  # base-model cost of the next work (exec_s is beta times it)
    cost_s: float  # their sum
    min_cost_s: float
    min_tpot_s: float
    min_blocks: dict[int, tuple[int, Request]]  # per priority: the fewest blocks a whole sequence needs, and whose
    prefill: list[bool]
    arrival_s: list[float]
    tpot_s: list[float]
    costs_array_s: np.ndarray  # costs_s, deadlines_unsorted_s, their weights, and whether a first token is next
    deadlines_array_s: np.ndarray
    weights: np.ndarray
    first_token: np.ndarray
    requests: list[Request]
    whole_blocks: list[int]  # the blocks each one's whole sequence needs

    @classmethod
    def of(cls, policy: SlideBatching, block_size: int) -> _WaitingStats:
        """The stats of ``policy``'s waiting requests, in its order of them, from their entries
        (:meth:`SlideBatching._waiting_entries`)."""
        entries = policy._waiting_entries(block_size)
        if not entries:
            return cls(policy._waiting_version, block_size, 0, [], [], [], [], [], [], 0.0, math.inf, math.inf, {},
                       [], [], [], np.array([], dtype=np.float64), np.array([], dtype=np.float64),
                       np.array([], dtype=np.float64), np.array([], dtype=np.bool_), [], [])
        rows, computed, outputs, prefill, costs_s, deadline_s, whole_blocks, arrival_s, tpot_s, weights, \
            requests, priorities = map(list, zip(*entries, strict=True))
        costs_array_s = np.array(costs_s, dtype=np.float64)
        return cls(
            policy._waiting_version, block_size, len(rows), rows, sorted(deadline_s), deadline_s, computed,
            outputs, costs_s, float(costs_array_s.sum()), min(costs_s), min(tpot_s),
            _min_blocks(whole_blocks, priorities, requests), prefill, arrival_s, tpot_s, costs_array_s,
            np.array(deadline_s, dtype=np.float64), np.array(weights, dtype=np.float64),
            np.array(outputs, dtype=np.int64) == 0, requests, whole_blocks,
        )

    def count_remain_below(self, threshold_s: float, now_s: float) -> int:
        """How many have ``deadline - now < threshold_s`` (``deadline - now`` is monotone in the deadline)."""
        return bisect.bisect_left(self.deadlines_s, threshold_s, key=lambda d: d - now_s)

    def count_remain_at_most(self, threshold_s: float, now_s: float) -> int:
        return bisect.bisect_right(self.deadlines_s, threshold_s, key=lambda d: d - now_s)


class _WaitingEntry(NamedTuple):
    """A waiting request's columns in :class:`_WaitingStats` (a function of its row, its progress counters and
    the block size alone)."""

    row: _Row
    computed: int
    outputs: int
    prefill: bool  # its next work is prompt (or recompute) tokens
    cost_s: float  # the base model's cost of that work (:func:`_base_cost_s`)
    deadline_s: float  # its next token's (:func:`_deadline_s`)
    whole_blocks: int  # the blocks its whole sequence needs
    arrival_s: float
    tpot_s: float
    weight: float
    request: Request
    priority: int

    @classmethod
    def of(cls, row: _Row, config: BatchConfig, block_size: int) -> _WaitingEntry:
        request = row.request
        computed, outputs = request.num_computed_tokens, request.num_output_tokens
        prefill, cost_s = _base_cost_s(config, row.prompt, computed, outputs)
        return cls(row, computed, outputs, prefill, cost_s, _deadline_s(row, outputs),
                   -(-(row.prompt + outputs) // block_size), row.arrival_s, row.tpot_s, row.weight, request,
                   request.priority)


def _min_blocks(whole_blocks: list[int], priorities: list[int],
                requests: list[Request]) -> dict[int, tuple[int, Request]]:
    """Per priority (in the order they first come), the fewest blocks a whole sequence needs and whose (the first
    of those that need that few)."""
    fewest: dict[int, tuple[int, Request]] = {}
    for blocks, priority, request in zip(whole_blocks, priorities, requests, strict=True):
        best = fewest.get(priority)
        if best is None or blocks < best[0]:
            fewest[priority] = (blocks, request)
    return fewest


def _waiting_may_start(running: Sequence[Request], stats: _WaitingStats, view: SchedulerView,
                       max_num_seqs: int) -> bool:
    """Whether a waiting request may be in the plan by :class:`_StartRoom`'s rule, asked before the running
    requests' columns are built: a sequence slot is free, and some priority's smallest whole sequence fits the
    blocks it may take once every started prompt has the blocks to complete (the plan's commitments only grow,
    so a waiting request shut out now stays out of this plan)."""
    if not stats.size or max_num_seqs - len(running) <= 0:
        return False
    block_size, committed = view.block_size, 0
    for request in running:
        computed, prompt, outputs = request.num_computed_tokens, request.prompt_tokens, request.num_output_tokens
        if prompt + outputs - computed > 1 or computed < prompt:  # in its prompt: blocks still to take
            committed += max(-(-(prompt + outputs) // block_size) - -(-computed // block_size), 0)
    return any(blocks <= view.available_blocks(request, admission=True) - committed
               for blocks, request in stats.min_blocks.values())


class _StartRoom:
    """Which requests may start without stranding the ones that have. A request not yet running is planned
    only if (1) a sequence slot is free beside the running requests, which keep theirs whether or not the plan
    serves them, and (2) its whole sequence fits the KV blocks left once every started prompt has the blocks to
    complete (vLLM 0.32's ``scheduler_reserve_full_isl`` rule, applied to the plan). Without (1) a plan can
    choose only waiting requests that the engine cannot admit, and the step is empty; without (2) a plan that
    keeps starting prompts whose first chunks fit the time budget fills the KV cache with half-computed prompts
    none of which can finish, and long-context traffic stops the engine. Without a view of the engine (a plan
    made before any hook gave one) only the slots are checked."""

    def __init__(self, queue: _Queue, view: SchedulerView | None, max_num_seqs: int) -> None:
        self._view = view
        self._queue = queue
        self._free_slots = max_num_seqs - queue.started.count(True)
        self._committed = 0
        self._available: dict[int, int] = {}  # free blocks per priority (reservations differ), asked once a plan
        self._whole: list[int] | None = None
        if view is None:
            return
        if queue.blocks is not None:
            self._whole, self._committed = queue.blocks
            return
        size = self._block_size = view.block_size
        committed = 0
        rows, prefill, computed, outputs = queue.rows, queue.prefill, queue.computed, queue.outputs
        for i in itertools.compress(range(queue.size), queue.started):
            if prefill[i]:
                still_needed = -(-(rows[i].prompt + outputs[i]) // size) - -(-computed[i] // size)
                if still_needed > 0:
                    committed += still_needed
        self._committed = committed

    def _whole_blocks(self, index: int) -> int:
        """The blocks request ``index``'s whole sequence needs (0 without a view)."""
        if self._view is None:
            return 0
        if self._whole is not None:
            return self._whole[index]
        queue = self._queue
        return -(-(queue.rows[index].prompt + queue.outputs[index]) // self._block_size)

    def admits(self, index: int, request: Request) -> bool:
        """Whether request ``index`` (not running) may start now."""
        if self._free_slots <= 0:
            return False
        if self._view is None:
            return True
        available = self._available.get(request.priority)
        if available is None:
            available = self._available[request.priority] = self._view.available_blocks(request, admission=True)
        return self._whole_blocks(index) <= available - self._committed

    def take(self, index: int) -> None:
        """Request ``index`` is in the plan: one not yet running takes a slot and commits its whole sequence."""
        if not self._queue.started[index]:
            self._free_slots -= 1
            self._committed += self._whole_blocks(index)


#: from this many waiting requests a plan made on them all computes their columns by numpy
_NUMPY_WAITING_FROM = 32
#: from this many requests a sort goes through numpy's lexsort (the same order as a sort of tuples ending with
#: the position, cheaper for long queues)
_LEXSORT_FROM = 96


def _total_s(queue: _Queue) -> float:
    """The sum of the queue's ``exec`` in its order, as numpy sums it."""
    if queue.arrays is not None:
        return float(queue.arrays.exec_s.sum())
    return pairwise_sum(queue.exec_s)


def _below(queue: _Queue, threshold_s: float) -> list[bool]:
    """Whether each request's ``remain`` is below ``threshold_s`` (never, against a NaN one)."""
    if queue.arrays is not None:
        below: list[bool] = (queue.arrays.remain < threshold_s).tolist()
        return below
    return [r < threshold_s for r in queue.remain]


def _by_deadline(queue: _Queue) -> list[int]:
    """The requests by ascending ``remain``; arrival, then position, break ties."""
    arrays = queue.arrays
    if arrays is not None:
        order: list[int] = np.lexsort((arrays.arrival_s, arrays.remain)).tolist()
        return order
    if queue.size >= _LEXSORT_FROM:
        order = np.lexsort((np.array(queue.arrival_s), np.array(queue.remain))).tolist()
        return order
    return [key[2] for key in sorted(zip(queue.remain, queue.arrival_s, range(queue.size), strict=True))]


def _sorted(queue: _Queue, urgent: list[bool]) -> list[int]:
    """Line 13: URGENT first by descending density, then NORMAL by ascending remain; arrival breaks ties."""
    if True not in urgent:  # (the first key is the same for all: the order of the other two)
        return _by_deadline(queue)
    arrays = queue.arrays
    if arrays is not None:
        flags = np.array(urgent)
        order: list[int] = np.lexsort((arrays.arrival_s, np.where(flags, -arrays.density, arrays.remain),
                                       ~flags)).tolist()
        return order
    secondary = [-d if flag else r for flag, d, r in zip(urgent, queue.density, queue.remain, strict=True)]
    if queue.size >= _LEXSORT_FROM:
        order = np.lexsort((np.array(queue.arrival_s), np.array(secondary), np.logical_not(urgent))).tolist()
        return order
    keys = sorted(zip([not flag for flag in urgent], secondary, queue.arrival_s, range(queue.size), strict=True))
    return [key[3] for key in keys]
