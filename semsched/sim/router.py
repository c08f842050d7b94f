"""Routers: which instance of a cluster gets an arriving request.

A router sees each instance's scheduler through its read-only view (queue depths, free blocks) at the
arrival time. Routers are objects with their own state (e.g. the round-robin cursor), never globals.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import ClassVar, Protocol

from semsched.core.request import Request
from semsched.core.scheduler import Scheduler


class Router(Protocol):
    name: ClassVar[str]

    def route(self, request: Request, instances: Sequence[Scheduler], now_s: float) -> int:
        """Index of the instance that gets ``request``."""
        ...


class RoundRobinRouter:
    name: ClassVar[str] = "round-robin"

    def __init__(self) -> None:
        self._next = 0

    def route(self, request: Request, instances: Sequence[Scheduler], now_s: float) -> int:
        index = self._next % len(instances)
        self._next += 1
        return index


class LeastOutstandingRouter:
    """The instance with the fewest unfinished requests (waiting + running); lowest index on ties."""

    name: ClassVar[str] = "least-outstanding"

    def route(self, request: Request, instances: Sequence[Scheduler], now_s: float) -> int:
        return min(range(len(instances)), key=lambda i: instances[i].num_unfinished)


ROUTERS: dict[str, Callable[[], Router]] = {
    RoundRobinRouter.name: RoundRobinRouter,
    LeastOutstandingRouter.name: LeastOutstandingRouter,
}


def make_router(name: str) -> Router:
    try:
        return ROUTERS[name]()
    except KeyError:
        raise ValueError(f"unknown router {name!r}; known: {', '.join(sorted(ROUTERS))}") from None
