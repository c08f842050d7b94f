"""Factories for hand-built terminal requests with explicit token emission times."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from semsched.core.request import LengthDistribution, Request, RequestState, TokenTimeline

RequestFactory = Callable[..., Request]


def build_request(
    token_times_s: Sequence[float] = (),
    *,
    request_id: str = "r",
    arrival_time_s: float = 0.0,
    first_scheduled_time_s: float | None = None,
    finish_time_s: float | None = None,
    state: RequestState = RequestState.FINISHED,
    priority: int = 0,
    tier: str = "default",
    prompt_tokens: int = 10,
    output_tokens: int | None = None,
    ttft_slo_s: float | None = None,
    tpot_slo_s: float | None = None,
    e2e_slo_s: float | None = None,
    num_preemptions: int = 0,
    max_output_tokens: int = 4096,
    urgency: int | None = None,
    urgency_true: int | None = None,
    predicted_output: LengthDistribution | None = None,
    finish_reason: str | None = None,
) -> Request:
    """A request that emitted ``token_times_s`` on its own timeline.

    Defaults for a FINISHED request: scheduled at arrival, finished at its last token, true output length
    equal to the tokens emitted. Other states default to never scheduled and never finished.
    """
    finished = state is RequestState.FINISHED
    req = Request(
        request_id=request_id,
        prompt_tokens=prompt_tokens,
        max_output_tokens=max_output_tokens,
        arrival_time_s=arrival_time_s,
        output_tokens=output_tokens if output_tokens is not None else max(len(token_times_s), 1),
        priority=priority,
        tier=tier,
        ttft_slo_s=ttft_slo_s,
        tpot_slo_s=tpot_slo_s,
        e2e_slo_s=e2e_slo_s,
        urgency=urgency,
        urgency_true=urgency_true,
        predicted_output=predicted_output,
    )
    req.state = state
    req.num_preemptions = num_preemptions
    req.finish_reason = finish_reason
    req.first_scheduled_time_s = first_scheduled_time_s
    if req.first_scheduled_time_s is None and finished:
        req.first_scheduled_time_s = arrival_time_s
    req.finish_time_s = finish_time_s
    if req.finish_time_s is None and finished and token_times_s:
        req.finish_time_s = token_times_s[-1]
    if token_times_s:
        timeline = TokenTimeline()
        first_step = timeline.extend(list(token_times_s))
        req.record_tokens(timeline, first_step, len(token_times_s))
    return req
