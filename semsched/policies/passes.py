"""Per-step passes of policies over the running requests, compiled with the core (``semsched.compiled``).

A policy that reads every running request at every step spends its time in that loop. Written here, the loop is
compiled with the core and reads the compiled ``Request``'s fields directly, where interpreted policy code reads
each one through a descriptor; the policies stay interpreted classes and call these functions. Each pass is the
definition its policy documents, written out once; the pure-Python build runs the same source
(``tests/test_compiled.py`` compares both builds on every policy).
"""

from __future__ import annotations

from collections.abc import Sequence

from semsched.core.request import Request


class DeadlineSplit:
    """The running requests of one step split into prompts, urgent and slack decodes (each by next deadline), and
    the sums fairbatching's step budget needs."""

    def __init__(self) -> None:
        self.prompts: list[Request] = []
        self.urgent: list[Request] = []
        self.slack: list[Request] = []
        #: the prompts' uncomputed tokens, the most computed tokens among them (0 without prompts), and the blocks
        #: of their remaining sequences (``step_blocks``)
        self.prompt_tokens = 0
        self.prompt_cached = 0
        self.prompt_blocks = 0
        #: the urgent decodes' summed context
        self.urgent_context = 0
        #: entry ``k``: the summed context of the first ``k`` slack decodes
        self.slack_contexts: list[int] = [0]


def next_deadline(request: Request) -> float:
    """When ``request``'s next output token is due (:func:`semsched.policies.fairbatching.next_deadline_s`):
    arrival + TTFT SLO + (tokens so far) * TPOT SLO; infinitely late without the SLO it needs."""
    ttft_s, tpot_s, output = request.ttft_slo_s, request.tpot_slo_s, request.num_output_tokens
    if ttft_s is None:
        return float("inf")
    if output > 0:
        if tpot_s is None:
            return float("inf")
        return request.arrival_time_s + ttft_s + tpot_s * output
    return request.arrival_time_s + ttft_s + 0.0


def split_by_deadline(requests: Sequence[Request], now_s: float, margin_s: float | None,
                      block_size: int) -> DeadlineSplit:
    """fairbatching's split: ``requests`` by next deadline (stably), prompts (anything but a decode) apart, a
    decode urgent when its next token is due within ``margin_s`` of ``now_s`` (None: within its own TPOT SLO)."""
    keyed = [(next_deadline(request), index) for index, request in enumerate(requests)]
    keyed.sort()  # (the index breaks ties: a stable sort by deadline)
    split = DeadlineSplit()
    prompts, urgent, slack, slack_contexts = split.prompts, split.urgent, split.slack, split.slack_contexts
    urgent_context = slack_context = 0
    for deadline_s, index in keyed:
        request = requests[index]
        computed, prompt = request.num_computed_tokens, request.prompt_tokens
        if computed < prompt or prompt + request.num_output_tokens - computed > 1:  # (in_prompt)
            prompts.append(request)
            continue
        within_s = margin_s if margin_s is not None else request.tpot_slo_s
        if within_s is not None and deadline_s - now_s <= within_s:
            urgent.append(request)
            urgent_context += computed
        else:
            slack.append(request)
            slack_context += computed
            slack_contexts.append(slack_context)
    split.urgent_context = urgent_context
    prompt_tokens = prompt_cached = prompt_blocks = 0
    for request in prompts:
        computed = request.num_computed_tokens
        prompt_tokens += request.prompt_tokens + request.num_output_tokens - computed
        if computed > prompt_cached:
            prompt_cached = computed
        # step_blocks: the prompt's whole remaining sequence
        prompt_blocks += (-(-(request.prompt_tokens + request.num_output_tokens) // block_size)
                          - -(-computed // block_size))
    split.prompt_tokens, split.prompt_cached, split.prompt_blocks = prompt_tokens, prompt_cached, prompt_blocks
    return split
