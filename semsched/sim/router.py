"""Routers: which instance of a cluster gets an arriving request.

A router sees each instance through an :class:`InstanceView` (queue depths, free KV blocks, running requests
at the arrival time), never the mutable scheduler: what a gateway in front of real servers could know, plus its
own dispatch accounting. Routers are objects with their own state (e.g. the round-robin cursor), never globals,
registered by name with :func:`register_router`::

    @register_router
    class MostFreeBlocks:
        name: ClassVar[str] = "most-free-blocks"

        def route(self, request: Request, instances: Sequence[InstanceView], now_s: float) -> int:
            return max(range(len(instances)), key=lambda i: instances[i].num_free_gpu_blocks)

:func:`make_router` builds a fresh one from a spec (``ClusterSpec.router``, ``--router``): a name, or
``name:key=value;key=value`` for a router with a ``config_class`` (a frozen dataclass; :class:`SpecSyntax` reads
the values). Optional methods, called only when a router defines them (:data:`ROUTER_HOOKS`):

* ``bind(context: RouterContext)``: once, before the run, with the cluster's latency model and TDG weights;
* ``route_decode(request, decode_instances, now_s) -> int``: PD clusters only, the decode instance of a request
  whose prefill just ended (default: the most free KV blocks, lowest index on ties);
* ``on_first_token(request, instance, now_s)``: the request's first token left ``instance`` (its prefill ended);
* ``on_finish(request, instance, now_s)``: the request ended on ``instance``, finished, rejected or dropped.

A gateway learns these from the response streams. In a PD cluster ``route`` sees the prefill instances only and
``route_decode`` the decode instances only, each indexed within its pool (``InstanceView.role`` says which).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Literal, Protocol, TypeVar, cast

from semsched.core.errors import SemschedError
from semsched.core.request import Request
from semsched.core.scheduler import Scheduler
from semsched.core.specs import SpecSyntax
from semsched.latency.base import LatencyModel
from semsched.metrics.tdg import TDGWeights

InstanceRole = Literal["mixed", "prefill", "decode"]


class RouterError(SemschedError):
    """Unknown router name, a bad router parameter, a name registered twice, or a router that chose an instance
    that does not exist."""


ROUTER_SPECS = SpecSyntax("router", RouterError)

#: the optional router methods the simulation calls when a router defines them (see the module docstring)
ROUTER_HOOKS = ("bind", "route_decode", "on_first_token", "on_finish")


@dataclass(frozen=True)
class RouterContext:
    """What a router may know about its cluster before the run (``bind``): the engines' ``latency`` model (to
    estimate execution times), whether the cluster is PD ``disaggregated``, and the run's TDG weights
    (``tdg_weights``; None: a router's own default)."""

    latency: LatencyModel
    disaggregated: bool = False
    tdg_weights: TDGWeights | None = None


class InstanceView:
    """Read-only state of one instance at the arrival time: what a router may consult."""

    __slots__ = ("_index", "_scheduler", "_role")

    def __init__(self, index: int, scheduler: Scheduler, role: InstanceRole = "mixed") -> None:
        self._index = index
        self._scheduler = scheduler
        self._role: InstanceRole = role

    @property
    def index(self) -> int:
        """Position of the instance in its pool (what :meth:`Router.route` returns to choose it): the cluster for
        a co-located cluster, the prefill or the decode pool of a PD one."""
        return self._index

    @property
    def role(self) -> InstanceRole:
        """``mixed`` (co-located: prefill and decode), ``prefill`` or ``decode`` (PD disaggregation)."""
        return self._role

    @property
    def num_waiting(self) -> int:
        return self._scheduler.num_waiting

    @property
    def num_running(self) -> int:
        return self._scheduler.num_running

    @property
    def num_unfinished(self) -> int:
        """Waiting plus running (preempted requests wait again)."""
        return self._scheduler.num_unfinished

    @property
    def num_free_gpu_blocks(self) -> int:
        return self._scheduler.num_free_gpu_blocks

    @property
    def num_gpu_blocks(self) -> int:
        return self._scheduler.kv.num_gpu_blocks

    @property
    def block_size(self) -> int:
        return self._scheduler.block_size

    def running_requests(self) -> tuple[Request, ...]:
        """The requests running now (a copy; their fields are for reading)."""
        return tuple(self._scheduler.running_requests())


class Router(Protocol):
    """Chooses an instance for each arrival; ``name`` is what :func:`make_router` knows it by. A router with
    parameters names their frozen dataclass as ``config_class`` and takes an instance of it as its one
    constructor argument; one without takes none. The optional methods are the module docstring's."""

    name: ClassVar[str]

    def route(self, request: Request, instances: Sequence[InstanceView], now_s: float) -> int:
        """Index of the instance that gets ``request``."""
        ...


R = TypeVar("R", bound=type[Router])

#: registered router classes by name; built by :func:`make_router`
ROUTERS: dict[str, type[Router]] = {}


def register_router(cls: R) -> R:
    """Class decorator: make ``cls`` available to :func:`make_router` under ``cls.name``."""
    name = cls.name
    if ROUTERS.get(name, cls) is not cls:
        raise RouterError(f"router name {name!r} registered twice")
    ROUTERS[name] = cls
    return cls


def router_names() -> list[str]:
    return sorted(ROUTERS)


def router_class(name: str) -> type[Router]:
    """The class registered as ``name``; :class:`RouterError` listing the known names if there is none."""
    cls = ROUTERS.get(name)
    if cls is None:
        raise RouterError(f"unknown router {name!r}; known routers: {', '.join(router_names())}")
    return cls


def make_router(spec: str) -> Router:
    """A fresh router from ``spec``: a registered name, with ``:key=value;key=value`` parameters for a router
    that has a ``config_class``. :class:`RouterError` names an unknown router or a bad parameter."""
    name, params = ROUTER_SPECS.parse(spec)
    cls = router_class(name)
    config_class = getattr(cls, "config_class", None)
    if config_class is None:
        if params:
            raise RouterError(f"router {name!r} takes no parameters (got {', '.join(sorted(params))})")
        return cls()
    config = ROUTER_SPECS.config(config_class, params, name=name)
    return cast(Any, cls)(config)  # type: ignore[no-any-return]


def most_free_blocks(instances: Sequence[InstanceView]) -> int:
    """Index of the instance with the most free KV blocks, lowest index on ties (GoRouting's decode rule)."""
    return max(range(len(instances)), key=lambda i: (instances[i].num_free_gpu_blocks, -i))


@register_router
class RoundRobinRouter:
    """Instances in turn, whatever their load."""

    name: ClassVar[str] = "round-robin"

    def __init__(self) -> None:
        self._next = 0

    def route(self, request: Request, instances: Sequence[InstanceView], now_s: float) -> int:
        index = self._next % len(instances)
        self._next += 1
        return index


@register_router
class LeastOutstandingRouter:
    """The instance with the fewest unfinished requests (waiting + running); lowest index on ties."""

    name: ClassVar[str] = "least-outstanding"

    def route(self, request: Request, instances: Sequence[InstanceView], now_s: float) -> int:
        return min(range(len(instances)), key=lambda i: instances[i].num_unfinished)


# the routers of seed 001 (§4.3) live in their own module; importing it registers them
import semsched.sim.go_routing  # noqa: E402, F401, I001
import semsched.sim.prefix_router  # noqa: E402, F401, I001
