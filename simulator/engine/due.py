"""When a queued collective's data is ready, without a SimPy event per collective."""

from __future__ import annotations

from heapq import heappush
from typing import NamedTuple

import simpy
from simpy.events import NORMAL


class Due(NamedTuple):
    """A moment a collective's data is ready, kept as a SimPy `Timeout` would be scheduled (its time and
    its place in SimPy's event order, simpy/core.py `Environment.schedule`) but without the event: the
    event is made only if the dp stream reaches the collective before it is due (`wait`). Most gradient
    buckets are ready long before their turn, and an event each cost as much as the collective's own."""

    at_s: float
    order: int

    @classmethod
    def after(cls, env: simpy.Environment, seconds: float) -> Due:
        return cls(env.now + seconds, next(env._eid))  # the id a Timeout made now would take

    def wait(self, env: simpy.Environment) -> simpy.Event | None:
        """The event to wait for, or None when the moment has passed."""
        if self.at_s < env.now:
            return None
        event = simpy.Event(env)
        event._ok, event._value = True, None  # as Timeout.__init__ sets them
        heappush(env._queue, (self.at_s, NORMAL, self.order, event))
        return event
