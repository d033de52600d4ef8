"""Pipeline point-to-point transfers: a send posts, a receive waits for the transfer to land.

SimPy process fragments over the engine's state (core.py); processes.py calls them around each pass."""

from __future__ import annotations

from typing import TYPE_CHECKING

import simpy

from plancast.simulator.engine.spans import Process, new_span
from plancast.simulator.schedules import Action

if TYPE_CHECKING:
    from plancast.simulator.engine.core import Engine, RankState


class Arrival(simpy.Event):
    """What a receiver waits on when it is there before its transfer was posted: fired when the
    transfer lands, once the sender knows when (one SimPy event, where a timeout firing an event
    would be two)."""

    def land_in(self, seconds: float) -> None:
        """Fire `seconds` from now, as a `Timeout` created now would (simpy/events.py, Timeout)."""
        self._ok, self._value = True, None
        self.env.schedule(self, delay=seconds)


def send(sim: Engine, st: RankState, kind: str, a: Action, to_stage: int) -> simpy.Event | None:
    """Post a pipeline transfer to the holder of `to_stage` (after its host cost, `plan.p2p_host_s`,
    which the caller spends); returns what a blocking send waits for, None when the plan overlaps
    pipeline communication. A plain function, not a process: the hot path creates no generator.

    The landing time is known at once: without link sharing the transfer starts now; with it, it
    queues for the rank's link on its tier (link.py), behind what was posted before it."""
    dst = st.holders[to_stage]
    seconds, link = sim.route(st.rank, dst)
    key = (dst, kind, to_stage, a.microbatch)
    now = sim.env.now
    if link is not None:  # queued on the rank's link (link.py)
        start, cut = link.post(now, seconds)
        if cut is not None:
            collective, slices_done = cut
            collective.interrupt(slices_done)
        sim.land_at(key, start + seconds)
    else:
        start = now
        sim.land_after(key, seconds)
    sim.transfers.append(
        new_span(
            (
                st.rank,
                "pp",
                "send",
                a.stage,
                a.chunk,
                a.microbatch,
                0 if kind == "F" else 1,
                dst,
                start,
                seconds,
                sim.plan.p2p_bytes,
                0.0,
            )
        )
    )
    return None if sim.plan.overlap_p2p else sim.env.timeout(seconds)


def recv(sim: Engine, st: RankState, kind: str, a: Action, from_stage: int) -> Process:
    """Wait until the transfer for (kind, stage, micro-batch) has landed; the wait is the recv span."""
    env = sim.env
    key = (st.rank, kind, a.stage, a.microbatch)
    start = env.now
    landed = sim.landed.pop(key, None)
    if landed is None:
        ev = sim.arrivals[key] = Arrival(env)
        yield ev
    elif landed > start:
        yield env.timeout(landed - start)
    if sim.plan.p2p_host_s:
        yield sim.busy(st.rank, sim.plan.p2p_host_s)
    index = 0 if kind == "F" else 1
    sim.transfers.append(
        new_span(
            (
                st.rank,
                "pp",
                "recv",
                a.stage,
                a.chunk,
                a.microbatch,
                index,
                st.holders[from_stage],
                start,
                env.now - start,
                sim.plan.p2p_bytes,
                0.0,
            )
        )
    )
