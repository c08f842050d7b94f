"""The :class:`Workload`: an immutable table of requests (when they arrive, how long they are, who sent them).

A workload is pure data. It is turned into fresh :class:`~semsched.core.request.Request` objects with
:meth:`Workload.to_requests` each time a simulation or a benchmark needs them, so one workload can drive many
runs without any state leaking between them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from semsched.core.errors import SemschedError
from semsched.core.request import MAX_CLIENT_CHARS, LengthDistribution, Request
from semsched.core.tiers import UNTIERED, TierError, TierSpec, tier_index

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]


NO_URGENCY = -1
"""An ``urgency`` (or ``urgency_true``) entry for a request without an urgency level: its request's is ``None``
(a workload where only some requests carry a level, e.g. ``production-mix``)."""


class WorkloadError(SemschedError):
    """A workload is malformed or cannot be built; the message names the field and the bad index or value."""


@dataclass(frozen=True, eq=False)
class Workload:
    """Requests as parallel arrays, one entry per request, in arrival order.

    Promises (checked on construction, :class:`WorkloadError` otherwise): all arrays have the same length;
    ``arrival_time_s`` is finite, >= 0 and non-decreasing; ``prompt_tokens`` and ``output_tokens`` are
    integers >= 1; ``priority`` is an integer (lower = more important, as in vLLM); every ``tier`` label names
    a :class:`TierSpec` in ``tiers``, which holds the SLOs of each tier. Arrays are stored read-only.

    Optional per-request data, ``None`` when the workload has none: ``urgency`` (the level the scheduler
    believes, 0 = most urgent; possibly a prediction), ``urgency_true`` (the true level beside a believed one;
    only with ``urgency``), both integers >= 0, or :data:`NO_URGENCY` (-1) for a request without a level;
    ``predicted_length`` (a point prediction of the output tokens,
    >= 1); ``prompt_text`` (the prompt itself); ``client`` (who sent each request, a non-empty string of at most
    :data:`~semsched.core.request.MAX_CLIENT_CHARS` characters; per-client fairness, ``vtc``); ``accept_lengths``
    (speculative decoding, seed 004: the tokens each verification round of a logged run emitted, per request,
    None for a request without a log); ``prefix_hashes`` (prefix caching: each request's chained block hashes,
    :mod:`semsched.core.prefix`, for blocks of ``prefix_block_size`` tokens, the engine's block size they were
    computed for; None for a request whose tokens are unknown).
    """

    name: str
    arrival_time_s: FloatArray
    prompt_tokens: IntArray
    output_tokens: IntArray
    priority: IntArray
    tier: tuple[str, ...]
    tiers: tuple[TierSpec, ...] = field(default=(UNTIERED,))
    urgency: IntArray | None = None
    urgency_true: IntArray | None = None
    predicted_length: IntArray | None = None
    prompt_text: tuple[str, ...] | None = None
    client: tuple[str, ...] | None = None
    accept_lengths: tuple[tuple[int, ...] | None, ...] | None = None
    prefix_hashes: tuple[tuple[int, ...] | None, ...] | None = None
    prefix_block_size: int = 16

    def __post_init__(self) -> None:
        object.__setattr__(self, "arrival_time_s", _frozen_array("arrival_time_s", self.arrival_time_s, float))
        for name in ("prompt_tokens", "output_tokens", "priority"):
            object.__setattr__(self, name, _frozen_array(name, getattr(self, name), int))
        object.__setattr__(self, "tier", tuple(self.tier))
        object.__setattr__(self, "tiers", tuple(self.tiers))
        self._check_lengths()
        self._check_arrivals()
        _check_at_least("prompt_tokens", self.prompt_tokens, 1)
        _check_at_least("output_tokens", self.output_tokens, 1)
        self._check_tiers()
        self._check_optional()

    # ---- construction helpers ----------------------------------------------------------------------------
    @classmethod
    def untiered(
        cls,
        name: str,
        arrival_time_s: npt.ArrayLike,
        prompt_tokens: npt.ArrayLike,
        output_tokens: npt.ArrayLike,
    ) -> Workload:
        """A workload whose requests all belong to the SLO-less ``"default"`` tier with priority 0."""
        n = len(np.atleast_1d(np.asarray(arrival_time_s)))
        return cls(
            name=name,
            arrival_time_s=np.asarray(arrival_time_s, dtype=np.float64),
            prompt_tokens=np.asarray(prompt_tokens, dtype=np.int64),
            output_tokens=np.asarray(output_tokens, dtype=np.int64),
            priority=np.zeros(n, dtype=np.int64),
            tier=(UNTIERED.name,) * n,
            tiers=(UNTIERED,),
        )

    # ---- validation --------------------------------------------------------------------------------------
    def _check_lengths(self) -> None:
        sizes = {
            "prompt_tokens": self.prompt_tokens.shape[0],
            "output_tokens": self.output_tokens.shape[0],
            "priority": self.priority.shape[0],
            "tier": len(self.tier),
        }
        for name, size in sizes.items():
            self._check_size(name, size)

    def _check_optional(self) -> None:
        minimum = {"urgency": NO_URGENCY, "urgency_true": NO_URGENCY, "predicted_length": 1}
        for name, least in minimum.items():
            values = getattr(self, name)
            if values is not None:
                array = np.asarray(_frozen_array(name, values, int), dtype=np.int64)
                self._check_size(name, array.shape[0])
                _check_at_least(name, array, least, " (-1: no urgency level)" if least == NO_URGENCY else "")
                object.__setattr__(self, name, array)
        if self.urgency_true is not None and self.urgency is None:
            raise WorkloadError("urgency_true: given without urgency (the believed level it stands beside)")
        if self.prompt_text is not None:
            texts = tuple(self.prompt_text)
            self._check_size("prompt_text", len(texts))
            for i, text in enumerate(texts):
                if not isinstance(text, str):
                    raise WorkloadError(f"prompt_text[{i}]: must be a string (got {type(text).__name__})")
            object.__setattr__(self, "prompt_text", texts)
        if self.client is not None:
            object.__setattr__(self, "client", self._checked_clients(tuple(self.client)))
        if self.accept_lengths is not None:
            object.__setattr__(self, "accept_lengths", self._checked_accept_lengths(tuple(self.accept_lengths)))
        if self.prefix_hashes is not None:
            object.__setattr__(self, "prefix_hashes", self._checked_prefix_hashes(tuple(self.prefix_hashes)))
        size = self.prefix_block_size
        if isinstance(size, bool) or not isinstance(size, int) or size < 1:
            raise WorkloadError(f"prefix_block_size: must be an integer >= 1 (got {size!r})")

    def _checked_prefix_hashes(
        self, values: tuple[Sequence[int] | None, ...]
    ) -> tuple[tuple[int, ...] | None, ...]:
        self._check_size("prefix_hashes", len(values))
        checked: list[tuple[int, ...] | None] = []
        for i, hashes in enumerate(values):
            if hashes is None:
                checked.append(None)
                continue
            row = tuple(hashes)
            for k, value in enumerate(row):
                if isinstance(value, bool) or not isinstance(value, int | np.integer):
                    raise WorkloadError(f"prefix_hashes[{i}][{k}]: must be an integer (got {value!r:.80})")
            checked.append(tuple(int(v) for v in row))
        return tuple(checked)

    def _checked_accept_lengths(
        self, logs: tuple[Sequence[int] | None, ...]
    ) -> tuple[tuple[int, ...] | None, ...]:
        self._check_size("accept_lengths", len(logs))
        checked: list[tuple[int, ...] | None] = []
        for i, rounds in enumerate(logs):
            if rounds is None:
                checked.append(None)
                continue
            values = tuple(rounds)
            if not values:
                raise WorkloadError(f"accept_lengths[{i}]: must hold at least one round (got none)")
            for k, value in enumerate(values):
                if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < 1:
                    raise WorkloadError(f"accept_lengths[{i}][{k}]: must be an integer >= 1 (got {value!r})")
            checked.append(tuple(int(v) for v in values))
        return tuple(checked)

    def _checked_clients(self, clients: tuple[str, ...]) -> tuple[str, ...]:
        self._check_size("client", len(clients))
        for i, client in enumerate(clients):
            if not isinstance(client, str) or not 1 <= len(client) <= MAX_CLIENT_CHARS:
                raise WorkloadError(
                    f"client[{i}]: must be a non-empty string of at most {MAX_CLIENT_CHARS} characters "
                    f"(got {client!r:.80})"
                )
        return clients

    def _check_size(self, name: str, size: int) -> None:
        if size != len(self):
            raise WorkloadError(f"{name}: has {size} entries but arrival_time_s has {len(self)}")

    def _check_arrivals(self) -> None:
        times = self.arrival_time_s
        bad = np.flatnonzero(~np.isfinite(times) | (times < 0))
        if bad.size:
            i = int(bad[0])
            raise WorkloadError(f"arrival_time_s[{i}]: must be finite and >= 0 (got {times[i]!r})")
        drops = np.flatnonzero(np.diff(times) < 0)
        if drops.size:
            i = int(drops[0]) + 1
            raise WorkloadError(
                f"arrival_time_s[{i}]: must be non-decreasing (got {times[i]!r} after {times[i - 1]!r})"
            )

    def _check_tiers(self) -> None:
        try:
            known = tier_index(self.tiers)
        except TierError as exc:
            raise WorkloadError(str(exc)) from exc
        for i, label in enumerate(self.tier):
            if label not in known:
                raise WorkloadError(f"tier[{i}]: {label!r} is not in the tier table {sorted(known)}")

    # ---- summaries ---------------------------------------------------------------------------------------
    def __len__(self) -> int:
        return int(self.arrival_time_s.shape[0])

    def duration_s(self) -> float:
        """Time from the first arrival to the last (0 for fewer than two requests)."""
        if len(self) < 2:
            return 0.0
        return float(self.arrival_time_s[-1] - self.arrival_time_s[0])

    def mean_rate(self) -> float:
        """Requests per second: the inverse of the mean inter-arrival gap, ``(n - 1) / duration_s``.

        Raises :class:`WorkloadError` when fewer than two requests or all arrive at the same instant.
        """
        duration_s = self.duration_s()
        if duration_s <= 0:
            raise WorkloadError(
                f"mean_rate: undefined for {len(self)} request(s) spanning {duration_s} s; "
                "need at least two distinct arrival times"
            )
        return (len(self) - 1) / duration_s

    # ---- conversion --------------------------------------------------------------------------------------
    def to_requests(self, max_output_tokens: int | None = None) -> list[Request]:
        """Build fresh :class:`Request` objects, ids ``"0"``, ``"1"``, ... in arrival order.

        Each request gets its tier's SLOs, its true ``output_tokens`` and the optional data the workload holds
        (``urgency``, ``urgency_true``, ``predicted_length`` as a point :class:`LengthDistribution`,
        ``prompt_text``, ``client``, ``accept_lengths``, ``prefix_hashes``). ``max_output_tokens`` caps every
        request (the engine stops there); by default each request's cap is its own true output length.
        """
        if max_output_tokens is not None and max_output_tokens < 1:
            raise WorkloadError(f"max_output_tokens: must be >= 1 or None (got {max_output_tokens})")
        specs = tier_index(self.tiers)
        return [self._request(i, specs[self.tier[i]], max_output_tokens) for i in range(len(self))]

    def _request(self, i: int, spec: TierSpec, max_output_tokens: int | None) -> Request:
        output_tokens = int(self.output_tokens[i])
        return Request(
            request_id=str(i),
            prompt_tokens=int(self.prompt_tokens[i]),
            max_output_tokens=output_tokens if max_output_tokens is None else max_output_tokens,
            arrival_time_s=float(self.arrival_time_s[i]),
            output_tokens=output_tokens,
            priority=int(self.priority[i]),
            tier=spec.name,
            ttft_slo_s=spec.ttft_slo_s,
            tpot_slo_s=spec.tpot_slo_s,
            e2e_slo_s=spec.e2e_slo_s,
            urgency=_level(self.urgency, i),
            urgency_true=_level(self.urgency_true, i),
            predicted_output=None if self.predicted_length is None else LengthDistribution.point(
                int(self.predicted_length[i])
            ),
            prompt_text=None if self.prompt_text is None else self.prompt_text[i],
            client=None if self.client is None else self.client[i],
            accept_lengths=None if self.accept_lengths is None else self.accept_lengths[i],
            prefix_hashes=None if self.prefix_hashes is None else self.prefix_hashes[i],
        )

    # ---- derived workloads -------------------------------------------------------------------------------
    def head(self, n: int) -> Workload:
        """The first ``n`` requests (all of them if there are fewer)."""
        if n < 0:
            raise WorkloadError(f"head: n must be >= 0 (got {n})")
        return self._take(np.arange(min(n, len(self))))

    def slice_time(self, start_s: float, end_s: float, *, rebase: bool = True) -> Workload:
        """Requests arriving in ``[start_s, end_s)``; ``rebase`` shifts their times by ``-start_s``."""
        if not start_s <= end_s:
            raise WorkloadError(f"slice_time: start_s must be <= end_s (got {start_s} and {end_s})")
        times = self.arrival_time_s
        picked = self._take(np.flatnonzero((times >= start_s) & (times < end_s)))
        if not rebase:
            return picked
        return picked.with_arrival_times(picked.arrival_time_s - start_s)

    def with_tiers(
        self,
        tiers: Sequence[TierSpec],
        *,
        tier: Sequence[str] | None = None,
        priority: npt.ArrayLike | None = None,
    ) -> Workload:
        """A copy with a new tier table, and optionally new per-request tier labels and priorities."""
        return dataclasses.replace(
            self,
            tiers=tuple(tiers),
            tier=self.tier if tier is None else tuple(tier),
            priority=self.priority if priority is None else np.asarray(priority, dtype=np.int64),
        )

    def with_arrival_times(self, arrival_time_s: npt.ArrayLike) -> Workload:
        """A copy with new arrival times (one per request); everything else unchanged."""
        return dataclasses.replace(self, arrival_time_s=np.asarray(arrival_time_s, dtype=np.float64))

    def with_lengths(self, prompt_tokens: npt.ArrayLike, output_tokens: npt.ArrayLike) -> Workload:
        """A copy with new prompt and output lengths (one per request); everything else unchanged."""
        return dataclasses.replace(
            self,
            prompt_tokens=np.asarray(prompt_tokens, dtype=np.int64),
            output_tokens=np.asarray(output_tokens, dtype=np.int64),
        )

    def with_urgency(self, urgency: npt.ArrayLike, urgency_true: npt.ArrayLike | None = None) -> Workload:
        """A copy with believed urgency levels (0 = most urgent), and the true levels when ``urgency`` is a
        prediction; everything else unchanged."""
        return dataclasses.replace(
            self,
            urgency=np.asarray(urgency),
            urgency_true=None if urgency_true is None else np.asarray(urgency_true),
        )

    def with_predicted_length(self, predicted_length: npt.ArrayLike | None) -> Workload:
        """A copy with a point prediction of each request's output tokens (None: no prediction)."""
        values = None if predicted_length is None else np.asarray(predicted_length)
        return dataclasses.replace(self, predicted_length=values)

    def with_prompt_text(self, prompt_text: Sequence[str] | None) -> Workload:
        """A copy with each request's prompt text (None: no text)."""
        return dataclasses.replace(self, prompt_text=None if prompt_text is None else tuple(prompt_text))

    def with_client(self, client: Sequence[str] | None) -> Workload:
        """A copy with who sent each request (None: no clients)."""
        return dataclasses.replace(self, client=None if client is None else tuple(client))

    def with_accept_lengths(self, accept_lengths: Sequence[Sequence[int] | None] | None) -> Workload:
        """A copy with each request's logged speculative-decoding rounds (tokens per round; None for a request
        without a log, or for none at all)."""
        values = None if accept_lengths is None else tuple(
            None if rounds is None else tuple(int(v) for v in rounds) for rounds in accept_lengths
        )
        return dataclasses.replace(self, accept_lengths=values)

    def with_prefix_hashes(
        self, prefix_hashes: Sequence[Sequence[int] | None] | None, block_size: int = 16
    ) -> Workload:
        """A copy with each request's chained block hashes for ``block_size``-token blocks (None for a request
        whose tokens are unknown, or for none at all)."""
        values = None if prefix_hashes is None else tuple(
            None if hashes is None else tuple(hashes) for hashes in prefix_hashes
        )  # (checked, and made plain integers, by the copy's construction)
        return dataclasses.replace(self, prefix_hashes=values, prefix_block_size=block_size)

    def with_name(self, name: str) -> Workload:
        """A copy with a new name."""
        return dataclasses.replace(self, name=name)

    def _take(self, index: npt.NDArray[np.intp]) -> Workload:
        return dataclasses.replace(
            self,
            arrival_time_s=self.arrival_time_s[index],
            prompt_tokens=self.prompt_tokens[index],
            output_tokens=self.output_tokens[index],
            priority=self.priority[index],
            tier=tuple(self.tier[int(i)] for i in index),
            urgency=_taken(self.urgency, index),
            urgency_true=_taken(self.urgency_true, index),
            predicted_length=_taken(self.predicted_length, index),
            prompt_text=None if self.prompt_text is None else tuple(self.prompt_text[int(i)] for i in index),
            client=None if self.client is None else tuple(self.client[int(i)] for i in index),
            accept_lengths=None if self.accept_lengths is None else tuple(
                self.accept_lengths[int(i)] for i in index
            ),
            prefix_hashes=None if self.prefix_hashes is None else tuple(self.prefix_hashes[int(i)] for i in index),
        )


def _frozen_array(name: str, values: object, kind: type) -> npt.NDArray[np.generic]:
    """Validate dtype and shape, and return a read-only 1-D copy (float64 or int64)."""
    array = np.array(values, copy=True)
    if array.ndim != 1:
        raise WorkloadError(f"{name}: must be a 1-D array (got shape {array.shape})")
    if kind is int:
        if array.size and not np.issubdtype(array.dtype, np.integer):
            raise WorkloadError(f"{name}: must hold integers (got dtype {array.dtype})")
        array = array.astype(np.int64)
    else:
        if array.size and not np.issubdtype(array.dtype, np.number):
            raise WorkloadError(f"{name}: must hold numbers (got dtype {array.dtype})")
        array = array.astype(np.float64)
    array.flags.writeable = False
    return array


def _check_at_least(name: str, values: IntArray, minimum: int, note: str = "") -> None:
    bad = np.flatnonzero(values < minimum)
    if bad.size:
        i = int(bad[0])
        raise WorkloadError(f"{name}[{i}]: must be >= {minimum}{note} (got {int(values[i])})")


def _level(values: IntArray | None, i: int) -> int | None:
    """An urgency level, ``None`` where there is none (no array, or :data:`NO_URGENCY`)."""
    if values is None or values[i] == NO_URGENCY:
        return None
    return int(values[i])


def _taken(values: IntArray | None, index: npt.NDArray[np.intp]) -> IntArray | None:
    return None if values is None else values[index]
