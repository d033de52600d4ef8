"""Which plan should I buy? Enumerate every valid plan for a model on N GPUs, rank, simulate the best.

The space is tp x pp x dp x micro-batch x schedule (with virtual stages) x recompute x sequence
parallel x ZeRO stage: millions of plans for GPT-3 on 1,536 GPUs. Three steps keep it fast:

1. enumerate with pruning: a (tp, pp) pair whose smallest possible footprint (ZeRO-3, full recompute,
   micro-batch 1) does not fit is skipped whole; memory is a closed form per plan;
2. rank every plan that fits with a closed-form step time built from cached per-layer costs (the same
   cost model the engine uses: pipeline (m + (p-1)/v)(F + B), ZB-H1's smaller bubble, exposed
   data-parallel traffic, optimizer);
3. run the SimPy engine on the best `finalists` plans and rank them by simulated step time.

`tests/simulator/test_sweep.py` checks on small spaces that this never misses the plan an exhaustive
engine search finds.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from typing import Any

from plancast.simulator.costs.collectives import collective_seconds, group_levels
from plancast.simulator.costs.memory import GiB, layer_activation_bytes, model_state_bytes, peak_memory
from plancast.simulator.costs.ops import DTYPE_BYTES, Shape
from plancast.simulator.costs.optimizer import optimizer_bytes_per_param
from plancast.simulator.costs.params import layer_params, stage_parameters
from plancast.simulator.costs.stage import StageCost, stage_costs
from plancast.simulator.engine import Topology
from plancast.simulator.mesh import RankGrid, span_tier
from plancast.simulator.predict import simulate
from plancast.simulator.scenario import Scenario, even_layer_split
from plancast.simulator.validation import MAX_WORLD_SIZE, check_plan

SCHEDULES = ("1F1B", "Interleaved1F1B", "ZeroBubble", "GPipe")
RECOMPUTE = ("none", "selective", "full")


@dataclass(frozen=True, slots=True, order=True)
class Plan:
    """One point of the search space."""

    tp: int
    pp: int
    dp: int
    micro_batch_size: int
    schedule: str
    virtual_stages: int
    recompute: str
    sequence_parallel: bool
    zero_stage: int

    def apply(self, base: Scenario) -> Scenario:
        """The base scenario with this plan's parallelism and batch shape (layer split reset to even)."""
        par = base.parallelism.model_copy(
            update={
                "tensor_parallel_degree": self.tp,
                "pipeline_parallel_degree": self.pp,
                "data_parallel_degree": self.dp,
                "zero_stage": self.zero_stage,
                "pipeline_parallel_schedule": self.schedule,
                "virtual_stages_per_rank": self.virtual_stages,
                "sequence_parallel": self.sequence_parallel,
                "pipeline_layer_split": None,
            }
        )
        training = base.training.model_copy(
            update={"micro_batch_size": self.micro_batch_size, "recompute": self.recompute}
        )
        return base.model_copy(update={"parallelism": par, "training": training})

    def label(self) -> str:
        sched = self.schedule + (f"x{self.virtual_stages}" if self.virtual_stages > 1 else "")
        sp = "+SP" if self.sequence_parallel else ""
        return (
            f"tp{self.tp}{sp} pp{self.pp} dp{self.dp} mb{self.micro_batch_size} {sched} "
            f"rc={self.recompute} zero{self.zero_stage}"
        )


@dataclass(frozen=True, slots=True)
class Ranked:
    """A plan with its closed-form estimate and, for finalists, the engine's prediction."""

    plan: Plan
    estimate_s: float
    memory_gib: float
    step_time_s: float | None = None
    summary: dict[str, Any] | None = None

    def row(self) -> dict[str, Any]:
        """One table row: the plan's fields and label, its times, memory and throughput."""
        summary = self.summary or {}
        return {
            **asdict(self.plan),
            "plan": self.plan.label(),
            "step_time_s": self.step_time_s,
            "estimate_s": self.estimate_s,
            "peak_memory_gib": self.memory_gib,
            "mfu": summary.get("mfu"),
            "tokens_per_s": summary.get("tokens_per_s"),
        }


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def enumerate_plans(base: Scenario, gpus: int) -> Iterator[Plan]:
    """Every plan whose degrees and batch shape are valid for `base` on `gpus` GPUs (memory not checked)."""
    m, t = base.model, base.training
    layers = m.num_hidden_layers
    for tp in _divisors(gpus):
        if m.num_attention_heads % tp or m.kv_heads % tp or m.ffn_size % tp:
            continue
        for pp in _divisors(gpus // tp):
            if pp > layers:
                continue
            dp = gpus // (tp * pp)
            if t.global_batch_size % dp:
                continue
            for b in _divisors(t.global_batch_size // dp):
                mbs = t.global_batch_size // (dp * b)
                for schedule, v in _schedules(pp, mbs, layers):
                    for sp in (False, True) if tp > 1 and t.seq_len % tp == 0 else (False,):
                        for rc, zero in itertools.product(RECOMPUTE, range(4)):
                            yield Plan(tp, pp, dp, b, schedule, v, rc, sp, zero)


def _schedules(pp: int, microbatches: int, layers: int) -> Iterator[tuple[str, int]]:
    if pp == 1:
        yield "1F1B", 1
        return
    yield from (("1F1B", 1), ("GPipe", 1), ("ZeroBubble", 1))
    if microbatches % pp == 0:
        for v in range(2, layers // pp + 1):  # uneven splits allowed: layers go as evenly as possible
            yield "Interleaved1F1B", v


# ------------------------------------------------------------------------------------------ estimates
@dataclass(frozen=True, slots=True)
class _Layer:
    """Per-micro-batch times of the three segment kinds for one (tp, micro-batch, SP, recompute)."""

    layer_s: float  # forward + backward (+ recompute) of one block, tp traffic included
    layer_w_s: float  # its weight-gradient part (zero bubble defers it)
    embedding_s: float
    head_s: float
    act_bytes: float  # activation bytes one block keeps per micro-batch
    full_act_bytes: float  # ... without recompute (the block rebuilt during a full-recompute backward)


@dataclass
class _Estimator:
    """Closed-form memory (exactly the first pipeline rank's, a lower bound of the peak) and step time.

    Everything is arithmetic over a few cached quantities, so millions of plans cost seconds; the
    caches live in the estimator, one per sweep."""

    base: Scenario
    gpus: int
    _layers: dict[tuple[int, int, bool, str], _Layer] = field(default_factory=dict)
    _dp_levels: dict[tuple[int, int], tuple[Any, ...]] = field(default_factory=dict)
    _params: dict[tuple[int, int, int], float] = field(default_factory=dict)
    _splits: dict[int, tuple[int, ...]] = field(default_factory=dict)

    def split(self, stages: int) -> tuple[int, ...]:
        split = self._splits.get(stages)
        if split is None:
            split = self._splits[stages] = even_layer_split(self.base.model.num_hidden_layers, stages)
        return split

    def scenario(self, plan: Plan) -> Scenario:
        return plan.apply(self.base)

    def layer(self, plan: Plan) -> _Layer:
        key = (plan.tp, plan.micro_batch_size, plan.sequence_parallel, plan.recompute)
        cached = self._layers.get(key)
        if cached is None:
            flat = Plan(
                plan.tp,
                1,
                self.gpus // plan.tp,
                plan.micro_batch_size,
                "1F1B",
                1,
                plan.recompute,
                plan.sequence_parallel,
                0,
            )
            s = flat.apply(self.base)
            segments = stage_costs(s, Topology.of(s).levels("tp"))[0].segments
            emb, layer, head = segments[0], segments[1], segments[-1]
            one = StageCost(0, (layer,), 0.0, s.parallelism.tp_comm_overlap, plan.recompute == "full")
            x = Shape.of(s)
            cached = self._layers[key] = _Layer(
                one.forward_s + one.backward_s + one.recompute_s,
                layer.backward_weight_s,
                StageCost(0, (emb,), 0.0, one.tp_overlap, False).forward_s * 3,
                StageCost(0, (head,), 0.0, one.tp_overlap, False).forward_s * 3,
                layer_activation_bytes(x, plan.recompute),
                layer_activation_bytes(x, "none"),
            )
        return cached

    def dp_levels(self, plan: Plan) -> tuple[Any, ...]:
        key = (plan.tp, plan.pp)
        levels = self._dp_levels.get(key)
        if levels is None:
            grid = RankGrid(plan.pp, plan.dp, plan.tp)
            levels = self._dp_levels[key] = group_levels(
                grid.group("dp", 0), self.base.cluster.tier_sizes, Topology.of(self.base).links
            )
        return levels

    def rank0_params(self, plan: Plan) -> float:
        key = (plan.tp, plan.pp, plan.virtual_stages)
        params = self._params.get(key)
        if params is None:
            m = self.base.model
            stages = plan.pp * plan.virtual_stages
            split = even_layer_split(m.num_hidden_layers, stages)
            params = self._params[key] = sum(
                stage_parameters(
                    m,
                    split[c * plan.pp],
                    first=c == 0,
                    last=c * plan.pp == stages - 1,
                    tp=plan.tp,
                    pipelined=stages > 1,
                    vocab_tp=plan.tp if self.base.parallelism.vocab_parallel else 1,
                )
                for c in range(plan.virtual_stages)
            )
        return params

    def _p2p_exposed(self, plan: Plan, m: int) -> float:
        """Blocking pipeline sends (overlap_p2p_comm off) put every transfer on the critical path."""
        if self.base.parallelism.overlap_p2p_comm:
            return 0.0
        t = self.base.training
        nbytes = t.micro_batch_size * t.seq_len * self.base.model.hidden_size * DTYPE_BYTES[t.dtype] / plan.tp
        tier = span_tier((0, plan.tp * plan.dp), self.base.cluster.tier_sizes)
        link = Topology.of(self.base).links[tier]
        return 2 * m * plan.virtual_stages * (nbytes / link.bandwidth_Bps + link.latency_s)

    def memory_bytes(self, plan: Plan) -> float:
        """First pipeline rank's peak, as simulator.costs.memory.rank_memory computes it."""
        t = self.base.training
        stages = plan.pp * plan.virtual_stages
        split = self.split(stages)
        p, g, o = model_state_bytes(
            self.rank0_params(plan),
            dp=plan.dp,
            zero_stage=plan.zero_stage,
            dtype=t.dtype,
            grad_fp32=bool(t.grad_accumulation_fp32),
        )
        if plan.zero_stage >= 3 and plan.dp > 1:
            p += 2 * layer_params(self.base.model).per_rank(plan.tp) * DTYPE_BYTES[t.dtype]
        mbs = t.global_batch_size // (plan.micro_batch_size * plan.dp)
        chunk_layers = tuple(split[c * plan.pp] for c in range(plan.virtual_stages))
        inflight = _inflight_layers(plan.schedule, plan.pp, mbs, plan.virtual_stages, chunk_layers)
        lay = self.layer(plan)
        acts = inflight * lay.act_bytes + (lay.full_act_bytes if plan.recompute == "full" else 0.0)
        if stages == 1:  # the first rank is also the last: fp32 logits and their gradient
            acts += 2 * 4 * plan.micro_batch_size * t.seq_len * self.base.model.vocab_size / plan.tp
        return p + g + o + acts

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
        params = self.rank0_params(plan)
        dtype_bytes = DTYPE_BYTES[t.dtype]
        grad_bytes = params * (4 if t.grad_accumulation_fp32 else dtype_bytes)
        levels = self.dp_levels(plan)
        exposed = self._p2p_exposed(plan, m) if plan.pp > 1 else 0.0
        if plan.dp == 1:
            pass
        elif plan.zero_stage <= 1:  # DDP buckets (ZeRO-1: + one broadcast per owner after the step)
            cap_MiB = self.base.parallelism.bucket_cap_MiB  # None: one bucket per chunk (torch DDP)
            buckets = 1 if cap_MiB is None else max(math.ceil(grad_bytes / (cap_MiB * 2**20)), 1)
            comm = buckets * collective_seconds("all_reduce", levels, grad_bytes / buckets)
            tail = per_mb / v if self.base.parallelism.overlap_grad_reduce else 0.0
            exposed += max(comm - tail, 0.0)
            if plan.zero_stage == 1:
                exposed += plan.dp * collective_seconds("broadcast", levels, params * dtype_bytes / plan.dp)
        else:  # FSDP units: per micro-batch gathers (twice for ZeRO-3) and reduce-scatters per block
            units = per_rank_layers + 1
            unit_bytes = params * dtype_bytes / units
            gathers = 2 if plan.zero_stage == 3 else 1
            algorithm = self.base.parallelism.zero_collective_algorithm or "hierarchical"  # as the engine
            gather = collective_seconds("all_gather", levels, unit_bytes, algorithm)
            scatter = collective_seconds("reduce_scatter", levels, grad_bytes / units, algorithm)
            comm = m * units * (gathers * gather + scatter)
            first_waits = m * v * gathers * gather  # each chunk's first unit waits for its gather
            exposed += max(comm - m * per_mb, 0.0) + first_waits
        local = params / plan.dp if plan.zero_stage >= 1 else params
        optimizer = (
            local
            * optimizer_bytes_per_param(self.base)
            / (self.base.cluster.gpu.hbm_GBps * 1e9 * self.base.cluster.compute.memory_efficiency)
        )
        return pipeline + exposed + optimizer


def _inflight_layers(schedule: str, pp: int, m: int, v: int, chunk_layers: tuple[int, ...]) -> int:
    """Peak layer-micro-batches on the first pipeline rank, in closed form.

    GPipe holds every micro-batch; 1F1B and ZB-H1 hold min(pp, m) (warm-up pp - 1 forwards, then one
    more before the first backward, Narayanan et al. 2021 sec. 2.2); interleaved 1F1B holds
    min(warm-up + 1, v m) chunk passes with warm-up (v - 1) pp + 2 (pp - 1) (simulator/schedules.py).
    Exactly `peak_inflight_layers` of the built schedule when chunks have equal layers (a test checks
    it); with uneven chunks it uses the smallest chunk, a lower bound, so pruning stays safe."""
    if schedule == "GPipe":
        return m * chunk_layers[0]
    if schedule != "Interleaved1F1B":
        return min(pp, m) * chunk_layers[0]
    warmup = min((v - 1) * pp + 2 * (pp - 1), v * m)
    return min(warmup + 1, v * m) * min(chunk_layers)


# -------------------------------------------------------------------------------------------- search
@dataclass(frozen=True)
class SweepResult:
    """Ranked finalists plus the search's bookkeeping."""

    finalists: list[Ranked]
    enumerated: int
    fits: int
    pruned_subtrees: int


def _base_for(base: Scenario, gpus: int) -> Scenario:
    """The base scenario resized to `gpus` GPUs (node count from the cluster's node size)."""
    per_node = base.cluster.gpus_per_node
    nodes = max(gpus // per_node, 1)
    per_node = min(per_node, gpus)
    if nodes * per_node != gpus:
        raise ValueError(
            f"--gpus {gpus} is not a multiple of cluster.gpus_per_node ({base.cluster.gpus_per_node})"
        )
    tiers = [
        t.model_copy(update={"size": None}) if i == len(base.cluster.tiers) - 1 else t
        for i, t in enumerate(base.cluster.tiers)
    ]
    cluster = base.cluster.model_copy(update={"num_nodes": nodes, "gpus_per_node": per_node, "tiers": tiers})
    return base.model_copy(update={"cluster": cluster})


def sweep(
    base: Scenario,
    gpus: int,
    *,
    finalists: int = 24,
    progress: Callable[[int, int], None] | None = None,
    max_memory_gib: float | None = None,
) -> SweepResult:
    """Search all plans of `base`'s model and training on `gpus` GPUs; the best `finalists`, simulated.

    `max_memory_gib` caps the memory a plan may use per GPU below the GPU's own (headroom for the
    framework, or a smaller card of the same kind)."""
    if not 0 < gpus <= MAX_WORLD_SIZE:  # ValueError: the CLI and the dashboard show it as bad input
        raise ValueError(f"--gpus must be between 1 and {MAX_WORLD_SIZE:,}, got {gpus:,}")
    base = _base_for(base, gpus)
    est = _Estimator(base, gpus)
    # headroom for context, NCCL, fragmentation; --max-memory-gib caps it further
    limit = min(base.cluster.gpu.usable_memory_GiB, max_memory_gib or math.inf) * GiB
    candidates: list[Ranked] = []
    enumerated = pruned = 0
    smallest_fits: dict[tuple[int, int], bool] = {}
    for plan in enumerate_plans(base, gpus):
        enumerated += 1
        key = (plan.tp, plan.pp)
        if key not in smallest_fits:  # smallest footprint of the whole (tp, pp) subtree
            smallest = Plan(plan.tp, plan.pp, plan.dp, 1, "1F1B", 1, "full", plan.tp > 1, 3)
            smallest_fits[key] = est.memory_bytes(smallest) <= limit
        if not smallest_fits[key]:
            pruned += 1
            continue
        memory = est.memory_bytes(plan)
        if memory > limit:
            continue
        candidates.append(Ranked(plan, est.step_seconds(plan), memory / GiB))
    candidates.sort(key=lambda r: (r.estimate_s, r.plan))
    simulated: list[Ranked] = []
    for ranked in candidates:
        if len(simulated) >= finalists:
            break
        s = est.scenario(ranked.plan)
        if check_plan(s)[0] or peak_memory(s)[1].total > limit:  # exact check over every pipeline rank
            continue
        summary = simulate(s, events=False).summary
        simulated.append(
            Ranked(
                ranked.plan, ranked.estimate_s, summary["peak_memory_gib"], summary["step_time_s"], summary
            )
        )
        if progress is not None:
            progress(len(simulated), finalists)
    simulated.sort(key=lambda r: (r.step_time_s or math.inf, r.plan))
    return SweepResult(simulated, enumerated, len(candidates), pruned)
