"""Semantic scheduling (seed 000): by urgency, then estimated remaining time; urgent arrivals preempt, stage-aware.

Seed 000 is "Semantic Scheduling for LLM Inference" (Alg. 1-5).

``semantic`` orders every request by ``(f_e, f_t)``: its urgency level (``Request.urgency``, 0 = most urgent;
the priority when no urgency is attached) and its *estimated remaining computation time*, priced with a
latency profile: the prompt still to prefill (or to recompute after a preemption), the KV to reload if it was
swapped out, and the decode of its predicted remaining output (``Request.predicted_output``; the true length
without one, as ``length=oracle`` always does).

* **Heap and buffer (Alg. 1, 5).** The waiting queue is the scheduler's min-heap, keyed once at enqueue (a
  waiting request's estimate does not change while it waits). The paper's unsorted arrival buffer holds a
  request until its predictions are ready; the simulator models that wait (``Request.ready_time_s``, set by
  ``semsched.predict.cost``), after which the request is inserted in O(log n), so each step's top of the queue
  already covers every request whose prediction is done.
* **Urgent arrivals preempt (Alg. 2).** Each step's batch is the top of running and waiting together: while a
  more urgent request waits, running prompts of less urgent levels compute nothing (they keep their KV), so
  the step's tokens go to it; a waiting request that does not fit displaces running requests of a strictly
  less urgent level, least urgent and longest remaining first, if together they make room.
* **Stage-aware batching (Alg. 2).** When the most important request among the running ones and the head of
  the queue is decoding, less urgent prompts are held back, so the urgent decode is not slowed by them.
  ``strict`` is the paper's rule: no new prompt joins while every waiting request ranks after the decoding one.
  ``level`` admits only prompts of the decoding request's own level (as many new sequences as wait at that
  level, which the queue holds first). Both leave a lightly loaded engine idle while less urgent work waits:
  on ``spikes:gap_s=1.0;max_concurrent=5`` (200 s) ``level`` gave urgency 4 a mean normalized latency of
  1.49 s/token against FCFS's 0.023. The default ``budget`` slows them instead of stopping them: the step's
  tokens are capped at its decodes, the prompts of the decoding request's level and ``stage_prefill_tokens``
  more (urgency 4: 0.038 s/token there; urgency 0 of the burst at gap 0.1 s: 0.139 vs ``level``'s 0.137).
* **Priority eviction (Alg. 3-4).** Under KV pressure the victim is the running request with the largest
  ``(f_e, f_t)``: the least urgent, then the longest remaining; a more urgent request is never evicted while a
  less urgent one is resident.
* **Cache or recompute (eq. 3-5).** An evicted request keeps (swaps to CPU) the prefix of its KV that makes
  resuming cheapest. ``recompute_cost=prefill`` (default) prices what engines do: the dropped tail is
  recomputed in one prefill pass over it, on top of the kept prefix, and the kept prefix costs its copy out and
  back; that cost is concave in the kept length, so all or nothing wins. ``recompute_cost=token`` is the
  paper's: the prompt is kept iff eq. 3 says so, and of the decoded tokens the minimiser of eq. 5
  (token-by-token recompute) is kept. ``cache=recompute`` or ``swap`` force one mode. Inside vLLM every
  preemption is a recompute.
"""

from __future__ import annotations

import heapq
import itertools
import math
import operator
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal, NamedTuple

from semsched.core.kv import blocks_for
from semsched.core.plan import PreemptionMode
from semsched.core.policy import Policy, PolicyConfig, SchedulerView, SortKey, StepBudget
from semsched.core.request import WAITING_STATES, Request, RequestState
from semsched.latency import LatencyModel, load_profile
from semsched.latency.analytic import AnalyticLatencyModel, optimal_saved_decode_tokens, should_save_prefill_kv
from semsched.policies.passes import SemanticKeys, same_requests, semantic_kept, semantic_scan, versioned_head
from semsched.policies.registry import register_policy

#: a linear fit of one request's decode step, ``g1 * context + g2``, is read off the profile at these contexts
_FIT_CONTEXTS = (0, 8192)
#: (a tuple: its ``in`` compares members by identity, where a frozenset's hashes each state with Enum.__hash__)
#: ``Request.policy_state`` key: bumped each time the request (re-)enters the queue; older heap entries are stale
_VERSION_KEY = "semantic.version"
_RUNNING = RequestState.RUNNING
#: keys kept at most (a bound for configurations that never call step_budget, which clears them now and then)
_MAX_CACHED_KEYS = 4096
#: step_budget clears the kept keys when they outnumber twice the running requests and this many more: a kept key
#: holds while its request's tokens and state have not moved (it is checked when read), so clearing them at every
#: step, as before, only freed the dict's table, for the next step's scan to grow it again
_SPARE_KEYS = 64
#: full scans that build no certificate after one that did not pay, at most, and the steps a certificate must
#: cover to pay for itself (see Semantic._certify)
_MAX_CERTIFICATE_BACKOFF = 63
_CERTIFICATE_PAYS = 3
#: the fewest running requests a certificate is built for: a shorter list's scan costs about what checking one does
_MIN_CERTIFIED_RUNNING = 16


#: below every key (the first comparison of a scan)
_FIRST: SortKey = (-math.inf,)


class _Scan(NamedTuple):
    """What step_budget's scan found about the scheduler's running list: whether it is in key order (a stable
    sort leaves it as it is), and the least urgent level among its prompts (-inf: none)."""

    running: Sequence[Request]
    in_order: bool
    prompt_level: float

    def describes(self, running: Sequence[Request]) -> bool:
        """Whether ``running`` is the list scanned (this step's, if step_budget was asked in it), request by
        request."""
        return same_requests(self.running, running)  # (compiled)


@dataclass(frozen=True, slots=True)
class _Certificate:
    """What a full scan of a running list proved about the steps after it: the list was in key order, each of its
    requests a running decode whose key has the closed form (the true remaining output, or no prediction attached),
    and it stays in key order while each emits ``k < limit`` more tokens, the same ``k`` for all, or more for the
    first of two neighbours of a level than for the second (its remaining time only falls faster). A later step
    that finds this so knows the list is in key order, with no prompt in it, and its smallest key the first
    request's, with no other key to compute.

    Why a stretch of decodes can be priced without computing their keys: a decode's remaining time is the sum
    over the ``r`` tokens it has left of ``g1 * (context + i) + g2``, so one more token takes
    ``g1 * (context + 1) + g2`` off it. After ``k`` tokens each, the gap between two neighbours of one level moves
    by ``k * g1`` times their context difference; ``limit`` is where the first gap could close, less a margin far
    above the keys' rounding (and no later than a request's last token, where the sum runs out)."""

    running: tuple[Request, ...]
    #: each request's output when the scan priced it, and whether it follows a request of its level
    outputs: tuple[int, ...]
    chained: tuple[bool, ...]
    limit: float


#: of two neighbours' remaining times, the share kept clear of rounding when a certificate prices their gap (each
#: key is a handful of float operations: its error is a few 1e-16 of it)
_CERTIFICATE_MARGIN = 1e-9


def _param(default: Any, doc: str) -> Any:
    return field(default=default, metadata={"doc": doc})


def urgency_level(request: Request) -> int:
    """The level a scheduler believes: ``urgency`` when attached, else the vLLM priority."""
    return request.urgency if request.urgency is not None else request.priority


@dataclass(frozen=True)
class SemanticConfig(PolicyConfig):
    profile: str = _param("a100-qwen1.5-4b", "latency profile that prices remaining work and evictions "
                          "(give it the engine's own)")
    length: Literal["predicted", "oracle"] = _param(
        "predicted", "output length behind f_t: the predicted distribution's mean (the truth without one), or the "
        "truth")
    preempt: bool = _param(True, "a more urgent waiting request displaces less urgent running ones (Alg. 2)")
    stage_aware: Literal["budget", "level", "strict", "off"] = _param(
        "budget", "while the most important request decodes, hold back less urgent prompts: to "
        "stage_prefill_tokens a step (budget), entirely (level), every new prompt entirely (strict: the paper's "
        "Alg. 2), or not (off)")
    stage_prefill_tokens: int = _param(
        128, "stage_aware=budget: prompt tokens of less urgent levels a step may take while the most important "
        "request decodes")
    cache: Literal["cost", "recompute", "swap"] = _param(
        "cost", "what an eviction keeps: the cheapest prefix to resume from (eq. 3-5), nothing, or everything")
    recompute_cost: Literal["prefill", "token"] = _param(
        "prefill", "how cache=cost prices recomputing dropped KV: one prefill pass (engines) or token by token "
        "(the paper's eq. 5)")

    def __post_init__(self) -> None:
        super().__post_init__()
        tokens = self.stage_prefill_tokens
        if isinstance(tokens, bool) or not isinstance(tokens, int) or not 1 <= tokens <= 2**31 - 1:
            raise ValueError(f"stage_prefill_tokens must be an integer from 1 to {2**31 - 1}, got {tokens!r}")


@register_policy
class Semantic(Policy):
    """Seed 000's semantic scheduling: by urgency level, then estimated remaining time; urgent arrivals preempt.

    starvation: possible for less urgent levels under sustained more urgent load, and within a level for
    requests with a long estimated remaining time while shorter ones keep arriving (nothing ages).
    """

    name: ClassVar[str] = "semantic"
    config_cls: ClassVar[type[PolicyConfig]] = SemanticConfig
    config: SemanticConfig

    def __init__(self, config: PolicyConfig | None = None) -> None:
        super().__init__(config)
        cfg = self.config
        self._latency: LatencyModel = load_profile(cfg.profile)
        self._analytic = self._latency if isinstance(self._latency, AnalyticLatencyModel) else None
        self._oracle = cfg.length == "oracle"
        low, high = (self._latency.step_time_s([], 1, c) for c in _FIT_CONTEXTS)
        self._g2 = low
        self._g1 = max(high - low, 0.0) / (_FIT_CONTEXTS[1] - _FIT_CONTEXTS[0])
        self._queue: list[tuple[SortKey, int, int, Request]] = []  # (key, version, seq, request): lazy deletion
        self._seq = itertools.count()
        #: every request waiting as this policy last heard (arrival, preemption), by id: (request, its level, its
        #: uncomputed tokens), and per level their count and summed tokens, kept as they come and go
        self._waiting: dict[int, tuple[Request, int, int]] = {}
        self._level_count: dict[int, int] = {}
        self._level_tokens: dict[int, int] = {}
        #: keys by request, with the progress and state they were computed at: a step asks for a running
        #: request's key more than once (stage-aware cap, running order, the core's sort by victim_key); cleared
        #: by step_budget now and then (_SPARE_KEYS)
        self._keys: dict[Request, tuple[int, int, RequestState, SortKey]] = {}
        #: the keys, compiled (the victim key function the core sorts by, and the scan's)
        self._keyer = SemanticKeys(self._keys, self._latency, self._g1, self._g2, self._oracle,
                                   _MAX_CACHED_KEYS)
        #: the engine as the last step_budget saw it (live): what stable_between_events reads
        self._view: SchedulerView | None = None
        #: what the step's scan found (step_budget's)
        self._scanned = _Scan((), True, -math.inf)
        #: what the last full scan proved about the steps after it (see :class:`_Certificate`), how many steps have
        #: used it, and (backing off while certificates do not pay) how many full scans build none
        self._certificate: _Certificate | None = None
        self._certificate_uses = 0
        self._certificate_backoff = 0
        self._certificate_wait = 0
        #: the step's smallest running key and whether its request decodes, with the step's time (step_budget's)
        self._step_best: tuple[float, SortKey | None, bool] = (math.nan, None, False)

    @property
    def static_victim_key(self) -> bool:  # type: ignore[override]
        """True where step_budget is asked at every step (stage_aware) and the running order is the policy's
        (preempt: no speculative stretch re-sorts between its rounds without asking it). The keys fall as requests
        run, but their order seldom changes (in 0.3 % of the Azure trace's steps that admit nothing): the step's
        scan finds whether the scheduler's running list is still in key order and counts in
        ``victim_key_changes`` each step where it is not, so the scheduler sorts it then (and after admissions)
        rather than at every step; a list in key order is what its stable sort would leave."""
        return self.config.preempt and self.config.stage_aware != "off"

    @property
    def uses_predicted_lengths(self) -> bool:
        return self.config.length == "predicted"

    def uses_hook(self, hook: str) -> bool:
        if hook == "step_budget":
            return self.config.stage_aware != "off"
        if hook in ("on_arrival", "on_preempt"):  # they keep the view of the queue's head
            return self.config.stage_aware != "off" or self.config.preempt
        if hook == "victims_for" or hook == "running_order":
            return self.config.preempt
        return super().uses_hook(hook)

    # ---- f_t: estimated remaining computation time ---------------------------------------------------------
    def remaining_time_s(self, request: Request) -> float:
        """Prefill (or recompute) of what is not computed, the reload of swapped KV, and the decode of the
        expected remaining output at a growing context (compiled:
        :class:`~semsched.policies.passes.SemanticKeys`)."""
        return self._keyer.remaining_time_s(request)

    def _key(self, request: Request) -> SortKey:
        """(level, :meth:`remaining_time_s`, arrival), kept while the request's tokens and state do not move
        (a running decode's remaining time in closed form:
        :func:`~semsched.policies.passes.semantic_decode_key`)."""
        return self._keyer.key(request)

    # ---- ordering ----------------------------------------------------------------------------------------
    def waiting_key(self, request: Request, now_s: float) -> SortKey:
        return self._keyer.key(request)

    @property
    def victim_key(self) -> Callable[[Request], SortKey]:
        """The eviction max-heap's order (Alg. 3): least urgent, then longest remaining, evicted first. The key
        function is compiled (:class:`~semsched.policies.passes.SemanticKeys`: the key kept since the request's
        tokens last moved, else computed): the core sorts the running batch by it every step."""
        return self._keyer

    def victims_for(
        self, candidate: Request, running: Sequence[Request], view: SchedulerView, now_s: float
    ) -> Sequence[Request]:
        if not self.config.preempt:
            return ()
        if candidate.in_prefill and self.config.stage_aware != "off" and self._holds_back(candidate, view, now_s):
            return ()  # stage-aware: held back this step (asked afresh: vLLM plans admissions first)
        level = urgency_level(candidate)
        lower = [r for r in running if urgency_level(r) > level]
        return sorted(lower, key=self._keyer, reverse=True)

    def running_order(
        self, running: Sequence[Request], view: SchedulerView, now_s: float
    ) -> Sequence[Request] | None:
        """Top-b over running and waiting (Alg. 2): while a more urgent request waits, running prompts of less
        urgent levels compute nothing this step (they keep their KV), so the step's tokens go to it."""
        if not self.config.preempt:
            return None
        head = versioned_head(self._queue, _VERSION_KEY)  # (_queue_head, inlined: every step)
        if head is None:
            return None
        level = head[0]
        scanned = self._scanned
        known = same_requests(scanned.running, running)  # (step_budget scanned this very list?)
        if known and not scanned.prompt_level > level:
            return None
        kept = semantic_kept(running, level)  # (compiled)
        if kept is None:
            return None
        if not (known and scanned.in_order):  # (a part of a list in key order is in key order)
            kept.sort(key=self.victim_key)
        return kept

    # ---- stage-aware batching ------------------------------------------------------------------------------
    def on_arrival(self, request: Request, now_s: float) -> None:
        self._track(request)

    def on_preempt(self, request: Request, now_s: float) -> None:
        self._track(request)

    def _track(self, request: Request) -> None:
        version = int(request.policy_state.get(_VERSION_KEY, 0)) + 1
        request.policy_state[_VERSION_KEY] = version
        heapq.heappush(self._queue, (self._keyer.key(request), version, next(self._seq), request))
        self._forget_waiting(id(request))
        self._add_waiting(request)

    def _add_waiting(self, request: Request) -> None:
        level, tokens = urgency_level(request), request.num_uncomputed_tokens
        self._waiting[id(request)] = (request, level, tokens)
        self._level_count[level] = self._level_count.get(level, 0) + 1
        self._level_tokens[level] = self._level_tokens.get(level, 0) + tokens

    def _forget_waiting(self, key: int) -> None:
        entry = self._waiting.pop(key, None)
        if entry is not None:
            _, level, tokens = entry
            self._level_count[level] -= 1
            self._level_tokens[level] -= tokens

    def _queue_head(self) -> SortKey | None:
        return versioned_head(self._queue, _VERSION_KEY)  # (compiled)

    @property
    def stable_between_events(self) -> bool:  # type: ignore[override]
        """Whether a decode-only step that serves every running request repeats while nothing arrives, finishes
        or is preempted: the queue's head (keys are set at enqueue) can neither start (no sequence slot, or not
        the blocks of even one token, and free blocks only shrink while the running requests decode) nor
        displace anyone (no running request of a less urgent level). Running requests still in their prompt
        cannot be in such a step, so nothing is held back; every decode fits the stage-aware budget."""
        view = self._view
        if view is None or self._queue_head() is None:
            return False
        key, _, _, head = self._queue[0]
        if any(entry[0] == key for entry in self._queue[1:3]):
            return False  # a tie for the head: the engine's queue may hold another request first
        if self.config.preempt:
            level = urgency_level(head)
            if any(urgency_level(r) > level for r in view.running_requests()):
                return False
        if view.num_running >= view.budget.max_num_seqs:
            return True
        return blocks_for(head.num_computed_tokens + 1, view.block_size) > view.available_blocks(head,
                                                                                                 admission=True)

    def _admission_cap(self, view: SchedulerView, now_s: float) -> int | None:
        """Alg. 2: while the most important request (running, or at the head of the queue) decodes, the most
        sequences this step may run: those running, plus (``level``) the waiting requests of its own level,
        which the queue holds first; None when nothing is held back. What step_budget found, while the running
        list is the one it scanned in this step (both engines ask it first in every step, and nothing runs
        before the step's admissions)."""
        running = view.running_requests()
        step_s, best, best_decoding = self._step_best
        if step_s != now_s or not self._scanned.describes(running):
            best, best_decoding, _ = self._scan_running(running)
        return self._cap_for(best, best_decoding, view)

    def _scan_running(
        self, running: Sequence[Request], *, fresh: bool = False
    ) -> tuple[SortKey | None, bool, int]:
        """One pass over the running requests: the smallest key, whether its request decodes, and the tokens
        the prompts of the most urgent level need beyond one each (compiled: a decode's key is priced in closed
        form and not kept). ``fresh``: the step's scan, which notes for the step (``_scanned``) whether ``running``
        is in key order and the least urgent level of its prompts."""
        best, best_decoding, extra, in_order, prompt_level = semantic_scan(running, self._keyer)
        if fresh:
            self._scanned = _Scan(running, in_order, prompt_level)
        return best, best_decoding, extra

    def _certify(self, running: Sequence[Request]) -> _Certificate | None:
        """The certificate for ``running``, just scanned and found in key order; None where none
        holds: a request not running, a decode whose key has no closed form, or neighbours too close to price
        (step_budget asks only for lists without prompts).

        Building one costs about two scans on top of the scan, and a step it covers saves most of one: it pays
        where a batch of decodes stays put for steps on end, not where requests come and go every few steps. So
        after a certificate fewer than ``_CERTIFICATE_PAYS`` steps used (or none held), the next 1, 3, 7 ... (up
        to 63) such full scans build none."""
        if self._certificate_uses >= _CERTIFICATE_PAYS:  # the one it replaces paid: no backing off
            self._certificate_backoff = 0
        else:  # (or there was none)
            self._certificate_backoff = min(2 * self._certificate_backoff + 1, _MAX_CERTIFICATE_BACKOFF)
            self._certificate_wait = self._certificate_backoff
        self._certificate, self._certificate_uses = None, 0
        if not running:
            return None
        keyer, g1, oracle = self._keyer, self._g1, self._oracle
        limit = math.inf
        outputs: list[int] = []
        chained: list[bool] = []
        last: SortKey = _FIRST
        last_total, last_remaining = -1, 0.0
        for request in running:
            if request.state is not _RUNNING or not (oracle or request.predicted_output is None):
                return None
            output = request.num_output_tokens
            total = request.prompt_tokens + output
            if total - request.num_computed_tokens > 1:
                return None  # a prompt
            key = keyer.key(request)
            remaining = float(request.target_output_tokens - output)
            if remaining < 0.0:
                remaining = 0.0
            if remaining + 1.0 < limit:
                limit = remaining + 1.0
            chain = key[0] == last[0]
            if chain and (total != last_total or remaining != last_remaining):
                room = key[1] - last[1] - _CERTIFICATE_MARGIN * (key[1] + last[1])
                slope = g1 * (total - last_total)
                if slope > 0.0:  # the gap closes by slope a token
                    limit = min(limit, room / (slope * (1.0 + _CERTIFICATE_MARGIN)))
                elif room - slope <= 0.0:  # it opens (or holds), but is not clear of rounding after one token
                    return None
            if limit <= 1.0:
                return None
            outputs.append(output)
            chained.append(chain)
            last, last_total, last_remaining = key, total, remaining
        return _Certificate(tuple(running), tuple(outputs), tuple(chained), limit)

    def _certified_scan(self, running: Sequence[Request], certificate: _Certificate) -> SortKey | None:
        """The smallest key of ``running`` when ``certificate`` covers it (the same requests, each still a running
        decode, having emitted fewer tokens since than the limit, and no more than the request before it at its
        level): the first request's; None when it does not."""
        if not all(map(operator.is_, running, certificate.running)):
            return None
        limit, previous = certificate.limit, 0
        for request, output, chained in zip(running, certificate.outputs, certificate.chained, strict=True):
            now = request.num_output_tokens  # (a loop, not all(): this runs every step)
            advance = now - output
            if not 0 <= advance < limit or chained and advance > previous \
                    or request.prompt_tokens + now - request.num_computed_tokens > 1 \
                    or request.state is not _RUNNING:
                return None
            previous = advance
        self._certificate_uses += 1
        return self._key(running[0])

    def _cap_for(self, best: SortKey | None, best_decoding: bool, view: SchedulerView) -> int | None:
        if best is None or not best_decoding:
            return None
        head = versioned_head(self._queue, _VERSION_KEY)  # (_queue_head, inlined: every step)
        if head is None:
            return view.num_running
        if head < best:
            return None  # the head of the queue is the most important: a prompt, so nothing is held back
        if self.config.stage_aware != "strict" and head[0] == best[0]:
            return view.num_running + self._waiting_at(int(best[0]), view)[0]
        return view.num_running

    def _waiting_at(self, level: int, view: SchedulerView) -> tuple[int, int]:
        """How many requests of ``level`` wait, and their uncomputed tokens. Kept as sums: the requests that
        started since are found among the running ones; when the count left differs from the engine's waiting
        count (a request ended or left while waiting), every entry's state is checked."""
        waiting = self._waiting
        for request in view.running_requests():
            if id(request) in waiting:
                self._forget_waiting(id(request))
        if len(waiting) != view.num_waiting:
            self._recount_waiting()
        return self._level_count.get(level, 0), self._level_tokens.get(level, 0)

    def _recount_waiting(self) -> None:
        """Drop the entries of requests no longer waiting, and recount the rest as they stand now."""
        entries = [request for request, _, _ in self._waiting.values() if request.state in WAITING_STATES]
        self._waiting, self._level_count, self._level_tokens = {}, {}, {}
        for request in entries:
            self._add_waiting(request)

    def _holds_back(self, candidate: Request, view: SchedulerView, now_s: float) -> bool:
        if self.config.stage_aware == "budget":
            return False  # less urgent prompts are slowed by the step's token budget, never stopped
        cap = self._admission_cap(view, now_s)
        if cap is None:
            return False
        if self.config.stage_aware == "strict" or cap == view.num_running:
            return True
        best_level = min(urgency_level(r) for r in view.running_requests())
        return urgency_level(candidate) > best_level

    def step_budget(self, view: SchedulerView, now_s: float) -> StepBudget | None:
        """While the most important request decodes, cap the step's sequences (:meth:`_admission_cap`), so no
        less important prompt is admitted."""
        self._view = view
        running = view.running_requests()
        keys = self._keys
        if len(keys) > 2 * len(running) + _SPARE_KEYS:
            keys.clear()  # (the entries of requests that left, now and then: a kept key is checked when read)
        certificate = self._certificate
        best = (self._certified_scan(running, certificate)
                if certificate is not None and len(certificate.running) == len(running) else None)
        if best is not None:  # in key order, every request a decode
            best_decoding, extra = True, 0
            self._scanned = _Scan(running, True, -math.inf)
        else:  # (_scan_running(running, fresh=True), inlined: every step)
            best, best_decoding, extra, in_order, prompt_level = semantic_scan(running, self._keyer)
            self._scanned = _Scan(running, in_order, prompt_level)
            if not in_order:
                self.victim_key_changes += 1  # (see static_victim_key)
            elif prompt_level > -math.inf or len(running) < _MIN_CERTIFIED_RUNNING:
                pass  # (a prompt, or a list too short to pay for one: no certificate)
            elif self._certificate_wait > 0:  # (backing off: see _certify)
                self._certificate_wait -= 1
            else:
                self._certificate = self._certify(running)
        self._step_best = (now_s, best, best_decoding)
        cap = self._cap_for(best, best_decoding, view)
        if cap is None:
            return None
        budget = view.budget
        if self.config.stage_aware != "budget":
            return StepBudget(budget.max_num_batched_tokens, min(budget.max_num_seqs, cap))
        # budget: every decode, the prompts of the decoding request's level (running or waiting) in full, and
        # stage_prefill_tokens for the rest (one token each for the running prompts of other levels)
        assert best is not None
        level = int(best[0])
        tokens = self.config.stage_prefill_tokens + len(running) + extra
        if cap > view.num_running:
            tokens += self._waiting_at(level, view)[1]
        return StepBudget(min(budget.max_num_batched_tokens, tokens), budget.max_num_seqs)

    # ---- cache or recompute ------------------------------------------------------------------------------
    def preemption_mode(self, request: Request, view: SchedulerView) -> PreemptionMode:
        if self.config.cache == "recompute":
            return PreemptionMode.RECOMPUTE
        if self.config.cache == "swap":
            return PreemptionMode.SWAP
        return PreemptionMode.SWAP if self.tokens_to_keep(request) > 0 else PreemptionMode.RECOMPUTE

    def swap_tokens(self, request: Request, view: SchedulerView) -> int:
        if self.config.cache == "swap":
            return request.num_computed_tokens
        return self.tokens_to_keep(request)

    def tokens_to_keep(self, request: Request) -> int:
        """How many computed tokens an evicted request should keep (a prefix of its KV), by ``recompute_cost``."""
        computed = request.num_computed_tokens
        if computed <= 0:
            return 0
        if self.config.recompute_cost == "token":
            return self._paper_tokens_to_keep(request)
        keep_all = 2 * self._latency.swap_time_s(computed)  # out now, back in on resume
        drop_all = self._latency.step_time_s([(computed, 0)], 0, 0)  # one prefill pass over all of it
        return computed if keep_all < drop_all else 0

    def _paper_tokens_to_keep(self, request: Request) -> int:
        """Eq. 3 for the prompt, the eq. 5 minimiser for the decoded tokens (token-by-token recompute)."""
        if self._analytic is None:
            raise ValueError(f"semantic: recompute_cost=token needs an analytic profile (seed 000's), "
                             f"{self.config.profile!r} is not one")
        config = self._analytic.config
        computed, prompt = request.num_computed_tokens, request.prompt_tokens
        if computed <= prompt:  # still in (or just past) its prompt
            return computed if should_save_prefill_kv(config, computed) else 0
        if not should_save_prefill_kv(config, prompt):
            return 0
        return prompt + optimal_saved_decode_tokens(config, prompt, computed - prompt)

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), "decode_fit_s": {"g1": self._g1, "g2": self._g2}}

