"""Pipeline point-to-point transfers: a send posts, a receive waits for the transfer to land.

SimPy process fragments over the engine's state (core.py); processes.py calls them around each pass."""

from __future__ import annotations

from typing import TYPE_CHECKING

from plancast.simulator.engine.spans import Process, Span
from plancast.simulator.schedules import Action

if TYPE_CHECKING:
    from plancast.simulator.engine.core import Engine, RankState


def send(sim: Engine, st: RankState, kind: str, a: Action, to_stage: int) -> Process:
    """Post a pipeline transfer to the holder of `to_stage`; wait for it unless the plan overlaps
    pipeline communication.

    Without link sharing the landing time is known at once (core.Engine.land_after); with it the
    transfer queues for the rank's link on its tier."""
    plan = sim.plan
    if plan.p2p_host_s:
        yield sim.busy(st.rank, plan.p2p_host_s)
    dst = st.holders[to_stage]
    seconds = plan.p2p_seconds(st.rank, dst)
    key = (dst, kind, to_stage, a.microbatch)
    index = 0 if kind == "F" else 1
    if plan.share_links and dst in plan.simulated:
        sim.env.process(shared_send(sim, st, seconds, key, a, index))
    else:
        _record_send(sim, st, a, index, dst, seconds)
        sim.land_after(key, seconds)
    if not plan.s.parallelism.overlap_p2p_comm:
        yield sim.env.timeout(seconds)


def shared_send(
    sim: Engine, st: RankState, seconds: float, key: tuple[int, str, int, int], a: Action, index: int
) -> Process:
    """A pipeline transfer over a link that data-parallel collectives also use: it waits its turn."""
    dst = key[0]
    with sim.link(st.rank, sim.plan.tier(st.rank, dst)).request() as req:
        yield req
        _record_send(sim, st, a, index, dst, seconds)
        yield sim.env.timeout(seconds)
    sim.land_now(key)


def _record_send(sim: Engine, st: RankState, a: Action, index: int, dst: int, seconds: float) -> None:
    sim.spans.append(
        Span(
            st.rank,
            "pp",
            "send",
            a.stage,
            a.chunk,
            a.microbatch,
            index,
            dst,
            sim.env.now,
            seconds,
            sim.plan.p2p_bytes,
            0.0,
        )
    )


def recv(sim: Engine, st: RankState, kind: str, a: Action, from_stage: int) -> Process:
    """Wait until the transfer for (kind, stage, micro-batch) has landed; the wait is the recv span."""
    env = sim.env
    key = (st.rank, kind, a.stage, a.microbatch)
    start = env.now
    landed = sim.landed.pop(key, None)
    if landed is None:
        ev = sim.arrivals[key] = env.event()
        yield ev
    elif landed > start:
        yield env.timeout(landed - start)
    if sim.plan.p2p_host_s:
        yield sim.busy(st.rank, sim.plan.p2p_host_s)
    index = 0 if kind == "F" else 1
    sim.spans.append(
        Span(
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
