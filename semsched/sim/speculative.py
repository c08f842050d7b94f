"""Speculative decoding in the simulated engine (seed 004): what a verification round yields and what it costs.

Every decode of a speculative engine is one *round*: a draft model proposes up to ``n`` tokens
(:attr:`SpeculationSpec.draft_tokens`, also the KV slots the scheduler reserves per decode: vLLM's
``num_lookahead_tokens``), then the target model verifies them in one pass and keeps the accepted prefix plus one
token of its own. A round emits 1 to ``n + 1`` tokens.

**Yield.** A request that carries a real log (``Request.accept_lengths``, from a Spec-Bench answer file:
:mod:`semsched.workloads.spec_bench`) replays it round by round, exactly. The prompt's prefill emits the first
token (the engine's rule); round ``k`` then emits ``accept_lengths[k]`` tokens and the request stops at its logged
output length, so it emits exactly the logged number of tokens. It needs as many rounds as the log has steps,
except when the log's last step yielded a single token: in the authors' loop that step only appended the bonus
token the step before had already produced (the loop checks for the end of text before appending it), so a
streaming engine is done one round earlier. A request without a log draws its rounds from a fitted stochastic
model (:class:`~semsched.sim.acceptance.FittedAcceptance`: a per-request acceptance rate drawn from the logs'
distribution, autocorrelated from round to round), from a generator seeded by the spec's seed and the request id,
so every policy of a comparison sees the same acceptance for the same request. ``replay=False`` draws every
request's rounds from the model, logged or not.

**Cost.** For a step whose decodes have context lengths ``c_i`` (``B`` of them) the engine time is

* the target's verification pass: the latency model's decode step for the batch (weights read once, attention
  over ``Σ c_i``) plus the compute of the ``n`` draft tokens each decode carries, priced as a prefill chunk of
  ``d`` tokens per request, ``d`` the round's drafts (below; so verification grows with the batch: ``B·d`` more
  tokens to compute; their attention over the context is left in the decode part, a small term for a 7B model),
* the draft phase: ``d`` draft steps of ``draft_cost`` × the target's decode step for the same batch (a draft
  model's step scales with the batch as the target's does); ``d = n`` for a drafter of fixed length (EAGLE's tree
  depth), the batch's longest draft ``max_i min(yield_i, n)`` for an adaptive drafter that stops at its first
  unlikely token (the 68M draft model under Hugging Face's assisted generation),
* ``round_overhead`` × the target's decode step (per-round work outside both models),
* prefill chunks and swap traffic as in any step.

:func:`speculation_preset` holds the two drafting methods of the Spec-Bench logs, with the ratios fitted to the
logs' own wall times (see the function). ``T_SSM`` and ``T_LLM`` of the paper's eq. 6 are, per round at batch 1,
``draft_cost`` × decode and decode + verification extra.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass, field

import numpy as np

from semsched.core.errors import SemschedError
from semsched.core.plan import BatchPlan, StepResult
from semsched.core.request import Request
from semsched.latency.base import LatencyModel
from semsched.sim.acceptance import FittedAcceptance
from semsched.sim.executor import ModelExecutor


class SpeculationError(SemschedError):
    """Bad speculative-decoding settings: the message names the field and its limits."""


@dataclass(frozen=True)
class SpeculationSpec:
    """One drafting method on one engine: see the module docstring for what each number costs."""

    #: name shown in reports (``eagle``, ``sps-68m``, ...)
    method: str
    #: drafts proposed per round at most (n); the scheduler reserves that many lookahead slots per decode
    draft_tokens: int
    #: one draft step's time as a fraction of the target's decode step at the same batch and context
    draft_cost: float
    #: per-round time outside both models, as a fraction of the target's decode step
    round_overhead: float = 0.0
    #: True: a round drafts only as far as its batch's longest accepted run plus the rejected token
    adaptive: bool = False
    #: the acceptance model of requests without a log (None: such a request is an error)
    fallback: FittedAcceptance | None = field(default=None, compare=False)
    #: seeds the fallback's draws (with each request id)
    seed: int = 0
    #: True: a request that carries a log replays it; False: every request draws from the fallback
    replay: bool = True

    def __post_init__(self) -> None:
        if not isinstance(self.method, str) or not self.method:
            raise SpeculationError(f"method: must be a non-empty name (got {self.method!r})")
        n = self.draft_tokens
        if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= 64:
            raise SpeculationError(f"draft_tokens: must be an integer from 1 to 64 (got {n!r})")
        for name in ("draft_cost", "round_overhead"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value <= 100:
                raise SpeculationError(f"{name}: must be a number from 0 to 100 (got {value!r})")
        if not self.replay and self.fallback is None:
            raise SpeculationError("replay: False needs a fallback acceptance model to draw every request from")
        if self.fallback is not None:
            if not isinstance(self.fallback, FittedAcceptance):
                raise SpeculationError(f"fallback: must be a FittedAcceptance or None (got {self.fallback!r:.80})")
            if self.fallback.draft_tokens > n:
                raise SpeculationError(
                    f"fallback: fitted for {self.fallback.draft_tokens} drafts per round, more than "
                    f"draft_tokens = {n}"
                )

    def check_log(self, request: Request) -> None:
        """A request's log must fit the engine: no round may yield more than ``draft_tokens + 1``."""
        rounds = request.accept_lengths if self.replay else None
        if rounds is None:
            if self.fallback is None:
                raise SpeculationError(
                    f"request {request.request_id}: no accept_lengths and the speculation {self.method!r} has no "
                    "fallback acceptance model"
                )
            return
        largest = max(rounds)
        if largest > self.draft_tokens + 1:
            raise SpeculationError(
                f"request {request.request_id}: accept_lengths holds a round of {largest} tokens, more than "
                f"draft_tokens + 1 = {self.draft_tokens + 1} ({self.method!r})"
            )


def speculation_preset(
    name: str, fallback: FittedAcceptance | None = None, *, seed: int = 0, replay: bool = True
) -> SpeculationSpec:
    """The drafting methods of the Spec-Bench logs (vicuna-7b-v1.3 target, greedy).

    Fitted to the logs' wall times by least squares (``wall = a·steps + b·tokens`` over every turn): the plain
    target takes 19.5 ms per token (one decode); an EAGLE round 28.8 ms whatever it yields (a fixed-depth draft
    tree, depth 5: at most 6 tokens), 1.44 decodes at the log's mean yield, so with verification at
    1 + 5·α2/γ2 ≈ 1.06 decodes (the profile's compute of 5 draft tokens) a draft step costs ≈ 0.077 decodes;
    a round of the 68M draft model costs 22.1 ms + 3.0 ms per token it yields (an adaptive drafter, up to 20
    drafts: at most 21 tokens), i.e. 1.13 decodes + 0.156 per yielded token, so one draft step ≈ 0.145 decodes
    (0.156 less its verification compute) and the rest of a round 0.13 decodes. ``tests/sim/test_speculative.py``
    refits these from the logs.
    """
    presets = {
        "eagle": {"draft_tokens": 5, "draft_cost": 0.077, "round_overhead": 0.0, "adaptive": False},
        "sps-68m": {"draft_tokens": 20, "draft_cost": 0.145, "round_overhead": 0.13, "adaptive": True},
    }
    if name not in presets:
        raise SpeculationError(f"speculation: unknown method {name!r} (known: {', '.join(sorted(presets))})")
    settings = presets[name]
    return SpeculationSpec(
        method=name,
        draft_tokens=int(settings["draft_tokens"]),
        draft_cost=float(settings["draft_cost"]),
        round_overhead=float(settings["round_overhead"]),
        adaptive=bool(settings["adaptive"]),
        fallback=fallback,
        seed=seed,
        replay=replay,
    )


class _Rounds:
    """One request's acceptance process: its yields in order (capped at ``limit`` tokens a round, also as an
    array for fast-forward) and how many rounds it has run."""

    __slots__ = ("yields", "position", "capped")

    def __init__(self, yields: tuple[int, ...], limit: int) -> None:
        self.yields = yields
        self.position = 0
        self.capped = np.minimum(np.asarray(yields, dtype=np.int64), limit)


class SpeculativeExecutor(ModelExecutor):
    """A :class:`ModelExecutor` whose decodes are speculative rounds (module docstring): each step draws every
    decode's yield, then prices the step with it. Fast-forward knows the yields ahead (each request's own log or
    seeded draws) and prices a stretch of rounds as the same number of steps would."""

    def __init__(self, latency: LatencyModel, speculation: SpeculationSpec, **kwargs: object) -> None:
        super().__init__(latency, **kwargs)  # type: ignore[arg-type]
        if not isinstance(speculation, SpeculationSpec):
            raise TypeError(f"speculation: expected SpeculationSpec, got {type(speculation).__name__}")
        self.speculation = speculation
        self._rounds: dict[str, _Rounds] = {}
        self._yields: dict[str, int] | None = None  # the yields of the step being executed

    # ---- yields ------------------------------------------------------------------------------------------
    def _process(self, request: Request) -> _Rounds:
        process = self._rounds.get(request.request_id)
        if process is None:
            limit = self.speculation.draft_tokens + 1
            process = self._rounds[request.request_id] = _Rounds(self._yields_of(request), limit)
        return process

    def _yields_of(self, request: Request) -> tuple[int, ...]:
        spec = self.speculation
        spec.check_log(request)
        if request.accept_lengths is not None and spec.replay:
            return request.accept_lengths
        assert spec.fallback is not None  # check_log
        rng = np.random.default_rng([spec.seed, zlib.crc32(request.request_id.encode())])
        return spec.fallback.rounds(rng, max(1, request.target_output_tokens))

    def rounds_run(self, request_id: str) -> int:
        """Verification rounds ``request_id`` has run on this engine (0 if none)."""
        process = self._rounds.get(request_id)
        return 0 if process is None else process.position

    def yields_drawn(self, request_id: str) -> tuple[int, ...]:
        """The yields ``request_id``'s rounds have drawn so far (its log or its fallback draws)."""
        process = self._rounds.get(request_id)
        return () if process is None else process.yields[: process.position]

    def _draw(self, plan: BatchPlan) -> dict[str, int]:
        """Each decode's yield this round (its next, capped at ``draft_tokens + 1``), drawn: every step's hot
        path with speculation, so :meth:`_process` is inlined for a request already known."""
        limit = self.speculation.draft_tokens + 1
        known = self._rounds
        drawn: dict[str, int] = {}
        for request in plan.decode:
            request_id = request.request_id
            process = known.get(request_id)
            if process is None:
                process = self._process(request)
            position, yields = process.position, process.yields
            # (past the end of its log, a longer output than logged: no drafts accepted)
            value = yields[position] if position < len(yields) else 1
            process.position = position + 1
            drawn[request_id] = value if value < limit else limit
        return drawn

    # ---- cost --------------------------------------------------------------------------------------------
    def round_time_s(self, plan: BatchPlan, yields: dict[str, int]) -> float:
        """Engine time of ``plan`` with the decodes' yields known (swap traffic included, overheads excluded)."""
        spec = self.speculation
        prefill = [(c.num_tokens, c.context_tokens) for c in plan.prefill]
        drafts = 0
        if plan.decode:
            if spec.adaptive:
                drafts = max(min(value, spec.draft_tokens) for value in yields.values())
            else:
                drafts = spec.draft_tokens
        duration = self._verify_and_draft_s(prefill, len(plan.decode), plan.decode_context_tokens, drafts)
        swap_tokens = plan.swap_in_tokens + plan.swap_out_tokens
        if swap_tokens:
            duration += self.latency.swap_time_s(swap_tokens)
        return duration

    def _verify_and_draft_s(
        self, prefill: list[tuple[int, int]], num_decode: int, context_tokens: int, drafts: int
    ) -> float:
        """The step's model time: ``prefill`` chunks plus ``num_decode`` rounds of ``drafts`` drafts each."""
        latency, spec = self.latency, self.speculation
        if not num_decode:
            return latency.step_time_s(prefill, 0, context_tokens)
        prefill = prefill + [(drafts, 0)] * num_decode  # the drafts' compute in the verification pass
        duration = latency.step_time_s(prefill, num_decode, context_tokens)
        decode_s = latency.step_time_s([], num_decode, context_tokens)
        return duration + decode_s * (spec.draft_cost * drafts + spec.round_overhead)

    def step_time_s(self, plan: BatchPlan) -> float:
        """The step's time with the yields :meth:`execute` drew for it; for a plan priced without running it,
        with every decode yielding its largest round."""
        yields = self._yields
        if yields is None:
            yields = {r.request_id: self.speculation.draft_tokens + 1 for r in plan.decode}
        return self.round_time_s(plan, yields)

    def execute(self, plan: BatchPlan, now_s: float) -> StepResult:
        self._yields = self._draw(plan)
        try:
            result = super().execute(plan, now_s)  # prices the step with step_time_s, i.e. the drawn yields
        finally:
            yields, self._yields = self._yields, None
        return StepResult(result.end_time_s, accepted_tokens=yields)

    # ---- fast-forward ------------------------------------------------------------------------------------
    def can_repeat(self, plan: BatchPlan, now_s: float, until_s: float) -> bool:
        """:class:`ModelExecutor`'s checks, with the target's decode step alone as the early-out: a round costs at
        least that, and a stretch is two rounds or more, so two of them must end before ``until_s`` (pricing the
        drafts of every decode is left to :meth:`execute_repeated`). Declining is always exact (the rounds then run
        one by one): this only spares reading every decode's rounds ahead where a stretch cannot form."""
        if not self._priced_alike(plan):
            return False
        return now_s + 2.0 * self.latency.step_time_s([], len(plan.decode), plan.decode_context_tokens) < until_s

    def accepted_rounds(self, plan: BatchPlan, rounds: int) -> np.ndarray:
        """The next ``rounds`` yields of each decode of ``plan`` (a column each), as :meth:`execute` would draw
        them (1 past the end of a log); nothing is drawn."""
        table = np.ones((rounds, len(plan.decode)), dtype=np.int64)
        for column, request in enumerate(plan.decode):
            process = self._process(request)
            ahead = process.capped[process.position : process.position + rounds]
            table[: len(ahead), column] = ahead
        return table

    def execute_repeated(
        self, plan: BatchPlan, now_s: float, steps: int, until_s: float, accepted: np.ndarray | None = None
    ) -> list[float] | None:
        """End times of up to ``steps`` rounds of decode-only ``plan`` with the yields ``accepted`` (from
        :meth:`accepted_rounds`), priced and added up as consecutive :meth:`execute` calls would; the rounds
        returned are drawn."""
        if accepted is None:
            raise ValueError("execute_repeated: a speculative engine needs the rounds' accepted tokens")
        num_decode, context = len(plan.decode), plan.decode_context_tokens
        draft_tokens, adaptive = self.speculation.draft_tokens, self.speculation.adaptive
        ends: list[float] = []
        start_s = now_s
        for row in accepted[:steps].tolist():
            drafts = min(max(row), draft_tokens) if adaptive else draft_tokens
            end_s = start_s + self._verify_and_draft_s([], num_decode, context, drafts)
            if not start_s <= end_s < until_s:
                break  # it ends after the next arrival (or not at a finite time: execute() reports that)
            ends.append(end_s)
            context += sum(row)  # (a round before the last emits its whole yield: nobody finishes before then)
            start_s = end_s
        if len(ends) < 2:
            return None
        for request in plan.decode:
            self._rounds[request.request_id].position += len(ends)
        return ends
