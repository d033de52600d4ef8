"""Achieved time of one operator: a roofline with a shape-dependent GEMM efficiency.

time = max(FLOPs / (peak * efficiency(op)), bytes / (HBM bandwidth * memory_efficiency)) + overhead

GEMM efficiency saturates with size, e(F) = e_max * F / (F + F_half): small GEMMs cannot fill the
GPU (tile quantisation, launch latency), large ones approach e_max. The constants live in the
cluster's `compute` table (simulator.cluster.ComputeModel), fitted on Korthikanti et al. 2022
Table 4 for A100 and refitted by `plancast calibrate` from measured runs.
"""

from __future__ import annotations

from collections.abc import Iterable

from plancast.simulator.cluster import GPU, ComputeModel
from plancast.simulator.costs.fp8 import fp8_matmul_efficiency
from plancast.simulator.costs.ops import Op


def op_seconds(
    op: Op, gpu: GPU, compute: ComputeModel, dtype: str, flop_scale: float = 1.0, byte_scale: float = 1.0
) -> float:
    """Seconds for `op` scaled by flop_scale (backward = 2) and byte_scale."""
    flops = op.flops * flop_scale
    hbm_s = op.bytes * byte_scale / (gpu.hbm_GBps * 1e9 * compute.memory_efficiency)
    if op.category == "memory" or flops == 0.0:
        return hbm_s + compute.op_overhead_us * 1e-6 * op.calls
    peak = gpu.peak_flops(op.peak if op.fp8 else dtype)  # op.peak: training.fp8_recipe's format
    if op.category == "matmul":
        half = compute.matmul_half_gflop * 1e9
        e_max = fp8_matmul_efficiency(compute, gpu, op.peak) if op.fp8 else compute.matmul_efficiency
        eff = e_max * flops / (flops + half) * op.relative_rate  # a grouped GEMM's own (costs/moe_gemm.py)
    else:
        # op.rate: a kernel's own; relative_rate: its head width's (costs/attention.py)
        eff = (op.rate or compute.attention_efficiency) * op.relative_rate
    flop_s = flops / (peak * gpu.clock_fraction * eff)  # a power limit lowers the clock
    return max(flop_s, hbm_s) + compute.op_overhead_us * 1e-6 * op.calls


def ops_seconds(
    ops: Iterable[Op],
    gpu: GPU,
    compute: ComputeModel,
    dtype: str,
    flop_scale: float = 1.0,
    byte_scale: float = 1.0,
) -> float:
    """Sum of op_seconds over ops (they run back to back on one stream)."""
    return sum(op_seconds(op, gpu, compute, dtype, flop_scale, byte_scale) for op in ops)
