"""The sweep's closed-form step time and memory of a plan, from cached per-layer costs (the same cost
model the engine uses); simulator/sweep.py ranks every plan with it before simulating the best."""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from typing import Any, NamedTuple

from plancast.simulator.costs.collectives import CollectiveKind, collective_seconds, group_levels
from plancast.simulator.costs.memory import (
    layer_activation_bytes,
    loss_bytes_per_logit,
    model_state_bytes,
    peak_inflight_layers,
    rebuilds_a_block,
)
from plancast.simulator.costs.memory_fsdp import reduce_scatter_bytes, root_unit_bytes
from plancast.simulator.costs.moe import moe_activation_bytes
from plancast.simulator.costs.ops import DTYPE_BYTES, Shape
from plancast.simulator.costs.optimizer import optimizer_bytes_per_param
from plancast.simulator.costs.params import layer_params, rank_parameters
from plancast.simulator.engine import Topology
from plancast.simulator.mesh import RankGrid, span_tier
from plancast.simulator.scenario import Scenario
from plancast.simulator.schedules import SCHEDULES, Action
from plancast.simulator.sweep_axes import Plan
from plancast.simulator.sweep_inflight import CLOSED_FORM, INFLIGHT_STEADY, inflight_layers
from plancast.simulator.sweep_keys import (
    LayerKey,
    fsdp_stage,
    has_fsdp_stages,
    layer_key,
    recompute_pass,
    sharded,
)
from plancast.simulator.sweep_layer import Layer, Pricing, unpack
from plancast.simulator.sweep_segments import (
    StageTimes,
    stage_times,
)


class DpCosts(NamedTuple):
    """Seconds of the first pipeline rank's data-parallel collectives (each one's whole time; 0 where the
    plan has none) and of its optimizer step."""

    all_reduce_s: float  # DDP: every bucket's all-reduce
    broadcast_s: float  # ZeRO-1: every owner's shard broadcast
    all_gather_s: float  # ZeRO-2/3: one unit's gather
    reduce_scatter_s: float  # ZeRO-2/3: one unit's gradient reduce-scatter
    optimizer_s: float


class DpKeys(NamedTuple):
    """The [parallelism] keys whose framework default depends on the plan (frameworks.PLAN_DEPENDENT)."""

    overlap_grad_reduce: bool
    overlap_param_gather: bool
    bucket_cap_MiB: float | None


@dataclass
class Estimator:
    """Closed-form memory (exactly the first pipeline rank's, a lower bound of the peak) and step time.

    Arithmetic over a few cached quantities, one estimator per task of a sweep. `layers` may start
    filled: the per-layer costs (a stage's costs over every layer) are the expensive ones."""

    base: Scenario
    gpus: int
    layers: dict[LayerKey, Layer] = field(default_factory=dict)
    packed: dict[LayerKey, bytes] = field(default_factory=dict)
    """Layers as a grouping task sent them (simulator/sweep_layer.py), unpacked into `layers` when read."""
    _dp_levels: dict[tuple[int, int, int], tuple[Any, ...]] = field(default_factory=dict)
    _params: dict[tuple[int, ...], tuple[float, float]] = field(default_factory=dict)
    _splits: dict[tuple[int, int, int], tuple[int, ...]] = field(default_factory=dict)
    _tp_levels: dict[tuple[int, int, int], tuple[Any, ...]] = field(default_factory=dict)
    _states: dict[tuple[int, ...], float] = field(default_factory=dict)
    _dp: dict[tuple[int, ...], DpCosts] = field(default_factory=dict)
    _inflight: dict[tuple[object, ...], int] = field(default_factory=dict)
    _acts: dict[tuple[object, ...], tuple[float, float]] = field(default_factory=dict)
    _pricing: Pricing = field(init=False)
    _first_actions: dict[tuple[str, int, int, int], tuple[Action, ...]] = field(default_factory=dict)
    _stages: dict[tuple[object, ...], tuple[StageTimes, ...]] = field(default_factory=dict)
    _dp_keys: dict[tuple[int, int], DpKeys] = field(default_factory=dict)
    fsdp_stages: bool = field(init=False)
    """ZeRO-2 and ZeRO-3 blocks priced apart (`has_fsdp_stages`); else both as ZeRO-3."""

    def __post_init__(self) -> None:
        self.fsdp_stages = has_fsdp_stages(self.base)
        self._pricing = Pricing(self.base)

    def key(self, plan: Plan) -> LayerKey:
        """The plan's `LayerKey` on this estimator's cluster."""
        return layer_key(plan, self.fsdp_stages)

    def dp_keys(self, plan: Plan) -> DpKeys:
        """The plan's data-parallel keys as `Plan.apply` resolves them (each the framework's default for the
        plan where the scenario left it unset): they depend on its dp and ZeRO stage only."""
        key = (plan.dp, plan.zero_stage)
        cached = self._dp_keys.get(key)
        if cached is None:
            par = plan.apply(self.base).parallelism
            cached = self._dp_keys[key] = DpKeys(
                bool(par.overlap_grad_reduce), bool(par.overlap_param_gather), par.bucket_cap_MiB
            )
        return cached

    def split(self, plan: Plan) -> tuple[int, ...]:
        """The plan's blocks per virtual stage (Plan.layer_split)."""
        key = (plan.pp * plan.virtual_stages, plan.first_layers, plan.last_layers)
        split = self._splits.get(key)
        if split is None:
            m = self.base.model
            split = self._splits[key] = plan.layer_split(m.num_hidden_layers, m.num_nextn_predict_layers)
        return split

    def stages(self, plan: Plan, split: tuple[int, ...]) -> tuple[StageTimes, ...]:
        """sweep_segments.stage_times of the plan's per-layer costs, once per (layer key, split): a small
        key, where a cache on stage_times itself would hash every segment time on each call."""
        key = (self.key(plan), split)
        cached = self._stages.get(key)
        if cached is None:
            cached = self._stages[key] = stage_times(self.layer(plan).segments, split)
        return cached

    def layer(self, plan: Plan) -> Layer:
        key = self.key(plan)
        cached = self.layers.get(key)
        if cached is None and key in self.packed:
            cached = self.layers[key] = unpack(self.packed.pop(key))
        if cached is None:  # one stage of every layer, on the most data-parallel grid of tp and cp
            flat = self._flat(plan)
            tp_key = (plan.tp, plan.cp, plan.ep)  # the flat plan's grid: dp follows from tp and cp
            tp_levels = self._tp_levels.get(tp_key)
            if tp_levels is None:
                tp_levels = self._tp_levels[tp_key] = Topology.of(flat.apply(self.base)).levels("tp")
            segments = self._pricing.segments(key, flat, tp_levels)
            # the multi-token-prediction blocks run on the last stage with the head (costs/mtp.py); the
            # plan sets neither that nor tp overlap (Plan.apply)
            tail = 1 + self.base.model.num_nextn_predict_layers
            overlap, full = self.base.parallelism.tp_comm_overlap, recompute_pass(plan, self.base)
            passes, times = self._pricing.shared.segment_sums(segments, overlap, full)
            blocks = passes[1:-tail]  # StageCost(0, blocks, 0.0, overlap, full)'s sums, from its terms
            forward_s = sum(p[0] for p in blocks)
            backward_s = sum(p[1] for p in blocks) + sum(p[2] for p in blocks)
            n = len(blocks)  # an MoE model's layers differ: the mean block
            cached = self.layers[key] = Layer(
                (forward_s + backward_s + (forward_s if full else 0.0)) / n,
                sum(p[2] for p in blocks) / n,
                passes[0][0] * 3,
                sum(p[0] for p in passes[-tail:]) * 3,
                times,
            )
        return cached

    def _flat(self, plan: Plan) -> Plan:
        """The one-stage plan whose costs stand for `plan`'s blocks: the most data-parallel grid of its tp
        and cp, ZeRO-3 where the plan shards its parameters, or its own stage where the cluster tells
        them apart (`fsdp_stage`: FSDP changes a block's own passes)."""
        return Plan(
            plan.tp, 1, self.gpus // (plan.tp * plan.cp), plan.micro_batch_size, "1F1B", 1, plan.recompute,
            plan.sequence_parallel, fsdp_stage(plan.dp, plan.zero_stage, self.fsdp_stages), plan.ep, plan.cp,
            dispatcher=plan.dispatcher,
            overlap_ep=plan.overlap_ep, etp=plan.etp,
        )  # fmt: skip

    def dp_levels(self, plan: Plan) -> tuple[Any, ...]:
        """The tiers of rank 0's data-parallel group as the engine prices its collectives over them: dp x
        cp, or under HSDP (`data_parallel_replicate_degree`, kept from the base) its shard group
        (engine/plan.py `dp_shard_cp`); a plan whose dp the replicas do not divide is refused
        (validation.py) and priced over dp x cp."""
        key = (plan.tp, plan.pp, plan.cp)
        levels = self._dp_levels.get(key)
        if levels is None:
            replicas = self.base.parallelism.data_parallel_replicate_degree
            grid = RankGrid(
                plan.pp, plan.dp, plan.tp, cp=plan.cp, replicate=replicas if plan.dp % replicas == 0 else 1
            )
            levels = self._dp_levels[key] = group_levels(
                grid.group("dp_shard_cp", 0), self.base.cluster.tier_sizes, Topology.of(self.base).links
            )
        return levels

    def rank0_params(self, plan: Plan) -> float:
        return self._rank0(plan)[0]

    def _rank0(self, plan: Plan) -> tuple[float, float]:
        """(all, routed-expert) parameters of the first pipeline rank."""
        key = (plan.tp, plan.pp, plan.virtual_stages, plan.ep, plan.first_layers, plan.last_layers, plan.etp,
               plan.v_shape)  # fmt: skip
        params = self._params.get(key)
        if params is None:
            m = self.base.model
            split = self.split(plan)
            vocab_tp = plan.tp if self.base.parallelism.vocab_parallel else 1
            params = self._params[key] = rank_parameters(
                m, split, plan.first_rank_stages(), tp=plan.tp, vocab_tp=vocab_tp, ep=plan.ep,
                etp=plan.etp or None,
            )  # fmt: skip
        return params

    def _p2p_exposed(self, plan: Plan, m: int) -> float:
        """Blocking pipeline sends (overlap_p2p_comm off) put every transfer on the critical path."""
        if self.base.parallelism.overlap_p2p_comm:
            return 0.0
        t = self.base.training
        tokens = t.micro_batch_size * t.seq_len / plan.cp
        nbytes = tokens * self.base.model.hidden_size * DTYPE_BYTES[t.dtype] / plan.tp
        tier = span_tier((0, plan.tp * plan.dp), self.base.cluster.tier_sizes)
        link = Topology.of(self.base).links[tier]
        return 2 * m * plan.virtual_stages * (nbytes / link.bandwidth_Bps + link.latency_s)

    def _model_states(self, plan: Plan) -> float:
        """Parameters, gradients and optimizer states of the first pipeline rank (costs/memory.py), with
        ZeRO-3's gathered units: the same for every batch shape, schedule and recompute of a plan's
        degrees, so worked out once per (tp, pp, v, ep, cp, dp, ZeRO stage)."""
        key = degrees(plan)
        cached = self._states.get(key)
        if cached is None:
            t = self.base.training
            total, experts = self._rank0(plan)
            states = [
                model_state_bytes(
                    n,
                    dp=d,
                    zero_stage=plan.zero_stage,
                    dtype=t.dtype,
                    grad_fp32=bool(t.grad_accumulation_fp32),
                    master_params=self.base.amp_master_params,
                    master_weights=t.master_weights,
                    moment_bytes=DTYPE_BYTES[t.optimizer_moment_dtype],
                )
                for n, d in ((total - experts, plan.dp * plan.cp), (experts, expert_dp(plan)))
            ]
            p, g, o = (sum(parts) for parts in zip(*states, strict=True))
            if plan.zero_stage >= 3 and plan.dp > 1:
                p += 2 * layer_params(self.base.model).per_rank(plan.tp) * DTYPE_BYTES[t.dtype]
            if plan.pp == 1 and plan.zero_stage >= 2:  # FSDP2's backward buffers (costs/memory_fsdp.py)
                s = plan.apply(self.base)
                p += reduce_scatter_bytes(s) + root_unit_bytes(s, (0,))
            cached = self._states[key] = p + g + o
        return cached

    def memory_bytes(self, plan: Plan) -> float:
        """First pipeline rank's peak, as simulator.costs.memory.rank_memory computes it."""
        t = self.base.training
        stages = plan.pp * plan.virtual_stages
        split = self.split(plan)
        mbs = t.global_batch_size // (plan.micro_batch_size * plan.dp)
        chunk_layers = tuple(split[v] for v in plan.first_rank_stages())
        inflight = self._inflight_layers(plan, mbs, chunk_layers)
        act_bytes, full_act_bytes = self._activations(plan)
        rebuilt = rebuilds_a_block(plan.recompute, t.selective_recompute, moe=self.base.model.is_moe)
        acts = inflight * act_bytes + (full_act_bytes if rebuilt else 0.0)
        if stages == 1 or plan.v_shape:  # the first rank holds the last stage too: the loss's fp32 buffers
            logits = plan.micro_batch_size * t.seq_len / plan.cp * self.base.model.vocab_size / plan.tp
            acts += loss_bytes_per_logit(self.base, plan.tp) * logits
        return self._model_states(plan) + acts

    def states_at(self, template: Plan, zeros: Iterable[int]) -> dict[int, float]:
        """`_model_states` of `template` under each ZeRO stage of `zeros`: the cache read by its key,
        without building the plan unless it is missing (a sweep asks for every stage of each group)."""
        d = degrees(template)
        head, tail, out = d[:6], d[7:], {}
        for zero in zeros:
            cached = self._states.get((*head, zero, *tail))
            out[zero] = self._model_states(replace(template, zero_stage=zero)) if cached is None else cached
        return out

    def activations_at(self, template: Plan, recompute: str, zero: int) -> tuple[float, float]:
        """`_activations` of `template` under `recompute` and ZeRO stage `zero`, read as `states_at`."""
        t = template
        key = (
            t.tp,
            t.micro_batch_size,
            t.sequence_parallel,
            recompute,
            t.ep,
            t.cp,
            t.dp > 1 and zero >= 2,
            t.etp,
        )
        cached = self._acts.get(key)
        if cached is None:
            cached = self._activations(replace(template, recompute=recompute, zero_stage=zero))
        return cached

    def _activations(self, plan: Plan) -> tuple[float, float]:
        """(activation bytes one block keeps per micro-batch, the same without recompute: what backward
        rebuilds under full recompute): the same for every dispatcher and overlap, and worked out without
        the layer's segment costs, so that the memory check prices no layer."""
        key = (plan.tp, plan.micro_batch_size, plan.sequence_parallel, plan.recompute, plan.ep, plan.cp,
               sharded(plan), plan.etp)  # fmt: skip
        cached = self._acts.get(key)
        if cached is None:  # the expressions of `layer` for the default dispatcher, without its segments
            s = self._flat(replace(plan, dispatcher="alltoall", overlap_ep=False)).apply(self.base)
            x = Shape.of(s)
            mlp = moe_activation_bytes(x, s.model) if s.model.is_moe else None
            cached = self._acts[key] = (
                layer_activation_bytes(x, plan.recompute, mlp, s.training.selective_recompute),
                layer_activation_bytes(x, "none", mlp),
            )
        return cached

    def _inflight_layers(self, plan: Plan, m: int, chunk_layers: tuple[int, ...]) -> int:
        """`inflight_layers`, or for the schedules it has no closed form for (ZB-H2, ZB-V, DualPipeV) the
        first rank's built schedule walked (costs/memory.py peak_inflight_layers, the exact model's own
        count), once per (schedule, pp, micro-batches, chunk layers)."""
        if plan.schedule in CLOSED_FORM:
            return inflight_layers(plan.schedule, plan.pp, m, plan.virtual_stages, chunk_layers)
        m = min(m, INFLIGHT_STEADY[plan.schedule](plan.pp))  # the same peak past it (INFLIGHT_STEADY)
        key = (plan.schedule, plan.pp, m, chunk_layers)
        cached = self._inflight.get(key)
        if cached is None:
            actions = self.first_rank_actions(plan, m)
            cached = self._inflight[key] = peak_inflight_layers(actions, dict(enumerate(chunk_layers)))
        return cached

    def first_rank_actions(self, plan: Plan, m: int) -> tuple[Action, ...]:
        """The first pipeline rank's actions of the plan's schedule over `m` micro-batches, built once per
        (schedule, pp, m, v): the layer splits of one pp degree walk the same schedule."""
        key = (plan.schedule, plan.pp, m, plan.virtual_stages)
        cached = self._first_actions.get(key)
        if cached is None:
            rules = SCHEDULES[plan.schedule]  # type: ignore[index]
            cached = self._first_actions[key] = rules.build(0, plan.pp, m, plan.virtual_stages)
        return cached

    def _dp_costs(self, plan: Plan) -> DpCosts:
        """The data-parallel collectives and the optimizer of the first pipeline rank: the same for every
        batch shape, schedule and recompute of a plan's degrees, so worked out once per (tp, pp, v, ep,
        cp, dp, ZeRO stage)."""
        key = degrees(plan)
        cached = self._dp.get(key)
        if cached is not None:
            return cached
        t, par, keys = self.base.training, self.base.parallelism, self.dp_keys(plan)
        params = self.rank0_params(plan)
        dtype_bytes = DTYPE_BYTES[t.dtype]
        grad_bytes = params * (4 if t.grad_accumulation_fp32 else dtype_bytes)
        levels = self.dp_levels(plan)
        comm = broadcast = gather = scatter = 0.0
        if plan.dp == 1:
            pass
        elif plan.zero_stage <= 1:  # DDP buckets (ZeRO-1: + one broadcast per owner after the step)
            cap_MiB = keys.bucket_cap_MiB  # None: one bucket per chunk (torch DDP)
            buckets = 1 if cap_MiB is None else max(math.ceil(grad_bytes / (cap_MiB * 2**20)), 1)
            # Megatron-LM's distributed optimizer: reduce-scatter, then one all-gather (engine/plan.py)
            distopt = plan.zero_stage == 1 and par.distributed_optimizer
            kind: CollectiveKind = "reduce_scatter" if distopt else "all_reduce"
            comm = buckets * collective_seconds(kind, levels, grad_bytes / buckets)
            if distopt and keys.overlap_param_gather:
                pass  # gathered beside the next forward's compute (engine/param_gather.py)
            elif distopt:
                broadcast = collective_seconds("all_gather", levels, params * dtype_bytes, "hierarchical")
            elif plan.zero_stage == 1:
                broadcast = plan.dp * collective_seconds("broadcast", levels, params * dtype_bytes / plan.dp)
        else:  # FSDP units: one per block of the rank and one for the rest
            units = math.ceil(self.base.model.num_hidden_layers / plan.pp) + 1
            algorithm = par.zero_collective_algorithm or "hierarchical"  # as the engine
            gather = collective_seconds("all_gather", levels, params * dtype_bytes / units, algorithm)
            scatter = collective_seconds("reduce_scatter", levels, grad_bytes / units, algorithm)
        local = params / plan.dp if plan.zero_stage >= 1 else params
        optimizer = (
            local
            * optimizer_bytes_per_param(self.base)
            / (self.base.cluster.gpu.hbm_GBps * 1e9 * self.base.cluster.compute.memory_efficiency)
        )
        cached = self._dp[key] = DpCosts(comm, broadcast, gather, scatter, optimizer)
        return cached

    def step_seconds(self, plan: Plan) -> float:
        """(m + (p-1)/v)(F + B) for the bottleneck rank (ZB-H1: bubble (p-1)(F + B - 2W)), plus exposed
        data-parallel traffic and the optimizer."""
        t = self.base.training
        lay = self.layer(plan)
        layers = self.base.model.num_hidden_layers
        per_rank_layers = math.ceil(layers / plan.pp)
        per_mb = per_rank_layers * lay.layer_s + (lay.head_s if plan.pp > 1 else lay.head_s + lay.embedding_s)
        m, p, v = t.global_batch_size // (plan.micro_batch_size * plan.dp), plan.pp, plan.virtual_stages
        if plan.schedule == "ZeroBubble":
            pipeline = m * per_mb + (p - 1) * max(per_mb - 2 * per_rank_layers * lay.layer_w_s, 0.0)
        else:
            pipeline = (m + (p - 1) / v) * per_mb
        dp = self._dp_costs(plan)
        exposed = self._p2p_exposed(plan, m) if plan.pp > 1 else 0.0
        if plan.dp == 1:
            pass
        elif plan.zero_stage <= 1:
            tail = per_mb / v if self.dp_keys(plan).overlap_grad_reduce else 0.0
            exposed += max(dp.all_reduce_s - tail, 0.0)
            if plan.zero_stage == 1:
                exposed += dp.broadcast_s
        else:  # per micro-batch gathers (twice for ZeRO-3) and reduce-scatters per unit
            units = per_rank_layers + 1
            gathers = 2 if plan.zero_stage == 3 else 1
            comm = m * units * (gathers * dp.all_gather_s + dp.reduce_scatter_s)
            first_waits = m * v * gathers * dp.all_gather_s  # each chunk's first unit waits for its gather
            exposed += max(comm - m * per_mb, 0.0) + first_waits
        return pipeline + exposed + dp.optimizer_s


def degrees(plan: Plan) -> tuple[int, ...]:
    """What a plan's model states and data-parallel costs depend on: its degrees, ZeRO stage, split and
    the first rank's stages (V placement)."""
    return (
        plan.tp, plan.pp, plan.virtual_stages, plan.ep, plan.cp, plan.dp, plan.zero_stage, plan.first_layers,
        plan.last_layers, plan.etp, plan.v_shape,
    )  # fmt: skip


def expert_dp(plan: Plan) -> int:
    """Replicas of each expert, over which ZeRO shards the expert states (Scenario.edp): dp / ep, or on
    the folded grid tp x cp x dp / (ep x etp)."""
    if not plan.etp:
        return max(plan.dp // plan.ep, 1)
    return max(plan.tp * plan.cp * plan.dp // (plan.ep * plan.etp), 1)
