"""The policy contract: the small set of hooks through which a scheduling policy speaks.

The same hooks are called by :class:`semsched.core.scheduler.Scheduler` (simulation) and by the vLLM adapter,
so a policy never sees which engine drives it. Every hook has a default that reproduces vLLM's FCFS
behaviour; a policy overrides only what it changes.

Hook summary (all times are arguments; a policy never reads a clock):

=====================  ==============================================================================
``waiting_key``        order of the waiting queue (smallest first); computed when a request is enqueued, and
                       again for every waiting request each ``rekey_interval_s`` if the policy sets it
``waiting_order``      optional: the waiting requests in admission order, made afresh at each step (replaces
                       the core's keyed queue for a policy whose order is a per-step plan)
``aging_class``        optional, with ``rekey_interval_s``: classes whose order a re-key never changes (aging
                       at one rate per tier), so a re-key keys one request per class, not the whole queue
``waiting_key_until``  optional, with ``rekey_interval_s``: until when a waiting request's key holds (keys that
                       change at known times: starvation, a deadline), so a re-key keys only those due
``admit``              accept or reject an arriving request (explicit rejection, never a silent drop)
``victims_for``        which running requests a waiting request may displace when it does not fit
``victim_key``         victim order under KV-memory pressure (largest key is preempted first)
``preemption_mode``    recompute or swap for a given victim
``swap_tokens``        how many computed tokens a swapped victim saves (the rest are recomputed; seed 000 eq. 4-6)
``running_order``      which running requests get this step's token budget, in what order (default: all, FIFO)
``exclusive_class``    optional class-exclusive batching: only the most important class present runs
``step_budget``        per-step token budget and sequence cap (``None``: the engine's configuration)
``reservations``       GPU blocks kept for important classes (seed 003), asked once when a scheduler is built
``on_*``               callbacks on arrival, emitted tokens, preemption and finish; ``on_leave`` when a request
                       moves to another instance with its KV (PD disaggregation's hand-off), not ended
``on_step``            after each executed step: its composition and how long it really took (an estimator's
                       online correction, seed 001 §4.1); called only for a policy that overrides it
=====================  ==============================================================================
"""

from __future__ import annotations

import dataclasses
import math
import typing
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Literal, NamedTuple, Protocol

from semsched.core.kv import Reservation
from semsched.core.plan import Admission, PreemptionMode
from semsched.core.request import Request
from semsched.core.tiers import TierSpec

SortKey = tuple[float, ...]


class StepBudget(NamedTuple):
    """A step's limits (a named tuple: a policy may make one at every step, and a frozen dataclass's generated
    ``__init__`` costs twice a named tuple's)."""

    max_num_batched_tokens: int
    max_num_seqs: int


class SchedulerView(Protocol):
    """Read-only state a policy may consult."""

    @property
    def num_waiting(self) -> int: ...

    @property
    def num_running(self) -> int: ...

    @property
    def num_free_gpu_blocks(self) -> int: ...

    @property
    def num_free_cpu_blocks(self) -> int: ...

    @property
    def block_size(self) -> int: ...

    @property
    def budget(self) -> StepBudget: ...

    def running_requests(self) -> Sequence[Request]: ...

    def available_blocks(self, request: Request, *, admission: bool) -> int:
        """Free GPU blocks ``request`` may take now: less the blocks reserved for more important classes and, to
        be admitted (``admission``), less the engine's admission watermark."""
        ...


@dataclass(frozen=True)
class PolicyConfig:
    """Base of every policy's config dataclass (frozen; parsed from ``name:key=value,...`` specs).

    Fields annotated with ``Literal[...]`` are checked on construction; the error names the field and the
    allowed values.
    """

    def __post_init__(self) -> None:
        hints = typing.get_type_hints(type(self))
        for item in dataclasses.fields(self):
            allowed = typing.get_args(hints[item.name]) if typing.get_origin(hints[item.name]) is Literal else ()
            value = getattr(self, item.name)
            if allowed and value not in allowed:
                choices = " or ".join(repr(a) for a in allowed)
                raise ValueError(f"{item.name} must be {choices}, got {value!r}")


def key_holds_before(threshold_s: float) -> float:
    """For :meth:`Policy.waiting_key_until`: a time a few float steps before ``threshold_s``, the instant a
    condition such as ``now_s - entered_s >= wait_s`` turns (``entered_s + wait_s`` rounds either way, the
    subtraction too), so that the answer is never late; ``math.inf`` stays."""
    return threshold_s - 4.0 * math.ulp(threshold_s) if math.isfinite(threshold_s) else threshold_s


def describes_waiting_keys(policy: Policy, hook: str) -> bool:
    """Whether a queue may rely on what ``hook`` (``aging_class`` or ``waiting_key_until``) says of ``policy``'s
    waiting keys: the policy uses it, and it was written with the ``waiting_key`` the policy has (defined by the
    same class or a subclass of it). A subclass that redefines ``waiting_key`` alone is re-keyed in full, not
    ordered by what its parent says of another key."""
    if not policy.uses_hook(hook):
        return False
    mro = type(policy).__mro__
    defines_hook = next(cls for cls in mro if hook in vars(cls))
    defines_key = next(cls for cls in mro if "waiting_key" in vars(cls))
    return issubclass(defines_hook, defines_key)


def next_rekey_s(now_s: float, interval_s: float) -> float:
    """When the waiting queue is next re-keyed after a re-key at ``now_s``: the next multiple of ``interval_s``.
    A fixed grid rather than ``now_s + interval_s``, so the re-key times do not depend on which instants the
    scheduler happened to be called at (the simulator's fast-forward skips calls while nothing waits)."""
    return (math.floor(now_s / interval_s) + 1) * interval_s


class Policy:
    """Base class: vLLM's FCFS behaviour. Subclasses live one per file in :mod:`semsched.policies`.

    ``stable_between_events``: the policy promises that, while no request arrives, finishes or is preempted
    and no KV block is exhausted, its decisions for a decode-only batch do not change from step to step
    (no time- or progress-dependent reordering that would admit or preempt anything). The simulator's
    fast-forward mode relies on it; leave it False when unsure. It is read afresh at each event, so a subclass
    may make it a property whose answer changes between events (``srpt`` does, with predicted lengths).
    """

    name: ClassVar[str] = "base"
    config_cls: ClassVar[type[PolicyConfig]] = PolicyConfig
    stable_between_events: ClassVar[bool] = False
    #: re-key every waiting request at most this often (time-dependent order: aging, Gittins refresh)
    rekey_interval_s: ClassVar[float | None] = None
    #: True when ``victim_key`` depends only on what never changes while a request runs (arrival, priority,
    #: deadline): the scheduler then re-sorts its running list only after admissions
    static_victim_key: ClassVar[bool] = False
    #: with ``static_victim_key``: a count the policy raises when a running request's ``victim_key`` changes after
    #: all, at a moment it knows (``ltr``: a promotion's quantum spent); schedulers re-sort their running list
    #: when it moved since their last sort
    victim_key_changes: int = 0
    #: True when the policy ranks by attained service: the scheduler then charges each request's
    #: ``Request.service_s`` the seconds of every step in which it emitted tokens (in compiled code, before the
    #: step's ``on_tokens``), so the policy needs no per-token hook to keep it
    charges_service: ClassVar[bool] = False
    #: True when ``running_order`` only orders: it returns every running request and changes nothing in the
    #: policy, so an engine may skip it in a step where the order of the running requests cannot matter (the
    #: vLLM adapter's steady decode step, whose budget and KV blocks cover every running request)
    running_order_keeps_all: ClassVar[bool] = False
    #: True when ``waiting_order``'s order is fixed when it is made: it gives the same requests in the same order
    #: whether or not those it gave were admitted meanwhile (it does not read their state as it goes), so an
    #: engine may read it across an admission loop that tells the policy nothing until it ends (the vLLM
    #: adapter's ``PlanQueue``, read within vLLM's ``schedule()``; else its queue is keyed by ``waiting_key``)
    waiting_order_fixed: ClassVar[bool] = False
    #: the deployment's tier table when the policy was given one (``tiered:tier_table=``): the vLLM adapter
    #: takes the SLOs of a request that names a tier from it (default: :data:`semsched.core.tiers.DEFAULT_TIERS`)
    tier_table: tuple[TierSpec, ...] | None = None
    #: swap every victim's KV to CPU instead of recomputing it: set by the registry for ``preemption=swap`` on a
    #: policy that has no ``preemption`` parameter of its own and leaves :meth:`preemption_mode` to this class
    swap_victims: bool = False

    def __init__(self, config: PolicyConfig | None = None) -> None:
        self.config = config if config is not None else self.config_cls()
        if not isinstance(self.config, self.config_cls):
            raise TypeError(f"{self.name}: config must be {self.config_cls.__name__}")

    def uses_hook(self, hook: str) -> bool:
        """Whether this policy needs ``hook`` (a method name above) called. Schedulers skip a hook it does not
        use on their hot paths (``on_tokens`` after every step, ``step_budget`` and ``running_order`` at each). By
        default: the hooks its class overrides; a policy whose config turns a mechanism off may say so here (the
        hook must then answer as the base one would: None for ``running_order``)."""
        return getattr(type(self), hook) is not getattr(Policy, hook)

    @property
    def uses_predicted_lengths(self) -> bool:
        """True when this policy's decisions read ``Request.predicted_output`` (its predicted output-length
        distribution); without one a request's true length stands in, which the CLI points out."""
        return False

    # ---- ordering ----------------------------------------------------------------------------------------
    def waiting_key(self, request: Request, now_s: float) -> SortKey:
        """Sort key of a waiting request; smaller runs first. Called at enqueue (and at each re-key)."""
        return (request.arrival_time_s,)

    def victim_key(self, request: Request) -> SortKey:
        """Under KV pressure the running request with the LARGEST key is preempted first."""
        return (request.arrival_time_s,)

    def waiting_order(self, view: SchedulerView, now_s: float) -> Iterable[Request] | None:
        """For a policy whose waiting order is a plan made afresh each step: the requests waiting in ``view``,
        in the order to admit them at ``now_s``. The core scheduler then tries them in this order instead of
        its keyed queue's (it calls no ``waiting_key`` and re-keys nothing, so a step costs what it admits, not
        a walk over the queue); it stops at the first that does not fit, so a lazy iterator suffices. A policy
        that overrides it returns an iterable every time. ``None`` (the default): the keyed queue's order."""
        return None

    def aging_class(self, request: Request) -> int:
        """For a policy with ``rekey_interval_s`` whose re-key never reorders some requests among themselves: the
        class of ``request``, such that at any one time ``waiting_key`` is non-decreasing in arrival time within
        a class, and a request's class and arrival never change while it waits (aging at one rate per tier).
        The core's queue then keys only each class's first request at a re-key, not every waiting one (the
        order it pops is the same). Used only where :meth:`uses_hook` says so, and only with the ``waiting_key``
        it was written for (:func:`describes_waiting_keys`); the base one is never asked."""
        raise NotImplementedError(f"{self.name}: no aging classes")

    def waiting_key_until(self, request: Request, now_s: float) -> float:
        """For a policy with ``rekey_interval_s`` whose waiting keys change only at times known in advance (a
        starvation threshold, a deadline): a time no later than the first after ``now_s`` at which
        :meth:`waiting_key` of ``request`` may answer otherwise than at ``now_s``, while nothing happens to the
        request and no other hook runs for it (``math.inf``: never). Asked right after ``waiting_key(request,
        now_s)``. A keyed queue then re-keys, at each re-key, only the requests whose time has come (the order
        is the same as re-keying all: an earlier answer costs a key, a later one changes the order). Used only
        where :meth:`uses_hook` says so, and only with the ``waiting_key`` it was written for
        (:func:`describes_waiting_keys`); the base one is never asked."""
        raise NotImplementedError(f"{self.name}: no waiting_key_until")

    # ---- admission and preemption ------------------------------------------------------------------------
    def admit(self, request: Request, view: SchedulerView, now_s: float) -> Admission:
        return Admission.accept()

    def victims_for(
        self, candidate: Request, running: Sequence[Request], view: SchedulerView, now_s: float
    ) -> Sequence[Request]:
        """Running requests that waiting ``candidate`` may displace when it does not fit, most expendable
        first. The scheduler preempts from the front only if the whole list would make room."""
        return ()

    def preemption_mode(self, request: Request, view: SchedulerView) -> PreemptionMode:
        return PreemptionMode.SWAP if self.swap_victims else PreemptionMode.RECOMPUTE

    def swap_tokens(self, request: Request, view: SchedulerView) -> int:
        """For a SWAP victim: how many of its computed tokens to save to CPU; the rest are freed and
        recomputed on resume (seed 000's optimal partial save). 0 means recompute everything."""
        return request.num_computed_tokens

    def running_order(
        self, running: Sequence[Request], view: SchedulerView, now_s: float
    ) -> Sequence[Request] | None:
        """Running requests to serve this step, in order; those left out keep their KV but compute nothing
        this step. ``None`` (the default) serves all of them in ascending :meth:`victim_key` order (most protected
        first; for FCFS, arrival order), which is also the order the vLLM adapter gives vLLM's running list."""
        return None

    def exclusive_class(self, request: Request) -> int | None:
        """If not None, only requests of the smallest class among unfinished ones run (seed 000 eq. 2)."""
        return None

    def step_budget(self, view: SchedulerView, now_s: float) -> StepBudget | None:
        return None

    def reservations(self, num_gpu_blocks: int) -> tuple[Reservation, ...]:
        """GPU blocks this policy keeps out of reach of less important classes (seed 003's capacity
        reservation), asked once when a scheduler with ``num_gpu_blocks`` blocks is built; they add to the
        engine's own ``SchedulerConfig.reservations``. A request never grows into, nor is admitted into,
        blocks reserved for classes more important than its own."""
        return ()

    # ---- callbacks ---------------------------------------------------------------------------------------
    def on_arrival(self, request: Request, now_s: float) -> None:
        return None

    def on_tokens(self, request: Request, num_tokens: int, now_s: float) -> None:
        """``request`` emitted ``num_tokens`` (already counted in ``num_output_tokens``) at ``now_s``. A policy
        for which calls would change nothing until a known count sets ``request.notify_tokens_at`` to it: the
        core scheduler skips the calls before (an engine may still make them)."""
        return None

    def on_preempt(self, request: Request, now_s: float) -> None:
        return None

    def on_finish(self, request: Request, now_s: float) -> None:
        return None

    def on_leave(self, request: Request) -> None:
        """``request`` left this scheduler without ending (handed off to a decode instance with its KV): a
        policy that keeps its own list of requests forgets it here."""
        return None

    def on_step(
        self,
        prefill: Sequence[tuple[int, int]],
        num_decode: int,
        decode_context_tokens: int,
        duration_s: float,
        now_s: float,
    ) -> None:
        """A step ran: ``prefill`` holds one ``(lq, lkv)`` pair per prefill chunk (tokens computed on top of tokens
        cached), ``num_decode`` decodes on ``decode_context_tokens`` summed context; it took ``duration_s`` of
        engine time and ended at ``now_s``. Called once per executed step, before the step's ``on_tokens``: by the
        core scheduler (a fast-forwarded stretch of k steps gives the same k calls, together, before its tokens)
        and by the vLLM adapter, which times the model's execution. Schedulers skip it unless :meth:`uses_hook`
        says the policy uses it."""
        return None

    def describe(self) -> dict[str, Any]:
        return {"policy": self.name, **dataclasses.asdict(self.config)}
