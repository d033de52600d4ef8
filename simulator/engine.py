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

from collections.abc import Generator
from dataclasses import dataclass, field
from typing import Any

import simpy

from simulator.costs.collectives import Level, Link, collective_seconds, group_levels
from simulator.costs.ops import DTYPE_BYTES
from simulator.costs.stage import StageCost, stage_costs
from simulator.mesh import Coord, RankGrid, span_tier
from simulator.scenario import Scenario
from simulator.schedules import Action, build_schedule, splits_backward
from simulator.units import UnitPlan, dp_plan

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
    env: simpy.Environment = field(default_factory=simpy.Environment)

    def __post_init__(self) -> None:
        s = self.s
        self.topo = Topology.of(s)
        self.grid = self.topo.grid
        self.stages = s.pp * s.vpp
        self.m = s.num_microbatches
        self.schedule = build_schedule(s.parallelism.pipeline_parallel_schedule, s.pp, self.m, s.vpp)
        self.split_backward = splits_backward(s.parallelism.pipeline_parallel_schedule)
        self.costs: tuple[StageCost, ...] = stage_costs(s, self.topo.levels("tp"))
        self.durations = tuple(_Durations.of(c, self.split_backward) for c in self.costs)
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
        # Megatron-LM's scatter/gather optimisation (Narayanan et al. 2021 sec. 4.1): each tp rank sends
        # 1/t of the activation; with sequence parallelism it is sharded anyway.
        self.p2p_bytes = act_bytes * DTYPE_BYTES[s.training.dtype] // s.tp
        dp_tier = self.dp_levels[-1] if self.dp_levels else None
        pp_shares = s.pp > 1 and dp_tier is not None
        self.share_links = pp_shares
        self._holders: dict[tuple[Coord, int], int] = {}
        self._p2p: dict[tuple[int, int], float] = {}

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
    def _dp_collective(
        self,
        st: _RankState,
        kind: str,
        nbytes: float,
        stage: int,
        chunk: int,
        mb: int,
        index: int,
        ready: simpy.Event | None = None,
    ) -> simpy.Event:
        """Queue a collective on the rank's dp stream; returns the event fired when it completes."""
        done = self.env.event()
        st.dp_queue.put((kind, nbytes, stage, chunk, mb, index, ready, done))
        st.pending_dp += 1
        return done

    def _dp_stream(self, st: _RankState) -> Generator[Any, Any, None]:
        """Collectives run one after another, each once its data is ready (NCCL stream order)."""
        tier = len(self.topo.links) - 1 if not self.dp_levels else self._dp_tier
        while True:
            kind, nbytes, stage, chunk, mb, index, ready, done = yield st.dp_queue.get()
            if ready is not None and not ready.processed:
                yield ready
            seconds = collective_seconds(kind, self.dp_levels, nbytes)
            if self.share_links:
                with self._link(st.rank, tier).request() as req:
                    yield req
                    start = self.env.now
                    yield self.env.timeout(seconds)
            else:
                start = self.env.now
                yield self.env.timeout(seconds)
            self._record(st.rank, "dp", kind, stage, chunk, mb, start, seconds, index, -1, int(nbytes))
            done.succeed()
            st.pending_dp -= 1
            if st.pending_dp == 0 and not st.dp_done.triggered:
                st.dp_done.succeed()

    @property
    def _dp_tier(self) -> int:
        members = self.grid.group("dp", 0)
        return span_tier(members, self.topo.tier_sizes)

    # -------------------------------------------------------------------------------------- compute
    def _compute(
        self, st: _RankState, kind: str, a: Action, seconds: float, flops: float
    ) -> Generator[Any, Any, None]:
        start = self.env.now
        yield self.env.timeout(seconds)
        self._record(st.rank, "compute", kind, a.stage, a.chunk, a.microbatch, start, seconds, flops=flops)

    def _fsdp_phase(
        self, st: _RankState, kind: str, a: Action, seconds: float, flops: float
    ) -> Generator[Any, Any, None]:
        """A forward or backward under ZeRO-2/3: each unit waits for its gathered parameters.

        With overlap_param_gather every gather is queued at once on the dp stream (prefetch), so the
        next unit's parameters arrive while the current one computes; otherwise each waits its turn."""
        plan = self.units[a.stage]
        steps = plan.steps(kind)
        base = 0 if kind == "forward" else sum(1 for g in plan.forward if g.gather_bytes is not None)
        prefetch = self.s.parallelism.overlap_param_gather
        start = self.env.now
        pending: list[simpy.Event | None] = []
        index = base
        for step in steps:
            if step.gather_bytes is None:
                pending.append(None)
                continue
            if prefetch:
                pending.append(
                    self._dp_collective(
                        st, "all_gather", step.gather_bytes, a.stage, a.chunk, a.microbatch, index
                    )
                )
            else:
                pending.append(None)
            index += 1
        index = base
        for step, queued in zip(steps, pending, strict=True):
            gathered = queued
            if step.gather_bytes is not None and not prefetch:
                gathered = self._dp_collective(
                    st, "all_gather", step.gather_bytes, a.stage, a.chunk, a.microbatch, index
                )
                index += 1
            if gathered is not None and not gathered.processed:
                yield gathered
            if step.share:
                yield self.env.timeout(seconds * step.share)
        self._record(
            st.rank, "compute", kind, a.stage, a.chunk, a.microbatch, start, self.env.now - start, flops=flops
        )
        if kind == "backward":
            self._reduce_scatter(st, a)

    def _reduce_scatter(self, st: _RankState, a: Action) -> None:
        """FSDP: every unit's gradients are reduce-scattered once its backward has produced them."""
        for i, nbytes in enumerate(self.units[a.stage].reduce_bytes):
            self._dp_collective(st, "reduce_scatter", nbytes, a.stage, a.chunk, a.microbatch, i)

    def _rank(self, st: _RankState) -> Generator[Any, Any, None]:
        last_stage = self.stages - 1
        actions = self.schedule[st.coord.pp]
        last_grad = _last_grad_actions(actions, self.split_backward)
        fsdp = self.fsdp
        blocking = not self.s.parallelism.overlap_p2p_comm
        for a in actions:
            d = self.durations[a.stage]
            if a.kind == "F":
                if a.stage > 0:
                    yield from self._recv(st, "F", a.stage, a.chunk, a.microbatch, a.stage - 1)
                if fsdp:
                    yield from self._fsdp_phase(st, "forward", a, d.forward_s, d.forward_flops)
                else:
                    start = self.env.now
                    yield self.env.timeout(d.forward_s)
                    self._record(
                        st.rank,
                        "compute",
                        "forward",
                        a.stage,
                        a.chunk,
                        a.microbatch,
                        start,
                        d.forward_s,
                        flops=d.forward_flops,
                    )
                if a.stage < last_stage:
                    sent = self._send(st, "F", a.stage, a.chunk, a.microbatch, a.stage + 1)
                    if blocking:
                        yield self.env.timeout(sent)
                continue
            if a.kind == "B":
                if a.stage < last_stage:
                    yield from self._recv(st, "B", a.stage, a.chunk, a.microbatch, a.stage + 1)
                if d.recompute_s:
                    yield from self._compute(st, "recompute", a, d.recompute_s, d.forward_flops)
                start = self.env.now
                if fsdp:
                    yield from self._fsdp_phase(st, d.backward_kind, a, d.backward_s, d.backward_flops)
                else:
                    yield from self._compute(st, d.backward_kind, a, d.backward_s, d.backward_flops)
                if a.stage > 0:
                    sent = self._send(st, "B", a.stage, a.chunk, a.microbatch, a.stage - 1)
                    if blocking:
                        yield self.env.timeout(sent)
            else:
                start = self.env.now
                yield from self._compute(st, "backward_weight", a, d.backward_weight_s, d.forward_flops)
                if fsdp:
                    self._reduce_scatter(st, a)
            if a in last_grad and not fsdp:
                self._reduce_gradients(st, a, start)
        if st.pending_dp:
            yield st.dp_done
        yield from self._optimizer(st)

    def _reduce_gradients(self, st: _RankState, a: Action, start: float) -> None:
        """DDP / ZeRO-1: the chunk's gradient buckets, ready as the last backward produces them."""
        if self.zero == 0 and self.s.dp == 1:
            return
        plan = self.units[a.stage]
        now = self.env.now
        total = sum(plan.bucket_bytes) or 1
        done = 0.0
        overlap = self.s.parallelism.overlap_grad_reduce
        for i, nbytes in enumerate(plan.bucket_bytes):
            done += nbytes
            at = start + (now - start) * done / total if overlap else now
            ready = self.env.timeout(max(at - now, 0.0)) if at > now else None
            self._dp_collective(st, "all_reduce", nbytes, a.stage, a.chunk, -1, i, ready)

    def _optimizer(self, st: _RankState) -> Generator[Any, Any, None]:
        s = self.s
        params = sum(self.costs[c * s.pp + st.coord.pp].params for c in range(s.vpp))
        local = params / s.dp if self.zero >= 1 else params
        seconds = (
            local
            * optimizer_bytes_per_param(s)
            / (s.cluster.gpu.hbm_GBps * 1e9 * s.cluster.compute.memory_efficiency)
        )
        start = self.env.now
        yield self.env.timeout(seconds)
        self._record(st.rank, "compute", "optimizer", -1, -1, -1, start, seconds)
        if self.zero == 1:  # ZeroRedundancyOptimizer: each owner broadcasts its updated shard
            shard = params * DTYPE_BYTES[s.training.dtype] / s.dp
            events = [self._dp_collective(st, "broadcast", shard, -1, -1, -1, owner) for owner in range(s.dp)]
            yield self.env.all_of(events)

    # ------------------------------------------------------------------------------------------ run
    def run(self) -> list[Span]:
        """Simulate one step; returns the spans of the simulated ranks."""
        self._simulated = set(self.ranks)
        for rank in self.ranks:
            st = _RankState(rank, self.grid.coord(rank), simpy.Store(self.env), self.env.event())
            if self.s.dp > 1:
                self.env.process(self._dp_stream(st))
            self.env.process(self._rank(st))
        self.env.run()
        return self.spans


def optimizer_bytes_per_param(s: Scenario) -> float:
    """HBM bytes one optimizer step moves per parameter.

    Fused Adam (apex / torch `fused=True`) reads the gradient and reads and writes the fp32 parameter,
    momentum and variance (g + 24 bytes); zeroing the gradient writes g again. Mixed precision adds
    Megatron-LM's MixedPrecisionOptimizer passes: unscale and inf check (read + write g), gradient
    norm (read g) and the copy of fp32 parameters to the model's 16-bit ones (4 + 2)."""
    if s.training.dtype == "fp32":
        return 4 + 24 + 4
    g = 4.0 if s.training.grad_accumulation_fp32 else 2.0
    return g + 24 + g + 2 * g + g + 6


def _succeed(event: simpy.Event) -> None:
    event.succeed()


@dataclass(frozen=True, slots=True)
class _Durations:
    """A stage's per-micro-batch durations, computed once (the engine reads them per action)."""

    forward_s: float
    recompute_s: float
    backward_s: float  # full backward, or the input-gradient part when the schedule splits it
    backward_weight_s: float
    forward_flops: float
    backward_flops: float
    backward_kind: str

    @classmethod
    def of(cls, cost: StageCost, split: bool) -> _Durations:
        return cls(
            forward_s=cost.forward_s,
            recompute_s=cost.recompute_s,
            backward_s=cost.backward_input_s if split else cost.backward_s,
            backward_weight_s=cost.backward_weight_s,
            forward_flops=cost.forward_flops,
            backward_flops=cost.forward_flops * (1 if split else 2),
            backward_kind="backward_input" if split else "backward",
        )


def _last_grad_actions(actions: tuple[Action, ...], split: bool) -> set[Action]:
    """Per chunk, the action after which that chunk's gradients are complete."""
    kind = "W" if split else "B"
    last: dict[int, Action] = {}
    for a in actions:
        if a.kind == kind:
            last[a.chunk] = a
    return set(last.values())
