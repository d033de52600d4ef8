"""A proven lower bound of the engine's step time for one plan, in closed form (docs/sweep.md proves it).

The sweep simulates plans in the order of this bound and stops once the next bound cannot beat the
k-th best simulated time, so its top k is exact. Each term is a time the engine cannot avoid:

- compute: a rank runs its actions one after another; its first action (F of its first stage,
  micro-batch 0) waits for that micro-batch's forwards on every earlier stage and their transfers, so
  it ends no earlier than that chain plus all its own passes plus its optimizer step;
- cool-down: a rank's last backward feeds the backward of the same micro-batch on every earlier stage,
  one after another, down to the first rank, whose optimizer follows;
- data parallel: the first rank's dp stream runs its collectives one after another and the optimizer
  waits for them; each collective costs at least one collective of their summed bytes (subadditive).

Pass times are the engine's per-segment costs (costs/stage.py) without the host costs that only add.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cache, lru_cache

from plancast.simulator.costs.collectives import CollectiveKind, Level, PricedCollectives, collective_seconds
from plancast.simulator.costs.host import HostCosts
from plancast.simulator.costs.moe_overlap import Unpaired, unpaired_counts, unpaired_passes
from plancast.simulator.costs.ops import DTYPE_BYTES
from plancast.simulator.costs.optimizer import optimizer_memory_s
from plancast.simulator.costs.params import chunk_tensor_bytes, rank_parameters
from plancast.simulator.costs.tp_comm import ddp_bucket_bytes
from plancast.simulator.engine.plan import Topology, p2p_bytes
from plancast.simulator.schedules import Schedule, build_schedule, splits_backward
from plancast.simulator.sweep_axes import Plan
from plancast.simulator.sweep_chain import (
    Compute,
    FsdpUnits,
    Replay,
    action_seconds,
    chain_bound,
    first_rank_walk,
    overlapped_s,
    replay,
)
from plancast.simulator.sweep_estimate import Estimator, degrees
from plancast.simulator.sweep_fsdp import (
    UnitPrice,
    block_gather_s,
    chunk_bytes,
    fsdp_units,
    gather_counts,
    gather_waits,
    rank_waits,
)
from plancast.simulator.sweep_keys import recompute_pass, runs_units
from plancast.simulator.sweep_segments import StageTimes, pays_alone
from plancast.simulator.units import unit_bytes

built_schedule = lru_cache(maxsize=256)(build_schedule)
"""Pure-function memoisation (as engine/plan.py's `_schedule`): a worker refining plans one task at a
time (simulator/sweep.py, `_replayed`) builds each schedule once, not once per plan, and the exact
memory check of a plan it then simulates (sweep.py, `_simulated`) reads the same one."""

TOLERANCE = 1e-9
"""Relative slack for the bound's floating-point sums, which add the same terms as the engine in
another order: a plan is skipped only when its bound exceeds the k-th best time by more than this."""


@dataclass
class Bound:
    """Lower bounds of the engine's step time, from an estimator's cached per-segment costs."""

    est: Estimator
    _compute: dict[tuple[object, ...], Compute] = field(default_factory=dict)
    _dp: dict[tuple[object, ...], tuple[float, ...]] = field(default_factory=dict)
    _hop: dict[tuple[int, int, int, bool], float] = field(default_factory=dict)
    _replays: dict[tuple[object, ...], Replay] = field(default_factory=dict)
    _optimizer: dict[tuple[int, ...], float] = field(default_factory=dict)
    _schedules: dict[tuple[str, int, int, int], Schedule] = field(default_factory=dict)
    _gathers: dict[tuple[object, ...], tuple[dict[int, tuple[int, int]]]] = field(default_factory=dict)
    _block_gather: dict[tuple[int, ...], float] = field(default_factory=dict)
    _units_cache: dict[tuple[object, ...], tuple[tuple[float, float], ...]] = field(default_factory=dict)
    _bucket_cache: dict[tuple[object, ...], tuple[tuple[tuple[int, ...], tuple[float, ...]], ...]] = field(
        default_factory=dict
    )
    _chunks: dict[tuple[object, ...], list[tuple[float, int]]] = field(default_factory=dict)
    _alones: dict[tuple[object, ...], Unpaired] = field(default_factory=dict)

    def replayed(self, plan: Plan) -> float:
        """A tighter bound than `seconds` (never below it), for the plans the search may simulate: the
        schedule replayed action by action, and the first rank's dp stream fed by its chunks' last
        backwards in their replayed order (docs/sweep.md)."""
        est, t = self.est, self.est.base.training
        m = t.global_batch_size // (plan.micro_batch_size * plan.dp)
        split = est.split(plan)
        rep = self._replay(plan, m, split)
        dense_dp = plan.dp * plan.cp
        zero = plan.zero_stage if dense_dp > 1 else 0
        opt = self._optimizer_s(plan, zero)
        other, first = max(rep.rank_end_s[1:], default=0.0), rep.rank_end_s[0]
        cheap = self.seconds(plan)
        if dense_dp == 1:
            return max(cheap, other, first + opt)
        if zero >= 2:
            return max(cheap, other, max(first, self._fsdp_stream(plan, m, split, zero)) + opt)
        buckets = self._buckets(plan, split)
        owned = [buckets[v] for v in plan.first_rank_stages()]
        drained = 0.0
        if est.dp_keys(plan).overlap_grad_reduce:  # each bucket ready at its share of its chunk's last B
            for (start, own), (sizes, seconds) in sorted(zip(rep.last_backward_s, owned, strict=True)):
                total, done = sum(sizes) or 1, 0
                for nbytes, collective_s in zip(sizes, seconds, strict=True):
                    done += nbytes
                    drained = max(drained, start + own * done / total) + collective_s
        else:  # every chunk's buckets once the final backward ends
            drained = max(start + own for start, own in rep.last_backward_s)
            drained += sum(sum(seconds) for _, seconds in owned)
        return max(cheap, other, max(first, drained) + opt + self._broadcasts(plan, split, zero))

    def _optimizer_s(self, plan: Plan, zero: int) -> float:
        """The first rank's optimizer step, memory-bound part (engine/plan.py, optimizer_s): its bytes per
        parameter depend on the plan (FSDP keeps no separate fp32 master copy, costs/optimizer.py)."""
        key = (*degrees(plan), zero)
        cached = self._optimizer.get(key)
        if cached is None:
            local = self.est.rank0_params(plan) / (plan.dp * plan.cp if zero >= 1 else 1)
            cached = self._optimizer[key] = optimizer_memory_s(plan.apply(self.est.base), local)
        return cached

    def _schedule(self, plan: Plan, m: int) -> Schedule:
        """The plan's schedule (simulator/schedules.py), built once per (name, pp, m, v)."""
        key = (plan.schedule, plan.pp, m, plan.virtual_stages)
        if (cached := self._schedules.get(key)) is None:
            cached = self._schedules[key] = built_schedule(plan.schedule, plan.pp, m, plan.virtual_stages)
        return cached

    def walked(self, plan: Plan) -> float | None:
        """Between `seconds` and `replayed` for a ZeRO-2/3 plan (None for others, DeepSpeed's too): its first
        rank as `replayed` counts it, walked alone (sweep_chain.first_rank_walk)."""
        est = self.est
        m, split = est.base.training.global_batch_size // (plan.micro_batch_size * plan.dp), est.split(plan)
        if (units := self._fsdp_units(plan, split) if runs_units(plan) else None) is None:
            return None
        times, actions = est.stages(plan, split), est.first_rank_actions(plan, m)
        end = first_rank_walk(times, actions, splits_backward(plan.schedule), units)  # type: ignore[arg-type]
        stream = self._fsdp_stream(plan, m, split, plan.zero_stage)
        return max(self.seconds(plan), max(end, stream) + self._optimizer_s(plan, plan.zero_stage))

    def _fsdp_stream(self, plan: Plan, m: int, split: tuple[int, ...], zero: int) -> float:
        """ZeRO-2/3: the first rank's gathers and reduce-scatters one after another, each unit apart
        (`_unit_collectives`), gathers counted by walking the schedule through the units' state as the
        engine does (units.py FsdpState)."""
        counts = {s: f + b for s, (f, b) in self._gather_counts(plan, m, zero == 3)[0].items()}
        per_stage = self._unit_collectives(plan, split)
        return sum(
            counts.get(stage, 0) * gather + m * scatter
            for stage, (gather, scatter) in zip(plan.first_rank_stages(), per_stage, strict=True)
        )

    def _gather_counts(self, plan: Plan, m: int, zero3: bool = False) -> tuple[dict[int, tuple[int, int]]]:
        """The first rank's `gather_counts` (ZeRO-2 unless `zero3`), once per schedule shape: its actions
        alone are built (a pp-th of the schedule) unless the whole schedule is at hand."""
        key = (plan.schedule, plan.pp, m, plan.virtual_stages, zero3, recompute_pass(plan, self.est.base))
        cached = self._gathers.get(key)
        if cached is None:
            built = self._schedules.get((plan.schedule, plan.pp, m, plan.virtual_stages))
            actions = built[0] if built else self.est.first_rank_actions(plan, m)
            cached = self._gathers[key] = (gather_counts(actions, zero3, key[5]),)
        return cached

    def _unit_collectives(self, plan: Plan, split: tuple[int, ...]) -> tuple[tuple[float, float], ...]:
        """Per chunk of the first rank, one pass's all-gathers and reduce-scatters of its FSDP units, each
        unit priced apart with its host cost (sized as simulator/units.py's dp_plan sizes them)."""
        key = (*degrees(plan), split)
        cached = self._units_cache.get(key)
        if cached is not None:
            return cached
        s = plan.apply(self.est.base)
        price, dtype = UnitPrice.of(s, self.est.dp_levels(plan)), DTYPE_BYTES[s.training.dtype]
        priced = cache(price)  # block units alike: each size priced once
        out = []
        kinds: dict[bool, tuple[float, float]] = {}  # one scenario: each kind of block sized once
        for stage in plan.first_rank_stages():
            first, last = stage == 0, stage == len(split) - 1
            units = unit_bytes(s, sum(split[:stage]), split[stage], first, last, dtype, kinds)
            gathers = sum(priced("all_gather", *b) for b in units)
            out.append((gathers, sum(priced("reduce_scatter", *b) for b in units)))
        cached = self._units_cache[key] = tuple(out)
        return cached

    def _fsdp_units(self, plan: Plan, split: tuple[int, ...]) -> FsdpUnits | None:
        """sweep_fsdp.fsdp_units of the plan, from the estimator's per-layer costs and dp group."""
        return fsdp_units(self.est.base, plan, split, self.est.dp_levels(plan), self.est.layer(plan).segments)

    def _replay(self, plan: Plan, m: int, split: tuple[int, ...]) -> Replay:
        key = (
            *self.est.key(plan),
            runs_units(plan),
            plan.pp,
            plan.dp,
            plan.zero_stage if runs_units(plan) else -1,
            plan.virtual_stages,
            plan.schedule,
            m,
            split,
        )  # fmt: skip  (DDP and ZeRO-1 replay alike: the same buckets, no FSDP units)
        cached = self._replays.get(key)
        if cached is None:
            times = self.est.stages(plan, split)
            sched = self._schedule(plan, m)
            split_backward = splits_backward(plan.schedule)  # type: ignore[arg-type]
            slowed = self._slowed(plan, split, times, split_backward)
            units = self._fsdp_units(plan, split) if runs_units(plan) else None
            alone = self._alone(plan, m)[0] if pays_alone(times) else frozenset()
            cached = self._replays[key] = replay(
                times, sched, self._hop_s(plan), split_backward, slowed, units, plan.holders(), alone
            )
        return cached

    def _slowed(
        self, plan: Plan, split: tuple[int, ...], times: tuple[StageTimes, ...], split_backward: bool
    ) -> tuple[float, ...] | None:
        """Per stage, what its last backward loses to its gradient buckets' all-reduces running beside
        it: the engine's own closed form (engine/data_parallel.py, _reduce_chunk), DDP/ZeRO-1 with
        overlap_grad_reduce only."""
        base = self.est.base
        slowdown = base.cluster.compute.overlap_slowdown
        dense_dp = plan.dp * plan.cp
        overlap = self.est.dp_keys(plan).overlap_grad_reduce
        if not (slowdown and overlap and dense_dp > 1 and plan.zero_stage <= 1):
            return None
        return tuple(
            slowdown * overlapped_s(sizes, seconds, action_seconds(st, v, split_backward)[1])
            for v, (st, (sizes, seconds)) in enumerate(zip(times, self._buckets(plan, split), strict=True))
        )

    def _buckets(
        self, plan: Plan, split: tuple[int, ...]
    ) -> tuple[tuple[tuple[int, ...], tuple[float, ...]], ...]:
        """Per virtual stage, its DDP gradient buckets (simulator/units.py, dp_plan) and each one's
        all-reduce time with its host costs (engine/plan.py, dp_collective_s)."""
        distopt = plan.zero_stage == 1 and self.est.base.parallelism.distributed_optimizer
        key = (plan.tp, plan.pp, plan.virtual_stages, plan.cp, plan.dp, split, distopt)
        cached = self._bucket_cache.get(key)
        if cached is not None:
            return cached
        base = self.est.base
        host = HostCosts.of(plan.apply(base))
        levels = self.est.dp_levels(plan)
        out, priced = [], PricedCollectives(levels)  # full buckets alike: each size priced once
        for v, n in enumerate(split):
            tensors = chunk_tensor_bytes(
                base.model, plan.tp, layers=n, has_embedding=v == 0, has_head=v == len(split) - 1,
                first_layer=sum(split[:v]),
            )  # fmt: skip
            sizes = tuple(ddp_bucket_bytes(tensors, self.est.dp_keys(plan).bucket_cap_MiB))
            # Megatron-LM's distributed optimizer reduce-scatters each bucket (engine/plan.py)
            kind: CollectiveKind = "reduce_scatter" if distopt else "all_reduce"
            per = host.dp_collective_s + (0.0 if distopt else host.ddp_all_reduce_s)
            out.append((sizes, tuple(priced(kind, b) + per for b in sizes)))
        cached = self._bucket_cache[key] = tuple(out)
        return cached

    def _broadcasts(self, plan: Plan, split: tuple[int, ...], zero: int) -> float:
        """ZeRO-1 after the optimizer: every owner's shard of each chunk, one after another (engine
        data_parallel.broadcast_shards, with the stage parameters of costs/params.py)."""
        if zero != 1:
            return 0.0
        base, dense_dp = self.est.base, plan.dp * plan.cp
        levels = self.est.dp_levels(plan)
        host = HostCosts.of(plan.apply(base))
        vocab_tp = plan.tp if base.parallelism.vocab_parallel else 1
        total = 0.0
        for stage in plan.first_rank_stages():
            params = rank_parameters(
                base.model, split, [stage], tp=plan.tp, vocab_tp=vocab_tp, ep=plan.ep, etp=plan.etp or None
            )[0]
            shard = params * DTYPE_BYTES[base.training.dtype] / dense_dp
            if base.parallelism.distributed_optimizer and self.est.dp_keys(plan).overlap_param_gather:
                continue  # gathered beside the next forward (engine/param_gather.py): none need show
            if base.parallelism.distributed_optimizer:  # Megatron-LM's one all-gather
                total += _one(levels, "all_gather", shard * dense_dp) + host.dp_collective_s
            else:
                total += dense_dp * (_one(levels, "broadcast", shard) + host.dp_collective_s)
        return total

    def after_passes_s(self, plan: Plan) -> float:
        """At least what `seconds` adds after the first rank's own passes (`Compute.first_rank_s`): its
        optimizer step, and after it ZeRO-1's broadcasts (every branch of `seconds` adds both)."""
        dense_dp = plan.dp * plan.cp
        zero = plan.zero_stage if dense_dp > 1 else 0
        opt = self._optimizer_s(plan, zero)
        if dense_dp > 1 and zero <= 1:
            return opt + self._dp_part(plan, self.est.split(plan), zero)[2]
        return opt

    def seconds(self, plan: Plan) -> float:
        """The bound for `plan` (see the module docstring)."""
        est, t = self.est, self.est.base.training
        m = t.global_batch_size // (plan.micro_batch_size * plan.dp)
        split = est.split(plan)
        c = self._compute_part(plan, m, split)
        dense_dp = plan.dp * plan.cp
        zero = plan.zero_stage if dense_dp > 1 else 0
        opt = self._optimizer_s(plan, zero)
        if dense_dp == 1:
            return max(c.other_ranks_s, c.first_rank_s + opt)
        dp = self._dp_part(plan, split, zero)
        if zero <= 1:
            chunk0_s, all_s, broadcast_s = dp
            if est.dp_keys(plan).overlap_grad_reduce:
                drained = c.final_backward_start_s + chunk0_s
            else:
                drained = c.final_backward_start_s + c.final_backward_s + all_s
            return max(c.other_ranks_s, max(c.first_rank_s, drained) + opt + broadcast_s)
        return max(c.other_ranks_s, max(c.first_rank_s, self.fsdp_stream_s(plan, m, split)) + opt)

    def fsdp_stream_s(self, plan: Plan, m: int, split: tuple[int, ...], walk: bool = True) -> float:
        """ZeRO-2/3 over dp x cp > 1: the least the first rank's data-parallel stream runs, one gather
        and reduce-scatter after another, before its optimizer (term 3 of docs/sweep.md). Without
        `walk`, ZeRO-2's gathers are counted once a stage (each stage's first forward gathers), not
        on the first rank's schedule walked: a lower bound of the walked count."""
        gather_s, scatter_s = self._dp_part(plan, split, plan.zero_stage)
        if plan.zero_stage == 3:  # every forward, recompute and backward gathers (sweep_fsdp.gather_passes)
            return (2 + recompute_pass(plan, self.est.base)) * m * gather_s + m * scatter_s
        if not walk:
            return gather_s + m * scatter_s
        # ZeRO-2 gathers again after each backward: counted on the first rank's schedule
        return self._fsdp_stream(plan, m, split, plan.zero_stage)

    # ------------------------------------------------------------------------------------- compute
    def _compute_part(self, plan: Plan, m: int, split: tuple[int, ...]) -> Compute:
        # DeepSpeed's first unit of a block is one GEMM's weights: no block-sized wait (sweep_fsdp.py)
        waits = runs_units(plan) and self.est.base.parallelism.framework != "deepspeed"
        key = (*self.est.key(plan), runs_units(plan), plan.pp, plan.virtual_stages, plan.schedule, m, split,
               (plan.dp, plan.zero_stage) if waits else 0)  # fmt: skip
        cached = self._compute.get(key)
        if cached is None:
            times = self.est.stages(plan, split)
            cached = self._compute[key] = self.chain(plan, m, split, times)
        return cached

    def chain(
        self, plan: Plan, m: int, split: tuple[int, ...], times: tuple[StageTimes, ...], walk: bool = True
    ) -> Compute:
        """`chain_bound` of `plan` over per-stage `times`, with its passes' ZeRO-2/3 gather waits (docs/
        sweep.md): a sum of the times and waits with non-negative weights and maxima of such sums, so
        lower `times` give a lower bound (a group's floor, sweep_groups.py). Without `walk`, ZeRO-2's
        waits, which need the first rank's schedule walked, are left out (they only add)."""
        ranks = None
        if runs_units(plan) and self.est.base.parallelism.framework != "deepspeed":
            if plan.zero_stage == 3:  # every pass gathers
                times = gather_waits(times, split, self._block_gather_s(plan))
            elif walk:  # ZeRO-2: the first rank's passes that gather, from its schedule
                ranks = rank_waits(self._gather_counts(plan, m), split, self._block_gather_s(plan))
        alone = self._alone(plan, m)[1] if pays_alone(times) else None
        return chain_bound(times, plan.pp, m, plan.schedule, self._hop_s(plan), plan.holders(), ranks, alone)

    def _alone(self, plan: Plan, m: int) -> Unpaired:
        """The schedule's unpaired passes (as the engine reads them) and their counts per stage."""
        key = (plan.schedule, plan.pp, m, plan.virtual_stages)
        cached = self._alones.get(key)
        if cached is None:
            passes = unpaired_passes(self._schedule(plan, m))
            cached = self._alones[key] = (passes, unpaired_counts(passes, plan.pp * plan.virtual_stages))
        return cached

    def _chunk_bytes(self, plan: Plan, split: tuple[int, ...]) -> list[tuple[float, int]]:
        """`chunk_bytes` once per (tp, first-rank stages, split): it reads the estimator's model (fixed per
        bound) and of the plan only `tp`, `first_rank_stages()` and `split`, so the key covers every input
        (the dp degrees and ZeRO stages of a tp and pp share it). Callers only read the list."""
        key = (plan.tp, plan.first_rank_stages(), split)
        cached = self._chunks.get(key)
        if cached is None:
            cached = self._chunks[key] = chunk_bytes(self.est.base, plan, split)
        return cached

    def _block_gather_s(self, plan: Plan) -> float:
        """One block unit's all-gather with its host cost, as `_fsdp_units` prices it."""
        key = degrees(plan)
        cached = self._block_gather.get(key)
        if cached is None:
            cached = self._block_gather[key] = block_gather_s(self.est.base, plan, self.est.dp_levels(plan))
        return cached

    def _hop_s(self, plan: Plan) -> float:
        """The shortest a pipeline transfer can take: its bytes over the fastest tier (pipeline.py)."""
        key = (plan.tp, plan.micro_batch_size, plan.cp, plan.sequence_parallel)
        hop = self._hop.get(key)
        if hop is None:
            base = self.est.base
            s = plan.apply(base)
            nbytes = p2p_bytes(s)
            compute = base.cluster.compute
            busy = 0.0 if compute.p2p_rendezvous else compute.p2p_busy_delay_us * 1e-6
            links = Topology.of(base).links
            fastest = min(nbytes / link.bandwidth_Bps + link.latency_s for link in links)
            hop = self._hop[key] = busy + fastest
        return hop

    # ------------------------------------------------------------------------------- data parallel
    def _dp_part(self, plan: Plan, split: tuple[int, ...], zero: int) -> tuple[float, ...]:
        key = (*degrees(plan), zero, split)
        cached = self._dp.get(key)
        if cached is None:
            cached = self._dp[key] = self._dp_seconds(plan, split, zero)
        return cached

    def _dp_seconds(self, plan: Plan, split: tuple[int, ...], zero: int) -> tuple[float, ...]:
        """DDP/ZeRO-1: (chunk 0's gradient all-reduce, every chunk's, ZeRO-1's broadcasts), each as one
        collective of the summed bytes plus every collective's host cost (engine/plan.py,
        dp_collective_s); ZeRO-2/3: (one pass's gathers, one pass's reduce-scatters) of every chunk's
        units (`_unit_collectives`)."""
        base = self.est.base
        s = plan.apply(base)
        host = HostCosts.of(s)
        levels = self.est.dp_levels(plan)
        chunks = self._chunk_bytes(plan, split)  # per owned chunk: (fp32 gradient bytes, tensors)
        grad = [b for b, _ in chunks]
        if zero <= 1:
            ar = host.ddp_all_reduce_s + host.dp_collective_s
            # Megatron-LM's distributed optimizer reduce-scatters and all-gathers (engine/plan.py
            # dense_grad_reduce); its reduce-scatter has no DDP all-reduce host cost, bounded by it
            distopt = zero == 1 and base.parallelism.distributed_optimizer
            kind: CollectiveKind = "reduce_scatter" if distopt else "all_reduce"
            ar = host.dp_collective_s if distopt else ar
            chunk0 = _one(levels, kind, grad[0]) + ar
            every = _one(levels, kind, sum(grad)) + ar * len(grad)
            broadcast = 0.0
            if zero == 1:  # every owner's shard of the rank's parameters (engine/plan.py)
                shard = self.est.rank0_params(plan) * DTYPE_BYTES[base.training.dtype] / (plan.dp * plan.cp)
                if distopt and self.est.dp_keys(plan).overlap_param_gather:
                    broadcast = 0.0  # beside the next forward (engine/param_gather.py): none need show
                elif distopt:
                    broadcast = _one(levels, "all_gather", shard * plan.dp * plan.cp)
                else:
                    broadcast = _one(levels, "broadcast", shard) * plan.dp * plan.cp
            return chunk0, every, broadcast
        # ZeRO-3 gathers each unit once per pass (forward, recompute, backward), resharding after;
        # ZeRO-2 keeps them gathered, at least one gather per step (units.py FsdpState). Each unit is
        # priced apart, as `_fsdp_stream` prices it: its own latency counts, not only its bytes.
        per_chunk = self._unit_collectives(plan, split)
        return sum(g for g, _ in per_chunk), sum(r for _, r in per_chunk)


def _one(levels: tuple[Level, ...], kind: CollectiveKind, nbytes: float, algorithm: str = "auto") -> float:
    return collective_seconds(kind, levels, nbytes, algorithm)  # type: ignore[arg-type]
