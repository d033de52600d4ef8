"""The numbers one step of a plan is simulated with, derived before any event runs (no SimPy here).

`StepPlan.of(scenario)` computes, once per simulation, everything the SimPy processes read: the
schedule, per-stage durations and gradient buckets, the link tiers, the pipeline transfer size, the host
overheads, the ranks to simulate and who holds which stage. It is frozen: the engine (engine.py) keeps
only the event state, so these numbers are unit-tested without running a simulation.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from functools import cached_property, lru_cache

from plancast.simulator.costs.collectives import (
    Algorithm,
    CollectiveKind,
    Level,
    Link,
    collective_seconds,
    group_levels,
    ring_seconds,
)
from plancast.simulator.costs.durations import Durations
from plancast.simulator.costs.host import HostCosts, optimizer_host_s
from plancast.simulator.costs.moe_overlap import hidden_seconds, unpaired_passes
from plancast.simulator.costs.ops import DTYPE_BYTES
from plancast.simulator.costs.optimizer import optimizer_memory_s
from plancast.simulator.costs.stage import StageCost, stage_costs
from plancast.simulator.costs.tp_comm import folded_router_grad_bytes, sp_grad_all_reduce_bytes
from plancast.simulator.mesh import Coord, GroupName, RankGrid, span_tier
from plancast.simulator.scenario import Scenario
from plancast.simulator.schedules import (
    Action,
    Schedule,
    build_schedule,
    owned_stages,
    splits_backward,
    stage_rank,
)
from plancast.simulator.units import Unit, UnitPlan, dp_plan

MAIN_GRAD_BYTES = 4
"""Bytes per element of the tied embedding's gradient as its two holders sum it: Megatron-LM all-reduces
the fp32 `main_grad` (megatron/core/distributed/finalize_model_grads.py, _allreduce_word_embedding_grads)."""


@dataclass(frozen=True)
class Topology:
    """Link tiers as collectives see them, and the levels of each parallel group."""

    tier_sizes: tuple[int, ...]
    links: tuple[Link, ...]
    grid: RankGrid

    @classmethod
    def of(cls, s: Scenario) -> Topology:
        links = tuple(Link.of(t.bandwidth_GBps, t.latency_us, t.efficiency) for t in s.cluster.tiers)
        return cls(s.cluster.tier_sizes, links, s.grid)

    def levels(self, axis: GroupName, rank: int = 0) -> tuple[Level, ...]:
        return group_levels(self.grid.group(axis, rank), self.tier_sizes, self.links)

    def tier(self, a: int, b: int) -> int:
        return span_tier((a, b), self.tier_sizes)


@dataclass(frozen=True)
class StepPlan:
    """Derived numbers of one simulated step (seconds, bytes); see the module docstring."""

    s: Scenario
    topo: Topology
    schedule: Schedule
    split_backward: bool
    costs: tuple[StageCost, ...]
    durations: tuple[Durations, ...]
    """Per virtual stage: the durations of one micro-batch's passes."""
    units: tuple[UnitPlan, ...]
    """Per virtual stage: DDP buckets and FSDP2 units."""
    dp_levels: tuple[Level, ...]
    tp_levels: tuple[Level, ...]
    zero_stage: int
    """ZeRO stage in effect (0 without data parallelism)."""
    ranks: tuple[int, ...]
    """Ranks simulated: one per pipeline position, or every rank (full fidelity, shared compute)."""
    full_fidelity: bool
    """Every rank simulated (asked for, or forced by shared compute slots)."""
    p2p_bytes: int
    """Bytes one rank sends per pipeline transfer."""
    overlap_p2p: bool
    """Pipeline sends do not block the sender (parallelism.overlap_p2p_comm)."""
    share_links: bool
    """Pipeline transfers and dp collectives can meet on one tier: a rank's link there is shared."""
    dp_tier: int
    host: HostCosts
    compute_slots: int | None
    """Compute units per node when ranks share them (fewer than ranks per node), else None."""
    stages: int
    """Virtual pipeline stages (pp x v)."""
    dense_dp: int
    """Ranks the dense gradients and ZeRO shards span: data x context parallel (the `dp_cp` group of
    simulator/mesh.py; Megatron-LM's data-parallel group `with_context_parallel=True`)."""
    fsdp: bool
    """ZeRO-2/3: parameters gathered per unit before use, gradients reduce-scattered."""
    simulated: frozenset[int]
    """`ranks` as a set."""
    p2p_host_s: float
    """Host cost of posting one pipeline transfer."""
    rendezvous: bool
    """Transfers start once both sides have posted (cluster.compute.p2p_rendezvous: gloo)."""
    p2p_busy_s: float
    """A transfer's extra time while its sender computes (cluster.compute.p2p_busy_delay_us)."""
    p2p_thread_s: float
    """CPU time of the transport's threads per transfer side (cluster.compute.p2p_thread_us)."""
    # (the eight above are plain fields, not properties: the event loop reads them per action, and an
    # instance attribute is the cheapest read there is)
    replicate_levels: tuple[Level, ...] = ()
    """HSDP: the tiers of the replica group that all-reduces each unit's sharded gradient (mesh.py)."""
    alone: frozenset[tuple[str, int, int]] = frozenset()
    """(kind, stage, micro-batch) of the passes no pass of the other kind overlaps (moe_overlap_ep_comm:
    costs/moe_overlap.py unpaired_passes); empty without overlapped all-to-alls."""
    alone_durations: tuple[Durations, ...] = ()
    """Per virtual stage: `durations` with the all-to-alls an overlapped pass hides paid in full."""
    _tiers: dict[tuple[int, int], int] = field(default_factory=dict, compare=False, repr=False)
    _p2p_seconds: dict[tuple[int, int], float] = field(default_factory=dict, compare=False, repr=False)
    _dp_seconds: dict[tuple[CollectiveKind, float, tuple[Level, ...] | None], float] = field(
        default_factory=dict, compare=False, repr=False
    )

    @classmethod
    def of(
        cls, s: Scenario, full_fidelity: bool = False, costs_override: tuple[StageCost, ...] | None = None
    ) -> StepPlan:
        """`costs_override`: tests' uniform stages for the ideal identities."""
        topo = Topology.of(s)
        name = s.parallelism.pipeline_parallel_schedule
        split = splits_backward(name)
        tp_levels = topo.levels("tp")
        costs = costs_override or stage_costs(s, tp_levels)
        dp_levels = topo.levels("dp_shard_cp")  # dense gradients: dp x cp, HSDP's shard group (mesh.py)
        slots = s.cluster.compute_slots_per_node
        # Shared compute only matters when a node runs more ranks than it has compute units; symmetric
        # simulation would hide the contention, so every rank is simulated then.
        shared = slots if slots is not None and slots < s.cluster.gpus_per_node else None
        full = full_fidelity or shared is not None
        grid = topo.grid
        ranks = tuple(range(grid.world_size) if full else (grid.rank(Coord(p, 0, 0)) for p in range(s.pp)))
        zero_stage = s.parallelism.zero_stage if s.dp * s.cp > 1 else 0  # ZeRO shards over dp x cp
        host = HostCosts.of(s)
        schedule = _schedule(name, s.pp, s.num_microbatches, s.vpp)
        durations = tuple(Durations.of(c, split) for c in costs)
        alone, alone_durations = _alone(costs, durations, schedule, split)
        return cls(
            s=s,
            topo=topo,
            schedule=schedule,
            split_backward=split,
            costs=costs,
            durations=durations,
            alone=alone,
            alone_durations=alone_durations,
            units=tuple(dp_plan(s, c) for c in costs),
            dp_levels=dp_levels,
            tp_levels=tp_levels,
            zero_stage=zero_stage,
            ranks=ranks,
            full_fidelity=full,
            p2p_bytes=p2p_bytes(s),
            overlap_p2p=bool(s.parallelism.overlap_p2p_comm),
            share_links=s.pp > 1 and bool(dp_levels),
            dp_tier=span_tier(grid.group("dp_shard_cp", 0), topo.tier_sizes),
            host=host,
            compute_slots=shared,
            stages=s.pp * s.vpp,
            dense_dp=s.zero_dp,
            fsdp=zero_stage >= 2,
            simulated=frozenset(ranks),
            p2p_host_s=host.p2p_s,
            rendezvous=s.cluster.compute.p2p_rendezvous,
            p2p_busy_s=s.cluster.compute.p2p_busy_delay_us * 1e-6,
            p2p_thread_s=s.cluster.compute.p2p_thread_us * 1e-6,
            replicate_levels=topo.levels("dp_replicate") if grid.replicate > 1 else (),
        )

    def pass_durations(self, a: Action) -> Durations:
        """The durations `a` runs at: `alone_durations` where no pass of the other kind overlaps it."""
        if self.alone and (a.kind, a.stage, a.microbatch) in self.alone:
            return self.alone_durations[a.stage]
        return self.durations[a.stage]

    # --------------------------------------------------------------------------------- the layout
    @property
    def grid(self) -> RankGrid:
        return self.topo.grid

    def holder(self, coord: Coord, stage: int) -> int:
        """The rank holding virtual `stage` in `coord`'s data- and tensor-parallel replica."""
        pp_rank = stage_rank(self.s.parallelism.pipeline_parallel_schedule, self.s.pp, stage)
        return self.grid.rank(Coord(pp_rank, coord.dp, coord.tp, cp=coord.cp))

    def holders(self, coord: Coord) -> tuple[int, ...]:
        """Per virtual stage, its holder in `coord`'s replica."""
        return tuple(self.holder(coord, v) for v in range(self.stages))

    def owned_stages(self, pp_rank: int) -> tuple[int, ...]:
        """The virtual stages of pipeline rank `pp_rank`, one per chunk."""
        return owned_stages(self.s.parallelism.pipeline_parallel_schedule, self.s.pp, pp_rank, self.s.vpp)

    def final_backward(self, pp_rank: int) -> Action | None:
        """The rank's last backward action of the step: its pipeline flush ends with it."""
        return next((a for a in reversed(self.schedule[pp_rank]) if a.kind == "B"), None)

    def last_backwards(self, pp_rank: int) -> frozenset[Action]:
        """Per chunk, its last backward action (after which DDP's gradients of that chunk are complete)."""
        last: dict[int, Action] = {}
        for a in self.schedule[pp_rank]:
            if a.kind == "B":
                last[a.stage] = a
        return frozenset(last.values())

    def is_last_backward(self, pp_rank: int) -> tuple[bool, ...]:
        """Per action of the rank's schedule, whether it is one of `last_backwards` (read beside the
        schedule: an Action's hash is a Python-level call, too slow to look up per action)."""
        last = {id(a) for a in self.last_backwards(pp_rank)}
        return tuple(id(a) in last for a in self.schedule[pp_rank])

    # ---------------------------------------------------------------------------------- transfers
    def tier(self, a: int, b: int) -> int:
        tier = self._tiers.get((a, b))
        if tier is None:
            tier = self._tiers[(a, b)] = self.topo.tier(a, b)
        return tier

    def p2p_seconds(self, rank: int, peer: int) -> float:
        """Duration of one pipeline transfer between two ranks (memoised: it is read per transfer). A
        rendezvous transfer's busy-sender delay depends on when its receive is posted (pipeline.py);
        otherwise every transfer carries it."""
        seconds = self._p2p_seconds.get((rank, peer))
        if seconds is None:
            link = self.topo.links[self.tier(rank, peer)]
            busy = 0.0 if self.rendezvous else self.p2p_busy_s  # CPU ranks on busy cores (cluster.py)
            seconds = self._p2p_seconds[(rank, peer)] = (
                self.p2p_bytes / link.bandwidth_Bps + link.latency_s + busy
            )
        return seconds

    def tie_peer(self, coord: Coord, rank: int, stage: int) -> int | None:
        """The other holder of the tied embedding, if `stage` holds one copy and another rank the other."""
        if not self.s.model.tie_word_embeddings or self.stages == 1 or stage not in (0, self.stages - 1):
            return None
        peer = self.holder(coord, self.stages - 1 if stage == 0 else 0)
        return None if peer == rank else peer

    @property
    def tied_grad_bytes(self) -> int:
        """The tied embedding's gradient as its two holders all-reduce it (each holds its vocab shard)."""
        m = self.s.model
        return m.vocab_size * m.hidden_size * MAIN_GRAD_BYTES // self.s.vocab_tp

    def tied_all_reduce_s(self, rank: int, peer: int) -> float:
        """The two-rank all-reduce of the tied embedding's gradient over their link."""
        return ring_seconds("all_reduce", 2, self.tied_grad_bytes, self.topo.links[self.tier(rank, peer)])

    def sp_norm_all_reduce(self, stage: int) -> tuple[int, float] | None:
        """(bytes, seconds) of the sequence-parallel norm gradients' all-reduce over tp after the flush,
        or None when the stage has none."""
        s = self.s
        layers = s.layer_split[stage]
        if not (s.tp > 1 and s.parallelism.sequence_parallel and layers):
            return None
        nbytes = sp_grad_all_reduce_bytes(layers, s.model.hidden_size, layernorm=s.model.norm == "layernorm")
        nbytes += folded_router_grad_bytes(s, sum(s.layer_split[:stage]), layers)
        return nbytes, collective_seconds("all_reduce", self.tp_levels, nbytes)

    def dp_collective_s(
        self, kind: CollectiveKind, nbytes: float, levels: tuple[Level, ...] | None = None
    ) -> float:
        """One data-parallel collective of this rank, its host cost included (memoised: the same
        buckets and units recur every micro-batch).

        All-gathers move the gathered tensor: nbytes is this rank's full (unsharded) unit. ZeRO-2/3
        gathers and reduce-scatters run the framework's algorithm (parallelism.zero_collective_algorithm;
        simulator/catalog/frameworks.py cites both). `levels`: another group's (the routed experts'
        edp group); default the dense gradients' group."""
        key = (kind, nbytes, levels)
        seconds = self._dp_seconds.get(key)
        if seconds is None:
            algorithm: Algorithm = "auto"
            if kind in ("all_gather", "reduce_scatter"):
                algorithm = self.s.parallelism.zero_collective_algorithm or "hierarchical"
            seconds = collective_seconds(kind, levels or self.dp_levels, nbytes, algorithm) + self.dp_host_s
            if kind == "all_reduce":
                seconds += self.host.ddp_all_reduce_s
            self._dp_seconds[key] = seconds
        return seconds

    def unit_collective_s(self, kind: CollectiveKind, unit: Unit, scale: float) -> float:
        """An FSDP unit's all-gather or reduce-scatter (bytes x `scale`) and its routed experts' over edp
        (simulator/units.py), one after the other on the dp stream."""
        seconds = self.dp_collective_s(kind, unit.param_bytes * scale)
        if unit.expert_bytes:
            seconds += self.dp_collective_s(kind, unit.expert_bytes * scale, self.edp_levels)
        return seconds

    @cached_property
    def edp_levels(self) -> tuple[Level, ...]:
        """The tiers of rank 0's expert-data-parallel group (simulator/mesh.py)."""
        return self.topo.levels("edp")

    @cached_property
    def fsdp_reduce_scale(self) -> float:
        """Bytes a ZeRO-2/3 reduce-scatter moves per byte of its unit as units.py sizes it (in
        training.dtype): gradients are reduced in parallelism.fsdp_reduce_dtype."""
        return DTYPE_BYTES[self.s.fsdp_reduce_dtype] / DTYPE_BYTES[self.s.training.dtype]

    # ------------------------------------------------------------------------------ host and optimizer
    @cached_property
    def dp_host_s(self) -> float:
        """Host cost of one data-parallel collective (FSDP2's hooks)."""
        return self.host.dp_collective_s

    def optimizer_s(self, pp_rank: int) -> float:
        """The optimizer step of pipeline rank `pp_rank`: memory-bound update plus per-tensor host loop."""
        owned = list(self.owned_stages(pp_rank))
        params = sum(self.costs[v].params for v in owned)
        local = params / self.dense_dp if self.zero_stage >= 1 else params
        return optimizer_memory_s(self.s, local) + optimizer_host_s(self.s, owned)

    @cached_property
    def dense_grad_reduce(self) -> CollectiveKind:
        """The collective of a dense gradient bucket. ZeRO-1 with parallelism.distributed_optimizer is
        Megatron-LM's distributed optimizer, which reduce-scatters each bucket to its owners and
        all-gathers the updated parameters after the step (megatron/core/distributed/
        param_and_grad_buffer.py: start_grad_sync calls reduce_scatter_tensor with
        use_distributed_optimizer, all_reduce without); elsewhere DDP's all-reduce
        (ZeroRedundancyOptimizer then broadcasts the shards)."""
        if self.zero_stage == 1 and self.s.parallelism.distributed_optimizer:
            return "reduce_scatter"
        return "all_reduce"

    def broadcast_shard_bytes(self, stage: int) -> float:
        """ZeRO-1: the updated parameter shard each data-parallel owner broadcasts for virtual `stage`."""
        return self.costs[stage].params * DTYPE_BYTES[self.s.training.dtype] / self.dense_dp

    @cached_property
    def forward_param_gather(self) -> bool:
        """Megatron-LM's distributed optimizer with `--overlap-param-gather`: the updated parameters are
        all-gathered bucket by bucket in the next step's first forward of each chunk, not after the
        optimizer (megatron/core/distributed/distributed_data_parallel.py: the forward pre-hook waits
        for its bucket's gather and dispatches the next one, `finish_param_sync`)."""
        return self.dense_grad_reduce == "reduce_scatter" and bool(self.s.parallelism.overlap_param_gather)

    def param_gather_buckets(self, stage: int) -> tuple[float, ...]:
        """Under `forward_param_gather`, virtual `stage`'s parameter all-gathers in forward order: the
        bytes each moves (the whole bucket, as dp_collective_s counts an all-gather). Megatron-core
        lays its buckets out in reverse parameter order, the order gradients come (`bucket_bytes` is that
        order), and gathers them in reverse (distributed_data_parallel.py `next_param_gather_bucket_group`
        set "in reverse order of buckets"); each bucket holds its share of the parameters."""
        whole = self.broadcast_shard_bytes(stage) * self.dense_dp
        buckets = self.units[stage].bucket_bytes
        total = sum(buckets) or 1.0
        return tuple(whole * nbytes / total for nbytes in reversed(buckets))

    def shard_sync(self, stage: int) -> tuple[CollectiveKind, int, float, float]:
        """ZeRO-1 after the optimizer, for virtual `stage`: (kind, count, bytes, seconds of one). One
        broadcast per owner (ZeroRedundancyOptimizer), or, under Megatron-LM's distributed optimizer, one
        all-gather of the updated parameter buffer (megatron/core/distributed/param_and_grad_buffer.py,
        start_param_sync)."""
        shard = self.broadcast_shard_bytes(stage)
        if self.dense_grad_reduce == "reduce_scatter":
            whole = shard * self.dense_dp
            return "all_gather", 1, whole, self.dp_collective_s("all_gather", whole)
        return "broadcast", self.dense_dp, shard, self.dp_collective_s("broadcast", shard)


# Schedules are immutable data (tuples of frozen Actions) and the same few recur call after call (a
# sweep's finalists, a What-if slider): built once per (name, pp, m, v), as pure-function memoisation.
_schedule = lru_cache(maxsize=64)(build_schedule)


def p2p_bytes(s: Scenario) -> int:
    """Bytes one rank sends per pipeline transfer: its activation (micro-batch x sequence x hidden)."""
    act_elements = s.training.micro_batch_size * s.training.seq_len // s.cp * s.model.hidden_size
    # Each tp rank sends its activation; sequence parallelism shards it, and Megatron-LM's
    # scatter/gather optimisation (Narayanan et al. 2021 sec. 4.1) sends 1/t of it per rank.
    sharded = s.parallelism.sequence_parallel or s.parallelism.scatter_gather_p2p
    return act_elements * DTYPE_BYTES[s.training.dtype] // (s.tp if sharded else 1)


def _alone(
    costs: tuple[StageCost, ...], durations: tuple[Durations, ...], schedule: Schedule, split: bool
) -> tuple[frozenset[tuple[str, int, int]], tuple[Durations, ...]]:
    """The passes that run without a partner (costs/moe_overlap.py unpaired_passes) and, per stage, the
    durations they run at: the hidden all-to-all seconds added to the forward, and to the backward's
    input-gradient pass (the first stage's W under a split backward, which carries its whole backward).
    Empty where no all-to-all is overlapped."""
    hidden = [hidden_seconds(c) for c in costs]
    if not any(f or b for f, b in hidden):
        return frozenset(), ()
    out = []
    for d, (fwd, bwd) in zip(durations, hidden, strict=True):
        if split and not d.backward_s:
            out.append(replace(d, forward_s=d.forward_s + fwd, backward_weight_s=d.backward_weight_s + bwd))
        else:
            out.append(replace(d, forward_s=d.forward_s + fwd, backward_s=d.backward_s + bwd))
    return unpaired_passes(schedule), tuple(out)
