"""Victim keys kept per running request, for a policy whose ``victim_key`` changes only at moments it knows.

The schedulers sort their running requests by ``victim_key`` after every admission; with :class:`KeptVictimKeys`
the key function is a dict's own lookup, not a Python call per request. The policy makes it its ``victim_key``
(a property returning ``keys.__getitem__``) and keeps every entry true: an entry is made when a key is first
asked for (:meth:`KeptVictimKeys.__missing__`), and the policy replaces or drops it where the key changes and
drops it where the request leaves the running list through a hook (preempted, finished, handed off); those that
end without one (aborted, dropped) are swept out by :meth:`KeptVictimKeys.sweep`, which the policy calls every
:data:`SWEEP_ARRIVALS` arrivals.
"""

from __future__ import annotations

from collections.abc import Callable

from semsched.core.policy import SortKey
from semsched.core.request import Request, RequestState

#: arrivals between two sweeps
SWEEP_ARRIVALS = 1024


class KeptVictimKeys(dict[Request, SortKey]):
    """Each running request's ``victim_key`` as ``key_of`` gives it from the request's state."""

    def __init__(self, key_of: Callable[[Request], SortKey]) -> None:
        super().__init__()
        self._key_of = key_of
        self._arrivals = 0

    def __missing__(self, request: Request) -> SortKey:
        key = self[request] = self._key_of(request)
        return key

    def arrived(self) -> None:
        """An arrival: every :data:`SWEEP_ARRIVALS`, drop the entries of requests not running (those ended without
        a hook; the others are made again when asked for)."""
        self._arrivals += 1
        if self._arrivals % SWEEP_ARRIVALS == 0:
            for request in [r for r in self if r.state is not RequestState.RUNNING]:
                del self[request]
