"""What the sweep's per-layer costs depend on (simulator/sweep_estimate.py caches a `Layer` per key): the
layer key of a plan, the ZeRO stage its blocks are priced at, and which keys' one-stage segments are the
same (`shared_key`, `alike`)."""

from __future__ import annotations

from plancast.simulator.costs.host import HostCosts
from plancast.simulator.costs.mixed_precision import param_pass_ops
from plancast.simulator.costs.ops import Shape
from plancast.simulator.scenario import Scenario
from plancast.simulator.sweep_axes import Plan

LayerKey = tuple[int, int, bool, str, int, int, int, str, bool, int]
"""(tp, micro_batch_size, sequence_parallel, recompute, ep, cp, FSDP stage, dispatcher, ep overlap, etp):
what a `Layer` depends on. FSDP (ZeRO-2/3 over dp > 1) changes a block's own passes: no autocast weight
casts, a gradient cast (costs/mixed_precision.py), and its host time per unit (`fsdp_stage`); the
dispatcher, overlap and folded etp the MoE blocks' all-to-alls and expert GEMMs (costs/stage.py)."""


def layer_key(plan: Plan, fsdp_stages: bool = False) -> LayerKey:
    """The plan's `LayerKey`; `fsdp_stages` as `Estimator.fsdp_stages` (`Estimator.key` passes it)."""
    return (
        plan.tp, plan.micro_batch_size, plan.sequence_parallel, plan.recompute, plan.ep, plan.cp,
        fsdp_stage(plan.dp, plan.zero_stage, fsdp_stages), plan.dispatcher, plan.overlap_ep, plan.etp,
    )  # fmt: skip


def sharded(plan: Plan) -> bool:
    """Whether FSDP shards the plan's parameters (Scenario.fsdp: ZeRO-2/3 over more than one dp rank)."""
    return plan.dp > 1 and plan.zero_stage >= 2


def runs_units(plan: Plan) -> bool:
    """Whether the engine runs the plan's passes by FSDP units (engine/plan.py: ZeRO-2/3 over dp x cp)."""
    return plan.zero_stage >= 2 and plan.dp * plan.cp > 1


def fsdp_stage(dp: int, zero_stage: int, stages: bool) -> int:
    """The ZeRO stage a plan's blocks are priced at: 0 unless FSDP shards it (`sharded`); then 3, or its
    own stage where `stages` (the cluster's FSDP host overheads tell ZeRO-2's one unshard per unit from
    ZeRO-3's two, costs/host.py: a ZeRO-2 plan priced as ZeRO-3 there would be bounded above the engine)."""
    if dp <= 1 or zero_stage < 2:
        return 0
    return zero_stage if stages else 3


def has_fsdp_stages(base: Scenario) -> bool:
    """Whether ZeRO-2 and ZeRO-3 blocks cost differently on `base`'s cluster: only through FSDP2's host
    time per unit (costs/host.py HostCosts.of), which `plancast calibrate` fits on CPU; 0 on GPU presets."""
    compute = base.cluster.compute
    return compute.fsdp_unit_overhead_us > 0.0 or compute.fsdp_gather_overhead_us > 0.0


def recompute_pass(plan: Plan, base: Scenario) -> bool:
    """Whether the plan's backward runs a recompute pass of its own (costs/stage.py StageCost.recompute_full):
    full recompute of every block. With `training.recompute_num_layers` (Megatron's block or uniform
    method) the recomputed blocks re-run their forward inside their backward instead (costs/stage.py
    `_recomputing`, in the per-layer costs already), and no pass of its own gathers FSDP units."""
    return plan.recompute == "full" and base.training.recompute_num_layers is None


def shared_key(key: LayerKey) -> LayerKey:
    """The key whose one-stage segments `key`'s may be (`alike`): ZeRO 0, and recompute none for full."""
    recompute = "none" if key[3] == "full" else key[3]
    return (*key[:3], recompute, key[4], key[5], 0, *key[7:])


def alike(a: Scenario, b: Scenario) -> bool:
    """Whether costs/stage.py's stage_costs gives one-stage scenarios `a` and `b` (the same plan but for its
    ZeRO stage, and recompute none against full) the same segments. It reads the ZeRO stage only through
    Shape.of (autocast's residual bytes), HostCosts.of (FSDP2's host time per unit) and the parameter
    passes (costs/mixed_precision.py: FSDP's gradient cast, autocast's weight casts, torch's gradient
    accumulation), and recompute through Shape.of, the selective check, the bytes activation offload
    moves and partial recompute; so where those agree the segments do (tests/simulator/test_sweep_keys.py
    compares the segments themselves). On DeepSeek-V3's 2,048 H800s half the layer keys' segments are
    another key's: Megatron-LM prices ZeRO 0 and 3 blocks alike."""
    ta, tb = a.training, b.training
    if ta.recompute != tb.recompute and (
        {ta.recompute, tb.recompute} != {"none", "full"}
        or ta.activation_offload
        or tb.activation_offload
        or ta.recompute_num_layers is not None
        or tb.recompute_num_layers is not None
    ):
        return False
    return (
        Shape.of(a) == Shape.of(b)
        and HostCosts.of(a) == HostCosts.of(b)
        and param_pass_ops(a, 1.0, 1.0) == param_pass_ops(b, 1.0, 1.0)
    )
