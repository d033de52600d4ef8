"""FP8 GEMMs (`training.fp8`): what they cost beside the dtype they replace.

Transformer Engine (`--fp8-format hybrid`) and torchao float8 run a block's linear layers in FP8 with
per-tensor scaling and keep everything else (attention, norms, the output layer, the optimizer) in the
training dtype. Three things change:
- each GEMM runs at the GPU's FP8 peak at `fp8_matmul_efficiency` of it;
- each GEMM input is cast first: read in `dtype`, written as FP8 and as its FP8 transpose (Hopper's FP8
  tensor cores take both operands K-major, so the weight-gradient GEMM needs the transpose; TE's
  cast_transpose kernel writes both), d + 2 bytes an element (simulator/costs/ops.py `linear`); the
  backward's cast of the output gradient is priced as the cast's backward (costs/stage.py,
  MEMORY_BACKWARD_FACTOR);
- an FP8 copy of each GEMM weight and its transpose stays for the step (TE caches them over the
  micro-batches of a step), 2 bytes a weight element, unless ZeRO-3 gathers the weights per use.
What a block saves for backward is left as in `dtype`: the FP8 input and its transpose (2 bytes) take
what the bf16 input took.
"""

from __future__ import annotations

from plancast.simulator.cluster import GPU, ComputeModel

# The best measured FP8 GEMM against the best BF16 one on the same GPU, as fractions of each peak:
# H100 SXM 1402.6 of 1978.9 TFLOP/s (70.9%) vs 794.5 of 989.4 (80.3%); stas00/ml-engineering,
# compute/accelerator/README.md, "Maximum Achievable Matmul FLOPS comparison table" (mamf-finder.py).
FP8_TO_BF16_EFFICIENCY = 0.709 / 0.803

FP8_WEIGHT_COPY_BYTES = 2
"""Bytes per GEMM weight element of the FP8 weight and its transpose, kept for the step."""


def fp8_matmul_efficiency(compute: ComputeModel, gpu: GPU) -> float:
    """Fraction of the FP8 peak a large FP8 GEMM reaches in training: the cluster's BF16 GEMM efficiency
    scaled by the GPU's measured FP8 / BF16 ratio (GPU.fp8_gemm_ratio; unset: the H100's)."""
    ratio = gpu.fp8_gemm_ratio if gpu.fp8_gemm_ratio is not None else FP8_TO_BF16_EFFICIENCY
    return compute.matmul_efficiency * ratio


def fp8_weight_copy_bytes(
    layer_params_on_rank: float, zero_stage: int, fp8_param: bool = False, dtype_bytes: float = 2.0
) -> float:
    """Bytes the blocks' FP8 weights add on one rank beside the `dtype` parameters: the step's FP8 copies
    (0 under ZeRO-3: each gathered weight is cast per use). With FP8 primary weights (training.fp8_param:
    Transformer Engine's `fp8_model_init`, which Megatron-LM's `--fp8-param-gather` and Megatron-Bridge's
    FP8 recipes turn on) the FP8 weight and its transpose are the parameter: no `dtype` copy is kept."""
    if fp8_param:
        return (FP8_WEIGHT_COPY_BYTES - dtype_bytes) * layer_params_on_rank
    return 0.0 if zero_stage >= 3 else FP8_WEIGHT_COPY_BYTES * layer_params_on_rank
