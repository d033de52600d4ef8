"""The rate of the routed experts' grouped GEMMs relative to a large GEMM (issue 31).

A rank's E/ep experts run as one grouped GEMM per projection (costs/moe.py). Measured on an H200
(benchmarks/gpu_grouped_gemm.py, benchmarks/results/gpu_grouped_gemm_h200.json: torch 2.11's
`torch._grouped_mm` in BF16, the kernel torchtitan's GroupedExperts calls), the published MoE rows' 12
expert shapes (4-16 experts of 512-8192 rows; K and N from 768 to 7168) ran at 0.74-0.91 of one 8192^3
GEMM's rate, mean 0.83: the up-projections 0.82-0.91, the down-projections, whose K is the narrow
expert width, 0.74-0.85. The size curve of costs/efficiency.py prices their total FLOPs at about the
large-GEMM rate, so their time is divided by this mean on GPUs.

FP8 depends on whose kernel runs them. DeepSeek's DeepGEMM runs its grouped contiguous-layout kernels at
the rate of its dense GEMMs of the same N and K (deepseek-ai/DeepGEMM README, Feb 2025: 1297 and 1099
TFLOPS grouped against 1304 and 1025 dense), so FP8 grouped GEMMs keep the dense rate there (and on the
torchtitan path, which has no measurement of its own). Megatron-LM runs its experts through Transformer
Engine's GroupedLinear, which issues BF16 and FP8 alike as one cuBLAS GEMM per expert
(`general_grouped_gemm`, TE's multi-stream cuBLAS path), not DeepGEMM: its FP8 expert GEMMs take the
measured grouped rate as its BF16 ones do (the H200 kernel table, docs/calibration.md, shows per-tensor
FP8 GEMMs below the large size keeping about the same share of their 8192^3 rate as BF16: 0.78 vs 0.74
at Llama 3 70B's tp-8 gate/up, 0.90 vs 0.86 at DeepSeek-V3's expert gate/up, 0.75 vs 0.82 at its
expert down). CPU ranks (the runtime's per-expert loop) keep their calibrated rate.
"""

from __future__ import annotations

import math

from plancast.simulator.scenario import Scenario

GROUPED_GEMM_RELATIVE_RATE = 0.83
"""Mean rate of the 12 measured BF16 grouped expert GEMMs over an 8192^3 GEMM's (module docstring)."""


def grouped_gemm_rate(s: Scenario) -> float:
    """The relative rate of the scenario's grouped expert GEMMs: the measured mean on a GPU, in BF16 and
    under Megatron-LM's FP8 (Transformer Engine's per-expert cuBLAS GEMMs); 1 on CPU and for the other
    frameworks' FP8 (DeepGEMM's grouped kernels run at the dense rate)."""
    if s.cluster.gpu.name.startswith("cpu"):
        return 1.0
    if s.training.fp8 and s.parallelism.framework != "megatron-lm":
        return 1.0
    return GROUPED_GEMM_RELATIVE_RATE


def per_expert_quantize(s: Scenario) -> bool:
    """Whether each local expert's GEMM inputs (and output gradients) are quantized by a call of their
    own under training.fp8 (training.moe_fp8_quantize; unset: per expert on Megatron-LM, whose
    Transformer Engine GroupedLinear `split_quantize`s the experts' rows one tensor at a time unless the
    recipe is delayed scaling, whose multi-tensor cast-transpose is one kernel)."""
    t = s.training
    if not t.fp8:
        return False
    if t.moe_fp8_quantize is not None:
        return t.moe_fp8_quantize == "per_expert"
    return s.parallelism.framework == "megatron-lm" and t.fp8_recipe != "tensorwise_delayed"


# Transformer Engine PR #2045 (NVIDIA/TransformerEngine, merged for 2.8), `general_grouped_gemm` on an
# H100, BF16, TE 2.7 and CUDA 12.9, N 768 and K 2048: the multi-stream cuBLAS path ran 627.9 TFLOP/s at
# 8 experts of 4,096 rows and 553.9 at 16 of 2,048, where its CUTLASS grouped kernel ran 650.6 and 636.9.
# Read per expert's output (rows x N), the tiles one GEMM gives the SMs to fill, which a grouped kernel
# pools over all experts: 2,048 x 768 and 4,096 x 768 elements.
MULTI_STREAM_POINTS = ((2048 * 768, 553.9 / 636.9), (4096 * 768, 627.9 / 650.6))
"""(output elements per expert GEMM, multi-stream rate over the grouped kernel's), TE's measurement."""


def multi_stream_relative(output_elements: float) -> float:
    """Rate of one cuBLAS GEMM per expert over one grouped kernel when each expert's GEMM writes
    `output_elements` (rows x N): linear in log2 between the two measured points, held at the nearer one
    outside them (no figure says how it goes on beyond)."""
    (e0, f0), (e1, f1) = MULTI_STREAM_POINTS
    if output_elements <= e0:
        return f0
    if output_elements >= e1:
        return f1
    return f0 + (f1 - f0) * math.log2(output_elements / e0) / math.log2(e1 / e0)


def multi_stream_experts(s: Scenario) -> bool:
    """Whether the routed experts run as one cuBLAS GEMM per expert on a few streams
    (training.moe_expert_gemm; unset: Megatron-LM's Transformer Engine GroupedLinear on a GPU)."""
    if s.cluster.gpu.name.startswith("cpu"):
        return False
    if s.training.moe_expert_gemm is not None:
        return s.training.moe_expert_gemm == "multi_stream"
    return s.parallelism.framework == "megatron-lm"

