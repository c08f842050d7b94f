"""Utility scheduling (issue 31): the seeds' mechanisms as one model of what a request is worth and what it costs.

Each request carries a **weight** ``w``: its tier's (``weights``, by priority: SYSTEM 8, PREMIUM 4, STANDARD 2,
BACKGROUND 1, the weights of the tier-weighted goodput in :mod:`semsched.metrics.goodput`), times
``urgency_factor`` (100) when its urgency level is 0 (seed 000's most urgent class: at 100 it goes before every
calm request of comparable cost, nearly seed 000's strict class, without ``hard_urgency``'s order among the
other levels). Its **expected remaining cost** is the Gittins index (seed 002,
:func:`~semsched.policies.gittins.gittins_index`) of its remaining cost distribution, from its predicted
output-length distribution (``Request.predicted_output``; without one its true length stands in, as for the
other policies) under the ``cost`` model, after the cost it has attained; under speculative decoding (seed 004)
it is divided by the tokens per verification round the request was seen to emit (known once it has run: for a
preempted request). A request's utility is ``w`` while it can still meet its targets and nothing
once it cannot (it counts for no goodput whenever it ends). Everything below reads these numbers.

* **Order.** Waiting requests go in ascending ``index / w``, expected cost per unit of weight (a weighted Gittins
  rule: with equal weights this is ``gittins``; with equal costs, weight order), keyed once, when the request
  enters the queue (arrival or preemption). A request that is **late** (not started by its TTFT deadline, or not
  finished by its E2E deadline) goes after every request still in time, in the same order among the late ones.
* **Deadlines at risk** (``risk_slack``, off by default; seed 001's URGENT set, seed 003's TTFT SLOs). A request of
  weight at least ``protect_weight`` that has not produced its first token, once less than ``risk_slack`` of its
  TTFT SLO is left (and until its deadline passes), goes before the index order, earliest TTFT deadline first,
  and may displace running requests of strictly smaller weight below the preemption limit (``displace``), most
  expendable first, when together they make room. ``protect_weight`` (100) makes these the urgent requests.
* **Displacing for order where it is cheap** (``swap_displace``; seed 004's SRPT). A waiting request in time that
  does not fit displaces running requests below the preemption limit whose expected cost per weight, priced
  now (after the cost they attained), exceeds its own, largest first, but only those whose KV would be swapped
  (``preemption`` finds swapping cheaper and the host has room for it). Where a victim would be recomputed
  (no host blocks; inside vLLM, which swaps nothing) nothing is displaced for order: there it costs more than
  it saves (``cost_index``'s measurements).
* **Hard classes** (off by default): ``hard_tiers=true`` orders by priority before anything else but starvation,
  ``hard_urgency=true`` by urgency level (after the tier when both are on): seed 003's strict tiers and seed
  000's strict urgency, for an operator who wants them.
* **Fair-share floor.** A request that has waited ``starve_s`` since it entered the queue has starved: starved
  requests take every ``starve_every``-th admission, in the order they entered the queue (the bound below), so
  that a sustained overload, where every request waits that long, does not turn the whole order into FIFO.
* **Victims** under KV pressure and for displacement: requests below the preemption limit first, the least
  weighted work lost (``w`` times computed tokens: what a recompute redoes; a demoted request's counts as none),
  then the latest arrival; among those at the limit, the latest arrival. ``preemption`` decides per victim
  between swapping and recomputing its KV (``cheapest``: whichever
  :class:`~semsched.latency.preemption.PreemptionCostModel` prices lower, when the host has room for the whole
  cache; inside vLLM every preemption is a recompute).
* **Preemption limit.** A request preempted ``preemption_limit`` times is preempted again only when every running
  request has reached the limit, and is never displaced.
* **Protecting TPOT** (``protect_tpot``, on; seed 001's time budget with ``tiered``'s closed form, in the role
  of seed 000's stage-aware budget for its urgent class): in a step with decodes of requests of weight at least
  ``protect_weight`` (100: the urgent ones) that have a TPOT SLO, prefill is capped so the profile's step time
  stays within the tightest of their allowances (target less ``tpot_margin``, 0.7: 30 % of it, plus the time
  each has banked; :func:`~semsched.policies.tiered.prefill_within`); the prompts of such requests (running, or
  at the head of the queue) are not held back.
* **Hopeless requests** (``hopeless``, off by default): a request that cannot meet one of its targets even alone
  on an empty engine (TTFT: its prompt's prefill; TPOT: one decode after its prompt; E2E: prefill and the decodes
  of the fewest tokens its prediction allows, priced with ``profile``) is demoted (``demote``: it goes with the
  late requests and is never promoted) or rejected at arrival (``reject``) with a reason starting ``hopeless:``
  that names the SLO. Rejection is never the default: a long-context prompt is often hopeless against a TTFT
  target, and rejecting it would refuse requests every baseline serves.

**Defaults** were chosen on the scoreboard's benchmarks (:mod:`semsched.experiments.scoreboard`), each through
``run_benchmark`` at its quick size (``Benchmark.requests[1]``; spikes 10 spikes, production 1,000 requests) at
0.6, 0.9 and 1.2 of capacity, seeds 0-1 (spikes 0-2), regret (best contender's headline over utility's, 1.00 the
best) as medians over seeds per load; before -> now, where "before" is ``urgency_factor=4;protect_weight=4;
protect_tpot=false;tpot_margin=0.2;swap_displace=false``:

* spikes (urgency-0 normalized latency; best otherwise ``semantic``, 0.041-0.051 s/token): 1.95, 1.98, 1.78 ->
  1.00, 1.00, 1.00 (``semantic`` then 1.09, 1.06, 1.05). The urgent class's decodes are what ``semantic``'s
  stage-aware budget protects: weight 100 alone gave 1.82-1.67 (4 spikes), TPOT protection of the urgent
  requests with ``tpot_margin=0.2`` 1.12-1.28, with 0.5 1.07-1.02, with 0.7 1.01-1.01; ``hard_urgency`` on top
  of 0.7 did not help (1.03, 1.09, 1.03) and costs production 1-2 %;
* spec-poisson and spec-burst (mean latency, one request at a time, swap; best ``srpt``): 1.14, 1.10, 1.06 and
  1.04, 1.06, 1.05 -> 1.02, 1.01, 1.01 and 1.01, 1.00, 1.01 (``swap_displace``: SRPT's preemption; the cost
  model and the tokens per round change nothing there, ``cost=output`` gave the same order);
* production (tier-weighted goodput, seeds 0/1): 57.1/59.8, 77.1/81.3, 91.5/94.8 -> 57.1/59.8, 76.4/81.3,
  90.4/94.8 (``gittins`` 57.1/59.8, 77.4/81.3, 88.4/91.6; ``tiered`` 56.0/56.4, 73.1/79.0, 90.4/94.1): TPOT
  protection of the urgent requests costs about 1 % on seed 0; PREMIUM attainment 0.213 -> 0.239 at 1.2x;
* unchanged: tiers 1.27, 1.22, 4.05 (best ``tiered``), proserve 1.01, 1.14, 1.87 (best proserve's
  slide-batching), sagesched 1.00, long-context 1.71, 1.18, 1.37 (mean E2E of 60 requests; every request
  served, as by every baseline).

Earlier, on azure-conv with the default tiers (300 s at 2.4, 3.6, 4.8 requests/s; seeds 0-2): TPOT protection
of PREMIUM (``protect_weight=4``) cost goodput (4.27, 5.17, 5.27 against 4.46, 5.84, 6.25) with no higher
PREMIUM attainment; hopeless demotion 5.45 at 4.8/s against 6.25; deadlines at risk (``risk_slack=0.5``) 5.95;
the victim by weighted work lost, rather than by weight then latest arrival, took 4.8/s from 4.77 to 6.00; the
floor (``starve_s=60``) costs nothing measurable (6.21 without it).
Where this falls short: on the tiers benchmark (PREMIUM attainment over its idle ceiling) ``tiered`` stays ahead:
there PREMIUM first tokens wait behind steps full of 2,048-token prefill chunks, which ``tiered`` caps and holds
back for protected prompts, at the cost of the other tiers' goodput (above). On proserve at 1.2x,
slide-batching's TDG ratio (0.92/0.95) is ahead of utility's (0.40/0.66).

**Hot path.** Under the core scheduler the policy keeps its waiting requests in sorted structures and gives the
core its order through ``waiting_order``: a heap in index order (keyed once; a request that turns late moves
once to a second heap), a line in the order requests entered the queue (starvation), and one line per tier and
TTFT SLO in deadline order (deadlines at risk). Lines are passed over by bisection as time moves on, stale
entries (admitted, ended, re-entered) are dropped when they reach a front, and a step looks only at what it
admits: no walk over the queue, no re-key. The vLLM adapter keys its own queue with :meth:`Utility.waiting_key`
(the same order, except that starved requests take every admission there) and re-keys it every ``check_s`` for
the time-dependent layers; the first call to it turns the policy's own structures off. ``step_budget`` walks the
running requests only while some unfinished request has a protected TPOT target; ``victims_for`` prices them
(``swap_displace``) only when the queue's head does not fit and the host has free blocks. What a step costs beyond
``fcfs`` is mostly the core's re-sort of its running requests by ``victim_key`` (the work each would lose grows as
it computes): ``benchmarks/scheduler_overhead.py --policies fcfs,utility --repeats 30`` measured, at 10,000
waiting and 256 running, 0.151 ms per schedule+update against ``fcfs``'s 0.103 (schedule alone 0.085 against
0.035), the same at 1,000 and 100,000 waiting.

**Fast-forward.** Starvation, lateness, deadlines at risk and TPOT allowances change with time, so the policy is
``stable_between_events`` only when nothing waits (the simulator fast-forwards decode-only stretches then).
"""

from __future__ import annotations

import bisect
import heapq
import itertools
import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import ClassVar, Literal

from semsched.core.plan import Admission, PreemptionMode
from semsched.core.policy import Policy, PolicyConfig, SchedulerView, SortKey, StepBudget, key_holds_before
from semsched.core.request import WAITING_STATES, Request
from semsched.latency import load_profile
from semsched.latency.preemption import KNOWN_SHAPES, PreemptionCostModel
from semsched.policies.cost_model import CostModel, attained_cost, cost_distribution, one_token_floor
from semsched.policies.gittins import gittins_index
from semsched.policies.params import check_float, check_int, param
from semsched.policies.registry import register_policy
from semsched.policies.slo_guard import HOPELESS
from semsched.policies.tiered import prefill_within

#: the tier-weighted goodput's weights by priority (``semsched.metrics.goodput.TIER_WEIGHTS``; a policy may not
#: import the metrics package, so tests/policies/test_utility.py checks that the two agree)
DEFAULT_WEIGHTS: tuple[float, ...] = (8.0, 4.0, 2.0, 1.0)

_WEIGHT = "utility.weight"  # w, set at arrival
_INDEX = "utility.index"  # expected cost per unit of weight, set when the request entered the queue
_QUEUED = "utility.queued_s"  # when it last entered the queue
_MARK = "utility.mark"  # the order of that entry (its heap entries' mark)
_DEMOTED = "utility.demoted"  # 1.0: hopeless and demoted at admission
_FIRST_TOKEN = "utility.first_token_s"  # when it was first seen decoding (its TPOT allowance's start)
_ENTRY = "utility.entry"  # the preemption count at its last entry into the queue
_VICTIM_WEIGHT = "utility.victim_weight"  # w, or 0 when demoted: the weight of its work in the victim order
#: the work a request at the preemption limit counts as losing: more than any request's weighted tokens
_LIMITED = 1e30


# the layers of the waiting order (the first element of every key): starved, deadline at risk, in time (by
# index), late or demoted (by index)
_STARVING, _AT_RISK, _BY_INDEX, _LATE = 0.0, 1.0, 2.0, 3.0


@dataclass(frozen=True)
class UtilityConfig(PolicyConfig):
    weights: tuple[float, ...] = param(
        DEFAULT_WEIGHTS, "weight of priority 0/1/2/... (SYSTEM 8, PREMIUM 4, STANDARD 2, BACKGROUND 1: the "
                         "tier-weighted goodput's); a larger priority takes the last")
    urgency_factor: float = param(100.0, "weight multiplier of a request of urgency level 0 (the most urgent)")
    cost: CostModel = param("resource", "service cost of O output tokens after I prompt tokens: O^2/2 + I*O "
                                        "(resource), O (output) or I + 2*O (weighted)")
    risk_slack: float = param(0.0, "a request of protect_weight or more that has not started goes first, "
                                   "earliest TTFT deadline first, once less than this fraction of its TTFT SLO is "
                                   "left (0: never)")
    protect_weight: float = param(100.0, "weight from which deadlines at risk are promoted and may displace, and "
                                         "TPOT targets cap prefill (100: the urgent requests of every tier)")
    hard_tiers: bool = param(False, "strict priority across tiers before every other order but starvation")
    hard_urgency: bool = param(False, "strict urgency levels before the index order (after tiers if both)")
    starve_s: float = param(60.0, "a request waiting this long since it entered the queue goes first, in the "
                                  "order they entered (0: never)")
    starve_every: int = param(4, "starved requests take every this-many-th admission (1: all of them), so a "
                                 "sustained overload does not turn the whole order into FIFO")
    hopeless: Literal["demote", "reject", "off"] = param(
        "off", "a request that cannot meet one of its SLOs even alone: demote (served after the rest), reject "
                  "(at arrival, reason hopeless:) or off")
    displace: bool = param(True, "a request whose deadline is at risk displaces running requests of smaller "
                                 "weight below the preemption limit")
    swap_displace: bool = param(True, "a waiting request in time displaces running requests below the "
                                      "preemption limit of larger expected cost per weight, where each victim's "
                                      "KV is swapped (cheaper than a recompute, and the host has room), never "
                                      "where it would be recomputed (inside vLLM, or without host blocks)")
    preemption_limit: int = param(3, "preemptions after which a request is preempted only when every running "
                                     "request has as many, and never displaced")
    protect_tpot: bool = param(True, "cap prefill in steps with decodes of protected requests that have a TPOT "
                                     "target, to the profile's step time within their allowances")
    tpot_margin: float = param(0.7, "TPOT protection aims this fraction under each target")
    min_prefill_tokens: int = param(64, "prefill tokens a step may always take under TPOT protection")
    preemption: Literal["recompute", "swap", "cheapest"] = param(
        "cheapest", "how a victim's KV cache is freed (cheapest: swap or recompute, whichever costs less, swap "
                    "only where the host holds the whole cache)")
    profile: str = param("a100-qwen1.5-4b", "latency profile for TPOT protection, hopeless requests and "
                                            "preemption costs (use the engine's own)")
    model: str = param("qwen1.5-4b", "model whose KV cache a swap moves: " + ", ".join(sorted(KNOWN_SHAPES)))
    link_gb_per_s: float = param(25.0, "host link bandwidth in GB/s, one direction (PCIe 4.0 x16: ~25)")
    check_s: float = param(1.0, "inside vLLM: how often the waiting queue is re-keyed for starvation, lateness "
                                "and deadlines at risk (seconds; each re-key is O(n) in the waiting requests)")

    def __post_init__(self) -> None:
        super().__post_init__()
        if not isinstance(self.weights, tuple) or not 1 <= len(self.weights) <= 1024:
            raise ValueError(f"weights must be 1 to 1,024 numbers, one per priority, got {self.weights!r}")
        for priority, weight in enumerate(self.weights):
            check_float(f"weights[{priority}]", weight, 1e-6, 1e6)
        check_float("urgency_factor", self.urgency_factor, 1e-6, 1e6)
        check_float("risk_slack", self.risk_slack, 0.0, 1.0)
        check_float("protect_weight", self.protect_weight, 0.0, 1e12)
        check_float("starve_s", self.starve_s, 0.0, 86_400.0)
        check_int("starve_every", self.starve_every, 1, 1_000_000)
        check_int("preemption_limit", self.preemption_limit, 1, 1_000)
        check_float("tpot_margin", self.tpot_margin, 0.0, 0.9)
        check_int("min_prefill_tokens", self.min_prefill_tokens, 1, 2**31 - 1)
        check_float("link_gb_per_s", self.link_gb_per_s, 1e-3, 1e6)
        check_float("check_s", self.check_s, 1e-3, 3_600.0)
        for name in ("hard_tiers", "hard_urgency", "displace", "swap_displace", "protect_tpot"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"{name} must be true or false, got {getattr(self, name)!r}")
        if self.model not in KNOWN_SHAPES:
            raise ValueError(f"model must be one of {', '.join(sorted(KNOWN_SHAPES))}, got {self.model!r}")


def tokens_per_round(request: Request) -> float:
    """Tokens ``request`` emitted per step it emitted in (per verification round under speculative decoding;
    1.0 without speculation or before it has run): its output tokens over the distinct steps of its token
    record."""
    ranges = request.token_step_ranges
    if len(ranges) < 2 and not request.round_extras:
        return 1.0  # one contiguous range holds one token per step
    steps, end = 0, -1
    for start, stop in ranges:  # in order of emission; a step may repeat (tokens recorded one call each)
        if stop > end:
            steps += stop - max(start, end)
            end = stop
    return request.num_output_tokens / steps if steps else 1.0


@register_policy
class Utility(Policy):
    """Smallest expected remaining cost per unit of weight first, deadlines at risk promoted, TPOT protected.

    starvation: bounded: a request that has waited ``starve_s`` since it entered the queue (arrival or
    preemption) has starved, and starved requests take at least every ``starve_every``-th admission in the order
    they entered; so it starts once the starved requests that entered before it have, within ``starve_every``
    admissions each, and the running requests holding the room it needs are done (``starve_s=0``: possible).
    """

    name: ClassVar[str] = "utility"
    config_cls: ClassVar[type[PolicyConfig]] = UtilityConfig
    config: UtilityConfig

    def __init__(self, config: PolicyConfig | None = None) -> None:
        super().__init__(config)
        cfg = self.config
        self._latency = load_profile(cfg.profile)
        self._preemption_limit = cfg.preemption_limit
        self._marks = itertools.count()
        #: the waiting requests: a heap by (layer, tier, urgency, index / w, arrival); a line by entry into the
        #: queue (starvation); and those that may be promoted, a line per (tier if hard, TTFT SLO) by deadline.
        #: Each entry ends with (mark, request) and is stale once the request's mark moved on or it stopped waiting
        self._ordered: list[tuple[SortKey, int, Request]] = []
        self._late: list[tuple[SortKey, int, Request]] = []  # (moved from _ordered when they turn late)
        self._entered = _Line()
        self._deadlines: dict[tuple[float, float], _Line] = {}
        #: ``waiting_key`` was asked (the vLLM adapter keys its own queue): the heaps are not kept
        self._keyed = False
        #: unfinished requests with a TPOT target and weight >= protect_weight (step_budget walks the running
        #: requests only while there are any; pruned of ended ones when it grows past the engine's requests)
        self._tpot_watch: dict[str, Request] = {}
        #: displacement's shortcut under the core: the running set's version (bumped when a request may have
        #: started, finished, been preempted or left) and the weight below which it was seen to hold no victim
        self._running_version = 0
        #: the fair-share floor's turn: admissions since a starved request was last admitted, and the request
        #: last given to the core (with its mark and whether it had starved), settled at the next look
        self._since_starved = 0
        self._offered: tuple[Request, float, bool] | None = None
        self._no_victims_below: tuple[int, float] = (-1, 0.0)

    @property
    def uses_predicted_lengths(self) -> bool:
        return True

    # (stable_between_events: False, the base class's: the order changes with time while requests wait)

    @property
    def rekey_interval_s(self) -> float | None:  # type: ignore[override]
        """Inside vLLM (the core asks ``waiting_order`` instead): starvation, lateness and deadlines at risk change
        keys with time."""
        return self.config.check_s

    def uses_hook(self, hook: str) -> bool:
        if hook == "step_budget":
            return self.config.protect_tpot
        if hook == "victims_for":  # (only a request at risk displaces inside vLLM, which swaps nothing; the
            return self.config.displace and self.config.risk_slack > 0  # adapter then skips re-keying a saturated
            # engine's queue. The core asks victims_for whatever this says: swap_displace needs no hook there)
        if hook == "admit":
            return self.config.hopeless != "off"
        return super().uses_hook(hook)

    # ---- what a request is worth and costs --------------------------------------------------------------
    def weight(self, request: Request) -> float:
        """``w``: the tier's weight, times ``urgency_factor`` at urgency level 0 (cached at arrival)."""
        value = request.policy_state.get(_WEIGHT)
        if value is None:
            weights = self.config.weights
            value = weights[min(max(request.priority, 0), len(weights) - 1)]
            if request.urgency == 0:
                value *= self.config.urgency_factor
            request.policy_state[_WEIGHT] = value
        return value

    def cost_per_weight(self, request: Request) -> float:
        """The request's Gittins index of remaining cost (the one-token floor past its prediction), divided by
        its tokens per round and its weight: smaller goes first."""
        cfg = self.config
        index = gittins_index(cost_distribution(request, cfg.cost), attained_cost(request, cfg.cost))
        if index is None:
            index = one_token_floor(request.prompt_tokens, cfg.cost)
        accept = tokens_per_round(request) if request.num_output_tokens > 1 else 1.0
        return index / (accept * self.weight(request))

    @staticmethod
    def demoted(request: Request) -> bool:
        return request.policy_state.get(_DEMOTED, 0.0) == 1.0

    def _risk_window(self, request: Request) -> tuple[float, float] | None:
        """When ``request``'s TTFT deadline becomes at risk, and the deadline; None if it is never promoted."""
        cfg, slo = self.config, request.ttft_slo_s
        if cfg.risk_slack == 0 or slo is None or request.num_output_tokens > 0 or self.demoted(request) \
                or self.weight(request) < cfg.protect_weight:
            return None
        deadline = request.arrival_time_s + slo
        return deadline - cfg.risk_slack * slo, deadline

    def at_risk(self, request: Request, now_s: float) -> bool:
        """Whether ``request`` is promoted at ``now_s``: protected, not started, its deadline within
        ``risk_slack`` of its SLO and not passed."""
        window = self._risk_window(request)
        return window is not None and window[0] <= now_s < window[1]

    def _starving(self, request: Request, now_s: float) -> bool:
        starve_s = self.config.starve_s
        return starve_s > 0 and now_s - request.policy_state.get(_QUEUED, now_s) >= starve_s

    def _tier(self, request: Request) -> float:
        return float(request.priority) if self.config.hard_tiers else 0.0

    def _static_key(self, request: Request) -> SortKey:
        """The index layer's key: demoted last, hard classes, cost per weight, arrival."""
        cfg, state = self.config, request.policy_state
        urgency = float(request.urgency if request.urgency is not None else 0) if cfg.hard_urgency else 0.0
        layer = _LATE if self.demoted(request) else _BY_INDEX
        return (layer, self._tier(request), urgency, state[_INDEX], request.arrival_time_s)

    @staticmethod
    def late(request: Request, now_s: float) -> bool:
        """Whether ``request`` can no longer meet a target it has: not started by its TTFT deadline, or not
        finished by its E2E deadline. It counts for no goodput whenever it ends, so it goes after the requests
        still in time."""
        return (request.num_output_tokens == 0 and now_s >= request.ttft_deadline_s) \
            or now_s >= request.e2e_deadline_s

    def waiting_key(self, request: Request, now_s: float) -> SortKey:
        """The order ``waiting_order`` gives, as one key at ``now_s`` (for the vLLM adapter's queue)."""
        if not self._keyed:
            self._keyed = True
            self._ordered.clear()
            self._late.clear()
            self._entered = _Line()
            self._deadlines.clear()
        self._enqueue(request, now_s)  # (a no-op unless it was preempted since it was last counted in)
        if self._starving(request, now_s):
            return (_STARVING, request.policy_state[_QUEUED], request.arrival_time_s)
        if self.at_risk(request, now_s):
            return (_AT_RISK, self._tier(request), request.ttft_deadline_s, request.arrival_time_s)
        key = self._static_key(request)
        return (_LATE, *key[1:]) if key[0] == _BY_INDEX and self.late(request, now_s) else key

    def waiting_key_until(self, request: Request, now_s: float) -> float:
        """The key changes only where one of its conditions turns: starving (for good), the TTFT risk window
        opening or closing, the TTFT or E2E deadline passing. The first of those still ahead (a starving
        request's key never changes)."""
        if self._starving(request, now_s):
            return math.inf
        starve_s = self.config.starve_s
        turns = [request.policy_state[_QUEUED] + starve_s] if starve_s > 0 else []
        window = self._risk_window(request)
        if window is not None:
            turns.extend(edge for edge in window if now_s < edge)
        if request.num_output_tokens == 0 and now_s < request.ttft_deadline_s:
            turns.append(request.ttft_deadline_s)
        if now_s < request.e2e_deadline_s:
            turns.append(request.e2e_deadline_s)
        return key_holds_before(min(turns, default=math.inf))

    # ---- the waiting heaps ------------------------------------------------------------------------------
    def on_arrival(self, request: Request, now_s: float) -> None:
        self._victim_weight(request)
        if request.tpot_slo_s is not None and self.weight(request) >= self.config.protect_weight:
            self._watch(request)
        self._enqueue(request, now_s)

    def on_preempt(self, request: Request, now_s: float) -> None:
        self._running_version += 1
        self._enqueue(request, now_s)

    def on_finish(self, request: Request, now_s: float) -> None:
        self._running_version += 1
        self._tpot_watch.pop(request.request_id, None)

    def on_leave(self, request: Request) -> None:
        self._running_version += 1
        request.policy_state.pop(_MARK, None)  # its entries here are stale, though it reads as waiting
        request.policy_state.pop(_ENTRY, None)  # it enters the next instance's queue afresh
        self._tpot_watch.pop(request.request_id, None)

    def _enqueue(self, request: Request, now_s: float) -> None:
        """``request`` entered the queue (arrival, or its latest preemption): its entry time, index and mark, once
        per entry (the vLLM adapter re-keys a preempted request before it reports the preemption: see
        :meth:`waiting_key`)."""
        state = request.policy_state
        if state.get(_ENTRY) == request.num_preemptions:
            return
        state[_ENTRY] = request.num_preemptions
        mark = next(self._marks)
        state[_MARK], state[_QUEUED] = mark, now_s
        state[_INDEX] = self.cost_per_weight(request)
        if self._keyed:
            return
        heapq.heappush(self._ordered, (self._static_key(request), mark, request))
        if self.config.starve_s > 0:
            self._entered.add(now_s, mark, request)
        window = self._risk_window(request)
        if window is not None:
            group = (self._tier(request), request.ttft_slo_s or 0.0)
            line = self._deadlines.get(group)
            if line is None:
                line = self._deadlines[group] = _Line(self.config.risk_slack * group[1])
            line.add(window[1], mark, request)

    @staticmethod
    def _live(request: Request, mark: float) -> bool:
        return request.policy_state.get(_MARK) == mark and request.state in WAITING_STATES

    def _head(self, now_s: float) -> tuple[Request, bool] | None:
        """The request first at ``now_s`` and whether its deadline is at risk, or None if none waits: the
        longest-waiting if it has starved, else the earliest deadline at risk, else the index order's front."""
        cfg = self.config
        if cfg.starve_s > 0 and self._since_starved >= cfg.starve_every - 1:
            entry = self._entered.front(-math.inf)
            if entry is not None and now_s - entry[0] >= cfg.starve_s:
                return entry[2], False
        best: tuple[float, float, int, Request] | None = None
        for (tier, _), line in self._deadlines.items():  # (one line per tier and TTFT SLO: a handful)
            entry = line.front(now_s)
            if entry is not None and entry[0] - line.lead_s <= now_s \
                    and (best is None or (tier, entry[0], entry[1]) < best[:3]):
                best = (tier, entry[0], entry[1], entry[2])
        if best is not None:
            return best[3], True
        ordered, live, late = self._ordered, self._live, self._late
        pop, push = heapq.heappop, heapq.heappush
        while ordered:  # (each request passes here once or twice in its wait: inlined)
            key, mark, request = ordered[0]
            if request.policy_state.get(_MARK) != mark or request.state not in WAITING_STATES:
                pop(ordered)
            elif key[0] == _BY_INDEX and (now_s >= request.e2e_deadline_s or (
                    request.num_output_tokens == 0 and now_s >= request.ttft_deadline_s)):
                pop(ordered)
                push(late, ((_LATE, *key[1:]), mark, request))
            else:
                break
        if ordered and ordered[0][0][0] == _BY_INDEX:
            return ordered[0][2], False
        while late and not live(late[0][2], late[0][1]):
            heapq.heappop(late)
        if late and (not ordered or late[0][:2] < ordered[0][:2]):
            return late[0][2], False
        return (ordered[0][2], False) if ordered else None

    def waiting_order(self, view: SchedulerView, now_s: float) -> Iterator[Request]:
        """The waiting requests in :meth:`waiting_key` order at ``now_s``, lazily: at each ``next`` the head
        (:meth:`_head`), so requests admitted or displaced meanwhile are seen. The walk ends at a request it gave
        before (not admitted: the core never asks on then)."""
        if self._keyed:
            raise RuntimeError("utility: waiting_order after waiting_key (one policy serves one engine)")
        return self._walk(now_s)

    def _walk(self, now_s: float) -> Iterator[Request]:
        seen: set[int] = set()
        self._settle()
        while True:
            head = self._head(now_s)
            if head is None or id(head[0]) in seen:
                return
            request = head[0]
            seen.add(id(request))
            self._offered = (request, request.policy_state[_MARK], self._starving(request, now_s))
            yield request
            self._running_version += 1  # (asked on: it was admitted)
            self._settle()

    def _settle(self) -> None:
        """Count the admission of the request last given to the core, if it left the queue (admitted)."""
        offered = self._offered
        if offered is None:
            return
        self._offered = None
        request, mark, starved = offered
        if not self._live(request, mark):
            self._since_starved = 0 if starved else self._since_starved + 1

    # ---- admission: hopeless requests -------------------------------------------------------------------
    def admit(self, request: Request, view: SchedulerView, now_s: float) -> Admission:
        mode = self.config.hopeless
        reason = self.hopeless_reason(request, now_s) if mode != "off" else None
        if reason is None:
            return Admission.accept()
        if mode == "reject":
            return Admission.reject(reason)
        request.policy_state[_DEMOTED] = 1.0
        return Admission.accept()

    def hopeless_reason(self, request: Request, now_s: float) -> str | None:
        """Why ``request`` cannot meet one of its SLOs even alone on an empty engine (``hopeless:`` and the SLO),
        or None."""
        latency, prompt = self._latency, request.prompt_tokens
        waited_s = max(now_s - request.arrival_time_s, 0.0)
        prefill_s = latency.step_time_s([(prompt, 0)], 0, 0)  # emits the first token
        if request.ttft_slo_s is not None and waited_s + prefill_s > request.ttft_slo_s:
            return (f"{HOPELESS} TTFT at least {waited_s + prefill_s:.3g} s (prefill of {prompt} tokens on an "
                    f"empty engine) over its ttft_slo of {request.ttft_slo_s:g} s")
        if request.tpot_slo_s is not None and request.max_output_tokens > 1:
            decode_s = latency.step_time_s([], 1, prompt)
            if decode_s > request.tpot_slo_s:
                return (f"{HOPELESS} TPOT at least {decode_s:.3g} s (one decode after {prompt} prompt tokens on "
                        f"an empty engine) over its tpot_slo of {request.tpot_slo_s:g} s")
        if request.e2e_slo_s is not None:
            fewest = _fewest_output_tokens(request)
            total_s = waited_s + prefill_s + float(latency.decode_times_s(1, prompt, fewest - 1).sum())
            if total_s > request.e2e_slo_s:
                return (f"{HOPELESS} E2E at least {total_s:.3g} s (prefill of {prompt} tokens and {fewest} output "
                        f"token{'s' if fewest > 1 else ''} on an empty engine) over its e2e_slo of "
                        f"{request.e2e_slo_s:g} s")
        return None

    # ---- displacement and preemption --------------------------------------------------------------------
    def victim_key(self, request: Request) -> SortKey:
        """Largest goes first: below the preemption limit, the least weighted work lost (weight times computed
        tokens: what a recompute redoes; a demoted request weighs nothing here), then the latest arrival; at the
        limit, the latest arrival.
        (The core sorts its running requests by it every step: one lookup and a product.)"""
        weight = request.policy_state.get(_VICTIM_WEIGHT)
        if weight is None:
            weight = self._victim_weight(request)
        if request.num_preemptions >= self._preemption_limit:
            return (-_LIMITED, request.arrival_time_s)  # among these, vLLM's order: a stable one, no thrash
        return (-weight * request.num_computed_tokens, request.arrival_time_s)

    def _victim_weight(self, request: Request) -> float:
        weight = 0.0 if self.demoted(request) else self.weight(request)
        request.policy_state[_VICTIM_WEIGHT] = weight
        return weight

    def victims_for(
        self, candidate: Request, running: Sequence[Request], view: SchedulerView, now_s: float
    ) -> Sequence[Request]:
        """For a candidate whose deadline is at risk: the running requests of smaller weight below the preemption
        limit, most expendable first. Under the core, a running set seen to hold none below a weight is not walked
        again for that weight until it changes (only this policy's order admits requests there)."""
        if not self.config.displace:
            return ()
        if not self.at_risk(candidate, now_s):
            return self._swap_victims(candidate, running, view, now_s)
        weight, limit = self.weight(candidate), self.config.preemption_limit
        version = self._running_version
        if not self._keyed and self._no_victims_below[0] == version and weight <= self._no_victims_below[1]:
            return ()
        lighter = [r for r in running if r.policy_state.get(_WEIGHT, 0.0) < weight and r.num_preemptions < limit]
        if not lighter:
            self._no_victims_below = (version, weight)
        return sorted(lighter, key=self.victim_key, reverse=True)

    def _swap_victims(
        self, candidate: Request, running: Sequence[Request], view: SchedulerView, now_s: float
    ) -> Sequence[Request]:
        """``swap_displace``: the running requests below the preemption limit whose expected cost per weight now
        exceeds the candidate's and whose KV would be swapped, largest first; none for a late or demoted
        candidate, or where nothing can be swapped (no host blocks: at once, before any request is priced)."""
        if not self.config.swap_displace or self.config.preemption == "recompute" \
                or view.num_free_cpu_blocks == 0 or self.demoted(candidate) or self.late(candidate, now_s):
            return ()
        mine = candidate.policy_state.get(_INDEX)
        if mine is None:
            mine = self.cost_per_weight(candidate)
        limit, swap = self._preemption_limit, PreemptionMode.SWAP
        priced = [(cost, r) for r in running if r.num_preemptions < limit
                  and (cost := self.cost_per_weight(r)) > mine and self.preemption_mode(r, view) is swap]
        priced.sort(key=lambda pair: (pair[0], pair[1].arrival_time_s), reverse=True)
        return [r for _, r in priced]

    @cached_property
    def _costs(self) -> PreemptionCostModel:
        cfg = self.config
        return PreemptionCostModel(self._latency, KNOWN_SHAPES[cfg.model], cfg.link_gb_per_s * 1e9)

    def preemption_mode(self, request: Request, view: SchedulerView) -> PreemptionMode:
        mode = self.config.preemption
        tokens = request.num_computed_tokens
        if mode == "recompute" or view.num_free_cpu_blocks * view.block_size < tokens:
            return PreemptionMode.RECOMPUTE  # (no room on the host for the whole cache)
        if mode == "swap" or self._costs.swap_s(tokens) < self._costs.recompute_s(tokens):
            return PreemptionMode.SWAP
        return PreemptionMode.RECOMPUTE

    # ---- protecting TPOT --------------------------------------------------------------------------------
    def _watch(self, request: Request) -> None:
        watch = self._tpot_watch
        watch[request.request_id] = request
        if len(watch) > 1024 and len(watch) % 1024 == 0:  # requests dropped or rejected got no on_finish
            for request_id in [i for i, r in watch.items() if r.state.is_terminal]:
                del watch[request_id]

    def step_budget(self, view: SchedulerView, now_s: float) -> StepBudget | None:
        """With decodes of protected requests (weight >= ``protect_weight``) that have a TPOT target, the most
        prefill tokens that keep the profile's step time within the tightest of their allowances (at least
        ``min_prefill_tokens``), raised by the prompts of protected requests (running, or at the queue's head)
        so that no protected first token waits; ``None`` (the engine's budget) otherwise."""
        if not self._tpot_watch:
            return None
        protect = self.config.protect_weight
        target_s, num_decode, context_tokens, prompt_tokens = math.inf, 0, 0, 0
        for request in view.running_requests():  # one pass, no calls for requests that do not matter
            computed = request.num_computed_tokens
            left = request.prompt_tokens + request.num_output_tokens - computed
            if left > 1:  # in its prompt (or recomputing)
                if request.policy_state.get(_WEIGHT, 0.0) >= protect:
                    prompt_tokens += left
                continue
            num_decode += 1
            context_tokens += computed
            if request.tpot_slo_s is not None and request.policy_state.get(_WEIGHT, 0.0) >= protect:
                target_s = min(target_s, self._allowance_s(request, now_s))
        if target_s == math.inf:
            return None
        budget = view.budget
        most = budget.max_num_batched_tokens - num_decode
        prefill = prefill_within(self._latency, target_s, num_decode, context_tokens, most,
                                 self.config.min_prefill_tokens)
        prefill = max(prefill, min(prompt_tokens + self._head_prompt_tokens(now_s), most))
        return StepBudget(num_decode + prefill, budget.max_num_seqs) if prefill < most else None

    def _head_prompt_tokens(self, now_s: float) -> int:
        """The uncomputed tokens of the queue's head if it is protected or at risk (0 inside vLLM, where the
        adapter's queue is not seen)."""
        head = None if self._keyed else self._head(now_s)
        if head is None:
            return 0
        request, at_risk = head
        if at_risk or self.weight(request) >= self.config.protect_weight:
            return request.num_uncomputed_tokens
        return 0

    def _allowance_s(self, request: Request, now_s: float) -> float:
        """How long the next step may take with ``request`` decoding: its TPOT target less ``tpot_margin``, plus
        what it has banked (``tiered``'s allowance: TPOT is a mean, so time ahead of it may be spent)."""
        assert request.tpot_slo_s is not None
        aim_s = request.tpot_slo_s * (1.0 - self.config.tpot_margin)
        first_s = request.policy_state.get(_FIRST_TOKEN)
        if first_s is None:  # first seen decoding: its first token came at the end of the last step
            request.policy_state[_FIRST_TOKEN] = now_s
            return aim_s
        return max(aim_s, aim_s * request.num_output_tokens - (now_s - first_s))


class _Line:
    """Waiting requests in ascending order of a time (when they entered the queue; a TTFT deadline), most added
    in order at the back. Entries before a time are passed over by bisection, stale ones at the front one by one
    (each once), so a step costs O(log n) however many requests' times it passes.

    ``lead_s``: for a line of deadlines, how long before its deadline a request is at risk (``risk_slack`` times
    the line's TTFT SLO)."""

    __slots__ = ("entries", "start", "lead_s")

    def __init__(self, lead_s: float = 0.0) -> None:
        self.entries: list[tuple[float, int, Request]] = []
        self.start = 0
        self.lead_s = lead_s

    def add(self, time_s: float, mark: int, request: Request) -> None:
        entry, entries = (time_s, mark, request), self.entries
        if not entries or entries[-1][:2] <= entry[:2]:
            entries.append(entry)
        else:  # (a request that entered with an earlier time, e.g. preempted in its prompt: rare)
            bisect.insort(entries, entry, lo=self.start, key=_time_and_mark)

    def front(self, after_s: float) -> tuple[float, int, Request] | None:
        """The first live entry whose time is after ``after_s`` (those before it are dropped for good)."""
        entries, start = self.entries, self.start
        if start < len(entries) and entries[start][0] <= after_s:
            start = bisect.bisect_right(entries, after_s, lo=start, key=_time)
        live = Utility._live
        while start < len(entries) and not live(entries[start][2], entries[start][1]):
            start += 1
        if start > 64 and 2 * start > len(entries):
            del entries[:start]
            start = 0
        self.start = start
        return entries[start] if start < len(entries) else None


def _time(entry: tuple[float, int, Request]) -> float:
    return entry[0]


def _time_and_mark(entry: tuple[float, int, Request]) -> tuple[float, int]:
    return entry[0], entry[1]


def _fewest_output_tokens(request: Request) -> int:
    """One, or the smallest length ``predicted_output`` gives any probability, capped by the maximum."""
    predicted = request.predicted_output
    fewest = min(n for n, p in zip(predicted.lengths, predicted.probs, strict=True) if p > 0) \
        if predicted is not None else 1
    return max(1, min(fewest, request.max_output_tokens))
