"""Requests and their lifecycle.

A :class:`Request` carries what a scheduler may know about one inference request (its size, who sent it, its
SLOs, its urgency and predicted cost) and the progress an engine reports back (computed tokens, emitted tokens,
preemptions). Token accounting follows vLLM v1: a request has ``num_tokens`` (prompt plus generated so far) and
``num_computed_tokens``; each step computes up to ``num_tokens - num_computed_tokens`` tokens, and when the
computed tokens catch up with ``num_tokens`` the engine samples one new token. Chunked prefill, decode and
recompute after preemption are therefore one mechanism.
"""

from __future__ import annotations

import enum
import functools
import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass, field, fields

import numpy as np

from semsched.core import emission
from semsched.core.errors import SemschedError

#: longest ``Request.client`` label
MAX_CLIENT_CHARS = 256
#: ``Request.token_times_s`` gathers its times with one index array from this many step ranges on
_GATHER_FROM_RANGES = 16


class RequestState(enum.Enum):
    """Where a request is in its life. Terminal states: FINISHED, REJECTED, DROPPED, STALLED (only a simulation run
    with ``allow_stalls`` ends a request so: its engine sat idle while it could have run, a scheduler defect)."""

    WAITING = "waiting"
    RUNNING = "running"
    PREEMPTED_RECOMPUTE = "preempted_recompute"
    PREEMPTED_SWAPPED = "preempted_swapped"
    FINISHED = "finished"
    REJECTED = "rejected"
    DROPPED = "dropped"
    STALLED = "stalled"

    @property
    def is_terminal(self) -> bool:
        return self in _TERMINAL


# tuples, not sets: ``in`` compares by identity first, where a set hashes an Enum member in Python
_TERMINAL = (RequestState.FINISHED, RequestState.REJECTED, RequestState.DROPPED, RequestState.STALLED)
#: the states of a request in a waiting queue (arrived or preempted, not running, not ended)
WAITING_STATES = (RequestState.WAITING, RequestState.PREEMPTED_RECOMPUTE, RequestState.PREEMPTED_SWAPPED)


class InvalidRequestError(SemschedError):
    """A request field is out of range; the message names the field and the limit."""


@dataclass(frozen=True)
class LengthDistribution:
    """A discrete distribution over output lengths (tokens): ``probs[i]`` is P(length == lengths[i]).

    Predictors return one per request; point estimates (mean, quantiles) and the remaining-work
    expectations that SRPT/Gittins-style policies need are derived from it.
    """

    lengths: tuple[int, ...]
    probs: tuple[float, ...]

    def __post_init__(self) -> None:
        if not self.lengths or len(self.lengths) != len(self.probs):
            raise InvalidRequestError(
                f"predicted_output: lengths and probs must be non-empty and equally long "
                f"(got {len(self.lengths)} and {len(self.probs)})"
            )
        if any(n < 1 for n in self.lengths):
            raise InvalidRequestError("predicted_output.lengths: every length must be >= 1")
        if any(p < 0 for p in self.probs) or not math.isclose(sum(self.probs), 1.0, abs_tol=1e-6):
            raise InvalidRequestError("predicted_output.probs: must be >= 0 and sum to 1")
        if any(b <= a for a, b in zip(self.lengths, self.lengths[1:], strict=False)):
            raise InvalidRequestError(
                "predicted_output.lengths: must be strictly ascending (each length once, its probability summed)")

    def __reduce__(self) -> tuple[object, ...]:
        """Pickled as its constructor's arguments (compiled and frozen, it takes no assignment after it)."""
        return (LengthDistribution, (self.lengths, self.probs))

    @classmethod
    def point(cls, length: int) -> LengthDistribution:
        """A degenerate distribution: the length is known exactly."""
        return cls((int(length),), (1.0,))

    @classmethod
    def from_samples(cls, samples: Sequence[int]) -> LengthDistribution:
        """The empirical distribution of observed lengths."""
        values, counts = np.unique(np.asarray(samples, dtype=np.int64), return_counts=True)
        probs = counts / counts.sum()
        return cls(tuple(int(v) for v in values), tuple(float(p) for p in probs))

    @functools.cached_property
    def mean(self) -> float:
        """The expected length (computed once: policies read it on hot paths)."""
        return float(sum(n * p for n, p in zip(self.lengths, self.probs, strict=True)))

    def quantile(self, q: float) -> int:
        """Smallest length whose cumulative probability reaches ``q``."""
        acc = 0.0
        for n, p in zip(self.lengths, self.probs, strict=True):
            acc += p
            if acc >= q - 1e-12:
                return n
        return self.lengths[-1]

    def expected_remaining(self, generated: int) -> float:
        """E[L - generated | L > generated]; falls back to 1 when the support is exhausted."""
        tail = [(n, p) for n, p in zip(self.lengths, self.probs, strict=True) if n > generated]
        mass = sum(p for _, p in tail)
        if mass <= 0:
            return 1.0
        return sum((n - generated) * p for n, p in tail) / mass


class TokenTimeline:
    """Shared, append-only record of step end times for one engine instance.

    Requests store the *step indices* at which they emitted tokens (as contiguous ranges), so a stretch of k
    identical decode steps costs O(1) per request to record, and per-token times are materialised only when
    metrics ask for them.
    """

    __slots__ = ("_times", "_array")

    def __init__(self) -> None:
        self._times: list[float] = []
        self._array: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self._times)

    def append(self, time_s: float) -> int:
        """Record one step's end time; returns its index."""
        self._times.append(time_s)
        self._array = None
        return len(self._times) - 1

    def extend(self, times_s: Sequence[float]) -> int:
        """Record several consecutive steps; returns the index of the first."""
        first = len(self._times)
        self._times.extend(times_s)
        self._array = None
        return first

    def last(self) -> float:
        return self._times[-1]

    def as_array(self) -> np.ndarray:
        if self._array is None:
            self._array = np.asarray(self._times, dtype=np.float64)
        return self._array


@dataclass(eq=False, slots=True, init=False)
class Request:
    """One inference request: static description plus mutable progress.

    Static fields are validated on construction (:class:`InvalidRequestError` names the field; a NumPy number is
    taken as the Python number it equals). ``priority``
    follows vLLM: lower values are more important. ``output_tokens`` is the true output length, known only in
    simulation; an engine stops the request when it emits that many tokens or ``max_output_tokens``.
    """

    request_id: str
    prompt_tokens: int
    max_output_tokens: int
    arrival_time_s: float
    output_tokens: int | None = None
    prompt_text: str | None = None
    prompt_token_ids: tuple[int, ...] | None = None
    priority: int = 0
    tier: str = "default"
    ttft_slo_s: float | None = None
    tpot_slo_s: float | None = None
    e2e_slo_s: float | None = None
    #: semantic urgency level, 0 = most urgent (seed 000); what the scheduler believes (a prediction, when one
    #: was made); ``urgency_true`` keeps the true level beside a prediction, for reports only
    urgency: int | None = None
    predicted_output: LengthDistribution | None = None
    urgency_true: int | None = None
    #: when the request's predictions are ready and it may enter the scheduler (None: at arrival). The simulator
    #: hands the request over then; latency is still measured from ``arrival_time_s``
    ready_time_s: float | None = None
    #: who sent the request (a user, tenant or API key), for per-client fairness (``vtc``); None: unknown
    client: str | None = None
    #: speculative decoding (seed 004): how many tokens each verification round of this request emitted in a
    #: real run (a Spec-Bench log), replayed by the simulator; None: the simulator's acceptance model decides
    accept_lengths: tuple[int, ...] | None = None
    #: prefix caching: chained hashes of the full KV blocks of the request's token sequence
    #: (:mod:`semsched.core.prefix`), its prompt's and, in a replay that knows them, its output's; an engine with
    #: prefix caching reuses the cached blocks of a matching prefix, a prefix-aware router keys instances by them.
    #: None: nothing is known about the tokens (nothing is shared)
    prefix_hashes: tuple[int, ...] | None = None

    # progress, owned by the scheduler
    state: RequestState = RequestState.WAITING
    num_computed_tokens: int = 0
    num_output_tokens: int = 0
    num_preemptions: int = 0
    #: prompt tokens found in the prefix cache when the request was first scheduled (their prefill skipped)
    num_cached_tokens: int = 0
    #: the policy's promise that its ``on_tokens`` changes nothing for this request until ``num_output_tokens``
    #: reaches this count, so the scheduler skips those calls (0: every emission is reported). Reset to 0 when a
    #: scheduler takes the request in, so it binds only the policy that set it. The vLLM adapter keeps it too;
    #: an engine that ignores it is still correct
    notify_tokens_at: int = 0
    #: attained service: the engine seconds of the steps in which this request emitted tokens (its prefill's last
    #: chunk, each decode or speculative round), charged by the scheduler for a policy that ranks by it
    #: (``Policy.charges_service``; 0.0 otherwise). A step's seconds are its end less its start, as ``on_step``
    #: hears them, added one step at a time (a fast-forwarded stretch adds its steps' in order)
    service_s: float = 0.0
    #: of those steps, the rounds: the ones after its first token's (decode steps, speculative verification
    #: rounds; a fast-forwarded stretch of k steps is k rounds), their seconds and the tokens they emitted (mean
    #: tokens per round: ``n·A + 1`` in seed 004's notation), kept alike
    service_rounds: int = 0
    round_service_s: float = 0.0
    round_tokens: int = 0
    first_scheduled_time_s: float | None = None
    finish_time_s: float | None = None
    finish_reason: str | None = None
    # token emission record: ranges [start, stop) of step indices into ``timeline``
    timeline: TokenTimeline | None = field(default=None, repr=False)
    token_step_ranges: list[list[int]] = field(default_factory=list, repr=False)
    #: a speculative round's tokens after its first, which share its step (its emission time): ``[range, offset,
    #: count]`` for a round whose first token is token ``offset`` of ``token_step_ranges[range]`` and which emitted
    #: ``count`` more, in order. Its tokens are thus not a range each
    round_extras: list[list[int]] = field(default_factory=list, repr=False)
    # per-policy scratch space (e.g. attained service, queue level); policies own their keys
    policy_state: dict[str, float] = field(default_factory=dict, repr=False)
    #: how many tokens this request will emit: its true length capped by ``max_output_tokens``
    target_output_tokens: int = field(init=False, repr=False)

    def __init__(
        self,
        request_id: object,
        prompt_tokens: object,
        max_output_tokens: object,
        arrival_time_s: object,
        output_tokens: object = None,
        prompt_text: object = None,
        prompt_token_ids: object = None,
        priority: object = 0,
        tier: object = "default",
        ttft_slo_s: object = None,
        tpot_slo_s: object = None,
        e2e_slo_s: object = None,
        urgency: object = None,
        predicted_output: object = None,
        urgency_true: object = None,
        ready_time_s: object = None,
        client: object = None,
        accept_lengths: object = None,
        prefix_hashes: object = None,
        state: RequestState = RequestState.WAITING,
        num_computed_tokens: int = 0,
        num_output_tokens: int = 0,
        num_preemptions: int = 0,
        num_cached_tokens: int = 0,
        notify_tokens_at: int = 0,
        service_s: float = 0.0,
        service_rounds: int = 0,
        round_service_s: float = 0.0,
        round_tokens: int = 0,
        first_scheduled_time_s: float | None = None,
        finish_time_s: float | None = None,
        finish_reason: str | None = None,
        timeline: TokenTimeline | None = None,
        token_step_ranges: list[list[int]] | None = None,
        round_extras: list[list[int]] | None = None,
        policy_state: dict[str, float] | None = None,
    ) -> None:
        # Every static field is checked before it is stored: compiled (``semsched.compiled``), ``Request`` is a
        # native class whose attributes hold only their declared types, so a value of another type would fail
        # at the assignment with a TypeError that names no limit. (The dataclass supplies the rest: fields,
        # ``dataclasses.replace``, the repr.)
        self.request_id = _checked_str("request_id", request_id)
        self.prompt_tokens = _checked_int("prompt_tokens", prompt_tokens, minimum=1)
        self.max_output_tokens = _checked_int("max_output_tokens", max_output_tokens, minimum=1)
        arrival = _checked_real("arrival_time_s", arrival_time_s)
        if not math.isfinite(arrival) or arrival < 0:
            raise InvalidRequestError(f"arrival_time_s: must be a finite number >= 0 (got {arrival_time_s!r})")
        self.arrival_time_s = arrival
        self.output_tokens = (None if output_tokens is None
                              else _checked_int("output_tokens", output_tokens, minimum=1))
        self.prompt_text = None if prompt_text is None else _checked_str("prompt_text", prompt_text)
        self.prompt_token_ids = (None if prompt_token_ids is None
                                 else _checked_ints("prompt_token_ids", prompt_token_ids))
        if isinstance(priority, bool) or not isinstance(priority, int):
            raise InvalidRequestError(f"priority: must be an integer (got {priority!r})")
        self.priority = priority
        self.tier = _checked_str("tier", tier)
        self.ttft_slo_s = _checked_slo("ttft_slo_s", ttft_slo_s)
        self.tpot_slo_s = _checked_slo("tpot_slo_s", tpot_slo_s)
        self.e2e_slo_s = _checked_slo("e2e_slo_s", e2e_slo_s)
        self.urgency = _checked_level("urgency", urgency)
        if predicted_output is not None and not isinstance(predicted_output, LengthDistribution):
            raise InvalidRequestError(
                f"predicted_output: must be a LengthDistribution or None (got {predicted_output!r:.80})")
        self.predicted_output = predicted_output
        self.urgency_true = _checked_level("urgency_true", urgency_true)
        ready = None if ready_time_s is None else _checked_real("ready_time_s", ready_time_s)
        if ready is not None and (not math.isfinite(ready) or ready < arrival):
            raise InvalidRequestError(
                f"ready_time_s: must be a finite number >= arrival_time_s ({arrival}) (got {ready_time_s!r})"
            )
        self.ready_time_s = ready
        if client is not None and (not isinstance(client, str) or not 1 <= len(client) <= MAX_CLIENT_CHARS):
            raise InvalidRequestError(
                f"client: must be a non-empty string of at most {MAX_CLIENT_CHARS} characters or None "
                f"(got {client!r:.80})"
            )
        self.client = client
        self.accept_lengths = None if accept_lengths is None else _checked_accept_lengths(accept_lengths)
        self.prefix_hashes = None if prefix_hashes is None else _checked_prefix_hashes(prefix_hashes)
        self.state = state
        self.num_computed_tokens = num_computed_tokens
        self.num_output_tokens = num_output_tokens
        self.num_preemptions = num_preemptions
        self.num_cached_tokens = num_cached_tokens
        self.notify_tokens_at = notify_tokens_at
        self.service_s = service_s
        self.service_rounds = service_rounds
        self.round_service_s = round_service_s
        self.round_tokens = round_tokens
        self.first_scheduled_time_s = first_scheduled_time_s
        self.finish_time_s = finish_time_s
        self.finish_reason = finish_reason
        self.timeline = timeline
        self.token_step_ranges = [] if token_step_ranges is None else token_step_ranges
        self.round_extras = [] if round_extras is None else round_extras
        self.policy_state = {} if policy_state is None else policy_state
        # read on the hot path every step, so computed once (the fields it derives from never change)
        self.target_output_tokens = self._target_output_tokens()

    def __reduce__(self) -> tuple[object, ...]:
        """Pickled as its constructor's four required fields and then every field's value (a compiled, native
        ``Request`` is created through its constructor, which needs those four)."""
        return (Request, (self.request_id, self.prompt_tokens, self.max_output_tokens, self.arrival_time_s),
                tuple(getattr(self, name) for name in _STATE_FIELDS))

    def __setstate__(self, state: tuple[object, ...]) -> None:
        for name, value in zip(_STATE_FIELDS, state, strict=True):
            setattr(self, name, value)

    # ---- sizes -------------------------------------------------------------------------------------------
    def _target_output_tokens(self) -> int:
        if self.output_tokens is None:
            return self.max_output_tokens
        return min(self.output_tokens, self.max_output_tokens)

    @property
    def num_tokens(self) -> int:
        """Prompt plus tokens generated so far: what the KV cache must eventually hold."""
        return self.prompt_tokens + self.num_output_tokens

    @property
    def num_uncomputed_tokens(self) -> int:
        return self.num_tokens - self.num_computed_tokens

    @property
    def remaining_output_tokens(self) -> int:
        """True remaining output (oracle; simulation only)."""
        return self.target_output_tokens - self.num_output_tokens

    @property
    def in_prefill(self) -> bool:
        """Whether the next step would process more than one token (prompt, or recompute after preemption)."""
        return self.num_uncomputed_tokens > 1

    def predicted_output_tokens(self) -> float:
        """Mean predicted total output length; the true length when no prediction was attached."""
        if self.predicted_output is not None:
            return self.predicted_output.mean
        return float(self.target_output_tokens)

    def predicted_remaining_tokens(self) -> float:
        """Expected remaining output given what was generated, from the prediction (or the truth)."""
        if self.predicted_output is not None:
            return self.predicted_output.expected_remaining(self.num_output_tokens)
        return float(self.remaining_output_tokens)

    # ---- deadlines ---------------------------------------------------------------------------------------
    @property
    def ttft_deadline_s(self) -> float:
        return self.arrival_time_s + self.ttft_slo_s if self.ttft_slo_s is not None else math.inf

    @property
    def e2e_deadline_s(self) -> float:
        return self.arrival_time_s + self.e2e_slo_s if self.e2e_slo_s is not None else math.inf

    # ---- emitted tokens ----------------------------------------------------------------------------------
    def token_times_s(self) -> np.ndarray:
        """Emission time of every output token so far, in order: each range's steps, a speculative round's extra
        tokens (``round_extras``) repeating its first token's time. Many ranges are gathered with one index array
        rather than a slice each."""
        ranges = self.token_step_ranges
        if self.timeline is None or not ranges:
            return np.empty(0, dtype=np.float64)
        times, extras = self.timeline.as_array(), self.round_extras
        if len(ranges) < _GATHER_FROM_RANGES and not extras:
            return np.concatenate([times[a:b] for a, b in ranges])
        starts, lengths = _starts_and_lengths(ranges)
        before = np.cumsum(lengths) - lengths  # the tokens of the ranges before each range
        # the index of each range's token: its range's start plus its place in the range
        firsts: np.ndarray = times[np.arange(int(lengths.sum())) + np.repeat(starts - before, lengths)]
        if not extras:
            return firsts
        table = np.fromiter(itertools.chain.from_iterable(extras), dtype=np.int64, count=3 * len(extras))
        copies = np.ones(firsts.size, dtype=np.int64)
        copies[before[table[0::3]] + table[1::3]] += table[2::3]
        repeated: np.ndarray = np.repeat(firsts, copies)
        return repeated

    def num_recorded_tokens(self) -> int:
        """Tokens recorded so far (counted from ``token_step_ranges`` and ``round_extras``, their times not
        gathered)."""
        ranges = self.token_step_ranges
        extra = sum(entry[2] for entry in self.round_extras)
        if len(ranges) < _GATHER_FROM_RANGES:
            return sum(stop - start for start, stop in ranges) + extra
        return int(_starts_and_lengths(ranges)[1].sum()) + extra

    @property
    def first_token_time_s(self) -> float | None:
        if self.timeline is None or not self.token_step_ranges:
            return None
        return float(self.timeline.as_array()[self.token_step_ranges[0][0]])

    def record_tokens(self, timeline: TokenTimeline, first_step: int, count: int) -> None:
        """Record ``count`` tokens emitted at consecutive steps starting at ``first_step``."""
        emission.record_tokens(self, timeline, first_step, count)

    def record_round(self, timeline: TokenTimeline, step: int, count: int) -> None:
        """Record ``count`` tokens emitted together at ``step`` (a speculative round), in one call: the token times
        of ``count`` calls of ``record_tokens(timeline, step, 1)`` (the first token in ``token_step_ranges``, the
        others as one ``round_extras`` entry)."""
        emission.record_round(self, timeline, step, count)


#: every field of a request, in order (what pickling keeps)
_STATE_FIELDS = tuple(f.name for f in fields(Request))


def _starts_and_lengths(ranges: list[list[int]]) -> tuple[np.ndarray, np.ndarray]:
    """The first step and the length of each of ``ranges`` (``[start, stop)`` each), as arrays read in one pass."""
    bounds = np.fromiter(itertools.chain.from_iterable(ranges), dtype=np.int64, count=2 * len(ranges))
    starts = bounds[0::2]
    return starts, bounds[1::2] - starts


def _checked_accept_lengths(values: object) -> tuple[int, ...]:
    """A non-empty tuple of integers >= 1 (tokens per verification round), or an error naming the field."""
    if isinstance(values, str | bytes) or not hasattr(values, "__iter__"):
        raise InvalidRequestError(f"accept_lengths: must be a sequence of integers >= 1 (got {values!r:.80})")
    lengths = tuple(values)
    if not lengths:
        raise InvalidRequestError("accept_lengths: must hold at least one round (got an empty sequence)")
    for k, value in enumerate(lengths):
        if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < 1:
            raise InvalidRequestError(f"accept_lengths[{k}]: must be an integer >= 1 (got {value!r})")
    return tuple(int(v) for v in lengths)


def _checked_prefix_hashes(values: object) -> tuple[int, ...]:
    """A tuple of integers (block hashes), or an error naming the field."""
    return _checked_ints("prefix_hashes", values)


def _checked_int(name: str, value: object, *, minimum: int) -> int:
    """``value`` as a Python int >= ``minimum`` (a NumPy integer is taken), or an error naming the field."""
    if isinstance(value, bool) or not isinstance(value, int | np.integer):
        raise InvalidRequestError(f"{name}: must be an integer (got {value!r})")
    if value < minimum:
        raise InvalidRequestError(f"{name}: must be >= {minimum} (got {value})")
    return int(value)


def _checked_real(name: str, value: object) -> float:
    """``value`` as a Python float (an int or a NumPy number is taken), or an error naming the field."""
    if isinstance(value, bool) or not isinstance(value, int | float | np.integer | np.floating):
        raise InvalidRequestError(f"{name}: must be a number (got {value!r:.80})")
    return float(value)


def _checked_slo(name: str, value: object) -> float | None:
    """A finite number of seconds > 0, or None."""
    if value is None:
        return None
    seconds = _checked_real(name, value)
    if not math.isfinite(seconds) or seconds <= 0:
        raise InvalidRequestError(f"{name}: must be a finite number > 0 (got {value!r})")
    return seconds


def _checked_level(name: str, value: object) -> int | None:
    """An urgency level: an integer >= 0, or None."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise InvalidRequestError(f"{name}: must be an integer >= 0 or None (got {value!r})")
    return value


def _checked_str(name: str, value: object) -> str:
    if not isinstance(value, str):
        raise InvalidRequestError(f"{name}: must be a string (got {value!r:.80})")
    return value


def _checked_ints(name: str, values: object) -> tuple[int, ...]:
    """A tuple of integers (token ids), or an error naming the field."""
    if isinstance(values, str | bytes) or not hasattr(values, "__iter__"):
        raise InvalidRequestError(f"{name}: must be a sequence of integers (got {values!r:.80})")
    items = tuple(values)
    if all(type(value) is int for value in items):
        return items
    for k, value in enumerate(items):
        if isinstance(value, bool) or not isinstance(value, int | np.integer):
            raise InvalidRequestError(f"{name}[{k}]: must be an integer (got {value!r:.80})")
    return tuple(int(v) for v in items)
