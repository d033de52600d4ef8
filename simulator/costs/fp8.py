"""FP8 (and FP4) GEMMs (`training.fp8`, `training.fp8_recipe`): what they cost beside the dtype they replace.

Transformer Engine, Megatron-LM (`--fp8-recipe`) and torchao run a block's linear layers in a narrow
format with scales and keep everything else (attention, norms, the embedding and output layer, the
optimizer) in the training dtype. What changes, per recipe (RECIPES):
- each GEMM runs at the GPU's peak for the recipe's format (`peak_tflops` key `fp8`, `mxfp8`, `nvfp4`)
  at `fp8_matmul_efficiency` of it, a block-scaled format's kernel at its measured rate over the per-tensor
  FP8 kernel's (KERNEL_RATE_OVER_FP8);
- each GEMM input is quantized first: read in `dtype` (once, or twice where an amax pass or a second
  scaling axis needs its own read), written in the narrow format in both orientations (Hopper's FP8
  tensor cores take both operands K-major, so the weight-gradient GEMM needs the transpose; block
  scales run along K, so Blackwell's MX/NV formats need a row- and a column-scaled copy), plus the
  scales (simulator/costs/ops.py `linear`); the backward's cast of the output gradient is priced as
  the cast's backward (costs/op.py, MEMORY_BACKWARD_FACTOR);
- a narrow copy of each GEMM weight (both orientations) stays for the step where the recipe's framework
  caches it over the micro-batches, unless ZeRO-3 gathers the weights per use.
Which layers stay in `dtype`: under every recipe attention (the core), norms, the embedding and the output
layer. Every block's linear layers run narrow: Megatron-LM's `--first-last-layers-bf16` is off by default,
and Megatron-Bridge's performance recipes leave it off (bf16_with_nvfp4_mixed; FP8-CS sets it False);
keeping blocks wide as the NVFP4 paper does (~15% of them, most at the end) would need a key of its own.
What a block saves for backward: its GEMM inputs in the recipe's `saved_input_bytes` (gemm_input_bytes;
costs/memory.py owns the activation memory).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, get_args

from plancast.simulator.cluster import GPU, ComputeModel

FP8Recipe = Literal["tensorwise_delayed", "tensorwise_current", "rowwise", "blockwise", "mxfp8", "nvfp4"]
"""The recipes by the names Transformer Engine / Megatron-LM / torchao give them (docs/scenario.md)."""
FP8_RECIPES: tuple[FP8Recipe, ...] = get_args(FP8Recipe)

# The best measured FP8 GEMM against the best BF16 one on the same GPU, as fractions of each peak:
# H100 SXM 1402.6 of 1978.9 TFLOP/s (70.9%) vs 794.5 of 989.4 (80.3%); stas00/ml-engineering,
# compute/accelerator/README.md, "Maximum Achievable Matmul FLOPS comparison table" (mamf-finder.py).
FP8_TO_BF16_EFFICIENCY = 0.709 / 0.803

# Block-scaled GEMM kernels against the per-tensor FP8 kernel on the same shapes, inputs pre-quantized:
# per-layer GEMM totals of a 5B config (hidden 4096, MLP 16384, 15,872 tokens) on a B300, FP8
# CurrentScaling 6.812 ms, MXFP8 7.161 ms, NVFP4 3.764 ms (NVIDIA/TransformerEngine
# docs/examples/gemm_profiling/gemm_profiling.rst, "Autocast vs Pre-quantized"). MXFP8 runs 0.951 of the
# FP8 rate on the same tensor cores; NVFP4 1.81x the FP8 rate, not the 3.3x of the B300's peaks.
KERNEL_RATE_OVER_FP8: dict[str, float] = {"mxfp8": 6.812 / 7.161, "nvfp4": 6.812 / 3.764}


@dataclass(frozen=True, slots=True)
class Recipe:
    """One way to run the blocks' GEMMs in a narrow format."""

    peak: str
    """The `cluster.gpu.peak_tflops` key its GEMMs run at."""
    input_reads: int
    """Reads of a GEMM input in `dtype` to quantize it (2: a separate amax pass, or one per scaling axis)."""
    element_bytes: float
    """Bytes of one quantized element (1 for FP8, 0.5 for FP4)."""
    scale_bytes: float
    """Bytes of scales per quantized element and orientation (a 4-byte scale per 128: 1/32)."""
    weight_copy_bytes: float
    """Bytes per GEMM weight element of the narrow weight copies kept for the step (0: cast per use)."""
    saved_input_bytes: float
    """Bytes per element of a GEMM input saved for its weight gradient (for costs/memory.py)."""

    def cast_bytes(self, dtype_bytes: int) -> float:
        """HBM bytes per input element of quantizing a GEMM input in both orientations."""
        return self.input_reads * dtype_bytes + 2 * (self.element_bytes + self.scale_bytes)


RECIPES: dict[FP8Recipe, Recipe] = {
    # TE DelayedScaling (Megatron `--fp8-recipe delayed`, `--fp8-format hybrid`): the scale comes from the
    # amax history, and the fused cast_transpose kernel records this step's amax as it casts: one read, FP8
    # and FP8 transpose written. TE caches the FP8 weight and its transpose over a step's micro-batches
    # (`is_first_microbatch`) and saves the FP8 input for the weight gradient (TE docs, "FP8 primer").
    "tensorwise_delayed": Recipe("fp8", 1, 1.0, 0.0, 2.0, 1.0),
    # TE Float8CurrentScaling (Megatron `--fp8-recipe tensorwise`), torchao tensorwise: the scale comes from
    # this tensor's amax, a reduction over the input before the cast can start (TE docs, "current
    # scaling": one more pass), so two reads. Weights cached as under delayed scaling.
    "tensorwise_current": Recipe("fp8", 2, 1.0, 0.0, 2.0, 1.0),
    # torchao rowwise (Float8LinearConfig.from_recipe_name("rowwise")): one scale per row, so the copy the
    # weight gradient reads (scaled along the other axis) is cast from the high-precision tensor again;
    # torchao keeps no FP8 weight between uses (it casts in each forward and backward). The gradient of
    # the weight is fed the bf16 input in torchao's rowwise_with_gw_hp variant, not modelled.
    "rowwise": Recipe("fp8", 2, 1.0, 0.0, 0.0, 2.0),  # one scale per row: negligible bytes
    # DeepSeek-V3 (arXiv 2412.19437 sec. 3.3.2): 1x128 tiles for activations, 128x128 blocks for weights,
    # a float32 scale each (4 / 128 bytes an element); TE Float8BlockScaling (Megatron `--fp8-recipe
    # blockwise`) quantizes both orientations in one kernel. The GEMM runs at the FP8 rate: DeepGEMM
    # reaches up to 1550 TFLOP/s on H800 (deepseek-ai/DeepGEMM README), above the best per-tensor GEMM.
    "blockwise": Recipe("fp8", 1, 1.0, 4 / 128, 2.0 + 2 * 4 / (128 * 128), 1.0 + 4 / 128),
    # OCP MXFP8 (TE MXFP8BlockScaling, Megatron `--fp8-recipe mxfp8`, torchao MXLinear): 32-element blocks
    # with a 1-byte E8M0 scale (OCP Microscaling Formats spec v1.0), scaled along K, so a row- and a
    # column-scaled copy, both written by one TE quantize kernel; Blackwell's block-scaled tensor cores run
    # it at the FP8 rate (peak key `mxfp8`).
    "mxfp8": Recipe("mxfp8", 1, 1.0, 1 / 32, 2 * (1.0 + 1 / 32), 1.0 + 1 / 32),
    # NVFP4 (NVIDIA, "Pretraining LLMs with NVFP4", arXiv 2509.25149): FP4 E2M1 elements in 16-element
    # blocks with an E4M3 scale (1/16 byte), under a per-tensor FP32 scale from the tensor's amax (a pass
    # before the cast: two reads). TE's recipe (Megatron-Bridge bf16_with_nvfp4_mixed keeps its defaults:
    # random Hadamard transform on the weight-gradient inputs, 16x16 weight scales, stochastic rounding of
    # gradients) reads each input twice: nvte_hadamard_transform_amax takes the amax of the input and of
    # its transformed transpose in one pass, then one kernel writes the rowwise copy and the transformed
    # columnwise one (transformer_engine/pytorch/csrc/quantizer.cpp, NVFP4Quantizer::quantize_impl); the
    # 16x16 transform runs on the tensor cores inside it, the weights are quantized once a step.
    "nvfp4": Recipe("nvfp4", 2, 0.5, 1 / 16, 2 * (0.5 + 1 / 16), 0.5 + 1 / 16),
}


def recipe(name: str) -> Recipe:
    """The recipe `name` (a FP8Recipe; validation refuses others)."""
    return RECIPES[name]  # type: ignore[index]


def fp8_matmul_efficiency(compute: ComputeModel, gpu: GPU, peak: str = "fp8") -> float:
    """Fraction of the `peak` format's peak a large GEMM reaches in training: the cluster's BF16 GEMM
    efficiency scaled by the GPU's measured FP8 / BF16 ratio (GPU.fp8_gemm_ratio; unset: the H100's), and
    for a block-scaled format by its kernel's measured rate over the FP8 kernel's (`narrow_kernel_share`)."""
    ratio = gpu.fp8_gemm_ratio if gpu.fp8_gemm_ratio is not None else FP8_TO_BF16_EFFICIENCY
    return compute.matmul_efficiency * ratio * narrow_kernel_share(peak, gpu)


def narrow_kernel_share(peak: str, gpu: GPU) -> float:
    """The share of the FP8 GEMM efficiency a `peak`-format GEMM keeps: its kernel's measured rate over the
    FP8 kernel's (KERNEL_RATE_OVER_FP8) divided by the ratio of the GPU's peaks, at most 1 (an FP4 kernel
    never runs faster than its peak allows: on a GPU whose FP4 peak is 2x its FP8 one, 0.905)."""
    over_fp8 = KERNEL_RATE_OVER_FP8.get(peak)
    if over_fp8 is None or "fp8" not in gpu.peak_tflops or peak not in gpu.peak_tflops:
        return 1.0
    return min(1.0, over_fp8 * gpu.peak_tflops["fp8"] / gpu.peak_tflops[peak])


def fp8_weight_copy_bytes(
    layer_params_on_rank: float,
    zero_stage: int,
    name: str = "tensorwise_delayed",
    fp8_param: bool = False,
    dtype_bytes: float = 2.0,
) -> float:
    """Bytes the blocks' narrow weights add on one rank beside the `dtype` parameters: the step's copies of
    recipe `name` (0 under ZeRO-3: each gathered weight is cast per use). With FP8 primary weights
    (training.fp8_param: Transformer Engine's `fp8_model_init`, which Megatron-LM's `--fp8-param-gather`
    and Megatron-Bridge's FP8 recipes turn on) the narrow weight and its transpose are the parameter: no
    `dtype` copy is kept."""
    copy = recipe(name).weight_copy_bytes
    if fp8_param:
        return (copy - dtype_bytes) * layer_params_on_rank
    return 0.0 if zero_stage >= 3 else copy * layer_params_on_rank


def gemm_input_bytes(fp8: bool, name: str, dtype_bytes: float) -> float:
    """Bytes per element of a GEMM input saved for its weight gradient: the recipe's quantized copy under
    FP8 (`Recipe.saved_input_bytes`), else the training dtype's (costs/memory.py, costs/moe.py)."""
    return recipe(name).saved_input_bytes if fp8 else float(dtype_bytes)


DEFAULT_RECIPE: FP8Recipe = "tensorwise_delayed"


def recipe_problems(fp8: bool, name: str, gpu: GPU) -> list[tuple[str, str]]:
    """(key path, message) of what is wrong with training.fp8_recipe `name` on `gpu`: another than the
    default needs fp8, and a GPU with its format's peak (mxfp8 and nvfp4: Blackwell)."""
    if name != DEFAULT_RECIPE and not fp8:
        return [("training.fp8_recipe", "applies to FP8 GEMMs: set training.fp8 = true, or drop it")]
    peak = recipe(name).peak
    if not fp8 or peak in gpu.peak_tflops or "fp8" not in gpu.peak_tflops:
        return []  # a GPU without FP8 at all is refused under training.fp8
    return [
        (
            "training.fp8_recipe",
            f"{name!r} runs on {peak} tensor cores, which {gpu.name} lacks (no {peak} in "
            f"cluster.gpu.peak_tflops: {sorted(gpu.peak_tflops)}); use a Blackwell GPU or a per-tensor or "
            "blockwise recipe (tensorwise_delayed, tensorwise_current, rowwise, blockwise)",
        )
    ]
