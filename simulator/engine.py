"""SimPy engine: replays one training step of a plan on per-rank compute and communication streams.

Each simulated rank runs its pipeline schedule (simulator/schedules.py) as a SimPy process on its
compute stream. Activations and gradients travel between stages as point-to-point transfers; data-
parallel collectives run on a per-rank `dp` stream that overlaps the backward pass; when pipeline and
data-parallel traffic can meet on the same tier, a rank's link on that tier is a SimPy resource they
share. Tensor-parallel collectives sit inside the compute spans (they block the GEMMs that follow).

Ranks that differ only in their data- or tensor-parallel coordinate do identical work, so by default
one representative per pipeline position is simulated and its events copied to its peers;
`full_fidelity=True` simulates every rank.
"""

from __future__ import annotations

import math
from collections.abc import Generator
from dataclasses import dataclass, field
from typing import Any

import simpy

from plancast.simulator.costs.collectives import (
    Algorithm,
    Level,
    Link,
    collective_seconds,
    group_levels,
    ring_seconds,
)
from plancast.simulator.costs.host import HostCosts, optimizer_host_s
from plancast.simulator.costs.ops import DTYPE_BYTES
from plancast.simulator.costs.optimizer import optimizer_bytes_per_param, optimizer_memory_s
from plancast.simulator.costs.stage import Durations, StageCost, stage_costs
from plancast.simulator.costs.tp_comm import sp_grad_all_reduce_bytes
from plancast.simulator.mesh import Coord, RankGrid, span_tier
from plancast.simulator.scenario import Scenario
from plancast.simulator.schedules import Action, build_schedule, splits_backward
from plancast.simulator.units import FsdpState, UnitPlan, dp_plan

__all__ = ["Engine", "Topology", "optimizer_bytes_per_param", "optimizer_memory_s"]

LINK_SLICE_BYTES = 8 * 4 * 2**20  # NCCL_BUFFSIZE (4 MiB) x 8 channels: one slice of a collective
MAX_LINK_SLICES = 256  # bounds the SimPy events per collective

# One recorded span: rank, stream, kind, stage, chunk, microbatch, index, peer, start_s, dur_s, bytes, flops
Span = tuple[int, str, str, int, int, int, int, int, float, float, int, float]


@dataclass
class Topology:
    """Link tiers as collectives see them, and the levels of each parallel group."""

    tier_sizes: tuple[int, ...]
    links: tuple[Link, ...]
    grid: RankGrid

    @classmethod
    def of(cls, s: Scenario) -> Topology:
        links = tuple(Link.of(t.bandwidth_GBps, t.latency_us, t.efficiency) for t in s.cluster.tiers)
        return cls(s.cluster.tier_sizes, links, RankGrid(s.pp, s.dp, s.tp))

    def levels(self, axis: str, rank: int = 0) -> tuple[Level, ...]:
        return group_levels(self.grid.group(axis, rank), self.tier_sizes, self.links)  # type: ignore[arg-type]

    def tier(self, a: int, b: int) -> int:
        return span_tier((a, b), self.tier_sizes)


@dataclass
class _RankState:
    rank: int
    coord: Coord
    dp_queue: simpy.Store
    dp_done: simpy.Event
    pending_dp: int = 0


@dataclass
class Engine:
    """One step of one scenario. `run()` returns the recorded spans (seconds)."""

    s: Scenario
    full_fidelity: bool = False
    costs_override: tuple[StageCost, ...] | None = None  # tests: uniform stages for the ideal identities
    env: simpy.Environment = field(default_factory=simpy.Environment)

    def __post_init__(self) -> None:
        s = self.s
        self.topo = Topology.of(s)
        self.grid = self.topo.grid
        self.stages = s.pp * s.vpp
        self.m = s.num_microbatches
        self.schedule = build_schedule(s.parallelism.pipeline_parallel_schedule, s.pp, self.m, s.vpp)
        self.split_backward = splits_backward(s.parallelism.pipeline_parallel_schedule)
        self.costs: tuple[StageCost, ...] = self.costs_override or stage_costs(s, self.topo.levels("tp"))
        self.durations = tuple(Durations.of(c, self.split_backward) for c in self.costs)
        self.dp_levels = self.topo.levels("dp")
        self.units: tuple[UnitPlan, ...] = tuple(dp_plan(s, c) for c in self.costs)
        self.spans: list[Span] = []
        self.arrivals: dict[tuple[int, str, int, int], simpy.Event] = {}  # receivers already waiting
        self.landed: dict[tuple[int, str, int, int], float] = {}  # transfers landed (or landing) at a time
        self.links: dict[tuple[int, int], simpy.Resource] = {}
        self.zero = s.parallelism.zero_stage if s.dp > 1 else 0
        self.fsdp = self.zero >= 2
        if self.full_fidelity:
            self.ranks = list(range(self.grid.world_size))
        else:
            self.ranks = [self.grid.rank(Coord(p, 0, 0)) for p in range(s.pp)]
        act_bytes = s.training.micro_batch_size * s.training.seq_len * s.model.hidden_size
        # Each tp rank sends its activation; sequence parallelism shards it, and Megatron-LM's
        # scatter/gather optimisation (Narayanan et al. 2021 sec. 4.1) sends 1/t of it per rank.
        sharded = s.parallelism.sequence_parallel or s.parallelism.scatter_gather_p2p
        self.p2p_bytes = act_bytes * DTYPE_BYTES[s.training.dtype] // (s.tp if sharded else 1)
        dp_tier = self.dp_levels[-1] if self.dp_levels else None
        pp_shares = s.pp > 1 and dp_tier is not None
        self.share_links = pp_shares
        self._holders: dict[tuple[Coord, int], int] = {}
        self._p2p: dict[tuple[int, int], float] = {}
        self._indices: dict[tuple[int, str, str, int, int, int], int] = {}
        self._fsdp: dict[tuple[int, int], FsdpState] = {}
        self._meetings: dict[tuple[int, int], simpy.Event] = {}
        self.dp_wait_s: dict[int, float] = {}  # per rank: compute-stream time spent waiting for gathers
        # host costs (simulator/costs/host.py): FSDP2 hooks per collective, pipeline transfer posts,
        # per-step DTensor / FSDP2 unit work
        self.host = HostCosts.of(s)
        self._dp_host_s = self.host.dp_collective_s
        self._p2p_host_s = self.host.p2p_s
        slots = s.cluster.compute_slots_per_node
        # Shared compute only matters when a node runs more ranks than it has compute units; symmetric
        # simulation would hide the contention, so every rank is simulated then.
        self.slots = slots if slots is not None and slots < s.cluster.gpus_per_node else None
        self._slots: dict[int, simpy.Resource] = {}
        if self.slots:
            self.ranks = list(range(self.grid.world_size))
            self.full_fidelity = True

    # ----------------------------------------------------------------------------------- helpers
    def _record(
        self,
        rank: int,
        stream: str,
        kind: str,
        stage: int,
        chunk: int,
        mb: int,
        start: float,
        dur: float,
        index: int = 0,
        peer: int = -1,
        nbytes: int = 0,
        flops: float = 0.0,
    ) -> None:
        self.spans.append((rank, stream, kind, stage, chunk, mb, index, peer, start, dur, nbytes, flops))

    def _link(self, rank: int, tier: int) -> simpy.Resource:
        res = self.links.get((rank, tier))
        if res is None:
            res = self.links[(rank, tier)] = simpy.Resource(self.env, capacity=1)
        return res

    def _holder(self, coord: Coord, stage: int) -> int:
        key = (coord, stage % self.s.pp)
        rank = self._holders.get(key)
        if rank is None:
            rank = self._holders[key] = self.grid.rank(Coord(stage % self.s.pp, coord.dp, coord.tp))
        return rank

    # ---------------------------------------------------------------------------------- transfers
    def p2p_seconds(self, rank: int, peer: int) -> float:
        """Duration of one pipeline transfer between two ranks."""
        seconds = self._p2p.get((rank, peer))
        if seconds is None:
            link = self.topo.links[self.topo.tier(rank, peer)]
            seconds = self._p2p[(rank, peer)] = self.p2p_bytes / link.bandwidth_Bps + link.latency_s
        return seconds

    def _send(self, st: _RankState, kind: str, stage: int, chunk: int, mb: int, to_stage: int) -> float:
        """Start a pipeline transfer to the holder of `to_stage`.

        Without link sharing the landing time is known at once: it is written down for the receiver,
        and an event is only created when the receiver is already waiting (fewer SimPy events)."""
        dst = self._holder(st.coord, to_stage)
        seconds = self.p2p_seconds(st.rank, dst)
        index = 0 if kind == "F" else 1
        key = (dst, kind, to_stage, mb)
        if self.share_links and dst in self._simulated:
            tier = self.topo.tier(st.rank, dst)
            self.env.process(self._shared_send(st.rank, tier, seconds, key, stage, chunk, mb, index, dst))
            return seconds
        now = self.env.now
        self.spans.append(
            (st.rank, "pp", "send", stage, chunk, mb, index, dst, now, seconds, self.p2p_bytes, 0.0)
        )
        waiting = self.arrivals.pop(key, None)
        if waiting is None:
            self.landed[key] = now + seconds
        else:
            done = self.env.timeout(seconds)
            done.callbacks.append(lambda _ev: _succeed(waiting))
        return seconds

    def _shared_send(
        self,
        rank: int,
        tier: int,
        seconds: float,
        key: tuple[int, str, int, int],
        stage: int,
        chunk: int,
        mb: int,
        index: int,
        dst: int,
    ) -> Generator[Any, Any, None]:
        with self._link(rank, tier).request() as req:
            yield req
            self._record(
                rank, "pp", "send", stage, chunk, mb, self.env.now, seconds, index, dst, self.p2p_bytes
            )
            yield self.env.timeout(seconds)
        waiting = self.arrivals.pop(key, None)
        if waiting is None:
            self.landed[key] = self.env.now
        else:
            waiting.succeed()

    def _recv(
        self, st: _RankState, kind: str, stage: int, chunk: int, mb: int, from_stage: int
    ) -> Generator[Any, Any, None]:
        """Wait until the transfer for (kind, stage, mb) has landed; record the wait as a recv span."""
        key = (st.rank, kind, stage, mb)
        start = self.env.now
        landed = self.landed.pop(key, None)
        if landed is None:
            ev = self.arrivals[key] = self.env.event()
            yield ev
        elif landed > start:
            yield self.env.timeout(landed - start)
        if self._p2p_host_s:
            yield self._busy(st, self._p2p_host_s)
        index = 0 if kind == "F" else 1
        self.spans.append(
            (
                st.rank,
                "pp",
                "recv",
                stage,
                chunk,
                mb,
                index,
                self._holder(st.coord, from_stage),
                start,
                self.env.now - start,
                self.p2p_bytes,
                0.0,
            )
        )

    # ------------------------------------------------------------------------------ data parallel
    def _next_index(self, rank: int, stream: str, kind: str, stage: int, chunk: int, mb: int) -> int:
        """`index` of a new event: issue order within (rank, stream, kind, stage, chunk, microbatch)."""
        key = (rank, stream, kind, stage, chunk, mb)
        index = self._indices.get(key, 0)
        self._indices[key] = index + 1
        return index

    def _dp_collective(
        self,
        st: _RankState,
        kind: str,
        nbytes: float,
        stage: int,
        chunk: int,
        mb: int,
        ready: simpy.Event | None = None,
    ) -> simpy.Event:
        """Queue a collective on the rank's dp stream; returns the event fired when it completes."""
        done = self.env.event()
        index = self._next_index(st.rank, "dp", kind, stage, chunk, mb)
        st.dp_queue.put((kind, nbytes, stage, chunk, mb, index, ready, done))
        st.pending_dp += 1
        return done

    def _dp_stream(self, st: _RankState) -> Generator[Any, Any, None]:
        """Collectives run one after another, each once its data is ready (NCCL stream order)."""
        tier = self._dp_tier
        while True:
            kind, nbytes, stage, chunk, mb, index, ready, done = yield st.dp_queue.get()
            if ready is not None and not ready.processed:
                yield ready
            # all-gathers move the gathered tensor: nbytes is this rank's full (unsharded) unit
            # ZeRO-2/3 gathers and reduce-scatters: the framework's algorithm (parallelism.
            # zero_collective_algorithm, simulator/catalog/frameworks.py cites both)
            algorithm: Algorithm = "auto"
            if kind in ("all_gather", "reduce_scatter"):
                algorithm = self.s.parallelism.zero_collective_algorithm or "hierarchical"
            seconds = collective_seconds(kind, self.dp_levels, nbytes, algorithm) + self._dp_host_s
            if self.share_links:
                # NCCL moves a collective in chunks (NCCL_BUFFSIZE, 4 MiB per channel), so pipeline
                # transfers on the same link interleave with it rather than wait for all of it: the link
                # is held one slice at a time.
                slices = max(1, min(math.ceil(nbytes / LINK_SLICE_BYTES), MAX_LINK_SLICES))
                start = -1.0
                for _ in range(slices):
                    with self._link(st.rank, tier).request() as req:
                        yield req
                        start = self.env.now if start < 0 else start
                        yield self.env.timeout(seconds / slices)
            else:
                start = self.env.now
                yield self.env.timeout(seconds)
            shard = nbytes / self.s.dp if kind == "all_gather" else nbytes  # per-rank payload, as measured
            self._record(st.rank, "dp", kind, stage, chunk, mb, start, seconds, index, -1, int(shard))
            done.succeed()
            st.pending_dp -= 1
            if st.pending_dp == 0:
                st.dp_done.succeed()
                st.dp_done = self.env.event()

    @property
    def _dp_tier(self) -> int:
        return span_tier(self.grid.group("dp", 0), self.topo.tier_sizes)

    # -------------------------------------------------------------------------------------- compute
    def _busy(self, st: _RankState, seconds: float) -> simpy.Event:
        """An event that fires after `seconds` of compute, queued for one of the node's compute slots
        when ranks share them (CPU cores), else a plain timeout."""
        if not self.slots:
            return self.env.timeout(seconds)
        return self.env.process(self._occupy(st.rank // self.s.cluster.gpus_per_node, seconds))

    def _occupy(self, node: int, seconds: float) -> Generator[Any, Any, None]:
        res = self._slots.get(node)
        if res is None:
            res = self._slots[node] = simpy.Resource(self.env, capacity=self.slots or 1)
        with res.request() as req:
            yield req
            yield self.env.timeout(seconds)

    def _compute(
        self, st: _RankState, kind: str, a: Action, seconds: float, flops: float
    ) -> Generator[Any, Any, None]:
        start = self.env.now
        yield self._busy(st, seconds)
        self._record(
            st.rank, "compute", kind, a.stage, a.chunk, a.microbatch, start, self.env.now - start, flops=flops
        )

    def _fsdp_phase(
        self, st: _RankState, kind: str, a: Action, seconds: float, flops: float
    ) -> Generator[Any, Any, None]:
        """A pass under ZeRO-2/3: units wait for their all-gathers (FSDP2 state rules, simulator/units.py).

        With overlap_param_gather a unit's gather is issued when the unit before it starts (one unit
        of prefetch: FSDP2's backward prefetch and torchtitan's forward prefetch, DeepSpeed's bounded
        `stage3_prefetch_bucket_size`), so it arrives while that unit computes; otherwise when the unit
        is reached. The time spent waiting for a gather is data-parallel communication, kept apart
        from the compute in `dp_wait_s`. A backward unit's reduce-scatter is issued once its gradients
        exist (overlap_grad_reduce), else after the whole backward."""
        state = self._fsdp[(st.rank, a.stage)]
        backward = kind in ("backward", "backward_input", "backward_weight")
        steps = state.backward() if backward else state.forward()
        ahead = 1 if self.s.parallelism.overlap_param_gather else 0
        overlap_rs = self.s.parallelism.overlap_grad_reduce
        start = self.env.now
        gathers: list[simpy.Event | None] = [None] * len(steps)

        def issue(i: int) -> None:
            if i < len(steps) and steps[i][1] and gathers[i] is None:
                unit = steps[i][0]
                gathers[i] = self._dp_collective(
                    st, "all_gather", unit.param_bytes, a.stage, a.chunk, a.microbatch
                )

        for i, (unit, _need) in enumerate(steps):
            for j in range(i, i + 1 + ahead):
                issue(j)
            gathered = gathers[i]
            if gathered is not None and not gathered.processed:
                waited_from = self.env.now
                yield gathered
                self.dp_wait_s[st.rank] = self.dp_wait_s.get(st.rank, 0.0) + self.env.now - waited_from
            share = unit.backward_share if backward else unit.forward_share
            if share:
                yield self._busy(st, seconds * share)
            if backward and overlap_rs:
                self._dp_collective(st, "reduce_scatter", unit.param_bytes, a.stage, a.chunk, a.microbatch)
        self._record(
            st.rank, "compute", kind, a.stage, a.chunk, a.microbatch, start, self.env.now - start, flops=flops
        )
        if backward and not overlap_rs:
            for unit, _ in steps:
                self._dp_collective(st, "reduce_scatter", unit.param_bytes, a.stage, a.chunk, a.microbatch)

    def _pass(
        self, st: _RankState, kind: str, a: Action, seconds: float, flops: float
    ) -> Generator[Any, Any, None]:
        if self.fsdp:
            yield from self._fsdp_phase(st, kind, a, seconds, flops)
        else:
            yield from self._compute(st, kind, a, seconds, flops)

    def _rank(self, st: _RankState) -> Generator[Any, Any, None]:
        """Run this rank's schedule. The common path (no FSDP) is inlined: it is the simulator's hot loop."""
        env, rank, spans = self.env, st.rank, self.spans
        last_stage = self.stages - 1
        actions = self.schedule[st.coord.pp]
        last_b = _last_actions(actions, "B")
        blocking = not self.s.parallelism.overlap_p2p_comm
        holders = [self._holder(st.coord, v) for v in range(self.stages)]
        for a in actions:
            d = self.durations[a.stage]
            stage, chunk, mb = a.stage, a.chunk, a.microbatch
            prev = holders[stage - 1] if stage > 0 else rank
            nxt = holders[stage + 1] if stage < last_stage else rank
            if a.kind == "F":
                if prev != rank:
                    yield from self._recv(st, "F", stage, chunk, mb, stage - 1)
                if self.fsdp:
                    yield from self._fsdp_phase(st, "forward", a, d.forward_s, d.forward_flops)
                else:
                    start = env.now
                    yield self._busy(st, d.forward_s) if self.slots else env.timeout(d.forward_s)
                    row = (
                        rank,
                        "compute",
                        "forward",
                        stage,
                        chunk,
                        mb,
                        0,
                        -1,
                        start,
                        env.now - start,
                        0,
                        d.forward_flops,
                    )
                    spans.append(row)
                if nxt != rank:
                    if self._p2p_host_s:
                        yield self._busy(st, self._p2p_host_s)
                    sent = self._send(st, "F", stage, chunk, mb, stage + 1)
                    if blocking:
                        yield env.timeout(sent)
            elif a.kind == "B":
                if nxt != rank:
                    yield from self._recv(st, "B", stage, chunk, mb, stage + 1)
                if d.recompute_s:
                    yield from self._pass(st, "recompute", a, d.recompute_s, d.forward_flops)
                start = env.now
                if self.fsdp:
                    yield from self._fsdp_phase(st, d.backward_kind, a, d.backward_s, d.backward_flops)
                else:
                    if a in last_b:
                        self._reduce_gradients(st, a, d.backward_s)
                    yield self._busy(st, d.backward_s) if self.slots else env.timeout(d.backward_s)
                    kind, dur = d.backward_kind, env.now - start
                    spans.append(
                        (rank, "compute", kind, stage, chunk, mb, 0, -1, start, dur, 0, d.backward_flops)
                    )
                if prev != rank:
                    if self._p2p_host_s:
                        yield self._busy(st, self._p2p_host_s)
                    sent = self._send(st, "B", stage, chunk, mb, stage - 1)
                    if blocking:
                        yield env.timeout(sent)
            else:
                yield from self._compute(st, "backward_weight", a, d.backward_weight_s, d.weight_flops)
        if st.pending_dp:
            yield st.dp_done
        step_host_s = self.host.step_s(self.s, st.coord.pp)
        if step_host_s:  # per-step host work (no event: a measured trace shows a gap)
            yield self._busy(st, step_host_s)
        yield from self._step_end(st)
        yield from self._optimizer(st)

    def _reduce_gradients(self, st: _RankState, a: Action, backward_s: float) -> None:
        """DDP / ZeRO-1, called as the chunk's last backward starts: each gradient bucket is reduced as
        soon as the backward has produced it (DDP's autograd hooks, Megatron-LM's overlap_grad_reduce),
        at its share of the backward in reduction order; without overlap all wait for its end."""
        if self.s.dp == 1:
            return
        buckets = self.units[a.stage].bucket_bytes
        total = sum(buckets) or 1
        done = 0.0
        overlap = self.s.parallelism.overlap_grad_reduce
        for nbytes in buckets:
            done += nbytes
            after_s = backward_s * done / total if overlap else backward_s
            ready = self.env.timeout(after_s)
            self._dp_collective(st, "all_reduce", nbytes, a.stage, a.chunk, -1, ready)

    def _step_end(self, st: _RankState) -> Generator[Any, Any, None]:
        """Per-chunk reductions after the pipeline flush: sequence-parallel norm gradients over tp, and
        the tied embedding's two copies (first and last stage) over the pipeline."""
        s = self.s
        for c in range(s.vpp):
            stage = c * s.pp + st.coord.pp
            layers = s.layer_split[stage]
            if s.tp > 1 and s.parallelism.sequence_parallel and layers:
                nbytes = sp_grad_all_reduce_bytes(
                    layers, s.model.hidden_size, layernorm=s.model.norm == "layernorm"
                )
                seconds = collective_seconds("all_reduce", self.topo.levels("tp"), nbytes)
                self._record(st.rank, "tp", "all_reduce", stage, c, -1, self.env.now, seconds, 0, -1, nbytes)
                yield self.env.timeout(seconds)
            peer = self._tie_peer(st, stage)
            if peer is not None:
                yield from self._tied_all_reduce(st, stage, c, peer)

    def _tie_peer(self, st: _RankState, stage: int) -> int | None:
        if not self.s.model.tie_word_embeddings or self.stages == 1 or stage not in (0, self.stages - 1):
            return None
        peer = self._holder(st.coord, self.stages - 1 if stage == 0 else 0)
        return None if peer == st.rank else peer

    def _tied_all_reduce(
        self, st: _RankState, stage: int, chunk: int, peer: int
    ) -> Generator[Any, Any, None]:
        """Both holders of the tied embedding meet, then sum its gradient (Megatron-LM's embedding group).

        The span starts when this rank arrives, as a blocking collective measures it: it includes the
        wait for the other holder."""
        arrived_at = self.env.now
        key = (min(st.rank, peer), max(st.rank, peer))
        partner = self._meetings.pop(key, None)
        if partner is None:
            arrived = self._meetings[key] = self.env.event()
            yield arrived
        else:
            partner.succeed()
        m = self.s.model
        nbytes = m.vocab_size * m.hidden_size * 4 // self.s.vocab_tp
        link = self.topo.links[self.topo.tier(st.rank, peer)]
        seconds = ring_seconds("all_reduce", 2, nbytes, link)
        yield self.env.timeout(seconds)
        self._record(
            st.rank,
            "pp",
            "all_reduce",
            stage,
            chunk,
            -1,
            arrived_at,
            self.env.now - arrived_at,
            0,
            peer,
            nbytes,
        )

    def _optimizer(self, st: _RankState) -> Generator[Any, Any, None]:
        s = self.s
        owned = [c * s.pp + st.coord.pp for c in range(s.vpp)]
        params = sum(self.costs[v].params for v in owned)
        local = params / s.dp if self.zero >= 1 else params
        seconds = optimizer_memory_s(s, local) + optimizer_host_s(s, owned)
        start = self.env.now
        yield self._busy(st, seconds)
        self._record(st.rank, "compute", "optimizer", -1, -1, -1, start, self.env.now - start)
        if self.zero == 1:  # ZeroRedundancyOptimizer: each owner broadcasts its updated shard, per chunk
            events = []
            for c, v in enumerate(owned):
                shard = self.costs[v].params * DTYPE_BYTES[s.training.dtype] / s.dp
                events += [self._dp_collective(st, "broadcast", shard, v, c, -1) for _ in range(s.dp)]
            yield self.env.all_of(events)

    # ------------------------------------------------------------------------------------------ run
    def run(self) -> list[Span]:
        """Simulate one step; returns the spans of the simulated ranks."""
        self._simulated = set(self.ranks)
        for rank in self.ranks:
            st = _RankState(rank, self.grid.coord(rank), simpy.Store(self.env), self.env.event())
            if self.fsdp:
                for c in range(self.s.vpp):
                    stage = c * self.s.pp + st.coord.pp
                    self._fsdp[(rank, stage)] = FsdpState(self.units[stage], zero3=self.zero == 3)
            if self.s.dp > 1:
                self.env.process(self._dp_stream(st))
            self.env.process(self._rank(st))
        self.env.run()
        return self.spans




def _succeed(event: simpy.Event) -> None:
    event.succeed()


def _last_actions(actions: tuple[Action, ...], kind: str) -> set[Action]:
    """Per stage, the last action of `kind` (after which that chunk's gradients are complete for DDP)."""
    last: dict[int, Action] = {}
    for a in actions:
        if a.kind == kind:
            last[a.stage] = a
    return set(last.values())
