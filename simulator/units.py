"""Data-parallel communication units of one virtual stage: DDP gradient buckets and FSDP units.

ZeRO-0/1 (DDP): the stage's gradients go out in DDP buckets (`ddp_bucket_bytes` over the chunk's
parameter tensors) once its last micro-batch's backward produces them.
ZeRO-2/3 (FSDP2 `fully_shard`, as torchtitan wraps a model): one unit per transformer block plus a
root unit holding the embedding and head when the chunk has them. DeepSpeed's ZeRO-3 gathers per
submodule instead: its pre-forward hook fetches each module's partitioned parameters (QKV, output
projection, FC1, FC2; LayerNorm weights stay whole below `stage3_param_persistence_threshold`, 1e5
elements), and its prefetch looks ahead by parameters (`stage3_prefetch_bucket_size`, 5e7 elements:
one submodule of a 10B+ model), so a block is several units and the attention core and the
elementwise ops between them are units without parameters (deepspeed/runtime/zero/config.py,
partitioned_param_coordinator.py). The state of each unit follows
FSDP2 (and runtime/expected.py, which the runtime's tests check against real runs): a pass gathers
the units that are not gathered; ZeRO-3 reshards every unit after its forward (the root included),
ZeRO-2 keeps them until the backward; every backward reshards all units and reduce-scatters each.
Each block unit holds its own block's bytes (a dense block of DeepSeek-V3 outweighs its MoE blocks'
attention, router and shared expert 2.5x). An MoE block's routed experts are a second FSDP unit over
the expert-data-parallel group edp (torchtitan's apply_fsdp: `fully_shard(transformer_block.moe.experts,
mesh=dp_mod_ep_mesh)` before the block's own `fully_shard`, prefetched with it; NeMo AutoModel and
Megatron-FSDP shard them over their expert-data-parallel group alike): gathered and reduce-scattered
with their block, right after the block's own collectives on the rank's dp stream (`Unit.expert_bytes`).
Under DDP / ZeRO-1 the experts' gradients are all-reduced over edp after the dense buckets instead.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from plancast.simulator.costs.efficiency import op_seconds
from plancast.simulator.costs.op import pass_multiple
from plancast.simulator.costs.ops import DTYPE_BYTES, Shape, gemm_weight_elements, layer_forward
from plancast.simulator.costs.params import chunk_expert_bytes, chunk_tensor_bytes
from plancast.simulator.costs.stage import StageCost
from plancast.simulator.costs.tp_comm import ddp_bucket_bytes
from plancast.simulator.scenario import Scenario


@dataclass(frozen=True, slots=True)
class Unit:
    """One FSDP unit: its parameter bytes on this rank (before sharding) and its share of the compute."""

    name: str
    param_bytes: float
    forward_share: float  # fraction of the stage's forward time spent in this unit
    backward_share: float
    expert_bytes: float = 0.0  # its routed experts' bytes on this rank, gathered over edp (ZeRO-2/3)


@dataclass(frozen=True, slots=True)
class UnitPlan:
    """The data-parallel traffic of one virtual stage."""

    bucket_bytes: tuple[int, ...]  # DDP buckets, in the order they are reduced
    units: tuple[Unit, ...]  # FSDP units, root first
    expert_bucket_bytes: tuple[int, ...] = ()  # routed-expert gradients, reduced over edp after the dense


@dataclass
class FsdpState:
    """Which units of one stage on one rank are gathered (FSDP2's rules, see the module docstring)."""

    plan: UnitPlan
    zero3: bool
    gathered: dict[str, bool] = field(default_factory=dict)

    def forward(self) -> list[tuple[Unit, bool]]:
        """(unit, needs a gather) in forward order, updating the state."""
        out = []
        for unit in self.plan.units:
            out.append((unit, not self.gathered.get(unit.name, False)))
            self.gathered[unit.name] = not self.zero3
        return out

    def backward(self) -> list[tuple[Unit, bool]]:
        """(unit, needs a gather) in backward order (blocks reversed, root last); all reshard after."""
        order = [u for u in reversed(self.plan.units) if u.name != "root"]
        order += [u for u in self.plan.units if u.name == "root"]
        out = [(u, not self.gathered.get(u.name, False)) for u in order]
        self.gathered = {}
        return out


def dp_plan(s: Scenario, cost: StageCost) -> UnitPlan:
    """Buckets and FSDP units of one virtual stage on one rank."""
    stages = s.pp * s.vpp
    first, last = cost.stage == 0, cost.stage == stages - 1
    layers = sum(1 for g in cost.segments if g.part == "layer")
    start = sum(s.layer_split[: cost.stage])
    tensors = chunk_tensor_bytes(
        s.model, s.tp, layers=layers, has_embedding=first, has_head=last, dtype_bytes=4, first_layer=start
    )
    buckets = tuple(ddp_bucket_bytes(tensors, s.parallelism.bucket_cap_MiB))
    experts = chunk_expert_bytes(s.model, s.etp, s.ep, first_layer=start, layers=layers)
    # the expert reducer runs over the expert-data-parallel group (simulator/mesh.py "edp"); none when
    # every expert has one replica, nor under ZeRO-2/3, whose units carry the experts
    sharded = _fsdp(s)
    expert_buckets = (
        tuple(ddp_bucket_bytes([experts], s.parallelism.bucket_cap_MiB)) if s.edp > 1 and not sharded else ()
    )

    sizes = unit_bytes(s, start, layers, first, last, DTYPE_BYTES[s.training.dtype])
    root_bytes, blocks = (sizes[0][0], sizes[1:]) if first or last else (0.0, sizes)
    fwd_total = sum(g.forward_s for g in cost.segments) or 1.0
    bwd_total = sum(g.backward_input_s + g.backward_weight_s for g in cost.segments) or 1.0
    units = []
    if first or last:
        root = [g for g in cost.segments if g.part != "layer"]
        units.append(
            Unit(
                "root",
                root_bytes,
                sum(g.forward_s for g in root) / fwd_total,
                sum(g.backward_input_s + g.backward_weight_s for g in root) / bwd_total,
            )
        )
    # each block its own share: blocks differ (MoE after dense ones; a partial recompute's checkpointed
    # blocks re-run their forward in their backward, costs/recompute.py)
    for i, layer in enumerate(g for g in cost.segments if g.part == "layer"):
        fwd_share = layer.forward_s / fwd_total
        bwd_share = (layer.backward_input_s + layer.backward_weight_s) / bwd_total
        own, routed = blocks[i]
        block = [Unit("", own, fwd_share, bwd_share, routed)]
        if s.parallelism.framework == "deepspeed" and not s.model.is_moe:
            block = _submodules(s, own, fwd_share, bwd_share)
        units += [replace(u, name=f"layer{i}{u.name}") for u in block]
    return UnitPlan(buckets, tuple(units), expert_buckets)


def unit_bytes(
    s: Scenario,
    start: int,
    layers: int,
    first: bool,
    last: bool,
    dtype_bytes: int,
    kinds: dict[bool, tuple[float, float]] | None = None,
) -> list[tuple[float, float]]:
    """(own, routed-expert) bytes of one virtual stage's FSDP units on one rank before sharding, in forward
    order: the root (embedding, head, final norm: the stage's tensors less its blocks') first where the
    stage is the first or the last, then each block from global layer `start` (`block_bytes`). `kinds`:
    the block bytes of `s` by kind (dense or MoE) found so far, shared by a caller that sizes several
    stages of one scenario."""
    kinds = {} if kinds is None else kinds  # blocks differ only as dense or MoE ones (params.py)
    blocks = []
    for layer in range(start, start + layers):
        moe = s.model.is_moe_layer(layer)
        if moe not in kinds:
            kinds[moe] = block_bytes(s, layer, dtype_bytes)
        blocks.append(kinds[moe])
    if not (first or last):
        return blocks
    root = chunk_tensor_bytes(s.model, s.tp, layers=0, has_embedding=first, has_head=last, dtype_bytes=1)
    return [(float(sum(root)) * dtype_bytes, 0.0), *blocks]


def _fsdp(s: Scenario) -> bool:
    """Whether the engine runs the plan's passes as FSDP units (engine/plan.py: ZeRO-2/3 over dp x cp > 1)."""
    return s.parallelism.zero_stage >= 2 and s.dp * s.cp > 1


def block_bytes(s: Scenario, layer: int, dtype_bytes: int) -> tuple[float, float]:
    """(its own, its routed experts') bytes of global block `layer` on one rank, as its FSDP units hold
    them before sharding: the experts only where ZeRO-2/3 shards them over an edp group of more than
    one rank (the module docstring), else 0."""
    own = chunk_tensor_bytes(
        s.model, s.tp, layers=1, has_embedding=False, has_head=False, dtype_bytes=1, first_layer=layer
    )
    routed = 0.0
    if _fsdp(s) and s.edp > 1:
        routed = float(chunk_expert_bytes(s.model, s.etp, s.ep, first_layer=layer, layers=1, dtype_bytes=1))
    return float(sum(own)) * dtype_bytes, routed * dtype_bytes


def _submodules(s: Scenario, layer_bytes: float, fwd_share: float, bwd_share: float) -> list[Unit]:
    """One block as DeepSpeed ZeRO-3 fetches it: a unit per GEMM weight and a unit without parameters
    for the ops between two GEMMs, in forward order. The block's bytes split in proportion to the
    weights (the small norm and bias tensors ride along); its time in proportion to each op's roofline
    time (backward: costs/op.py `backward_multiples`)."""
    x = Shape.of(s)
    gpu, compute, dtype = s.cluster.gpu, s.cluster.compute, s.training.dtype
    groups: list[tuple[str, float, float, float]] = []  # name, weight elements, forward s, backward s
    for op in layer_forward(x):
        t = op_seconds(op, gpu, compute, dtype)
        back = t * (pass_multiple(op) - 1.0)
        if op.category == "matmul":
            groups.append((op.name, gemm_weight_elements(op, x), t, back))
        elif groups and groups[-1][1] == 0.0:
            label, _, f, b = groups[-1]
            groups[-1] = (label, 0.0, f + t, b + back)
        else:
            groups.append((f"{op.name}+", 0.0, t, back))
    weights = sum(g[1] for g in groups)
    fwd = sum(g[2] for g in groups) or 1.0
    bwd = sum(g[3] for g in groups) or 1.0
    return [
        Unit(f".{label}", layer_bytes * w / weights, fwd_share * f / fwd, bwd_share * b / bwd)
        for label, w, f, b in groups
    ]
