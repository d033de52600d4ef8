"""Refit the compute model and link tiers of a cluster from measurements.

Compute: every op's time is linear in (1/matmul_efficiency, 1/attention_efficiency,
1/memory_efficiency, op_overhead_s) once the roofline's max() is dropped (GEMMs are compute-bound,
elementwise ops memory-bound at the sizes that matter), so a forward, backward or recompute pass of
a stage is a row of coefficients; the measured durations fit a common scale of the efficiencies
and the per-op overhead by least squares on relative error. Links: `links.fit_link`
gives a tier's latency and bandwidth from collective timings; they replace the tier's values with
efficiency 1.

The result is a `Cluster` the simulator reads (`plancast calibrate RUN -o cluster.toml`, then
`[cluster] preset = "cluster.toml"` in a scenario).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import numpy as np

from plancast.simulator.cluster import Cluster, ComputeModel, Tier
from plancast.simulator.costs.host import optimizer_tensors, rank_stages
from plancast.simulator.costs.mixed_precision import param_pass_ops
from plancast.simulator.costs.op import backward_multiples
from plancast.simulator.costs.ops import (
    Op,
    Shape,
    embedding_forward,
    head_forward,
    layer_forward,
)
from plancast.simulator.costs.recompute import selective_recompute
from plancast.simulator.costs.stage import Part, segment_params, stage_costs
from plancast.simulator.engine import Topology, optimizer_memory_s
from plancast.simulator.scenario import Scenario


@dataclass(frozen=True, slots=True)
class Observation:
    """A measured compute duration of one (stage, kind) pass, compute only (tp traffic removed)."""

    stage: int
    kind: str  # forward | backward | backward_input | backward_weight | recompute | optimizer
    seconds: float


def _op_coefficients(op: Op, s: Scenario, flop_scale: float, byte_scale: float) -> np.ndarray:
    """Coefficients of x for one op (see module docstring)."""
    gpu, compute = s.cluster.gpu, s.cluster.compute
    row = np.zeros(4)
    if op.category == "memory" or op.flops == 0:
        row[2] = op.bytes * byte_scale / (gpu.hbm_GBps * 1e9)
    elif op.category == "matmul":
        half = compute.matmul_half_gflop * 1e9
        size_factor = op.flops / (op.flops + half)
        row[0] = op.flops * flop_scale / (gpu.peak_flops(s.training.dtype) * size_factor * op.relative_rate)
    else:
        # relative_rate: a fused kernel's head-width factor (costs/attention.py head_dim_rate)
        row[1] = op.flops * flop_scale / (gpu.peak_flops(s.training.dtype) * op.relative_rate)
    row[3] = (flop_scale if op.category != "memory" else byte_scale) * op.calls  # each call's overhead
    return row


def _pass_row(ops: Iterable[Op], s: Scenario, kind: str) -> np.ndarray:
    row = np.zeros(4)
    for op in ops:
        if kind in ("forward", "recompute"):
            row += _op_coefficients(op, s, 1.0, 1.0)
            continue
        grad_in, grad_w = backward_multiples(op)  # costs/op.py: the engine's backward of the op
        scale = {"backward_input": grad_in, "backward_weight": grad_w}.get(kind, grad_in + grad_w)
        if scale:
            row += _op_coefficients(op, s, scale, scale)
    return row


def layer_row(s: Scenario, kind: str) -> np.ndarray:
    """Coefficients of one pass of one transformer layer (as sharded by `s`'s tensor parallelism)."""
    return _pass_row(layer_forward(Shape.of(s)), s, kind)


def model_x(compute: ComputeModel) -> np.ndarray:
    """The unknowns the rows multiply: 1/efficiencies and the per-op overhead in seconds."""
    return np.array(
        [
            1 / compute.matmul_efficiency,
            1 / compute.attention_efficiency,
            1 / compute.memory_efficiency,
            compute.op_overhead_us * 1e-6,
        ]
    )


def stage_row(s: Scenario, stage: int, kind: str) -> np.ndarray:
    """Coefficients of one pass of virtual `stage` (same op lists as simulator/costs/stage.py)."""
    x = Shape.of(s)
    layers = s.layer_split[stage]
    last = s.pp * s.vpp - 1
    row = layers * (_pass_row(layer_forward(x), s, kind) + _param_passes_row(s, "layer", kind))
    if kind in ("backward", "backward_input") and s.training.recompute == "selective":
        recomputed = selective_recompute(layer_forward(x), x, s.training.selective_recompute)
        row += layers * _pass_row(recomputed, s, "forward")
    if stage == 0:
        row += _pass_row(embedding_forward(x), s, kind) + _param_passes_row(s, "embedding", kind)
    if stage == last:
        row += _pass_row(head_forward(x), s, kind) + _param_passes_row(s, "head", kind)
    return row


def _param_passes_row(s: Scenario, part: Part, kind: str) -> np.ndarray:
    """Coefficients of the parameter passes (costs/mixed_precision.py) of one segment in pass `kind`:
    the forward's casts in forward and recompute, the weight-gradient passes in backward."""
    forward, weight = param_pass_ops(s, *segment_params(s, part))
    ops = forward if kind in ("forward", "recompute") else weight if kind != "backward_input" else ()
    row = np.zeros(4)
    for op in ops:
        row += _op_coefficients(op, s, 1.0, 1.0)
    return row


def optimizer_tensor_overhead_us(s: Scenario, seconds: float) -> float:
    """The per-tensor host time (us) one measured optimizer step implies on `s`'s cluster.

    `seconds` is the mean over ranks (observations.mean_observations), so the rank's memory-
    bound time and tensor count are the means over pipeline ranks: what is left of the measured step
    after moving the optimizer's bytes is spread over its tensors (engine.optimizer_host_s)."""
    costs = stage_costs(s, Topology.of(s).levels("tp"))
    memory_s, tensors = [], []
    for r in range(s.pp):
        stages = rank_stages(s, r)
        params = sum(costs[v].params for v in stages) / (s.dp if s.parallelism.zero_stage >= 1 else 1)
        memory_s.append(optimizer_memory_s(s, params))
        tensors.append(optimizer_tensors(s, stages))
    host_s = seconds - float(np.mean(memory_s))
    return max(host_s, 0.0) / float(np.mean(tensors)) * 1e6


@dataclass(frozen=True)
class Measured:
    """Compute observations of one run, with the run's scenario."""

    scenario: Scenario
    observations: tuple[Observation, ...]


def fit_compute(runs: Iterable[Measured]) -> ComputeModel:
    """Fit the compute model on relative error over one or more runs: one scale on every efficiency
    (their ratios, the peak, the memory bandwidth and the GEMM size curve come from the cluster, e.g.
    measured by microbenchmarks) and the per-op overhead. Two parameters stay well determined by the
    handful of (stage, pass) medians a run gives, where four collinear ones would not."""
    runs = list(runs)
    if not runs:
        raise ValueError("no measured runs to calibrate from")
    rows, targets = [], []
    for run in runs:
        s = run.scenario
        for ob in run.observations:
            if ob.seconds <= 0 or ob.kind == "optimizer":  # the optimizer has its own fit (below)
                continue
            row = stage_row(s, ob.stage, ob.kind)
            rows.append(row / ob.seconds)
            targets.append(1.0)
    if not rows:
        raise ValueError("no compute observations to calibrate from (the run has no matched compute events)")
    s = runs[0].scenario
    a = np.array(rows)  # each row already divided by its measured seconds: the target is 1
    current = s.cluster.compute
    x0 = np.array(
        [1 / current.matmul_efficiency, 1 / current.attention_efficiency, 1 / current.memory_efficiency]
    )
    base = a[:, :3] @ x0  # the current model's compute time (relative), without per-op overhead
    ops = a[:, 3]
    design = np.column_stack([base, ops])
    (scale, overhead), *_ = np.linalg.lstsq(design, np.ones(len(a)), rcond=None)
    if overhead < 0 or scale <= 0:  # no room for a per-op cost: fit the scale alone
        overhead = 0.0
        scale = float(np.sum(base) / np.sum(base * base))
    # Efficiencies are fractions of the peak (<= 1): a scale below the largest one would put it above
    # 1, i.e. the runs were faster than the measured peak allows (a microbenchmark caught a slow
    # moment). Hold the scale at that bound and refit the per-op overhead under it, rather than cap
    # the efficiencies afterwards, which left every pass slower than the runs measured.
    highest = max(current.matmul_efficiency, current.attention_efficiency, current.memory_efficiency)
    if scale < highest:
        scale = highest
        overhead = max(float(ops @ (1.0 - scale * base) / (ops @ ops)), 0.0) if ops.any() else 0.0
    return current.model_copy(  # host costs (measured apart) are kept
        update={
            "matmul_efficiency": _efficiency(current.matmul_efficiency / scale),
            "attention_efficiency": _efficiency(current.attention_efficiency / scale),
            "memory_efficiency": _efficiency(current.memory_efficiency / scale),
            "op_overhead_us": float(overhead) * 1e6,
        }
    )


def _efficiency(value: float) -> float:
    """Efficiencies live in (0, 1] (fit_compute holds its scale there; this guards the rounding)."""
    return float(min(max(value, 1e-3), 1.0))


def calibrated_cluster(
    s: Scenario, compute: ComputeModel, links: Mapping[int, tuple[float, float]]
) -> Cluster:
    """The scenario's cluster with a fitted compute model and, per tier index, (latency_s, bandwidth_Bps)."""
    tiers = []
    for i, tier in enumerate(s.cluster.tiers):
        fitted = tier
        if i in links:
            latency_s, bandwidth = links[i]
            fitted = Tier(
                name=tier.name,
                size=tier.size,
                bandwidth_GBps=bandwidth / 1e9,
                latency_us=latency_s * 1e6,
                efficiency=1.0,
            )
        tiers.append(fitted)
    return s.cluster.model_copy(update={"compute": compute, "tiers": tiers, "preset": None})
