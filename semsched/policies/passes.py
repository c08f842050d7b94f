"""Per-step passes of policies over the running requests, compiled with the core (``semsched.compiled``).

A policy that reads every running request at every step spends its time in that loop. Written here, the loop is
compiled with the core and reads the compiled ``Request``'s fields directly, where interpreted policy code reads
each one through a descriptor; the policies stay interpreted classes and call these functions. Each pass is the
definition its policy documents, written out once; the pure-Python build runs the same source
(``tests/test_compiled.py`` compares both builds on every policy).
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable, Sequence
from typing import Any

from semsched.core.kv import blocks_for
from semsched.core.request import WAITING_STATES, Request, RequestState
from semsched.core.scheduler import NativeVictimKey, by_service_then_arrival, sort_by_service_then_arrival
from semsched.latency.analytic import AnalyticConfig, AnalyticLatencyModel
from semsched.latency.base import LatencyModel, validate_step_inputs


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


def token_deadline(request: Request, index: int) -> float:
    """When output token ``index`` (from 0) of ``request`` is due (fairbatching, PROSERVE's TDG): arrival + TTFT
    SLO + index * TPOT SLO; infinitely late without the SLO it needs."""
    ttft_s, tpot_s = request.ttft_slo_s, request.tpot_slo_s
    if ttft_s is None or (index > 0 and tpot_s is None):
        return math.inf
    decode_s = tpot_s * index if index > 0 and tpot_s is not None else 0.0
    return request.arrival_time_s + ttft_s + decode_s


def next_deadline(request: Request) -> float:
    """When ``request``'s next output token is due."""
    return token_deadline(request, request.num_output_tokens)


def split_by_deadline(requests: Sequence[Request], now_s: float, margin_s: float | None,
                      block_size: int) -> DeadlineSplit:
    """fairbatching's split: ``requests`` by next deadline (stably), prompts (anything but a decode) apart, a
    decode urgent when its next token is due within ``margin_s`` of ``now_s`` (None: within its own TPOT SLO)."""
    deadlines = [next_deadline(request) for request in requests]
    # a stable sort of the positions by deadline (no deadline is NaN: list.sort compares the floats natively)
    order = sorted(range(len(deadlines)), key=deadlines.__getitem__)
    split = DeadlineSplit()
    prompts, urgent, slack, slack_contexts = split.prompts, split.urgent, split.slack, split.slack_contexts
    urgent_context = slack_context = 0
    for index in order:
        request = requests[index]
        deadline_s = deadlines[index]
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


def sorted_book_demand(entries: list[tuple[Any, int, Request]], start: int, live: dict[str, int], slots: int,
                       taken: int, view: Any, block_size: int) -> tuple[int, int, int]:
    """fairbatching's waiting demand, read off its sorted book (``entries`` of ``(key, seq, request)`` from
    ``start``; an entry is live while ``live[request_id]`` is its ``seq`` and the request waits): the uncomputed
    tokens of the first ``slots`` live requests, in order, while their whole sequences' blocks, added to
    ``taken``, fit the blocks an admission of each may take (asked of ``view`` once per run of one priority; the
    first that does not fit ends it), and the most computed tokens among them. Stale entries met at the front
    leave the book (``live`` too), as its lazy reading drops them: returns (demand, cached, the new start)."""
    demand, cached = 0, 0
    room_priority, room, known = 0, 0, False
    count, index = 0, start
    while index < len(entries) and count < slots:
        _, seq, request = entries[index]
        index += 1
        request_id = request.request_id
        if live.get(request_id) == seq and request.state in WAITING_STATES:
            count += 1
            taken += blocks_for(request.prompt_tokens + request.num_output_tokens, block_size)
            if not known or request.priority != room_priority:
                room_priority, known = request.priority, True
                room = view.available_blocks(request, admission=True) - 0
            if taken > room:
                break
            demand += request.prompt_tokens + request.num_output_tokens - request.num_computed_tokens
            computed = request.num_computed_tokens
            if computed > cached:  # (max(cached, computed))
                cached = computed
        elif index - 1 == start:  # stale at the front: it leaves the book
            start = index
            if live.get(request_id) == seq:
                del live[request_id]
    return demand, cached, start


# ---- cost_index's buckets of attained cost (gittins, mean) ---------------------------------------------------
def request_cost(output_tokens: float, prompt_tokens: int, model: str) -> float:
    """``C(O)`` of one request under cost ``model`` (:mod:`semsched.policies.cost_model`, which exports it)."""
    if model == "resource":
        return output_tokens * output_tokens / 2.0 + prompt_tokens * output_tokens
    if model == "output":
        return float(output_tokens)
    return prompt_tokens + 2.0 * output_tokens


def output_for_spent(spent: float, prompt_tokens: int, model: str) -> float:
    """Roughly the inverse of ``C(O) - C(0)``: the output length at which ``spent`` cost has been attained (a
    float; callers round it and check the neighbours with :func:`request_cost` itself)."""
    if model == "resource":
        return math.sqrt(float(prompt_tokens) * prompt_tokens + 2.0 * spent) - prompt_tokens
    if model == "output":
        return spent
    return spent / 2.0


def cost_bucket(generated: int, prompt_tokens: int, model: str, width_cost: float) -> int:
    """The bucket of attained cost a request is in after ``generated`` tokens: ``C(g) - C(0)`` over the bucket
    width, floored (``CostIndexPolicy``'s buckets when they are of cost)."""
    spent = request_cost(float(generated), prompt_tokens, model) - request_cost(0.0, prompt_tokens, model)
    return int(spent // width_cost)


def next_cost_bucket_entry(bucket: int, generated: int, prompt_tokens: int, model: str, width_cost: float,
                           most: int) -> int:
    """The least token count above ``generated`` whose bucket is past ``bucket`` (at most ``most``): the cost
    model's inverse at the boundary's cost, then stepped until :func:`cost_bucket` itself agrees, so the boundary
    is exactly the one a per-token check would find."""
    estimate = output_for_spent((bucket + 1) * width_cost, prompt_tokens, model)
    rounded = min(math.ceil(estimate), most) if math.isfinite(estimate) else most
    entry = max(generated + 1, rounded)
    while entry < most and cost_bucket(entry, prompt_tokens, model, width_cost) <= bucket:
        entry += 1
    while entry - 1 > generated and cost_bucket(entry - 1, prompt_tokens, model, width_cost) > bucket:
        entry -= 1
    return entry


def cost_bucket_entry(bucket: int, low: int, high: int, prompt_tokens: int, model: str, width_cost: float) -> int:
    """The first token count in ``[low, high]`` whose bucket is ``bucket`` or later (``high``'s own, by
    bisection)."""
    while low < high:
        middle = (low + high) // 2
        if cost_bucket(middle, prompt_tokens, model, width_cost) >= bucket:
            high = middle
        else:
            low = middle + 1
    return low


# ---- sarathi's step: decodes and prompts, the prefill priced within the TBT SLO -------------------------------
def split_prompts(running: Sequence[Request]) -> tuple[list[Request], list[Request], int, int, float | None]:
    """One pass over the running requests: the decodes and those still in their prompt (each in ``running``'s
    order), the decodes' summed context, the largest running prompt's context and the tightest TPOT SLO (None:
    none has one; the first of equal ones)."""
    decodes: list[Request] = []
    prompts: list[Request] = []
    context = cached = 0
    tightest_s: float | None = None
    for r in running:
        computed, prompt = r.num_computed_tokens, r.prompt_tokens
        if computed < prompt or prompt + r.num_output_tokens - computed > 1:  # (in_prompt)
            prompts.append(r)
            if computed > cached:
                cached = computed
        else:
            decodes.append(r)
            context += computed
        slo_s = r.tpot_slo_s
        if slo_s is not None and (tightest_s is None or slo_s < tightest_s):
            tightest_s = slo_s
    return decodes, prompts, context, cached, tightest_s


def _priced_s(model: AnalyticLatencyModel, tokens: int, cached_tokens: int, num_decode: int,
              decode_s: float) -> float:
    """The step time of a prefill of ``tokens`` on ``cached_tokens`` beside decodes whose part is ``decode_s``:
    the float ``step_time_s`` gives (its sum of one chunk is the chunk)."""
    chunk_s = model.chunk_time_s(tokens, cached_tokens)
    return chunk_s + decode_s if num_decode else chunk_s


def analytic_prefill_tokens(model: AnalyticLatencyModel, slo_s: float, num_decode: int, context_tokens: int,
                            cached_tokens: int, most: int) -> int:
    """``TBTBudget.prefill_tokens`` for the analytic model, its inputs checked by the caller: the largest prefill
    in [1, most] priced within ``slo_s``, from the quadratic's root (``α1·((c+x)² − c²) + α2·x + decode = slo``)
    stepped until the model's own step times agree, or by binary search when the root says nothing."""
    decode_s = model.decode_time_s(context_tokens) if num_decode else 0.0
    if most <= 1 or _priced_s(model, most, cached_tokens, num_decode, decode_s) <= slo_s:
        return max(most, 1)
    guess = -1  # (none)
    config = model.config
    a1, a2 = config.alpha1, config.alpha2
    if not (a1 < 0 or a2 < 0 or a1 + a2 <= 0):
        left_s = slo_s - (model.decode_time_s(context_tokens) if num_decode else 0.0)
        if left_s <= 0:
            guess = 1
        else:
            lin = 2 * a1 * cached_tokens + a2
            root = left_s / lin if a1 == 0 else (-lin + math.sqrt(lin * lin + 4 * a1 * left_s)) / (2 * a1)
            if math.isfinite(root):
                guess = int(root)
    if guess >= 0:
        low = min(max(guess, 1), most - 1)
        while low > 1 and _priced_s(model, low, cached_tokens, num_decode, decode_s) > slo_s:
            low -= 1
        while low + 1 < most and _priced_s(model, low + 1, cached_tokens, num_decode, decode_s) <= slo_s:
            low += 1
        return low
    low, high = 1, most  # invariant: high exceeds the SLO; low is within it, or the floor
    while high - low > 1:
        middle = (low + high) // 2
        if _priced_s(model, middle, cached_tokens, num_decode, decode_s) <= slo_s:
            low = middle
        else:
            high = middle
    return low


def analytic_decodes_within(model: AnalyticLatencyModel, slo_s: float, prefill: int, cached_tokens: int,
                            base_decode: int, base_context: int, added_contexts: Sequence[int]) -> int:
    """``TBTBudget.summed_decodes_within`` for the analytic model, its inputs checked by the caller: the largest
    count ``k`` of candidate decodes (``added_contexts[k]``: the first ``k``'s summed context, non-decreasing from
    0) that may join ``base_decode`` decodes of ``base_context`` context and ``prefill`` tokens on
    ``cached_tokens`` with the step priced within ``slo_s``. The prefill is priced once and each count adds the
    decode part as ``step_time_s`` does (same floats: its sum of one chunk is ``0.0 +`` the chunk); from the
    closed form's guess, stepped until the model agrees, else by binary search."""
    count = len(added_contexts) - 1
    prefill_s = 0.0 + model.chunk_time_s(prefill, cached_tokens) if prefill else 0.0
    if _decodes_priced_within(model, slo_s, prefill, prefill_s, base_decode + count,
                              base_context + added_contexts[count]):
        return count
    guess = -1  # (none)
    config = model.config
    if count and config.gamma1 > 0:  # (the step time grows with the summed context)
        most_context = (slo_s - prefill_s - config.gamma2) / config.gamma1
        if math.isfinite(most_context):
            # bisect_right over base_context + added_contexts[k], less one (at least 0)
            low, high = 0, len(added_contexts)
            while low < high:
                middle = (low + high) // 2
                if most_context < base_context + added_contexts[middle]:
                    high = middle
                else:
                    low = middle + 1
            guess = low - 1 if low > 0 else 0
    if guess >= 0:
        low = min(guess, count - 1)
        while low > 0 and not _decodes_priced_within(model, slo_s, prefill, prefill_s, base_decode + low,
                                                     base_context + added_contexts[low]):
            low -= 1
        while low + 1 < count and _decodes_priced_within(model, slo_s, prefill, prefill_s, base_decode + low + 1,
                                                         base_context + added_contexts[low + 1]):
            low += 1
        return low
    low, high = 0, count  # invariant: high exceeds the SLO; low is within it (or 0)
    while high - low > 1:
        middle = (low + high) // 2
        if _decodes_priced_within(model, slo_s, prefill, prefill_s, base_decode + middle,
                                  base_context + added_contexts[middle]):
            low = middle
        else:
            high = middle
    return low


def _decodes_priced_within(model: AnalyticLatencyModel, slo_s: float, prefill: int, prefill_s: float,
                           num_decode: int, context_tokens: int) -> bool:
    """Whether a step of ``num_decode`` decodes on ``context_tokens`` beside a prefill priced ``prefill_s`` (none
    when ``prefill`` is 0) is priced within ``slo_s``."""
    if num_decode == 0:
        return prefill_s <= slo_s
    step_s = model.decode_time_s(context_tokens)
    return (prefill_s + step_s if prefill else step_s) <= slo_s


class SarathiSteps:
    """sarathi's two hooks of every step, compiled: :meth:`step_budget` (the decodes plus the largest prefill
    priced within the TBT SLO, at least one token) and :meth:`running_order` (decodes first, then running prompts,
    each group by ``sort_key``, stably), which reuses the split :meth:`step_budget` made at the same instant of the
    very same running requests. ``prefill_tokens`` prices any latency model (``TBTBudget.prefill_tokens``); with
    ``model``, the analytic one, the compiled :func:`analytic_prefill_tokens` prices it here. ``swapped``: the
    policy's preempted requests that kept computed tokens (it adds them; this drops those no longer waiting)."""

    def __init__(self, model: AnalyticLatencyModel | None,
                 prefill_tokens: Callable[[float, int, int, int, int], int], tbt_slo_s: float | None,
                 default_slo_s: float, sort_key: Callable[[Request], Any], static_sort_key: bool,
                 swapped: dict[str, Request]) -> None:
        self.model = model
        self.prefill_tokens = prefill_tokens
        self.tbt_slo_s = tbt_slo_s
        self.default_slo_s = default_slo_s
        self.sort_key = sort_key
        self.static_sort_key = static_sort_key
        self.swapped = swapped
        #: step_budget's split of the running requests, for the running_order of the same step:
        #: (now_s, the running requests as step_budget saw them, decodes, prompts), each group in their order
        self.split: tuple[float, list[Request], list[Request], list[Request]] | None = None
        #: per group (decodes, prompts): the last list sorted and its sorted copy, while the sort key is one that
        #: never changes (arrival, priority): the same requests in the same order sort the same way again
        self.sorted: list[tuple[list[Request], list[Request]] | None] = [None, None]

    def step_budget(self, running: Sequence[Request], max_num_batched_tokens: int, now_s: float) -> int:
        """The step's token budget (-1: the engine's own, when the decodes fill it)."""
        decodes, prompts, context, cached, tightest_s = split_prompts(running)
        self.split = (now_s, list(running), decodes, prompts)
        num_decode = len(decodes)
        most = max_num_batched_tokens - num_decode
        if most <= 0:
            return -1
        cached = max(cached, self.swapped_context())
        if self.tbt_slo_s is not None:
            slo_s = self.tbt_slo_s
        else:
            slo_s = tightest_s if tightest_s is not None else self.default_slo_s
        model = self.model
        if model is not None and num_decode >= 0 and context >= 0 and cached >= 0 and (num_decode or not context):
            # (the inputs TBTBudget.prefill_tokens checks, all valid: its analytic path without the call)
            return num_decode + analytic_prefill_tokens(model, slo_s, num_decode, context, cached, most)
        return num_decode + self.prefill_tokens(slo_s, num_decode, context, cached, most)

    def running_order(self, running: Sequence[Request], now_s: float) -> Sequence[Request]:
        split, self.split = self.split, None
        if split is not None and split[0] == now_s and same_requests(split[1], running):
            decodes, prompts = split[2], split[3]
        else:
            decodes, prompts, _, _, _ = split_prompts(running)
        # (a stable sort of each group keeps the order a sort of the whole list gives it)
        decodes, prompts = self._in_key_order(decodes, 0), self._in_key_order(prompts, 1)
        if not prompts and decodes == running:  # (a list compares its items by identity first)
            return running
        return decodes + prompts

    def _in_key_order(self, group: list[Request], which: int) -> list[Request]:
        """``group`` sorted by the running order's key (a list kept here: not to be changed)."""
        last = self.sorted[which]
        if last is not None and last[0] == group:  # (Request compares by identity)
            return last[1]
        ordered = sorted(group, key=self.sort_key)
        if self.static_sort_key:
            self.sorted[which] = (group, ordered)
        return ordered

    def swapped_context(self) -> int:
        """Largest cached context a prefill chunk may sit on among the swapped-out requests waiting to come back
        (they keep their computed tokens; fresh and recomputed ones have none); the rest leave the book."""
        swapped = self.swapped
        if not swapped:
            return 0
        for request_id in [i for i, r in swapped.items() if r.state not in WAITING_STATES]:
            del swapped[request_id]
        return max((r.num_computed_tokens for r in swapped.values()), default=0)


def same_requests(seen: Sequence[Request], running: Sequence[Request]) -> bool:
    """Whether ``running`` holds the very requests of ``seen``, in the same order."""
    return len(seen) == len(running) and all(running[index] is request for index, request in enumerate(seen))


# ---- TPOT protection: the prefill a step may take (tiered, utility) ---------------------------------------------
def prefill_within(
    latency: LatencyModel, target_s: float, num_decode: int, context_tokens: int, most: int, floor_tokens: int
) -> int:
    """Largest prefill in [floor_tokens, most] whose step (one fresh chunk beside ``num_decode`` decodes on
    ``context_tokens``) stays within ``target_s``: the largest ``m`` below ``most`` whose step fits, else the floor
    (step time grows with the prefill). Solved in closed form on the analytic latency model, then checked against
    the model's own step times (so the boundary is the one a search would find); a binary search on any other
    model. Shared by the policies that protect TPOT (``tiered``, ``utility``)."""
    low = min(floor_tokens, max(most, 0))
    if low >= most:
        return max(most, low)
    if type(latency) is AnalyticLatencyModel:  # every step of tiered and utility: the decode part priced once
        if num_decode < 0 or context_tokens < 0 or (not num_decode and context_tokens):
            validate_step_inputs((), num_decode, context_tokens)  # (raises; the chunks, 0 < m <= most, are valid)
        config = latency.config
        decode_s = float(context_tokens) * config.gamma1 + config.gamma2 if num_decode else 0.0  # (decode_step_s)
        if config.alpha1 * (most * most) + config.alpha2 * most + decode_s <= target_s:
            return most
        return _analytic_within(config, target_s, decode_s, low, most)
    step_s = latency.step_time_s
    if step_s([(most, 0)], num_decode, context_tokens) <= target_s:
        return most
    if isinstance(latency, AnalyticLatencyModel):
        return analytic_prefill_within(latency, target_s, num_decode, context_tokens, low, most)
    high = most  # invariant: high exceeds the target; low is allowed (within it, or the floor)
    while high - low > 1:
        middle = (low + high) // 2
        if step_s([(middle, 0)], num_decode, context_tokens) <= target_s:
            low = middle
        else:
            high = middle
    return low


def analytic_prefill_within(
    latency: AnalyticLatencyModel, target_s: float, num_decode: int, context_tokens: int, low: int, most: int
) -> int:
    """:func:`prefill_within` on the analytic model, whose step time ``α1·m² + α2·m + decode`` does not fall as
    ``m`` grows (each term is rounded monotonically): the positive root of ``α1·m² + α2·m = target - decode`` is
    the guess, then the exact step times move it to the boundary (a step or two)."""
    if type(latency) is AnalyticLatencyModel:
        validate_step_inputs((), num_decode, context_tokens)
        decode_s = decode_step_s(latency, num_decode, context_tokens) if num_decode else 0.0
        return _analytic_within(latency.config, target_s, decode_s, low, most)
    step_s = latency.step_time_s  # (a subclass: its own step times)
    decode_s = latency.step_time_s([], num_decode, context_tokens) if num_decode else 0.0
    guess = _analytic_guess(latency.config, target_s, decode_s, low, most)
    while guess + 1 < most and step_s([(guess + 1, 0)], num_decode, context_tokens) <= target_s:
        guess += 1
    while guess > low and step_s([(guess, 0)], num_decode, context_tokens) > target_s:
        guess -= 1
    return guess


def decode_step_s(latency: LatencyModel, num_decode: int, context_tokens: int) -> float:
    """``latency.step_time_s([], num_decode, context_tokens)``: a step of decodes alone. On the analytic model
    (with decodes) its float, written out (``γ1·Σctx + γ2``, the summed context as a float), without the step's
    checks: the caller knows its counts are valid."""
    if num_decode and type(latency) is AnalyticLatencyModel:
        config = latency.config
        return float(context_tokens) * config.gamma1 + config.gamma2
    return latency.step_time_s([], num_decode, context_tokens)


def _analytic_within(config: AnalyticConfig, target_s: float, decode_s: float, low: int, most: int) -> int:
    """:func:`analytic_prefill_within` with the decode part priced (``decode_s``): each step time is
    ``AnalyticLatencyModel.step_time_s``'s float for one fresh chunk, written out. That sums the chunk's time
    ``α1·m² + α2·m`` onto 0.0 (which leaves it as it is) and adds the decode part when there are decodes; adding
    ``decode_s`` = 0.0 without them changes nothing either (the chunk's time is never -0.0)."""
    alpha1, alpha2 = config.alpha1, config.alpha2
    guess = _analytic_guess(config, target_s, decode_s, low, most)
    while guess + 1 < most and alpha1 * ((guess + 1) * (guess + 1)) + alpha2 * (guess + 1) + decode_s <= target_s:
        guess += 1
    while guess > low and alpha1 * (guess * guess) + alpha2 * guess + decode_s > target_s:
        guess -= 1
    return guess


def _analytic_guess(config: AnalyticConfig, target_s: float, decode_s: float, low: int, most: int) -> int:
    """The positive root of ``α1·m² + α2·m = target - decode``, in [low, most - 1]."""
    room_s = target_s - decode_s
    if room_s <= 0:
        guess = low
    elif config.alpha1 > 0:
        root = (-config.alpha2 + math.sqrt(config.alpha2 * config.alpha2 + 4 * config.alpha1 * room_s)) \
            / (2 * config.alpha1)
        guess = int(root) if math.isfinite(root) else most
    elif config.alpha2 > 0:
        guess = int(room_s / config.alpha2)
    else:
        guess = most
    return min(max(guess, low), most - 1)


# ---- semantic's scan of the running requests -------------------------------------------------------------------
#: a semantic key (level, remaining time, arrival) kept with what it was computed from: (computed tokens, output
#: tokens, state, key)
KeptKey = tuple[int, int, RequestState, tuple[Any, ...]]


def semantic_decode_key(request: Request, g1: float, g2: float, oracle: bool) -> tuple[float, float, float]:
    """``semantic``'s key of a running decode: (urgency level, remaining time, arrival), the remaining time in
    closed form (:func:`_semantic_decode_s`)."""
    urgency = request.urgency
    level = float(urgency if urgency is not None else request.priority)
    return (level, _semantic_decode_s(request, g1, g2, oracle), request.arrival_time_s)


def _semantic_decode_s(request: Request, g1: float, g2: float, oracle: bool) -> float:
    """The remaining time of a running decode: the decode of the expected remaining output at a growing context,
    ``sum over k = 1..r of g1·(total + k) + g2`` (``0.0 +`` it: ``remaining_time_s``'s float with nothing to reload
    or prefill); the true remaining output with ``oracle`` or without a prediction."""
    output = request.num_output_tokens
    predicted = request.predicted_output
    if oracle or predicted is None:
        remaining = float(request.target_output_tokens - output)
    else:
        remaining = predicted.expected_remaining(output)
    if remaining < 0.0:
        remaining = 0.0
    total = request.prompt_tokens + output
    return 0.0 + (g1 * (remaining * total + remaining * (remaining + 1) / 2) + g2 * remaining)


class SemanticKeys:
    """``semantic``'s keys, ``(urgency level, remaining time, arrival)``. :meth:`remaining_time_s` prices a
    request's remaining work with ``latency`` (``g1``, ``g2``: a decode step's linear fit in its context;
    ``oracle``: the true remaining output, as without a prediction). :meth:`key` (also the instance's call: the
    key function the policy's ``victim_key`` gives the core) returns the key kept in ``keys`` while the request's
    tokens and state have not moved since it was computed, else computes it and keeps it while fewer than
    ``limit`` are kept (the policy clears ``keys`` now and then)."""

    def __init__(self, keys: dict[Request, KeptKey], latency: LatencyModel, g1: float, g2: float, oracle: bool,
                 limit: int) -> None:
        self.keys = keys
        self.latency = latency
        self.analytic: AnalyticLatencyModel | None = latency if isinstance(latency, AnalyticLatencyModel) else None
        self.g1 = g1
        self.g2 = g2
        self.oracle = oracle
        self.limit = limit

    def remaining_time_s(self, request: Request) -> float:
        """Prefill (or recompute) of what is not computed, the reload of swapped KV, and the decode of the
        expected remaining output at a growing context."""
        computed = request.num_computed_tokens
        output = request.num_output_tokens
        total = request.prompt_tokens + output
        cost = 0.0
        if computed > 0 and request.state is not RequestState.RUNNING:
            cost += self.latency.swap_time_s(computed)  # swapped out: copied back first
        uncomputed = total - computed
        analytic = self.analytic
        if uncomputed > 1 and analytic is not None:  # step_time_s's one chunk: 0.0 + the chunk
            cost += 0.0 + analytic.chunk_time_s(uncomputed, computed)
        elif uncomputed > 1:
            cost += self.latency.step_time_s([(uncomputed, computed)], 0, 0)
        predicted = request.predicted_output
        remaining: float
        if self.oracle or predicted is None:
            remaining = float(request.target_output_tokens - output)
        else:
            remaining = predicted.expected_remaining(output)
        if remaining < 0.0:  # (max(remaining, 0.0): the first of equals)
            remaining = 0.0
        # sum over k = 1..r of g1 * (total + k) + g2
        cost += self.g1 * (remaining * total + remaining * (remaining + 1) / 2) + self.g2 * remaining
        return cost

    def key(self, request: Request) -> tuple[Any, ...]:
        computed, output, state = request.num_computed_tokens, request.num_output_tokens, request.state
        keys = self.keys
        cached = keys.get(request)
        if cached is not None and cached[0] == computed and cached[1] == output and cached[2] is state:
            return cached[3]
        key: tuple[Any, ...]
        if state is RequestState.RUNNING and request.prompt_tokens + output - computed <= 1:
            key = semantic_decode_key(request, self.g1, self.g2, self.oracle)
        else:
            urgency = request.urgency
            key = (float(urgency if urgency is not None else request.priority), self.remaining_time_s(request),
                   request.arrival_time_s)
        if len(keys) < self.limit:
            keys[request] = (computed, output, state, key)
        return key

    def __call__(self, request: Request) -> tuple[Any, ...]:
        return self.key(request)


def semantic_scan(running: Sequence[Request], keyer: SemanticKeys
                  ) -> tuple[tuple[Any, ...] | None, bool, int, bool, float]:
    """``semantic``'s one pass over the running requests (its ``_scan_running``): the smallest key, whether its
    request decodes, the tokens the prompts of the most urgent level need beyond one each, whether ``running`` is
    in key order, and the least urgent level among its prompts (-inf: none). A running decode's key is priced
    here in closed form and compared as three floats, with no tuple made or kept (the order of key tuples of
    floats, none of them NaN); any other key is ``keyer``'s. The smallest key is ``keyer``'s (kept)."""
    best = -1
    best_level, best_s, best_arrival = 0.0, 0.0, 0.0
    best_decoding = False
    level, extra = math.inf, 0
    in_order, prompt_level = True, -math.inf
    last_level, last_s, last_arrival = -math.inf, 0.0, 0.0
    running_state = RequestState.RUNNING
    g1, g2, oracle = keyer.g1, keyer.g2, keyer.oracle
    for index in range(len(running)):
        request = running[index]
        uncomputed = request.prompt_tokens + request.num_output_tokens - request.num_computed_tokens
        key_level: float
        key_s: float
        arrival: float
        if uncomputed <= 1 and request.state is running_state:
            urgency = request.urgency
            key_level = float(urgency if urgency is not None else request.priority)
            key_s = _semantic_decode_s(request, g1, g2, oracle)
            arrival = request.arrival_time_s
        else:
            key = keyer.key(request)
            key_level, key_s, arrival = key[0], key[1], key[2]
        if best < 0 or _semantic_before(key_level, key_s, arrival, best_level, best_s, best_arrival):
            best, best_decoding = index, uncomputed <= 1
            best_level, best_s, best_arrival = key_level, key_s, arrival
        if key_level < level:
            level, extra = key_level, 0
        if uncomputed > 1:
            if key_level == level:
                extra += uncomputed - 1
            if key_level > prompt_level:
                prompt_level = key_level
        if _semantic_before(key_level, key_s, arrival, last_level, last_s, last_arrival):
            in_order = False
        last_level, last_s, last_arrival = key_level, key_s, arrival
    smallest = keyer.key(running[best]) if best >= 0 else None
    return smallest, best_decoding, extra, in_order, prompt_level


def _semantic_before(level: float, remaining_s: float, arrival_s: float, other_level: float, other_s: float,
                     other_arrival_s: float) -> bool:
    """``(level, remaining_s, arrival_s) < (other_level, other_s, other_arrival_s)``, for floats not NaN."""
    if level != other_level:
        return level < other_level
    if remaining_s != other_s:
        return remaining_s < other_s
    return arrival_s < other_arrival_s


def versioned_head(queue: list[tuple[tuple[Any, ...], int, int, Request]], version_key: str
                   ) -> tuple[Any, ...] | None:
    """The key at the front of a lazily deleted heap of ``(key, version, seq, request)`` entries (``semantic``'s
    waiting queue): entries of requests no longer waiting, or re-entered since (their ``policy_state`` version
    moved on), are popped first; None when none is live."""
    while queue:
        key, version, _, request = queue[0]
        if request.state in WAITING_STATES and request.policy_state.get(version_key) == version:
            return key
        heapq.heappop(queue)
    return None


def semantic_kept(running: Sequence[Request], level: float) -> list[Request] | None:
    """``running`` without its prompts (a chunk of more than one token to compute) of a level above ``level``
    (less urgent), in running order; None when it has none."""
    kept: list[Request] = []
    dropped = False
    for request in running:
        urgency = request.urgency
        if (urgency if urgency is not None else request.priority) > level \
                and request.prompt_tokens + request.num_output_tokens - request.num_computed_tokens > 1:
            dropped = True
        else:
            kept.append(request)
    return kept if dropped else None


# ---- ltr, fastserve: waiting requests in lazily deleted heaps, one per level -----------------------------------
class LevelHeaps:
    """A policy's waiting requests in heaps, one per level (the first level goes first), of entries that end in
    ``(mark, request)``; an entry is live while the request waits, its ``policy_state[enqueued_key]`` is the
    entry's mark (a later entry replaces it) and :meth:`live` holds (a subclass's check of the level). Entries
    that are not live are dropped when they come to a heap's front. :meth:`order` reads them in order."""

    def __init__(self, heaps: list[list[tuple[Any, ...]]], enqueued_key: str) -> None:
        self.heaps = heaps
        self.enqueued_key = enqueued_key
        #: (level, entry) taken off a heap by the last order and put back at the next (see :class:`LevelOrder`)
        self.held: list[tuple[int, tuple[Any, ...]]] = []

    def live(self, level: int, request: Request) -> bool:
        """Whether ``request``'s entry belongs to ``level`` (a subclass's rule; here every level)."""
        return True

    def order(self) -> LevelOrder:
        """The waiting requests in order (the entries the last order held aside put back first)."""
        held = self.held
        if held:
            for level, entry in held:
                heapq.heappush(self.heaps[level], entry)
            held.clear()
        return LevelOrder(self)

    def clear(self) -> None:
        for heap in self.heaps:
            heap.clear()
        self.held.clear()


class LevelOrder:
    """An iterator over a :class:`LevelHeaps` in order: at each ``next`` the front of the first level with a live
    entry (requests admitted or displaced meanwhile are seen, as a keyed queue's front would show them). One
    yielded and still waiting at the next ``next`` (not admitted: the core never asks on then) is held aside,
    and put back when the next order is made."""

    def __init__(self, source: LevelHeaps) -> None:
        self.source = source
        self.entry: tuple[Any, ...] | None = None
        self.level = -1

    def __iter__(self) -> LevelOrder:
        return self

    def __next__(self) -> Request:
        source = self.source
        heaps = source.heaps
        entry = self.entry
        if entry is not None:
            heap = heaps[self.level]
            if heap and heap[0] is entry and entry[-1].state in WAITING_STATES:
                source.held.append((self.level, heapq.heappop(heap)))
            self.entry = None
        key = source.enqueued_key
        for level in range(len(heaps)):
            heap = heaps[level]
            while heap:
                front = heap[0]
                request: Request = front[-1]
                if request.policy_state.get(key) == front[-2] and request.state in WAITING_STATES \
                        and source.live(level, request):
                    self.entry, self.level = front, level
                    return request
                heapq.heappop(heap)
        raise StopIteration


class PromotedHeaps(LevelHeaps):
    """``ltr``'s waiting requests: level 0 promoted (``policy_state[left_key] > 0``), level 1 the others."""

    def __init__(self, heaps: list[list[tuple[Any, ...]]], enqueued_key: str, left_key: str) -> None:
        super().__init__(heaps, enqueued_key)
        self.left_key = left_key

    def live(self, level: int, request: Request) -> bool:
        return (request.policy_state.get(self.left_key, 0.0) > 0) == (level == 0)


class StoredLevelHeaps(LevelHeaps):
    """``fastserve``'s waiting requests: level ``policy_state[level_key]``."""

    def __init__(self, heaps: list[list[tuple[Any, ...]]], enqueued_key: str, level_key: str) -> None:
        super().__init__(heaps, enqueued_key)
        self.level_key = level_key

    def live(self, level: int, request: Request) -> bool:
        return bool(request.policy_state[self.level_key] == level)


class CostIndexTokens:
    """A cost-index policy's ``on_tokens`` (``gittins``, ``mean``), compiled: it runs when a request's token count
    leaves the window ``[low, high)`` over which nothing changes (``notify_tokens_at`` is ``high``). The bucket of
    attained cost (or of tokens, every ``bucket_tokens``; 0: of cost) is found again; when it moved, the index is
    computed at the first count in the new bucket (``compute``: the policy's, with its cost distribution); then
    the next window is stored. ``start`` sets up a request first seen here. The ``*_key`` names are the
    ``policy_state`` keys the policy keeps them under; ``changing`` the ids of requests whose index may rise."""

    def __init__(self, keys: tuple[str, str, str, str, str], changing: set[str], bucket_tokens: int, model: str,
                 most: int, start: Callable[[Request], float], compute: Callable[[Request, int], float]) -> None:
        self.low_key, self.high_key, self.last_key, self.bucket_key, self.width_key = keys
        self.changing = changing
        self.bucket_tokens = bucket_tokens
        self.model = model
        self.most = most
        self.start = start
        self.compute = compute

    def on_tokens(self, request: Request, num_tokens: int, now_s: float) -> None:
        state: dict[str, Any] = request.policy_state  # (Any: what is stored keeps its type, an int an int)
        high = state.get(self.high_key)
        if high is None:
            self.start(request)
            return
        generated = request.num_output_tokens
        if state[self.low_key] <= generated < high:
            return  # the same bucket, and the last predicted length not reached: nothing changes
        if generated >= state[self.last_key]:
            self.changing.discard(request.request_id)  # from here on every refresh gives the floor
        bucket = self.bucket_of(request, generated)
        if bucket != state[self.bucket_key]:
            state[self.bucket_key] = bucket
            low = generated - num_tokens + 1
            self.compute(request, self.bucket_entry(request, bucket, low if low > 0 else 0, generated))
        self.set_window(request, bucket, generated)

    def bucket_of(self, request: Request, generated: int) -> int:
        if self.bucket_tokens:
            return generated // self.bucket_tokens
        return cost_bucket(generated, request.prompt_tokens, self.model, request.policy_state[self.width_key])

    def bucket_entry(self, request: Request, bucket: int, low: int, high: int) -> int:
        """The first token count in ``[low, high]`` whose bucket is ``bucket`` (``high``'s own)."""
        if not self.bucket_tokens:
            return cost_bucket_entry(bucket, low, high, request.prompt_tokens, self.model,
                                     request.policy_state[self.width_key])
        while low < high:
            middle = (low + high) // 2
            if self.bucket_of(request, middle) >= bucket:
                high = middle
            else:
                low = middle + 1
        return low

    def next_bucket_entry(self, request: Request, bucket: int, generated: int) -> int:
        """The least token count above ``generated`` whose bucket is past ``bucket``."""
        if self.bucket_tokens:
            entry = (bucket + 1) * self.bucket_tokens
            return entry if entry > generated + 1 else generated + 1  # (max(entry, generated + 1))
        return next_cost_bucket_entry(bucket, generated, request.prompt_tokens, self.model,
                                      request.policy_state[self.width_key], self.most)

    def set_window(self, request: Request, bucket: int, generated: int) -> None:
        """Store the window ``[generated, high)``: ``high`` the first count in a later bucket, or the last
        predicted length while the request may still change its index upward (``changing``)."""
        high = self.next_bucket_entry(request, bucket, generated)
        state: dict[str, Any] = request.policy_state
        if request.request_id in self.changing:
            last = int(state[self.last_key])
            if last < high:  # (min(high, last))
                high = last
        state[self.low_key] = generated
        state[self.high_key] = high
        request.notify_tokens_at = high


# ---- las: attained service --------------------------------------------------------------------------------------
#: ``las``'s victim key, (attained service, arrival): the core sorts its running requests by it every step,
#: natively (it is the core's :func:`~semsched.core.scheduler.by_service_then_arrival`)
service_then_arrival = by_service_then_arrival


def served_victims(candidate: Request, running: Sequence[Request], quantum_s: float) -> list[Request]:
    """``las``'s victims for ``candidate``: the running requests served at least ``quantum_s`` more than it (and
    more at all), most served first (a stable sort: equal keys keep the running order)."""
    mine = candidate.service_s
    limit = mine + quantum_s
    served = [r for r in running if r.service_s >= limit and r.service_s > mine]
    count = len(served)
    descents = 0
    for index in range(1, count):
        before, after = served[index - 1], served[index]
        if after.service_s < before.service_s or (after.service_s == before.service_s
                                                  and after.arrival_time_s < before.arrival_time_s):
            descents += 1
    if 4 * descents > count:  # far from ascending (the vLLM adapter's running order is vLLM's)
        served.sort(key=service_then_arrival, reverse=True)
        return served
    # served.sort(key=service_then_arrival, reverse=True), natively: the core's running requests are mostly in
    # ascending order (it sorts them by this key every step), so they are sorted ascending (stable), then
    # reversed, and each run of equal keys is reversed back into the running order, as a stable descending sort
    # leaves it
    sort_by_service_then_arrival(served)
    served.reverse()
    start = 0
    while start < count:
        first = served[start]
        end = start + 1
        while end < count and served[end].service_s == first.service_s \
                and served[end].arrival_time_s == first.arrival_time_s:
            end += 1
        if end - start > 1:
            served[start:end] = served[start:end][::-1]
        start = end
    return served


# ---- ltr, fastserve: victims by kept keys --------------------------------------------------------------------
def kept_victims(running: Sequence[Request], keys: dict[Request, Any], bound: tuple[Any, ...]) -> list[Request]:
    """The running requests whose kept victim key is above ``bound``, largest key first, equal keys in running
    order (a stable descending sort). ``keys``: a :class:`~semsched.policies.kept_keys.KeptVictimKeys`, which
    makes a missing key when asked."""
    lower = [request for request in running if keys[request] > bound]
    lower.sort(key=keys.__getitem__, reverse=True)
    return lower


# ---- laps-sd: multi-level queues by attained (or perceived) service ---------------------------------------------
#: ``Request.policy_state`` keys of ``laps-sd``: 1.0 once the request is perceptible; its stable acceptance rate
LAPS_PERCEPTIBLE = "laps.perceptible"
LAPS_RATE = "laps.rate"
#: 1.0 in the round the request became perceptible (its last decision point)
LAPS_FRESH = "laps.fresh"


def estimated_time_s(length: float, acceptance: float, draft_tokens: int, t_ssm_s: float, t_llm_s: float) -> float:
    """Seed 004's eq. 6: ``L/(nA+1) · (n·T_SSM + T_LLM)`` (speculation plus verification time of ``L`` tokens)."""
    per_round = draft_tokens * acceptance + 1.0
    return length / per_round * (draft_tokens * t_ssm_s + t_llm_s)


def queue_of(service_s: float, bounds: Sequence[float]) -> int:
    """0-based queue holding ``service_s``: the first whose upper bound exceeds it."""
    for j, bound in enumerate(bounds):
        if service_s < bound:
            return j
    return len(bounds)


def laps_perceived_s(request: Request, draft_tokens: int, profiled: tuple[float, float] | None) -> float:
    """Eq. 6 for a perceptible request's whole output (its stable rate, its predicted or true length):
    ``profiled`` (T_SSM, T_LLM), else its own mean round time."""
    rate = request.policy_state[LAPS_RATE]
    output = request.predicted_output
    length = output.mean if output is not None else float(request.target_output_tokens)
    if profiled is not None:
        return estimated_time_s(length, rate, draft_tokens, profiled[0], profiled[1])
    count = request.service_rounds
    round_s = (request.round_service_s / count if count else 0.0) or 0.0
    return length / (draft_tokens * rate + 1.0) * round_s


def laps_victim_key(request: Request, bounds: tuple[float, ...], draft_tokens: int,
                    profiled: tuple[float, float] | None, tiers: bool) -> tuple[Any, ...]:
    """``laps-sd``'s victim key (the largest goes first): non-perceptible before perceptible, lower queues first
    (by attained service, or by perceived service, eq. 6, once perceptible), latest arrival first; the priority
    first with ``tiers``. ``profiled``: eq. 6's (T_SSM, T_LLM), else the request's own mean round time."""
    perceptible, queue = _laps_level(request, bounds, draft_tokens, profiled)
    if tiers:
        return (request.priority, perceptible, queue, request.arrival_time_s)
    return (perceptible, queue, request.arrival_time_s)


def laps_fcfs_key(request: Request, bounds: tuple[float, ...], draft_tokens: int,
                  profiled: tuple[float, float] | None) -> tuple[Any, ...]:
    """``laps-sd``'s queue order under its paper's order (``order=fcfs``): the queue (by attained service, or by
    perceived service, eq. 6, once perceptible), then perceptible ones first by their estimated remaining time,
    the others by arrival."""
    service = request.service_s
    if request.policy_state.get(LAPS_PERCEPTIBLE, 0.0) == 1.0:
        total = laps_perceived_s(request, draft_tokens, profiled)
        perceived = total or 0.0
        if perceived > service:  # (max(service, perceived): the first of equals)
            service = perceived
        length = request.predicted_output_tokens()
        remaining = 0.0
        if not length <= 0:
            left = 1.0 - request.num_output_tokens / length
            remaining = total * (left if left > 0.0 else 0.0)  # (max(0.0, left): the first of equals)
        return (_queue_in(service, bounds), 0, remaining, request.arrival_time_s)
    return (_queue_in(service, bounds), 1, request.arrival_time_s, 0.0)


class LapsFcfsKey:
    """:func:`laps_fcfs_key` with a ``laps-sd`` policy's settings bound (a key function for ``sorted``)."""

    def __init__(self, bounds: tuple[float, ...], draft_tokens: int, profiled: tuple[float, float] | None) -> None:
        self.bounds = bounds
        self.draft_tokens = draft_tokens
        self.profiled = profiled

    def __call__(self, request: Request) -> tuple[Any, ...]:
        return laps_fcfs_key(request, self.bounds, self.draft_tokens, self.profiled)


def _laps_level(request: Request, bounds: tuple[float, ...], draft_tokens: int,
                profiled: tuple[float, float] | None) -> tuple[int, int]:
    """(0 once perceptible, else 1; the queue) of :func:`laps_victim_key`."""
    service = request.service_s
    if request.policy_state.get(LAPS_PERCEPTIBLE, 0.0) == 1.0:
        perceived = laps_perceived_s(request, draft_tokens, profiled) or 0.0
        if perceived > service:  # (max(service, perceived): the first of equals)
            service = perceived
        return 0, _queue_in(service, bounds)
    return 1, _queue_in(service, bounds)


class LapsTokens:
    """``laps-sd``'s ``on_tokens`` under its paper's order (``order=fcfs``), compiled: it runs after every emission
    of a request not yet perceptible. The round's rates go onto the request's window (:func:`laps_stable_rate`);
    once they are stable the request is perceptible (and fresh, for this round). A perceptible request is
    ``settled`` and asks to hear of nothing more. ``keys``, ``rates_key``, ``seen_key``: where the window, its
    count and the rounds already seen are kept in ``policy_state``."""

    def __init__(self, settled: set[Request], keys: tuple[str, ...], rates_key: str, seen_key: str,
                 draft_tokens: int, gamma: int, delta: float) -> None:
        self.settled = settled
        self.keys = keys
        self.rates_key = rates_key
        self.seen_key = seen_key
        self.draft_tokens = draft_tokens
        self.gamma = gamma
        self.delta = delta

    def on_tokens(self, request: Request, num_tokens: int, now_s: float) -> None:
        """The policy's ``on_tokens`` (``now_s`` unread)."""
        state = request.policy_state
        state[LAPS_FRESH] = 0.0
        if state.get(LAPS_PERCEPTIBLE, 0.0) == 1.0:
            # nothing changes for it any more: its rate is fixed, it is no longer fresh
            self.settled.add(request)
            request.notify_tokens_at = request.max_output_tokens + 1
            return
        total_rounds = request.service_rounds
        count = total_rounds - int(state.get(self.seen_key, 0.0))  # the rounds of this emission (0: the first)
        if not count:
            return
        state[self.seen_key] = float(total_rounds)
        rate = laps_stable_rate(state, self.keys, self.rates_key, request.round_tokens, total_rounds, num_tokens,
                                count, self.draft_tokens, self.gamma, self.delta)
        if rate is not None:
            state[LAPS_PERCEPTIBLE] = 1.0
            state[LAPS_FRESH] = 1.0
            state[LAPS_RATE] = rate


def laps_victims(candidate: Request, running: Sequence[Request], settled: set[Request], mine: tuple[Any, ...],
                 bounds: tuple[float, ...], tiers: bool, fcfs: bool, ranks_first: bool,
                 key_of: Callable[[Request], tuple[Any, ...]]) -> list[Request]:
    """``laps-sd``'s victims of ``candidate`` (its key ``mine``), in running order: with ``tiers``, every running
    request of a less important tier, and none of a more important one; in the candidate's own, those not
    ``settled`` whose queue (by attained service) is above the candidate's, or equal when ``ranks_first``; a
    perceptible one only in the round it became so (``fcfs`` order) with a key (``key_of``) above ``mine``."""
    queue: int = mine[0]
    least = candidate.priority
    victims: list[Request] = []
    for request in running:
        if tiers:
            priority = request.priority
            if priority > least:
                victims.append(request)
                continue
            if priority < least:
                continue
        if request in settled:
            continue
        state = request.policy_state
        if state.get(LAPS_PERCEPTIBLE, 0.0) == 1.0:
            if fcfs and state.get(LAPS_FRESH, 0.0) == 1.0 and mine < key_of(request):
                victims.append(request)
            continue
        theirs = _queue_in(request.service_s, bounds)  # (its key's first item: only that is compared)
        if queue < theirs or (queue == theirs and ranks_first):
            victims.append(request)
    return victims


def _queue_in(service_s: float, bounds: tuple[float, ...]) -> int:
    """:func:`queue_of` on a tuple of bounds (its items read natively)."""
    j, count = 0, len(bounds)
    while j < count and not service_s < bounds[j]:
        j += 1
    return j


def is_stable(rates: Sequence[float], gamma: int, delta: float) -> bool:
    """Whether the last ``gamma`` acceptance rates differ by less than ``delta`` (max - min)."""
    if len(rates) < gamma:
        return False
    window = rates[-gamma:]
    return max(window) - min(window) < delta


def laps_stable_rate(state: dict[str, float], keys: tuple[str, ...], count_key: str, total_tokens: int,
                     total_rounds: int, num_tokens: int, count: int, draft_tokens: int, gamma: int,
                     delta: float) -> float | None:
    """Push the cumulative acceptance rate after each of an emission's ``count`` rounds (``num_tokens`` tokens in
    all; ``total_tokens`` in ``total_rounds`` rounds so far) onto the request's window of the last ``gamma``
    (``state[keys[i % gamma]]``, ``state[count_key]`` rates pushed so far), oldest first, stopping at the first
    window of ``gamma`` whose rates differ by less than ``delta`` (max - min): that window's mean (an exact sum);
    None if none is."""
    per_round = num_tokens / count
    pushed = int(state.get(count_key, 0.0))
    for k in range(count - 1, -1, -1):
        rate = ((total_tokens - k * per_round) / (total_rounds - k) - 1.0) / draft_tokens
        state[keys[pushed % gamma]] = rate
        pushed += 1
        state[count_key] = float(pushed)
        if pushed >= gamma:
            window = [state[keys[i % gamma]] for i in range(pushed - gamma, pushed)]
            if is_stable(window, gamma, delta):
                return math.fsum(window) / len(window)
    return None


class LapsVictimKey(NativeVictimKey):
    """:func:`laps_victim_key` with a ``laps-sd`` policy's settings bound: the key function its ``victim_key``
    gives the core, which sorts its running requests by it every step (:meth:`sort`: a call that never enters
    the interpreter)."""

    def __init__(self, bounds: tuple[float, ...], draft_tokens: int, profiled: tuple[float, float] | None,
                 tiers: bool) -> None:
        self.bounds = bounds
        self.draft_tokens = draft_tokens
        self.profiled = profiled
        self.tiers = tiers

    def __call__(self, request: Request) -> tuple[Any, ...]:
        return laps_victim_key(request, self.bounds, self.draft_tokens, self.profiled, self.tiers)

    def sort(self, requests: list[Request]) -> None:
        """``requests.sort(key=self)``: each request's key computed once, as an integer that orders as the key's
        leading items do (``(priority,) perceptible, queue``; the queue is below ``len(bounds) + 1``) and its
        arrival, then a stable insertion sort on them (between two steps the running list is sorted but for a
        few requests); past a bound on the moves, ``list.sort``, which gives the same result from any stable
        rearrangement."""
        levels = len(self.bounds) + 1
        bounds, draft_tokens, profiled, tiers = self.bounds, self.draft_tokens, self.profiled, self.tiers
        majors: list[int] = []
        for request in requests:
            perceptible, queue = _laps_level(request, bounds, draft_tokens, profiled)
            major = perceptible * levels + queue
            if tiers:
                major += request.priority * 2 * levels
            majors.append(major)
        limit = 8 * len(requests) + 64
        moves = 0
        for i in range(1, len(requests)):
            request, major = requests[i], majors[i]
            arrival_s = request.arrival_time_s
            j = i - 1
            while j >= 0 and (majors[j] > major
                              or (majors[j] == major and requests[j].arrival_time_s > arrival_s)):
                requests[j + 1], majors[j + 1] = requests[j], majors[j]
                j -= 1
                moves += 1
            requests[j + 1], majors[j + 1] = request, major
            if moves > limit:
                requests.sort(key=self)
                return


# ---- tiered ---------------------------------------------------------------------------------------------------
def tiered_victim_key(request: Request, preemption_limit: int) -> tuple[float, int, int, int, float]:
    """``tiered``'s victim key (the largest goes first): not yet promoted (fewer than ``preemption_limit``
    preemptions), then the lowest tier, the least progress, the fewest preemptions, the latest arrival."""
    preemptions = request.num_preemptions
    return (0.0 if preemptions >= preemption_limit else 1.0, request.priority, -request.num_computed_tokens,
            -preemptions, request.arrival_time_s)


class TieredVictimKey(NativeVictimKey):
    """:func:`tiered_victim_key` with a ``tiered`` policy's preemption limit bound: the key function its
    ``victim_key`` gives the core, which sorts its running requests by it every step (natively:
    :meth:`NativeVictimKey.sort` with :meth:`after`)."""

    def __init__(self, preemption_limit: int) -> None:
        self.preemption_limit = preemption_limit

    def __call__(self, request: Request) -> tuple[float, int, int, int, float]:
        return tiered_victim_key(request, self.preemption_limit)

    def after(self, a: Request, b: Request) -> bool:
        return _tiered_after(a, b, self.preemption_limit)  # (the key's fields compared in place)


def _tiered_after(a: Request, b: Request, limit: int) -> bool:
    """``tiered_victim_key(a) > tiered_victim_key(b)``, field by field as the tuples compare (the first field
    that differs decides)."""
    a_preemptions, b_preemptions = a.num_preemptions, b.num_preemptions
    a_fresh, b_fresh = a_preemptions < limit, b_preemptions < limit  # (the key's 1.0; 0.0 once promoted)
    if a_fresh != b_fresh:
        return a_fresh
    if a.priority != b.priority:
        return a.priority > b.priority
    if a.num_computed_tokens != b.num_computed_tokens:
        return a.num_computed_tokens < b.num_computed_tokens  # (the key holds its negation)
    if a_preemptions != b_preemptions:
        return a_preemptions < b_preemptions  # (likewise)
    return a.arrival_time_s > b.arrival_time_s


class TieredScan:
    """What ``tiered``'s step budget reads off the running requests in one pass (:func:`tiered_decode_scan`)."""

    def __init__(self) -> None:
        #: the tightest step time a protected decode allows (its TPOT aim plus what it has banked; inf: none)
        self.target_s = math.inf
        self.num_decode = 0
        self.context_tokens = 0
        #: the prompt tokens left of protected (or promoted) requests still in their prompt
        self.prompt_tokens = 0
        #: the E2E paces of protected decodes whose aim is tighter than the target found so far when seen
        self.paces: list[float] = []
        #: the running requests found in ``waiting``: they have started, and leave the waiting sums
        self.started: list[str] = []


def tiered_decode_scan(running: Sequence[Request], waiting: dict[str, Any], watch: bool, now_s: float,
                       protected: int, preemption_limit: int, pace_e2e: bool, keep: float,
                       first_token_key: str) -> TieredScan:
    """``tiered``'s pass over the running requests at every step (its ``step_budget`` documents the rule): the
    decodes and their context, each protected decode's step-time allowance (``keep`` times its TPOT target, or
    what it has banked when that is more; a decode seen for the first time after its first token records when
    that came, under ``first_token_key``), the E2E paces with ``pace_e2e``, and the protected prompt tokens left.
    With ``watch``, the ids of running requests still in ``waiting`` are listed in ``started``."""
    scan = TieredScan()
    target_s = math.inf
    num_decode = 0
    context_tokens = 0
    prompt_tokens = 0
    for request in running:
        if watch and request.request_id in waiting:
            scan.started.append(request.request_id)
        computed = request.num_computed_tokens
        left = request.prompt_tokens + request.num_output_tokens - computed
        if left > 1:  # in its prompt (or recomputing): a protected one's tokens are not held back
            if request.priority <= protected or request.num_preemptions >= preemption_limit:
                prompt_tokens += left
            continue
        num_decode += 1
        context_tokens += computed
        if request.priority > protected:
            continue
        tpot_slo_s = request.tpot_slo_s
        if tpot_slo_s is not None:  # how long the next step may take with it decoding: its aim, plus banked
            aim_s = tpot_slo_s * keep
            allowance_s = aim_s
            first_s = request.policy_state.get(first_token_key)
            if first_s is None:  # first seen decoding: its first token came at the end of the last step
                if request.num_output_tokens:
                    request.policy_state[first_token_key] = now_s
            else:  # after the next step, (tokens so far) gaps must average at most the aim
                banked_s = aim_s * request.num_output_tokens - (now_s - first_s)
                if banked_s > aim_s:  # (max, keeping the first on a tie)
                    allowance_s = banked_s
            if allowance_s < target_s:  # (min, keeping the first on a tie)
                target_s = allowance_s
        e2e_slo_s = request.e2e_slo_s
        if pace_e2e and e2e_slo_s is not None:
            # how long each step may take for it to finish within its E2E target if it produces all of
            # max_output_tokens; a pace whose aim is no tighter than an allowance already found cannot lower the
            # target (each pace's cap is at least its aim)
            tokens = request.max_output_tokens - request.num_output_tokens
            pace_s = (request.arrival_time_s + e2e_slo_s - now_s) / (tokens if tokens > 1 else 1)
            if pace_s * keep < target_s:
                scan.paces.append(pace_s)
    scan.target_s = target_s
    scan.num_decode = num_decode
    scan.context_tokens = context_tokens
    scan.prompt_tokens = prompt_tokens
    return scan
