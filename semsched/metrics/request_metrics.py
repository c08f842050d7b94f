"""Latency and SLO outcome of one request, computed once from its recorded token times.

Definitions (all times in seconds, measured from the request's arrival):

* queueing delay: first time the scheduler put the request in a batch, minus arrival;
* TTFT: emission time of the first output token, minus arrival;
* TPOT: mean gap between output tokens after the first, ``(t_n - t_1) / (n - 1)``;
* ITL: every gap ``t_{i+1} - t_i`` (the distribution that TPOT averages);
* E2E ("time to last token", TTLT): finish time minus arrival;
* normalized latency: E2E divided by the number of emitted tokens (seed 000's "normalized waiting time").

SLO outcomes follow PROSERVE (seed 001, §5.1): a target is met only when the observed value is *strictly*
below it. Each outcome is ``None`` when the request has no such target (there is nothing to meet, and a
request without targets must not count as a success), ``False`` when the request did not finish (rejected,
dropped, or still in flight when the run stopped), else whether the observed value beat the target. A request
meets its SLO (``slo_met``) when it finished and met every target it has: TTFT, TPOT and E2E.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

import numpy as np

from semsched.core.request import Request, RequestState

AttributeValue = str | int | float | None

#: What a figure may group or filter requests by, beyond ``priority`` and ``tier``: read from the request,
#: carried by :class:`RequestMetrics` and written as one ``requests.csv`` column each (``None`` is an empty
#: cell). A new request attribute is one line here.
REQUEST_ATTRIBUTES: Mapping[str, Callable[[Request], AttributeValue]] = {
    "max_output_tokens": lambda r: r.max_output_tokens,
    "target_output_tokens": lambda r: r.target_output_tokens,
    "urgency": lambda r: r.urgency,
    "urgency_true": lambda r: r.urgency_true,
    #: mean of the predicted output-length distribution, in tokens (empty without a prediction)
    "predicted_length": lambda r: None if r.predicted_output is None else r.predicted_output.mean,
    "ttft_slo_s": lambda r: r.ttft_slo_s,
    "tpot_slo_s": lambda r: r.tpot_slo_s,
    "e2e_slo_s": lambda r: r.e2e_slo_s,
    #: who sent the request (empty when the workload names no clients)
    "client": lambda r: r.client,
    #: speculative decoding (seed 004): mean tokens per verification round of the request's logged run, ``n·A + 1``
    #: (empty without a log)
    "logged_tokens_per_round": lambda r: None if r.accept_lengths is None else (
        sum(r.accept_lengths) / len(r.accept_lengths)),
    #: prefix caching: prompt tokens found cached when the request was first scheduled (0 without a hit)
    "cached_tokens": lambda r: r.num_cached_tokens,
}

_ENDED_WITHOUT_FINISHING = frozenset({RequestState.REJECTED, RequestState.DROPPED, RequestState.STALLED})


@dataclass(frozen=True, eq=False)
class RequestMetrics:
    """Per-request serving metrics. Latencies are ``None`` where the event they measure never happened; SLO
    outcomes are ``None`` where the request has no target to meet (see the module docstring)."""

    request_id: str
    priority: int
    tier: str
    state: RequestState
    #: why the request was rejected or dropped (the scheduler's reason); ``None`` for any other state
    rejection_reason: str | None
    #: :data:`REQUEST_ATTRIBUTES` of the request, in that order
    attributes: Mapping[str, AttributeValue]
    prompt_tokens: int
    output_tokens: int
    arrival_time_s: float
    queueing_delay_s: float | None
    ttft_s: float | None
    tpot_s: float | None
    itl_s: np.ndarray
    e2e_s: float | None
    normalized_latency_s_per_token: float | None
    num_preemptions: int
    ttft_slo_met: bool | None
    tpot_slo_met: bool | None
    e2e_slo_met: bool | None
    #: met its TTFT and TPOT targets (PROSERVE's notion; E2E left out); ``None`` without either target
    ttft_tpot_slo_met: bool | None
    #: finished and met every target it has; ``None`` without any target
    slo_met: bool | None

    @property
    def finished(self) -> bool:
        return self.state is RequestState.FINISHED


def request_metrics(req: Request) -> RequestMetrics:
    """Compute the metrics of ``req`` from its lifecycle fields and token record.

    Meant for requests in a terminal state; a request that is not FINISHED (including one still waiting or
    running) gets its observed latencies but misses every target it has.
    """
    token_times_s = req.token_times_s()
    finished = req.state is RequestState.FINISHED
    ttft_s = _first_token_latency_s(token_times_s, req.arrival_time_s)
    tpot_s = _time_per_output_token_s(token_times_s)
    e2e_s = _elapsed_s(req.finish_time_s, req.arrival_time_s)
    ttft_met = _outcome(finished, ttft_s, req.ttft_slo_s, missing_ok=False)
    tpot_met = _outcome(finished, tpot_s, req.tpot_slo_s, missing_ok=True)
    e2e_met = _outcome(finished, e2e_s, req.e2e_slo_s, missing_ok=False)
    return RequestMetrics(
        request_id=req.request_id,
        priority=req.priority,
        tier=req.tier,
        state=req.state,
        rejection_reason=req.finish_reason if req.state in _ENDED_WITHOUT_FINISHING else None,
        attributes={name: value_of(req) for name, value_of in REQUEST_ATTRIBUTES.items()},
        prompt_tokens=req.prompt_tokens,
        output_tokens=int(token_times_s.size),
        arrival_time_s=req.arrival_time_s,
        queueing_delay_s=_elapsed_s(req.first_scheduled_time_s, req.arrival_time_s),
        ttft_s=ttft_s,
        tpot_s=tpot_s,
        itl_s=np.diff(token_times_s),
        e2e_s=e2e_s,
        normalized_latency_s_per_token=_per_token(e2e_s, int(token_times_s.size)),
        num_preemptions=req.num_preemptions,
        ttft_slo_met=ttft_met,
        tpot_slo_met=tpot_met,
        e2e_slo_met=e2e_met,
        ttft_tpot_slo_met=all_met(ttft_met, tpot_met),
        slo_met=all_met(ttft_met, tpot_met, e2e_met),
    )


#: reasons the scheduling core gives without a ``kind:`` prefix, by a phrase each contains, and their kind
_UNPREFIXED_REASONS = (("exceeds the KV capacity", "too large for the KV cache"),)


def rejection_kind(reason: str) -> str:
    """What kind of rejection or drop ``reason`` is, for counting by reason: the text before its first ``:``
    (``"shed"``, ``"queue full"``, ``"hopeless"``, ``"dropped"``); the core's request-too-large message, which
    has no prefix, is ``"too large for the KV cache"``; any other reason without a ``:`` is its own kind
    (``"never schedulable"``)."""
    head, colon, _ = reason.partition(":")
    if colon:
        return head.strip()
    for phrase, kind in _UNPREFIXED_REASONS:
        if phrase in reason:
            return kind
    return reason.strip()


def all_met(*outcomes: bool | None) -> bool | None:
    """Whether every target that exists was met: ``None`` when no outcome has a target."""
    present = [o for o in outcomes if o is not None]
    return all(present) if present else None


def _elapsed_s(event_time_s: float | None, arrival_time_s: float) -> float | None:
    return None if event_time_s is None else float(event_time_s - arrival_time_s)


def _first_token_latency_s(token_times_s: np.ndarray, arrival_time_s: float) -> float | None:
    return float(token_times_s[0] - arrival_time_s) if token_times_s.size else None


def _time_per_output_token_s(token_times_s: np.ndarray) -> float | None:
    n = token_times_s.size
    return float((token_times_s[-1] - token_times_s[0]) / (n - 1)) if n >= 2 else None


def _per_token(e2e_s: float | None, output_tokens: int) -> float | None:
    return None if e2e_s is None or output_tokens == 0 else e2e_s / output_tokens


def _outcome(finished: bool, observed_s: float | None, slo_s: float | None, *, missing_ok: bool) -> bool | None:
    """``None`` without a target; a miss unless finished; then strictly below target. ``missing_ok`` says
    whether an absent observation passes: the TPOT of a one-token output has nothing to violate, a missing
    first token does."""
    if slo_s is None:
        return None
    if not finished:
        return False
    if observed_s is None:
        return missing_ok
    return observed_s < slo_s
