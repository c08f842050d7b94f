"""Tiered scheduling with rare, bounded and costed preemption (seed 003): strict tiers, aging, a preemption limit.

What ``priority-preempt`` lacks: it displaces running work for every more important arrival, so on the demo's
workload it preempts over a thousand times in ten minutes and starves BACKGROUND. ``tiered`` follows the seed's
rules:

* **Who may displace whom.** A waiting request may displace only running requests of a strictly lower tier
  (larger priority value) that also rank behind it once both are aged, and only if together they make room
  (the core's displacement rule). Requests at ``protected_priority`` or more important (PREMIUM and SYSTEM by
  default) are never displaced by a waiting request; requests less important than ``lowest_trigger_priority``
  (BACKGROUND by default) never trigger a displacement.
* **Victim order**: lowest tier first, then least progress (fewest computed tokens: the least work lost), then
  fewest earlier preemptions. Under KV pressure (a running request needs a block and none is free) the same
  order picks the victim, after every request that is not yet promoted.
* **Preemption limit.** A request preempted ``preemption_limit`` times is promoted: it waits with the protected
  tier's priority and is never displaced again by a waiting request, and under KV pressure it goes only after
  every request that is not promoted. When every running request is promoted the engine must still free a block:
  with ``on_limit=promote`` it preempts one once more; with ``on_limit=drop`` it ends it instead, with an error
  naming the cause (state DROPPED), so no request is ever preempted more than the limit.
* **Aging.** A waiting request's effective priority falls by ``aging_per_s`` per second waited, by at most
  ``max_age_boost`` (the seed's 0.1/s, capped at 1.5: a BACKGROUND request that waited 15 s ranks between
  PREMIUM and STANDARD). The queue is re-keyed every ``rekey_s`` seconds. Aging orders the queue and shields
  an aged request from displacement by a fresher one; it never lets a request displace running work its own
  tier could not.
* **Capacity reservation.** ``reserve_fraction`` of the KV blocks is kept for the protected tiers: less
  important requests are neither admitted into them nor grow into them (the seed's §7.2: premium requests then
  rarely need to displace anything).
* **Preemption strategy.** ``recompute`` (vLLM's only mode), ``swap``, or ``cheapest``: per victim, whichever
  of swap and recompute :class:`~semsched.latency.preemption.PreemptionCostModel` prices lower for its
  computed tokens, with the KV cache of ``model`` moved over a ``link_gb_per_s`` host link against a prefill on
  ``profile`` (swap only where the host has room for the whole cache). Inside vLLM every preemption is a
  recompute.
* **Protecting TPOT** (``protect_tpot``, on by default): steps with protected decodes take only as much
  prefill as keeps the profile's step time within their TPOT allowance and, with ``pace_e2e``, within the pace
  their E2E targets need (:meth:`Tiered.step_budget`); a protected request's own prompt is never held back, and
  less important prompts wait while one is pending (:meth:`Tiered.running_order`). Steps are priced with
  ``profile``: give it the engine's own (``semsched profile``), or the caps are set for another machine.
  Measured on azure-conv at --rate 4.2 (104 % of capacity; ``semsched simulate --workload azure-conv --rate 4.2
  --duration 600 --policy fcfs,tiered:protect_tpot=false,tiered``): PREMIUM SLO attainment 11.0 % -> 38.1 %
  (fcfs 11.0 %), output tok/s 833 -> 870 (fcfs 804), preemptions 1,227 -> 122, BACKGROUND SLO 55.7 % -> 99.0 %.
* **SLO guard** (``shedding``, ``max_waiting``, ``reject_hopeless``; all off by default): rolling p99 TTFT and TPOT
  per tier over ``slo_window_s``; while a tier with targets is at risk, arrivals of less important tiers are
  rejected (BACKGROUND first, then STANDARD), with hysteresis; bounded queues per priority; requests that cannot
  meet their E2E target are rejected at once. Every rejection is explicit, its reason prefixed ``shed:``,
  ``queue full:`` or ``hopeless:`` (:mod:`semsched.policies.slo_guard`).

* **Fair share** (``fair_shares``, off by default): output tokens served per priority over ``share_window_s``; a
  class served less than its target share ranks ahead of every class that is not, at the next re-key. Bound
  (stated, and tested in tests/policies/test_tiered.py): with a positive share, the request at the head of its
  class's queue is first scheduled within ``share_window_s + rekey_s + 2 * L * t`` whatever the load of more
  important classes, where ``L`` is the longest output a running request may produce and ``t`` the longest
  step: within ``L`` steps the requests of its own class that keep its share up have finished, within
  ``share_window_s`` their tokens have left the window (the class is short), within ``rekey_s`` the queue
  knows, and within ``L`` more steps every request running then has finished, while nothing else is admitted
  ahead of it. Aging alone gives no such bound: its cap (1.5) is below the gap from BACKGROUND to PREMIUM (2),
  and waiting PREMIUM requests age too. The queue learns a class is short (or no longer) only at a re-key, so a
  saturating class gets its share to within about ``rekey_s / share_window_s`` (tested: 20 % asked, 21 % served).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, ClassVar, Literal

from semsched.core.kv import Reservation, blocks_for
from semsched.core.plan import Admission, PreemptionMode
from semsched.core.policy import Policy, PolicyConfig, SchedulerView, SortKey, StepBudget
from semsched.core.request import Request, RequestState
from semsched.core.tiers import DEFAULT_TIERS, TierError
from semsched.latency import LatencyModel, load_profile
from semsched.latency.analytic import AnalyticLatencyModel
from semsched.latency.preemption import KNOWN_SHAPES, PreemptionCostModel
from semsched.policies.fair_share import ShareMeter
from semsched.policies.passes import (
    TieredVictimKey,
    analytic_prefill_within,
    tiered_decode_scan,
)
from semsched.policies.passes import (  # (TPOT protection's prefill, compiled; exported here, as before)
    decode_step_s as decode_step_s,
)
from semsched.policies.passes import (
    prefill_within as prefill_within,
)
from semsched.policies.registry import register_policy
from semsched.policies.slo_guard import SLOGuard, SLOGuardConfig
from semsched.policies.tier_table import load_tier_table

#: how far ahead a class short of its fair share ranks (more than any priority gap)
SHORT_OF_SHARE_BOOST = 1e6

#: ``Request.policy_state`` key: when the request's first token came (for its TPOT allowance)
FIRST_TOKEN_KEY = "tiered.first_token_s"


def _param(default: Any, doc: str) -> Any:
    return field(default=default, metadata={"doc": doc})


@dataclass(frozen=True)
class TieredConfig(PolicyConfig):
    preemption_limit: int = _param(3, "preemptions after which a request is promoted to the protected tier")
    on_limit: Literal["promote", "drop"] = _param(
        "promote", "at the limit: promote (protected from then on) or drop (also ends it, with an error, rather "
                   "than preempt it again under KV pressure)")
    protected_priority: int = _param(1, "requests this important or more (PREMIUM, SYSTEM) are never displaced "
                                        "by a waiting request")
    lowest_trigger_priority: int = _param(2, "requests less important than this (BACKGROUND) never displace "
                                             "running work")
    aging_per_s: float = _param(0.1, "effective priority gained per second waited")
    max_age_boost: float = _param(1.5, "most effective priority aging can give")
    rekey_s: float = _param(1.0, "how often the waiting queue is re-ordered for aging (seconds)")
    reserve_fraction: float = _param(0.0, "fraction of KV blocks only requests at protected_priority or more "
                                          "important may use (capacity reservation)")
    protect_tpot: bool = _param(True, "in steps with decodes of protected requests that have a TPOT target, cap "
                                      "less important prefill so the profile's step time stays within their "
                                      "targets; protected prompts go first and are never capped")
    min_prefill_tokens: int = _param(64, "prefill tokens a step may always take under TPOT protection")
    pace_e2e: bool = _param(True, "TPOT protection also keeps steps within the pace a protected request's E2E "
                                  "target needs over its max_output_tokens (when the decodes alone can)")
    tpot_margin: float = _param(0.2, "TPOT protection aims this fraction under each target (the step's price is "
                                     "a lower bound)")
    fair_shares: tuple[float, ...] | None = _param(
        None, "target share of served tokens per priority 0/1/2/...: a class served less than its share over "
              "share_window_s ranks ahead of every class that is not (a floor against starvation)")
    share_window_s: float = _param(60.0, "engine time over which fair shares are measured (seconds)")
    tier_table: str | None = _param(
        None, "a deployment's YAML tier table (semsched tiers): its fair shares, reserve fractions (each tier's "
              "blocks usable by it and more important tiers) and SLOs; the vLLM adapter gives requests naming a "
              "tier its SLOs")
    shedding: bool = _param(False, "reject arrivals of less important tiers while a tier with targets misses "
                                   "them (the SLO guard: slo_guard.py)")
    slo_window_s: float = _param(60.0, "engine time over which the SLO guard keeps TTFT and TPOT observations")
    slo_quantile: float = _param(0.99, "the quantile the SLO guard judges against the targets")
    shed_headroom: float = _param(0.1, "a tier is at risk when its headroom (1 - p99/target) is below this")
    resume_headroom: float = _param(0.3, "a shed tier is readmitted when headroom is back to this")
    max_waiting: tuple[int, ...] | None = _param(None, "most waiting requests of priority 0/1/2/... (0: no "
                                                       "limit); more are rejected at arrival")
    reject_hopeless: bool = _param(False, "reject at arrival a request that misses its E2E target even on an "
                                          "empty engine")
    preemption: Literal["recompute", "swap", "cheapest"] = _param(
        "recompute", "how a victim's KV cache is freed (cheapest: swap or recompute, whichever costs less)")
    profile: str = _param("a100-qwen1.5-4b", "latency profile for TPOT protection and for pricing preemptions "
                                             "(use the engine's own)")
    model: str = _param("qwen1.5-4b", "model whose KV cache a swap moves: " + ", ".join(sorted(KNOWN_SHAPES)))
    link_gb_per_s: float = _param(25.0, "host link bandwidth in GB/s, one direction (PCIe 4.0 x16: ~25)")

    def __post_init__(self) -> None:
        super().__post_init__()
        _check_int("preemption_limit", self.preemption_limit, 1, 1_000)
        _check_int("protected_priority", self.protected_priority, -(2**31), 2**31 - 1)
        _check_int("lowest_trigger_priority", self.lowest_trigger_priority, -(2**31), 2**31 - 1)
        if self.lowest_trigger_priority < self.protected_priority:
            raise ValueError(f"lowest_trigger_priority ({self.lowest_trigger_priority}) must be >= "
                             f"protected_priority ({self.protected_priority})")
        _check_float("aging_per_s", self.aging_per_s, 0.0, 1e6)
        _check_float("max_age_boost", self.max_age_boost, 0.0, 1e6)
        _check_float("rekey_s", self.rekey_s, 1e-3, 3600.0)
        _check_float("reserve_fraction", self.reserve_fraction, 0.0, 0.9)
        _check_int("min_prefill_tokens", self.min_prefill_tokens, 1, 2**31 - 1)
        _check_float("tpot_margin", self.tpot_margin, 0.0, 0.9)
        self.guard_config()  # the SLO guard's own checks, now
        _check_float("share_window_s", self.share_window_s, 1.0, 86_400.0)
        if self.fair_shares is not None:
            ShareMeter(dict(enumerate(self.fair_shares)), self.share_window_s)  # its checks, now
        if self.tier_table is not None:
            if self.fair_shares is not None or self.reserve_fraction:
                raise ValueError("tier_table gives each tier's fair_share and reserve_fraction: set them there, "
                                 "not also as fair_shares or reserve_fraction")
            try:
                load_tier_table(self.tier_table)  # a missing or bad file fails now, naming the field
            except TierError as error:
                raise ValueError(f"tier_table: {error}") from error
        _check_float("link_gb_per_s", self.link_gb_per_s, 1e-3, 1e6)
        if self.model not in KNOWN_SHAPES:
            raise ValueError(f"model must be one of {', '.join(sorted(KNOWN_SHAPES))}, got {self.model!r}")


    @property
    def guards_slos(self) -> bool:
        """Whether any admission mechanism (shedding, queue limits, hopeless requests) is on."""
        return self.shedding or bool(self.max_waiting) or self.reject_hopeless

    def guard_config(self) -> SLOGuardConfig:
        return SLOGuardConfig(
            window_s=self.slo_window_s, quantile=self.slo_quantile, shedding=self.shedding,
            protected_priority=self.protected_priority, shed_headroom=self.shed_headroom,
            resume_headroom=self.resume_headroom, max_waiting=self.max_waiting or (),
            reject_hopeless=self.reject_hopeless,
        )


def _waiting_now(request: Request) -> bool:
    """Whether ``request`` is still waiting (neither running nor ended)."""
    return request.state is not RequestState.RUNNING and not request.state.is_terminal


def _tokens_left(request: Request) -> int:
    """Tokens ``request`` must compute before its next token: its prompt, or a recompute's prompt and output."""
    return request.prompt_tokens + request.num_output_tokens - request.num_computed_tokens


def _check_int(name: str, value: object, low: int, high: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise ValueError(f"{name} must be an integer from {low:,} to {high:,}, got {value!r}")


def _check_float(name: str, value: object, low: float, high: float) -> None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) \
            or not low <= value <= high:
        raise ValueError(f"{name} must be a number from {low:g} to {high:g}, got {value!r}")


@register_policy
class Tiered(Policy):
    """Seed 003's tiers: strict tiers with aging, rare, bounded and costed preemption (see the module docstring).

    starvation: possible for less important tiers under sustained more important load (aging's cap,
    ``max_age_boost``, is below the tier gap); with ``fair_shares``, bounded by ``share_window_s + rekey_s +
    2·L·t`` (the module docstring's fair share, tested in tests/policies/test_tiered.py).
    """

    name: ClassVar[str] = "tiered"
    config_cls: ClassVar[type[PolicyConfig]] = TieredConfig
    config: TieredConfig

    def __init__(self, config: PolicyConfig | None = None) -> None:
        super().__init__(config)
        cfg = self.config
        self._victim_key = TieredVictimKey(cfg.preemption_limit)
        # loaded once, now, so that an unknown profile fails when the policy is built
        needed = cfg.preemption == "cheapest" or cfg.protect_tpot or cfg.guards_slos
        self._latency: LatencyModel | None = load_profile(cfg.profile) if needed else None
        self.tier_table = load_tier_table(cfg.tier_table) if cfg.tier_table is not None else None
        tiers = self.tier_table or DEFAULT_TIERS
        self._guard = SLOGuard(cfg.guard_config(), latency=self._latency, tiers=tiers) if cfg.guards_slos else None
        shares: dict[int, float] | None = dict(enumerate(cfg.fair_shares)) if cfg.fair_shares is not None else None
        if self.tier_table is not None and any(t.fair_share for t in self.tier_table):
            shares = {t.priority: t.fair_share for t in self.tier_table}
        self._shares = ShareMeter(shares, cfg.share_window_s) if shares is not None else None
        #: TPOT protection: every request waiting as this policy last heard (arrival, preemption), with the prompt
        #: tokens it adds to the protected ones' sum (0 unless protected); the protected among them (their prompts
        #: are not held back); that sum, kept as they come and go; and the protected prompt tokens step_budget
        #: counted at a time (running_order of the same step reuses them)
        self._waiting: dict[str, tuple[Request, int]] = {}
        self._protected_waiting: dict[str, Request] = {}
        self._protected_waiting_tokens = 0
        self._prompt_work: tuple[float, int] = (-math.inf, 0)

    def uses_hook(self, hook: str) -> bool:
        if hook == "step_budget":
            return self.config.protect_tpot
        if hook == "on_tokens":  # the SLO guard's observations, fair shares (TPOT protection notes first tokens
            return self._guard is not None or self._shares is not None  # itself, sparing a call per token)
        if hook == "running_order":  # TPOT protection: protected prompts before less important ones
            return self.config.protect_tpot
        if hook in ("on_arrival", "on_preempt", "on_finish"):  # the guard; TPOT protection's waiting list
            return self._guard is not None or self.config.protect_tpot
        if hook == "admit":
            return self._guard is not None
        if hook == "aging_class":  # (a class short of its fair share is known only at a re-key's time)
            return self._shares is None
        return super().uses_hook(hook)

    # ---- admission: the SLO guard (shedding, queue limits, hopeless requests) ----------------------------
    def admit(self, request: Request, view: SchedulerView, now_s: float) -> Admission:
        return self._guard.admit(request, now_s) if self._guard is not None else Admission.accept()

    def on_arrival(self, request: Request, now_s: float) -> None:
        if self._guard is not None:
            self._guard.on_arrival(request, now_s)
        if self.config.protect_tpot:
            self._track_waiting(request)

    def on_preempt(self, request: Request, now_s: float) -> None:
        if self._guard is not None:
            self._guard.on_preempt(request, now_s)
        if self.config.protect_tpot:
            self._track_waiting(request)

    def on_finish(self, request: Request, now_s: float) -> None:
        if self._guard is not None:
            self._guard.on_finish(request, now_s)
        self._forget_waiting(request.request_id)

    @cached_property
    def rekey_interval_s(self) -> float | None:  # type: ignore[override]
        # (cached: the core asks before every step; the config and the fair-share meter are fixed at __init__)
        aging = self.config.aging_per_s > 0 and self.config.max_age_boost > 0
        return self.config.rekey_s if aging or self._shares is not None else None

    @cached_property
    def _costs(self) -> PreemptionCostModel:
        cfg = self.config
        latency = self._latency if self._latency is not None else load_profile(cfg.profile)
        return PreemptionCostModel(latency, KNOWN_SHAPES[cfg.model], cfg.link_gb_per_s * 1e9)

    def reservations(self, num_gpu_blocks: int) -> tuple[Reservation, ...]:
        if self.tier_table is not None:  # each tier's blocks: for it and the more important tiers
            kept = ((t.priority, int(t.reserve_fraction * num_gpu_blocks)) for t in self.tier_table)
            return tuple(Reservation(priority, blocks) for priority, blocks in kept if blocks)
        reserved = int(self.config.reserve_fraction * num_gpu_blocks)
        return (Reservation(self.config.protected_priority, reserved),) if reserved else ()

    def promoted(self, request: Request) -> bool:
        """Preempted as often as the limit allows: protected from now on."""
        return request.num_preemptions >= self.config.preemption_limit

    # ---- ordering ----------------------------------------------------------------------------------------
    def effective_priority(self, request: Request, now_s: float) -> float:
        """The tier's priority, less the aging boost since arrival; a promoted request's is at most the
        protected tier's; a class short of its fair share ranks ahead of every class that is not. (The first
        item of :meth:`waiting_key`.)"""
        return self.waiting_key(request, now_s)[0]

    def waiting_key(self, request: Request, now_s: float) -> SortKey:
        """(:meth:`effective_priority`, arrival): every re-key asks this of each waiting request, so the
        effective priority is worked out here, with max and min written out (each keeping its first argument
        on a tie, as the builtins do) and ``promoted`` inline."""
        cfg = self.config
        waited = now_s - request.arrival_time_s
        if waited < 0.0:
            waited = 0.0
        boost = waited * cfg.aging_per_s
        if cfg.max_age_boost < boost:
            boost = cfg.max_age_boost
        effective = request.priority - boost
        if request.num_preemptions >= cfg.preemption_limit and cfg.protected_priority < effective:
            effective = cfg.protected_priority
        if self._shares is not None and request.priority in self._shares.short(now_s):
            effective -= SHORT_OF_SHARE_BOOST
        return (effective, request.arrival_time_s)

    def aging_class(self, request: Request) -> int:
        """Tier and promotion: within one, :meth:`waiting_key` at any one time is non-decreasing in arrival time
        (every request ages at the same rate to the same cap, and a promoted one's clamp is one bound), and
        neither changes while a request waits. Without fair shares only (a class short of its share is known
        only at a re-key's time)."""
        return 2 * request.priority + (request.num_preemptions >= self.config.preemption_limit)

    @property
    def victim_key(self) -> Callable[[Request], SortKey]:
        """Largest goes first: not yet promoted, then lowest tier, least progress, fewest preemptions, latest. The
        key function is compiled (:class:`~semsched.policies.passes.TieredVictimKey`): the core sorts the running
        requests by it every step."""
        return self._victim_key

    # ---- displacement and preemption ---------------------------------------------------------------------
    def victims_for(
        self, candidate: Request, running: Sequence[Request], view: SchedulerView, now_s: float
    ) -> Sequence[Request]:
        cfg = self.config
        if candidate.priority > cfg.lowest_trigger_priority:
            return ()
        # a strictly lower tier, and still behind the candidate once both are aged: otherwise an aged request
        # the queue has just admitted would be displaced by the next one in the same step
        ahead = self.effective_priority(candidate, now_s)
        lower = [r for r in running if r.priority > candidate.priority and r.priority > cfg.protected_priority
                 and not self.promoted(r) and self.effective_priority(r, now_s) > ahead]
        return sorted(lower, key=self.victim_key, reverse=True)

    def preemption_mode(self, request: Request, view: SchedulerView) -> PreemptionMode:
        if self.config.on_limit == "drop" and self.promoted(request):
            return PreemptionMode.DROP  # one more preemption would exceed the limit
        mode = self.config.preemption
        if mode == "recompute":
            return PreemptionMode.RECOMPUTE
        tokens = request.num_computed_tokens
        if view.num_free_cpu_blocks * view.block_size < tokens:
            return PreemptionMode.RECOMPUTE  # no room on the host for the whole cache
        if mode == "swap" or self._costs.swap_s(tokens) < self._costs.recompute_s(tokens):
            return PreemptionMode.SWAP
        return PreemptionMode.RECOMPUTE

    # ---- protecting TPOT ---------------------------------------------------------------------------------
    def step_budget(self, view: SchedulerView, now_s: float) -> StepBudget | None:
        """With decodes of protected requests that have a TPOT target in the batch, the most prefill tokens that
        keep the latency model's step time within their allowances (at least ``min_prefill_tokens``, so prefills
        progress); ``None`` (the engine's budget) otherwise.

        The seed's developers found PREMIUM's 30 ms TPOT missed whenever a 2,048-token prefill chunk shares its
        step. Each decode's allowance is its target less ``tpot_margin``, plus what it has banked (TPOT is the
        mean gap between its tokens, so a request whose steps so far came faster than its target has banked the
        difference, and one long step, a prefill chunk, spends it without a miss), so prefills are held back
        only when a TPOT is at stake. The step is priced with the prefill as one fresh chunk: exact for a new
        prompt, a lower bound for a chunk on top of cached tokens (a later chunk or a recompute), hence the margin.

        A protected request still in its prompt (running, or waiting: :meth:`_pending_prompt_tokens`) adds its
        prompt to the cap, so TPOT protection never delays a protected first token; without that exemption it
        cost PREMIUM more TTFT attainment (48 % -> 19 % on the demo workload) than it gained in TPOT.
        """
        latency, cfg = self._latency, self.config
        if latency is None or not cfg.protect_tpot:
            return None
        keep = 1.0 - cfg.tpot_margin
        # the protected prompt tokens, counted once per step (_pending_prompt_tokens, inline): the requests that
        # started since the last count leave the waiting sum in this pass
        counted = self._prompt_work[0] == now_s
        waiting = self._waiting
        watch = not counted and bool(waiting)
        scan = tiered_decode_scan(view.running_requests(), waiting, watch, now_s, cfg.protected_priority,
                                  cfg.preemption_limit, cfg.pace_e2e, keep, FIRST_TOKEN_KEY)  # (compiled)
        for request_id in scan.started:
            self._forget_waiting(request_id)
        target_s, num_decode, context_tokens = scan.target_s, scan.num_decode, scan.context_tokens
        prompt_tokens, paces = scan.prompt_tokens, scan.paces
        if counted:
            prompt_tokens = self._prompt_work[1]
        else:
            prompt_tokens += self._kept_waiting_tokens(view) if watch else 0
            self._prompt_work = (now_s, prompt_tokens)
        if paces:  # the E2E paces the decode batch alone can keep (a lost cause holds nothing back)
            decode_s = decode_step_s(latency, num_decode, context_tokens)
            for pace in paces:
                if pace >= decode_s:
                    paced_s = pace * keep
                    if decode_s > paced_s:  # (max, keeping the first on a tie)
                        paced_s = decode_s
                    if paced_s < target_s:
                        target_s = paced_s
        if target_s == math.inf:
            return None
        budget = view.budget
        most = budget.max_num_batched_tokens - num_decode
        prefill = prefill_within(latency, target_s, num_decode, context_tokens, most, cfg.min_prefill_tokens)
        # a protected request's own prompt is not held back: its TTFT is at stake; running_order serves these
        # tokens before any less important prefill
        prefill = max(prefill, min(prompt_tokens, most))
        return StepBudget(num_decode + prefill, budget.max_num_seqs) if prefill < most else None

    def running_order(
        self, running: Sequence[Request], view: SchedulerView, now_s: float
    ) -> Sequence[Request] | None:
        """Under TPOT protection, while a protected request waits or is still in its prompt, less important
        requests in theirs compute nothing: the step's prefill budget, capped for the TPOT of protected decodes,
        goes to the protected prompt first (and waiting ones are admitted after the running requests are
        served). Otherwise ``None``: every running request, most protected first. Nothing is held back when the
        held-back prompts are all that would run and the queue may not start a request now: no protected
        request can start (no sequence slot or blocks for its first chunk), or some waiting request cannot,
        which may be the one the engine tries first (admission stops at the first that does not fit; with
        aging a less important request can rank ahead of every protected one). Either way the engine would
        idle with work it could run (e.g. the slots hold prompts of a class its fair share shields from
        displacement, or, with a large ``max_age_boost``, an aged BACKGROUND request too large for the free
        blocks heads the queue while BACKGROUND prompts fill the slots: a KV deadlock, nothing preempted)."""
        if not self.config.protect_tpot or not self._pending_prompt_tokens(running, view, now_s):
            return None
        # protected (promoted inline) or with no more than its next token to compute (not in its prompt, nor in a
        # recompute of prompt and output after a preemption), in victim_key order (filtered, then sorted: the same
        # list, as the sort is stable; this runs every step while protected prompts are pending)
        protected, limit = self.config.protected_priority, self.config.preemption_limit
        served = [r for r in running if r.priority <= protected or r.num_preemptions >= limit
                  or r.num_computed_tokens + 1 >= r.prompt_tokens + r.num_output_tokens]
        served.sort(key=self.victim_key)
        if not served and not self._protected_may_start(view):
            return None
        return served

    def _protected_may_start(self, view: SchedulerView) -> bool:
        """Whether a waiting protected request would get a sequence slot and the blocks of its first chunk
        (priced at the engine's whole token budget, so the answer errs towards no) from what is free now, and
        so would every other waiting request: then the queue's head, whichever it is, starts (the policy does
        not see the queue's order; the walk stops at the first request that would not fit)."""
        budget = view.budget
        if view.num_running >= budget.max_num_seqs:
            return False
        if not any(_waiting_now(r) and self._may_start(r, view) for r in self._protected_waiting.values()):
            return False
        return all(self._may_start(r, view) for r, _ in self._waiting.values() if _waiting_now(r))

    @staticmethod
    def _may_start(request: Request, view: SchedulerView) -> bool:
        """Whether waiting ``request`` would get the blocks of its first chunk (at the engine's whole token
        budget) from what is free now."""
        chunk = min(request.num_uncomputed_tokens, view.budget.max_num_batched_tokens)
        return blocks_for(request.num_computed_tokens + chunk, view.block_size) \
            <= view.available_blocks(request, admission=True)

    def _pending_prompt_tokens(self, running: Sequence[Request], view: SchedulerView, now_s: float) -> int:
        """Prompt tokens protected requests still need, waiting or running; counted once per step (the core
        asks step_budget first, which counts them the same way in its own pass; the vLLM adapter running_order)."""
        when, tokens = self._prompt_work
        if when == now_s:
            return tokens
        tokens = self._waiting_prompt_tokens(running, view)
        protected, limit = self.config.protected_priority, self.config.preemption_limit
        for request in running:
            left = request.prompt_tokens + request.num_output_tokens - request.num_computed_tokens
            if left > 1 and (request.priority <= protected or request.num_preemptions >= limit):
                tokens += left
        self._prompt_work = (now_s, tokens)
        return tokens

    def _protected(self, request: Request) -> bool:
        return request.priority <= self.config.protected_priority or self.promoted(request)

    def _track_waiting(self, request: Request) -> None:
        """``request`` (re-)entered the waiting queue: counted, with its prompt tokens if it is protected (they
        do not change while it waits)."""
        request_id = request.request_id
        self._forget_waiting(request_id)
        protected = self._protected(request)
        tokens = _tokens_left(request) if protected else 0
        self._waiting[request_id] = (request, tokens)
        self._protected_waiting_tokens += tokens
        if protected:
            self._protected_waiting[request_id] = request

    def _forget_waiting(self, request_id: str) -> None:
        entry = self._waiting.pop(request_id, None)
        if entry is not None:
            self._protected_waiting_tokens -= entry[1]
            self._protected_waiting.pop(request_id, None)

    def _waiting_prompt_tokens(self, running: Sequence[Request], view: SchedulerView) -> int:
        """Prompt tokens of the protected requests waiting to run (arrived or preempted; forgotten once they run
        or end). Kept as a sum: the requests that started since the last step are found in ``running``; when
        the count left then differs from the engine's waiting count (a request ended or left while waiting, or
        ran and ended between two steps), every entry is checked as the old walk did."""
        waiting = self._waiting
        if not waiting:
            return 0
        for request in running:
            if request.request_id in waiting:
                self._forget_waiting(request.request_id)
        return self._kept_waiting_tokens(view)

    def _kept_waiting_tokens(self, view: SchedulerView) -> int:
        """The protected waiting prompt tokens, once the requests running now have left the sum: recounted
        when the entries left differ in number from the engine's waiting requests."""
        if len(self._waiting) != view.num_waiting:
            self._recount_waiting()
        return self._protected_waiting_tokens

    def _recount_waiting(self) -> None:
        """Drop the entries of requests running or ended, and recount the protected ones' tokens left now."""
        waiting, protected = self._waiting, self._protected_waiting
        ended = [i for i, (r, _) in waiting.items() if r.state is RequestState.RUNNING or r.state.is_terminal]
        for request_id in ended:
            self._forget_waiting(request_id)
        total = 0
        for request_id, request in protected.items():
            tokens = _tokens_left(request)
            waiting[request_id] = (request, tokens)
            total += tokens
        self._protected_waiting_tokens = total

    def on_tokens(self, request: Request, num_tokens: int, now_s: float) -> None:
        if FIRST_TOKEN_KEY not in request.policy_state:
            request.policy_state[FIRST_TOKEN_KEY] = now_s
        if self._guard is not None:
            self._guard.on_tokens(request, num_tokens, now_s)
        if self._shares is not None:
            self._shares.record(request.priority, num_tokens, now_s)

    @staticmethod
    def _analytic_prefill_within(
        latency: AnalyticLatencyModel, target_s: float, num_decode: int, context_tokens: int, low: int, most: int
    ) -> int:
        """:func:`analytic_prefill_within` (kept under its old name for its tests)."""
        return analytic_prefill_within(latency, target_s, num_decode, context_tokens, low, most)
