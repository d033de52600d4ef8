"""Pipeline point-to-point transfers: a send posts, a receive waits for the transfer to land.

A transfer starts when its send is posted, or, on a rendezvous transport (gloo: plan.rendezvous), once
both its send and its receive are. There the rank keeps its next receive posted ahead, as the runtime
does on gloo (runtime/parallel/pp.py): posted at the step's start, and each next one as the previous
lands. A receive posted after its send starts the transfer then, late by the busy-sender delay if the
sender computes at that moment (its event-loop thread must answer the receiver's notification,
cluster.py); a send posted after its receive is written by the posting thread at once.

Where ranks share the cores (more ranks than cores on a node), a thread woken while every core runs a
job waits for a slice: the receiver's transport thread before the message lands, and a receiver
blocked on it before it goes on (slice_wait_s).

SimPy process fragments over the engine's state (core.py); processes.py calls them around each pass."""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple

import simpy

from plancast.simulator.engine.spans import Process, new_span
from plancast.simulator.schedules import Action, cross_rank_receives

if TYPE_CHECKING:
    from plancast.simulator.engine.core import Engine, RankState, TransferKey


class Arrival(simpy.Event):
    """What a receiver waits on when it is there before its transfer was posted: fired when the
    transfer lands, once the sender knows when (one SimPy event, where a timeout firing an event
    would be two)."""

    def land_in(self, seconds: float) -> None:
        """Fire `seconds` from now, as a `Timeout` created now would (simpy/events.py, Timeout)."""
        self._ok, self._value = True, None
        self.env.schedule(self, delay=seconds)


class Posted(NamedTuple):
    """A rendezvous send posted before its receive: what starting it needs then."""

    rank: int
    dst: int
    kind: str
    a: Action
    at_s: float
    done: Arrival | None
    """What a blocking send waits on (fired when the transfer lands), or None."""


def send(sim: Engine, st: RankState, kind: str, a: Action, to_stage: int) -> simpy.Event | None:
    """Post a pipeline transfer to the holder of `to_stage` (after its host cost, `plan.p2p_host_s`,
    which the caller spends); returns what a blocking send waits for, None when the plan overlaps
    pipeline communication. A plain function, not a process: the hot path creates no generator.

    The landing time is known at once: without link sharing the transfer starts now; with it, it
    queues for the rank's link on its tier (link.py), behind what was posted before it."""
    dst = st.holders[to_stage]
    key = (dst, kind, to_stage, a.microbatch)
    if sim.plan.rendezvous:
        done = None if sim.plan.overlap_p2p else Arrival(sim.env)
        posted = Posted(st.rank, dst, kind, a, sim.env.now, done)
        if key in sim.ready:  # its receive is posted: written by the posting thread at once
            sim.ready.discard(key)
            start_transfer(sim, key, posted, 0.0)
        else:
            sim.posted[key] = posted
        return done
    seconds, link = sim.route(st.rank, dst)
    now = sim.env.now
    if link is not None:  # queued on the rank's link (link.py)
        start, cut = link.post(now, seconds)
        if cut is not None:
            collective, slices_done = cut
            collective.interrupt(slices_done)
        sim.land_at(key, start + seconds)
    else:
        start = now
        sim.land_after(key, seconds + slice_wait_s(sim, dst))
    sim.transport_cpu(st.rank)
    sim.transport_cpu(dst)
    record_send(sim, st.rank, dst, kind, a, start, seconds)
    return None if sim.plan.overlap_p2p else sim.env.timeout(seconds)


def record_send(sim: Engine, rank: int, dst: int, kind: str, a: Action, start_s: float, dur_s: float) -> None:
    """The send span of one transfer (index 0: activations, 1: gradients)."""
    index = 0 if kind == "F" else 1
    span = (
        rank,
        "pp",
        "send",
        a.stage,
        a.chunk,
        a.microbatch,
        index,
        dst,
        start_s,
        dur_s,
        sim.plan.p2p_bytes,
        0.0,
    )
    sim.transfers.append(new_span(span))


def start_transfer(sim: Engine, key: TransferKey, p: Posted, extra_s: float) -> None:
    """Start the rendezvous transfer `p` now (after `extra_s`, a busy sender's delay): it lands for its
    receiver (core.py) and its send span runs from its post to its landing."""
    seconds, link = sim.route(p.rank, p.dst)
    now = sim.env.now
    start = now + extra_s
    if link is not None:  # queued on the sender's link (link.py)
        start, cut = link.post(start, seconds)
        if cut is not None:
            collective, slices_done = cut
            collective.interrupt(slices_done)
    lands = start + seconds + slice_wait_s(sim, p.dst)
    sim.land_at(key, lands)
    sim.transport_cpu(p.rank)
    sim.transport_cpu(p.dst)
    if p.done is not None:
        p.done.land_in(lands - now)
    record_send(sim, p.rank, p.dst, p.kind, p.a, p.at_s, lands - p.at_s)


def slice_wait_s(sim: Engine, rank: int) -> float:
    """How long a thread of `rank` woken now waits for a core: the busy-thread delay where every core
    of its node runs a job (ranks sharing the cores), else 0. Linux's EEVDF scheduler lets a running
    task finish its slice before a woken one takes the core (kernel/sched/fair.c, RUN_TO_PARITY; base
    slice 0.75 ms x (1 + log2 cores)); the delay is measured as p2p_busy_delay_us (cluster.py)."""
    return sim.plan.p2p_busy_s if sim.cores_saturated(rank) else 0.0


def post_next_receive(sim: Engine, st: RankState) -> None:
    """Rendezvous plans: post the rank's next receive of the step ahead (see the module docstring)."""
    if st.next_recv >= len(st.receives):
        return
    key = st.receives[st.next_recv]
    st.next_recv += 1
    posted = sim.posted.pop(key, None)
    if posted is None:
        sim.ready.add(key)
    else:  # sent before: it starts now, late if its sender computes
        start_transfer(sim, key, posted, sim.plan.p2p_busy_s if sim.is_busy(posted.rank) else 0.0)


def receives(sim: Engine, st: RankState) -> tuple[TransferKey, ...]:
    """The rank's pipeline receives of the step, in the order its schedule waits for them."""
    actions, stages = sim.plan.schedule[st.coord.pp], sim.plan.stages
    received = cross_rank_receives(actions, stages, st.holders.__getitem__, st.rank)
    return tuple((st.rank, r.kind, r.stage, r.microbatch) for r in received)


def recv(sim: Engine, st: RankState, kind: str, a: Action, from_stage: int) -> Process:
    """Wait until the transfer for (kind, stage, micro-batch) has landed (the wait is the recv span),
    then the receive side's host time (plan.p2p_host_s)."""
    env = sim.env
    key = (st.rank, kind, a.stage, a.microbatch)
    start = env.now
    landed = sim.landed.pop(key, None)
    blocked = landed is None or landed > start
    if landed is None:
        ev = sim.arrivals[key] = Arrival(env)
        yield ev
    elif landed > start:
        yield env.timeout(landed - start)
    if blocked and (wait := slice_wait_s(sim, st.rank)):  # woken while others hold every core
        yield env.timeout(wait)
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
    # then the runtime's bookkeeping: post the next receive ahead (gloo), return to the schedule; as
    # runtime/parallel/pp.py does it after the wait, it is outside the recv span there too
    if sim.plan.rendezvous:
        post_next_receive(sim, st)
    if sim.plan.p2p_host_s:
        yield sim.busy(st.rank, sim.plan.p2p_host_s)
