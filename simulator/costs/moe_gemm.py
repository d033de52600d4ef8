"""The rate of the routed experts' grouped GEMMs relative to a large GEMM (issue 31).

A rank's E/ep experts run as one grouped GEMM per projection (costs/moe.py). Measured on an H200
(benchmarks/gpu_grouped_gemm.py, benchmarks/results/gpu_grouped_gemm_h200.json: torch 2.11's
`torch._grouped_mm` in BF16, the kernel torchtitan's GroupedExperts calls), the published MoE rows' 12
expert shapes (4-16 experts of 512-8192 rows; K and N from 768 to 7168) ran at 0.74-0.91 of one 8192^3
GEMM's rate, mean 0.83: the up-projections 0.82-0.91, the down-projections, whose K is the narrow
expert width, 0.74-0.85. The size curve of costs/efficiency.py prices their total FLOPs at about the
large-GEMM rate, so their time is divided by this mean on GPUs. FP8 grouped GEMMs keep the dense rate:
DeepGEMM's H800 table puts its grouped contiguous-layout kernels at the rate of its dense GEMMs of the
same N and K (deepseek-ai/DeepGEMM README, Feb 2025: 1297 and 1099 TFLOPS grouped against 1304 and
1025 dense). CPU ranks (the runtime's per-expert loop) keep their calibrated rate.
"""

from __future__ import annotations

from plancast.simulator.scenario import Scenario

GROUPED_GEMM_RELATIVE_RATE = 0.83
"""Mean rate of the 12 measured BF16 grouped expert GEMMs over an 8192^3 GEMM's (module docstring)."""


def grouped_gemm_rate(s: Scenario) -> float:
    """The relative rate of the scenario's BF16 grouped expert GEMMs: the measured mean on a GPU, 1 on
    CPU and under training.fp8."""
    if s.cluster.gpu.name.startswith("cpu") or s.training.fp8:
        return 1.0
    return GROUPED_GEMM_RELATIVE_RATE
