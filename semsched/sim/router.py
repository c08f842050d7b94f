"""Routers: which instance of a cluster gets an arriving request.

A router sees each instance through an :class:`InstanceView` (queue depths, free KV blocks, running requests
at the arrival time), never the mutable scheduler. Routers are objects with their own state (e.g. the
round-robin cursor), never globals, registered by name with :func:`register_router`::

    @register_router
    class MostFreeBlocks:
        name: ClassVar[str] = "most-free-blocks"

        def route(self, request: Request, instances: Sequence[InstanceView], now_s: float) -> int:
            return max(range(len(instances)), key=lambda i: instances[i].num_free_gpu_blocks)

:func:`make_router` builds a fresh one by name (``ClusterSpec.router``, ``--router``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar, Protocol, TypeVar

from semsched.core.errors import SemschedError
from semsched.core.request import Request
from semsched.core.scheduler import Scheduler


class RouterError(SemschedError):
    """Unknown router name, a name registered twice, or a router that chose an instance that does not exist."""


class InstanceView:
    """Read-only state of one instance at the arrival time: what a router may consult."""

    __slots__ = ("_index", "_scheduler")

    def __init__(self, index: int, scheduler: Scheduler) -> None:
        self._index = index
        self._scheduler = scheduler

    @property
    def index(self) -> int:
        """Position of the instance in the cluster (what :meth:`Router.route` returns to choose it)."""
        return self._index

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
    """Chooses an instance for each arrival; ``name`` is what :func:`make_router` knows it by."""

    name: ClassVar[str]

    def route(self, request: Request, instances: Sequence[InstanceView], now_s: float) -> int:
        """Index of the instance that gets ``request``."""
        ...


R = TypeVar("R", bound=type[Router])

#: registered router classes by name; built with no arguments by :func:`make_router`
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


def make_router(name: str) -> Router:
    """A fresh router registered as ``name``."""
    return router_class(name)()


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
