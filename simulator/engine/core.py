"""The event state of one simulated step: SimPy environment, recorded spans, transfers in flight,
link and compute-slot resources. The numbers come from the frozen `StepPlan` (plan.py); the SimPy
processes that drive this state are in processes.py."""

from __future__ import annotations

import gc
import math
from collections import deque
from dataclasses import dataclass, field
from typing import NamedTuple

import simpy

from plancast.simulator.costs.collectives import CollectiveKind, Level
from plancast.simulator.costs.stage import StageCost
from plancast.simulator.engine import data_parallel, pipeline, processes
from plancast.simulator.engine.cores import SharedCores
from plancast.simulator.engine.due import Due
from plancast.simulator.engine.link import Link
from plancast.simulator.engine.pipeline import Arrival, Posted
from plancast.simulator.engine.plan import StepPlan
from plancast.simulator.engine.spans import Span, new_span
from plancast.simulator.mesh import Coord
from plancast.simulator.scenario import Scenario
from plancast.simulator.schedules import Action
from plancast.simulator.units import FsdpState

TransferKey = tuple[int, str, int, int]
"""(receiving rank, F or B, stage, micro-batch) of one pipeline transfer."""


class DpItem(NamedTuple):
    """One collective queued on a rank's dp stream (Engine.dp_collective)."""

    kind: CollectiveKind
    nbytes: float
    where: tuple[int, int, int]
    """(stage, chunk, micro-batch)."""
    order: int
    ready: Due | None
    """It starts no earlier (its data exists)."""
    done: simpy.Event | None
    """Fired when it completes, for a caller that waits on it."""
    levels: tuple[Level, ...] | None


@dataclass
class RankState:
    """One simulated rank: its place, its stage holders and its data-parallel stream."""

    rank: int
    coord: Coord
    holders: tuple[int, ...]
    """Per virtual stage, the rank holding it in this rank's replica."""
    dp_done: simpy.Event
    """Fires when the dp stream has drained (replaced by a fresh event each time)."""
    dp_queue: deque[DpItem] = field(default_factory=deque)
    """Collectives issued and not started, in issue order (a plain queue: no SimPy event per item)."""
    dp_wake: simpy.Event | None = None
    """While the idle dp stream waits for work: the event that wakes it."""
    pending_dp: int = 0
    dp_process: simpy.Process | None = None
    """The rank's dp stream (data_parallel.dp_stream)."""
    fsdp: dict[int, FsdpState] = field(default_factory=dict)
    """Per owned virtual stage under ZeRO-2/3: which units are gathered."""
    param_gathers: dict[int, tuple[list[simpy.Event | None], float]] = field(default_factory=dict)
    """Per owned virtual stage under StepPlan.forward_param_gather, until its first forward: its
    buckets' gathers and the seconds of gathers queued up to it (param_gather.py)."""
    receives: tuple[TransferKey, ...] = ()
    """Rendezvous plans: the rank's pipeline receives in schedule order (pipeline.receives)."""
    next_recv: int = 0
    """Index in `receives` of the next one to post ahead."""


class Engine:
    """One step of one scenario. `run()` returns the recorded spans (seconds)."""

    def __init__(
        self,
        s: Scenario,
        full_fidelity: bool = False,
        costs_override: tuple[StageCost, ...] | None = None,
        plan: StepPlan | None = None,
    ) -> None:
        """`costs_override`: tests' uniform stages; `plan`: numbers already derived for `s`."""
        self.plan = plan or StepPlan.of(s, full_fidelity, costs_override)
        self.env = simpy.Environment()
        self.spans: list[Span] = []
        """Passes, collectives and waits: what the step's breakdown is made of."""
        self.transfers: list[Span] = []
        """Pipeline sends and receives (pipeline.py), apart: the summary reads only their ends."""
        self.passes: dict[tuple[int, str, int], int] = {}
        """Compute passes recorded per (rank, kind, virtual stage): what tensor-parallel time is priced by."""
        self.arrivals: dict[TransferKey, Arrival] = {}  # receivers already waiting
        self.landed: dict[TransferKey, float] = {}  # transfers landed (or landing) at a time
        self.posted: dict[TransferKey, Posted] = {}  # rendezvous sends whose receive is not posted yet
        self.ready: set[TransferKey] = set()  # rendezvous receives posted ahead of their send
        self.busy_until: dict[int, float] = {}
        """Per rank, when its compute ends (kept for rendezvous plans: is a sender busy?)."""
        self.meetings: dict[tuple[int, int], simpy.Event] = {}  # tied-embedding holders waiting
        self.dp_wait_s: dict[int, float] = {}  # per rank: compute-stream time spent waiting for gathers
        self._links: dict[tuple[int, int], Link] = {}
        self._routes: dict[tuple[int, int], tuple[float, Link | None]] = {}
        self._cores: dict[int, SharedCores] = {}
        self._indices: dict[tuple[int, str, str, int, int, int], int] = {}

    def run(self) -> list[Span]:
        """Simulate one step; returns the spans of the simulated ranks (`spans`, then `transfers`)."""
        plan = self.plan
        states = []
        for rank in plan.ranks:
            coord = plan.grid.coord(rank)
            st = RankState(rank, coord, plan.holders(coord), self.env.event())
            states.append(st)
            if plan.fsdp:
                for stage in plan.owned_stages(coord.pp):
                    st.fsdp[stage] = FsdpState(plan.units[stage], zero3=plan.zero_stage == 3)
            if plan.rendezvous:
                st.receives = pipeline.receives(self, st)
                pipeline.post_next_receive(self, st)  # the runtime posts it before the first action
            if plan.dense_dp > 1:
                st.dp_process = self.env.process(data_parallel.dp_stream(self, st))
            self.env.process(processes.rank_step(self, st))
        # The loop makes ~50 short-lived objects per event (events, spans, generator frames), which
        # would set off a cyclic collection every ~700 allocations, each scanning the young objects
        # that are all still alive: collect after the step instead (the cycles SimPy's processes and
        # events form are freed then). Python docs, gc.disable: "if you are sure your program does not
        # create reference cycles" -- here they are bounded by one step.
        paused = gc.isenabled()
        gc.disable()
        try:
            self.env.run()
        finally:
            for st in states:  # an idle dp stream waits for work forever: let it go with the step
                _stop_waiting(st.dp_wake)
                st.dp_process = st.dp_wake = None
            if paused:
                gc.enable()
        return self.spans + self.transfers

    # ------------------------------------------------------------------------------------ resources
    def link(self, rank: int, tier: int) -> Link:
        """The rank's link on `tier`, shared by its pipeline sends and its dp collectives."""
        link = self._links.get((rank, tier))
        if link is None:
            link = self._links[(rank, tier)] = Link()
        return link

    def route(self, rank: int, peer: int) -> tuple[float, Link | None]:
        """A pipeline transfer from `rank` to `peer`: its duration, and the sender's link it queues on
        when the plan shares links (None: it starts when posted). Memoised: read per transfer."""
        route = self._routes.get((rank, peer))
        if route is None:
            plan = self.plan
            shared = plan.share_links and peer in plan.simulated
            link = self.link(rank, plan.tier(rank, peer)) if shared else None
            route = self._routes[(rank, peer)] = (plan.p2p_seconds(rank, peer), link)
        return route

    def busy(self, rank: int, seconds: float) -> simpy.Event:
        """An event that fires after `seconds` of compute: a plain timeout, or, where ranks share a
        node's cores (CPU), a job on them that runs at its share of a core (cores.SharedCores)."""
        slots = self.plan.compute_slots
        if not slots:
            if self.plan.rendezvous:
                self.busy_until[rank] = self.env.now + seconds
            return self.env.timeout(seconds)
        done = self._node_cores(rank, slots).run(seconds)
        assert done is not None
        if self.plan.rendezvous:  # busy until the shared job ends (its end moves with the sharing)
            self.busy_until[rank] = math.inf
            done.callbacks.append(lambda _: self.busy_until.__setitem__(rank, self.env.now))
        return done

    def _node_cores(self, rank: int, slots: int) -> SharedCores:
        node = self._node(rank)
        cores = self._cores.get(node)
        if cores is None:
            cores = self._cores[node] = SharedCores(self.env, slots)
        return cores

    def transport_cpu(self, rank: int) -> None:
        """The transport threads' CPU time of one transfer side of `rank` (plan.p2p_thread_s), sharing
        the cores with the ranks' own work where ranks share them; nothing waits for it."""
        slots = self.plan.compute_slots
        if slots and self.plan.p2p_thread_s:
            self._node_cores(rank, slots).run(self.plan.p2p_thread_s, notify=False)

    def cores_saturated(self, rank: int) -> bool:
        """Whether every core of `rank`'s node runs a job now (ranks sharing the cores only)."""
        slots = self.plan.compute_slots
        if not slots:
            return False
        cores = self._cores.get(self._node(rank))
        return cores is not None and len(cores.jobs) >= slots

    def _node(self, rank: int) -> int:
        return rank // self.plan.s.cluster.gpus_per_node

    def is_busy(self, rank: int) -> bool:
        """Whether `rank` computes now (or waits for a core to): rendezvous plans only."""
        return self.busy_until.get(rank, -1.0) > self.env.now

    def record_pass(self, rank: int, kind: str, a: Action, start: float, dur: float, flops: float) -> None:
        """The span of one compute pass of `a` (forward, recompute, backward, ...) of `dur` seconds."""
        self.spans.append(
            new_span((rank, "compute", kind, a.stage, a.chunk, a.microbatch, 0, -1, start, dur, 0, flops))
        )
        key = (rank, kind, a.stage)
        self.passes[key] = self.passes.get(key, 0) + 1

    # ---------------------------------------------------------------------------------- transfers
    def land_after(self, key: TransferKey, seconds: float) -> None:
        """A transfer lands `seconds` from now: written down for its receiver, or, if the receiver
        already waits, its arrival fires then (no SimPy event for a transfer nobody waits for)."""
        waiting = self.arrivals.pop(key, None)
        if waiting is None:
            self.landed[key] = self.env.now + seconds
        else:
            waiting.land_in(seconds)

    def land_at(self, key: TransferKey, at_s: float) -> None:
        """A transfer lands at `at_s` (not before now): as `land_after`, at an absolute time."""
        waiting = self.arrivals.pop(key, None)
        if waiting is None:
            self.landed[key] = at_s
        else:
            waiting.land_in(at_s - self.env.now)

    # ------------------------------------------------------------------------------ data parallel
    def dp_collective(
        self,
        st: RankState,
        kind: CollectiveKind,
        nbytes: float,
        where: tuple[int, int, int],
        *,
        ready: Due | None = None,
        levels: tuple[Level, ...] | None = None,
        notify: bool = False,
    ) -> simpy.Event | None:
        """Queue a collective on the rank's dp stream (`where`: stage, chunk, micro-batch). It starts
        once `ready` is due (its data exists). `levels`: the group's tiers when it is
        not the dense-gradient group (expert gradients over edp). With `notify`, returns the event
        fired when it completes (else None: most collectives are only waited for as a whole, through
        `dp_done`, and an event each would cost as much as the collective's own timeout)."""
        done = self.env.event() if notify else None
        key = (st.rank, "dp", kind, *where)
        index = self._indices.get(key, 0)
        self._indices[key] = index + 1
        st.dp_queue.append(DpItem(kind, nbytes, where, index, ready, done, levels))
        st.pending_dp += 1
        wake = st.dp_wake
        if wake is not None:
            st.dp_wake = None
            wake.succeed()
        return done


def _stop_waiting(event: simpy.Event | None) -> None:
    """Drop the processes an event that will never fire would resume. A process waiting on it forms a
    cycle with it (event -> callback -> process -> generator -> ...), which would keep the whole engine,
    its spans included, alive until the next cyclic collection; without the callback the process is
    freed as soon as nothing refers to it (SimPy: `Event.callbacks`, the functions called when it fires)."""
    if event is not None and event.callbacks is not None:
        event.callbacks.clear()
