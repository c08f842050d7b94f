"""Sarathi-Serve (PROSERVE §5.1 baselines): decode first, chunked prefill, step budget from the TBT SLO.

``sarathi-fcfs`` and ``sarathi-priority`` (Sarathi-FCFS and Sarathi-Priority) differ only in their waiting order.

* **Decode first.** ``running_order`` serves every running decode before any running request still in its
  prompt; waiting requests are admitted after both (the core's rule), FCFS (``sarathi-fcfs``) or by (priority,
  arrival) (``sarathi-priority``).
* **Token budget from the TBT SLO** (:class:`TBTBudget`): the step takes the decodes plus the largest prefill
  whose step time, priced with the latency profile ``profile``, stays within the TBT SLO; never less than one
  prefill token beyond the decodes (so prefills progress even when the decodes alone exceed the SLO), never
  more than the engine's budget. Sarathi profiles one fixed budget offline; pricing each step's own decode batch
  keeps the same promise (no step beyond the TBT SLO) as the batch grows and shrinks.
* **Which TBT SLO.** ``tbt_slo_ms`` when given; otherwise the tightest ``tpot_slo_s`` among the running requests
  (those whose next tokens the step delays), and ``default_tbt_slo_ms`` when none has one.
* **Pricing.** The step's prefill is priced as one chunk of all its tokens on top of the largest context among
  the requests that may prefill in it (running prompts, and swapped-out requests waiting to come back): for
  an analytic profile (attention quadratic in the tokens) that bounds any split of those tokens into chunks. A
  batch profile with a per-chunk constant (``d_p``) adds that constant per extra chunk, which this price misses.
"""

from __future__ import annotations

import itertools
import math
import operator
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from semsched.core.policy import Policy, PolicyConfig, SchedulerView, SortKey, StepBudget
from semsched.core.request import Request
from semsched.latency import AnalyticLatencyModel, LatencyModel, load_profile
from semsched.latency.base import validate_step_inputs
from semsched.policies.params import param
from semsched.policies.passes import SarathiSteps, analytic_decodes_within, analytic_prefill_tokens
from semsched.policies.registry import register_policy

#: the profile TBT budgets are priced with by default (tiered's default too)
DEFAULT_PROFILE = "a100-qwen1.5-4b"
#: a request's computed tokens, read in C
_COMPUTED = operator.attrgetter("num_computed_tokens")
#: longest TBT SLO a config may name (one hour)
MAX_TBT_SLO_MS = 3_600_000.0


def check_slo_ms(name: str, value: object, *, optional: bool) -> None:
    """A TBT SLO in milliseconds: a finite number in (0, one hour], or None where ``optional``."""
    if value is None and optional:
        return
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) \
            or not 0 < value <= MAX_TBT_SLO_MS:
        raise ValueError(f"{name} must be a number of milliseconds above 0 and at most {MAX_TBT_SLO_MS:g}, "
                         f"got {value!r}")


class TBTBudget:
    """Prefill tokens a step may take beside its decodes so that its priced time stays within a TBT SLO."""

    def __init__(self, latency: LatencyModel, tbt_slo_ms: float | None, default_tbt_slo_ms: float) -> None:
        self.latency = latency
        self.tbt_slo_ms = tbt_slo_ms
        self.default_tbt_slo_ms = default_tbt_slo_ms

    def slo_s(self, running: Sequence[Request]) -> float:
        """The TBT SLO of this step: the configured one, else the tightest TPOT SLO among ``running``, else
        the default."""
        if self.tbt_slo_ms is not None:
            return self.slo_for(None)  # (the running requests' SLOs are not read)
        targets = [r.tpot_slo_s for r in running if r.tpot_slo_s is not None]
        return self.slo_for(min(targets) if targets else None)

    def slo_for(self, tightest_tpot_slo_s: float | None) -> float:
        """:meth:`slo_s` from the tightest TPOT SLO among the running requests (None: none has one)."""
        if self.tbt_slo_ms is not None:
            return self.tbt_slo_ms / 1000.0
        return tightest_tpot_slo_s if tightest_tpot_slo_s is not None else self.default_tbt_slo_ms / 1000.0

    def prefill_tokens(self, slo_s: float, num_decode: int, context_tokens: int, cached_tokens: int,
                       most: int) -> int:
        """Largest prefill in [1, most] priced within ``slo_s`` as one chunk on ``cached_tokens`` beside
        ``num_decode`` decodes of ``context_tokens`` summed context; 1 when even one token exceeds it. For the
        analytic model a compiled pass finds it from the quadratic's root, checked with the model's own step times
        (:func:`~semsched.policies.passes.analytic_prefill_tokens`); for any other, binary search (the step time
        grows with the prefill)."""
        model = self.latency
        if isinstance(model, AnalyticLatencyModel):
            validate_step_inputs([(most, cached_tokens)], num_decode, context_tokens)
            return analytic_prefill_tokens(model, slo_s, num_decode, context_tokens, cached_tokens, most)

        def step_s(tokens: int) -> float:
            return model.step_time_s([(tokens, cached_tokens)], num_decode, context_tokens)

        if most <= 1 or step_s(most) <= slo_s:
            return max(most, 1)
        low, high = 1, most  # invariant: high exceeds the SLO; low is within it, or the floor
        while high - low > 1:
            middle = (low + high) // 2
            if step_s(middle) <= slo_s:
                low = middle
            else:
                high = middle
        return low

    def decodes_within(self, slo_s: float, prefill: int, cached_tokens: int, decodes: Sequence[Request],
                       base_decode: int, base_context: int) -> int:
        """How many of ``decodes`` (in order) may join ``base_decode`` decodes of ``base_context`` context and
        ``prefill`` tokens on ``cached_tokens`` with the step priced within ``slo_s``."""
        return self.summed_decodes_within(slo_s, prefill, cached_tokens, base_decode, base_context,
                                          list(itertools.accumulate(map(_COMPUTED, decodes), initial=0)))

    def summed_decodes_within(self, slo_s: float, prefill: int, cached_tokens: int, base_decode: int,
                              base_context: int, added_contexts: Sequence[int]) -> int:
        """:meth:`decodes_within` from the candidates' summed contexts (``added_contexts[k]``: the first ``k``
        candidates', from ``added_contexts[0] == 0``, non-decreasing): the largest count within the SLO, by the
        closed form's guess (analytic model) or binary search, checked with the model's step times. For the
        analytic model the prefill is priced once and each count adds the decode part
        (:meth:`AnalyticLatencyModel.decode_time_s`) as ``step_time_s`` does (same floats: its sum of one chunk
        is ``0.0 +`` the chunk); its checks are made once, on the base (every count adds to it)."""
        count = len(added_contexts) - 1
        chunks = [(prefill, cached_tokens)] if prefill else []
        model = self.latency
        if not isinstance(model, AnalyticLatencyModel):
            def within(k: int) -> bool:
                return model.step_time_s(chunks, base_decode + k, base_context + added_contexts[k]) <= slo_s

            return count if within(count) else last_within(within, count, None)
        validate_step_inputs(chunks, base_decode, base_context)
        return analytic_decodes_within(model, slo_s, prefill, cached_tokens, base_decode, base_context,
                                       added_contexts)  # (compiled)


def last_within(within: Callable[[int], bool], count: int, guess: int | None) -> int:
    """The largest ``k`` below ``count`` with ``within(k)`` (true up to a point, false at ``count``), or 0: from
    ``guess`` (a closed form's answer, stepped until the model agrees: the search's answer in a step or two), else
    by binary search."""
    if guess is not None:
        low = min(max(guess, 0), count - 1)
        while low > 0 and not within(low):
            low -= 1
        while low + 1 < count and within(low + 1):
            low += 1
        return low
    low, high = 0, count  # invariant: high exceeds the SLO; low is within it (or 0)
    while high - low > 1:
        middle = (low + high) // 2
        if within(middle):
            low = middle
        else:
            high = middle
    return low


@dataclass(frozen=True)
class SarathiConfig(PolicyConfig):
    tbt_slo_ms: float | None = param(
        None, "TBT SLO the step budget is profiled from, ms (default: the tightest tpot_slo_s among the running "
              "requests, else default_tbt_slo_ms)")
    default_tbt_slo_ms: float = param(100.0, "TBT SLO when neither tbt_slo_ms nor any running request gives one, "
                                             "ms")
    profile: str = param(DEFAULT_PROFILE, "latency profile that prices each step (use the engine's own)")

    def __post_init__(self) -> None:
        super().__post_init__()
        check_slo_ms("tbt_slo_ms", self.tbt_slo_ms, optional=True)
        check_slo_ms("default_tbt_slo_ms", self.default_tbt_slo_ms, optional=False)
        if not isinstance(self.profile, str) or not self.profile:
            raise ValueError(f"profile must be a profile name or path, got {self.profile!r}")


@register_policy
class SarathiFCFS(Policy):
    """Sarathi-Serve: decodes first, chunked prefill FCFS, the step's tokens capped by the TBT SLO.

    starvation: none: waiting requests start in arrival order, and each step leaves prompts at least one token
    beside the decodes (while the decodes leave room in the engine's token budget).
    """

    name: ClassVar[str] = "sarathi-fcfs"
    config_cls: ClassVar[type[PolicyConfig]] = SarathiConfig
    static_victim_key: ClassVar[bool] = True
    running_order_keeps_all: ClassVar[bool] = True  # (it orders decodes before prompts and leaves none out)
    config: SarathiConfig

    def __init__(self, config: PolicyConfig | None = None) -> None:
        super().__init__(config)
        cfg = self.config
        self.budget = TBTBudget(load_profile(cfg.profile), cfg.tbt_slo_ms, cfg.default_tbt_slo_ms)
        #: preempted requests that kept computed tokens (swapped out): a chunk of theirs sits on that context
        self._swapped: dict[str, Request] = {}
        sort_key = self._running_sort_key()
        model = self.budget.latency
        #: the two hooks' work, compiled (the split and sorted groups they keep from step to step are there)
        self._steps = SarathiSteps(
            model if isinstance(model, AnalyticLatencyModel) else None, self.budget.prefill_tokens,
            None if cfg.tbt_slo_ms is None else self.budget.slo_for(None), cfg.default_tbt_slo_ms / 1000.0,
            sort_key, isinstance(sort_key, operator.attrgetter), self._swapped,
        )

    def waiting_key(self, request: Request, now_s: float) -> SortKey:
        return (request.arrival_time_s,)

    def on_preempt(self, request: Request, now_s: float) -> None:
        if request.num_computed_tokens > 0:
            self._swapped[request.request_id] = request

    def _running_sort_key(self) -> Callable[[Request], Any]:
        """The running order's sort key: ``victim_key``, read in C (the same order) when it is this module's."""
        owner = next(cls for cls in type(self).__mro__ if "victim_key" in vars(cls))
        if owner is Policy or owner is SarathiFCFS:
            return operator.attrgetter("arrival_time_s")
        if owner is SarathiPriority:
            return operator.attrgetter("priority", "arrival_time_s")
        return self.victim_key

    def running_order(
        self, running: Sequence[Request], view: SchedulerView, now_s: float
    ) -> Sequence[Request] | None:
        """Decodes first, then running prompts (each group most protected first): ``running`` itself when that is
        its order already (an engine then keeps its running list as it is). The split step_budget made at
        ``now_s`` serves when ``running`` holds the very requests it split, in the same order (nothing ran since,
        so none has moved from its prompt to decoding)."""
        return self._steps.running_order(running, now_s)

    def step_budget(self, view: SchedulerView, now_s: float) -> StepBudget | None:
        """The decodes plus the largest prefill priced within the TBT SLO (at least one token)."""
        engine = view.budget
        tokens = self._steps.step_budget(view.running_requests(), engine.max_num_batched_tokens, now_s)
        return StepBudget(tokens, engine.max_num_seqs) if tokens >= 0 else None

    @property
    def _split(self) -> tuple[float, list[Request], list[Request], list[Request]] | None:
        """step_budget's split of the running requests, for the running_order of the same step: (now_s, the
        running requests as step_budget saw them, decodes, prompts), each group in their order."""
        return self._steps.split

    def _swapped_context(self) -> int:
        """Largest cached context a prefill chunk may sit on among the swapped-out requests waiting to come back
        (they keep their computed tokens; fresh and recomputed ones have none); the rest leave the book."""
        return self._steps.swapped_context()



@register_policy
class SarathiPriority(SarathiFCFS):
    """Sarathi-Serve with strict priority: decodes first, then waiting requests by (priority, arrival).

    starvation: possible for low priorities under sustained higher-priority load (no aging).
    """

    name: ClassVar[str] = "sarathi-priority"

    def waiting_key(self, request: Request, now_s: float) -> SortKey:
        return (request.priority, request.arrival_time_s)

    def victim_key(self, request: Request) -> SortKey:
        return (request.priority, request.arrival_time_s)
