"""Learning to rank (LTR, Fu et al. 2024): order by a predicted rank score, re-ranked and preemptive, with
starvation prevention.

LTR's predictor scores each prompt so that the scores rank requests by output length; the scheduler
(hao-ai-lab/vllm-ltr) sorts waiting and running requests together by score at every iteration and runs the top
ones, preempting running requests that rank lower. Here the predictor that feeds ``Request.predicted_output``
plays the ranker: the score is the predicted distribution's mean (only its order matters), the true length
without a prediction. A waiting request displaces running requests whose key is larger.

Starvation prevention, as vllm-ltr's: a request that has gone unserved too long is promoted above every
unpromoted one for a quantum of service, then ranks by its score again. vllm-ltr counts unscheduled iterations
and scheduled ones; we count seconds waiting since the request last entered the queue (arrival or preemption),
``starve_s``, checked every ``check_s`` (the re-key interval), and a quantum of ``quantum_tokens`` output tokens.
``starve_s=0`` turns it off; the key is then fixed and the policy stable between events.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

from semsched.core.policy import Policy, PolicyConfig, SchedulerView, SortKey
from semsched.core.request import Request
from semsched.policies.registry import register_policy

_LEFT = "ltr.promoted_tokens"  # output tokens of promotion left (0: not promoted)
_QUEUED = "ltr.queued_s"  # when the request last entered the waiting queue


def _param(default: Any, doc: str) -> Any:
    return field(default=default, metadata={"doc": doc})


@dataclass(frozen=True)
class LTRConfig(PolicyConfig):
    starve_s: float = _param(10.0, "a request waiting this long is promoted above unpromoted ones (0: never)")
    quantum_tokens: int = _param(32, "output tokens a promoted request keeps its promotion for")
    check_s: float = _param(1.0, "how often waiting requests are checked for starvation")

    def __post_init__(self) -> None:
        super().__post_init__()
        if not math.isfinite(self.starve_s) or self.starve_s < 0:
            raise ValueError(f"starve_s must be a finite number >= 0, got {self.starve_s!r}")
        if not math.isfinite(self.check_s) or self.check_s <= 0:
            raise ValueError(f"check_s must be a finite number > 0, got {self.check_s!r}")
        tokens = self.quantum_tokens
        if isinstance(tokens, bool) or not isinstance(tokens, int) or not 1 <= tokens <= 2**31 - 1:
            raise ValueError(f"quantum_tokens must be an integer from 1 to {2**31 - 1}, got {tokens!r}")


@register_policy
class LTR(Policy):
    """Learning to rank: smallest predicted score first, preemptive, with vllm-ltr's starvation prevention.

    starvation: possible under overload: a request that has waited ``starve_s`` (checked every ``check_s``) is
    promoted above every unpromoted one for ``quantum_tokens``, but promoted requests rank by score among
    themselves, so a long one can wait behind a stream of shorter promoted ones (``starve_s=0``: no promotion).
    """

    name: ClassVar[str] = "ltr"
    config_cls: ClassVar[type[PolicyConfig]] = LTRConfig
    config: LTRConfig

    @property
    def stable_between_events(self) -> bool:  # type: ignore[override]
        return self.config.starve_s == 0

    @property
    def rekey_interval_s(self) -> float | None:  # type: ignore[override]
        return self.config.check_s if self.config.starve_s > 0 else None

    @property
    def uses_predicted_lengths(self) -> bool:
        return True

    def uses_hook(self, hook: str) -> bool:
        if hook in ("on_tokens", "on_arrival", "on_preempt"):
            return self.config.starve_s > 0
        return super().uses_hook(hook)

    @staticmethod
    def score(request: Request) -> float:
        return request.predicted_output_tokens()

    def rank(self, request: Request) -> tuple[float, float]:
        """(0 while promoted, else 1; score): the part of the key that decides displacement."""
        return (0.0 if request.policy_state.get(_LEFT, 0.0) > 0 else 1.0, self.score(request))

    # ---- hooks --------------------------------------------------------------------------------------------
    def on_arrival(self, request: Request, now_s: float) -> None:
        request.policy_state[_QUEUED] = now_s

    def on_preempt(self, request: Request, now_s: float) -> None:
        request.policy_state[_QUEUED] = now_s

    def on_tokens(self, request: Request, num_tokens: int, now_s: float) -> None:
        state = request.policy_state
        left = state.get(_LEFT, 0.0)
        if left > 0:
            state[_LEFT] = max(left - num_tokens, 0.0)

    def waiting_key(self, request: Request, now_s: float) -> SortKey:
        state = request.policy_state
        starve_s = self.config.starve_s
        if starve_s > 0 and state.get(_LEFT, 0.0) <= 0 and now_s - state.get(_QUEUED, now_s) >= starve_s:
            state[_LEFT] = float(self.config.quantum_tokens)
            state[_QUEUED] = now_s
        return (*self.rank(request), request.arrival_time_s)

    def victim_key(self, request: Request) -> SortKey:
        return (*self.rank(request), request.arrival_time_s)

    def victims_for(
        self, candidate: Request, running: Sequence[Request], view: SchedulerView, now_s: float
    ) -> Sequence[Request]:
        mine = self.rank(candidate)
        lower = [r for r in running if self.rank(r) > mine]
        return sorted(lower, key=self.victim_key, reverse=True)
