"""What the sweep's per-layer costs depend on (simulator/sweep_estimate.py caches a `Layer` per key): the
layer key of a plan, and the ZeRO stage its blocks are priced at."""

from __future__ import annotations

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
