"""The scenario keys of how a mixture-of-experts layer runs (docs/moe.md): routing balance, the expert
layers' own parallel grid (MoE parallel folding) and the token dispatcher. Declared here, inherited by
scenario.Training and scenario.Parallelism, so the MoE keys have one home."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from plancast.simulator.expert_bias import ExpertBiasTrainingKeys
from plancast.simulator.fields import Strict

Dispatcher = Literal["alltoall", "allgather", "deepep", "hybridep"]
"""Megatron-Core's `--moe-token-dispatcher-type` (alltoall, allgather, flex) with flex's backends
(`--moe-flex-dispatcher-backend deepep | hybridep`) named directly."""

TokenSpread = Literal["independent", "contiguous"]
"""How a token's k experts spread over the expert-parallel ranks (training.moe_token_spread)."""

ExpertGemm = Literal["multi_stream", "grouped"]
"""How the routed experts' GEMMs run on a GPU (training.moe_expert_gemm)."""

ExpertQuantize = Literal["per_expert", "grouped"]
"""How the routed experts' GEMM inputs are quantized under training.fp8 (training.moe_fp8_quantize)."""

DROPLESS_IMBALANCE = 1.25
"""Busiest-expert load over the mean load without a capacity: Switch Transformer found capacity factor
1.25 drops under 1% of tokens (Fedus et al. 2021, sec. 2.2 and Table 1), i.e. expert loads stay within
~1.25x the mean; the GEMMs of a dropless layer wait for the busiest expert."""


class MoeTrainingKeys(ExpertBiasTrainingKeys):
    """Training keys of MoE layers (the expert biases' in expert_bias.py)."""

    moe_routing_imbalance: float = Field(default=DROPLESS_IMBALANCE, ge=1.0, le=64.0)
    """Dropless routing: tokens of the busiest expert over the mean, which the expert GEMMs wait for.
    Default 1.25 (Switch Transformer, Fedus et al. 2021 sec. 2.2: capacity 1.25 drops under 1% of
    tokens). 1.0: forced balance, as benchmarks run it (Megatron-Core
    `--moe-router-force-load-balancing`, NeMo AutoModel `fake_balanced_gate`). Ignored when
    model.moe_capacity_factor is set (every padded slot is computed)."""
    moe_token_spread: TokenSpread = "independent"
    """Where a token's k experts lie, which sets how many ranks and nodes DeepEP/HybridEP send it to
    (parallelism.moe_token_dispatcher; NCCL's all-to-all sends every copy regardless). independent: as
    k distinct experts picked at random (a learned router, Megatron-Core's forced balance by random
    logits). contiguous: k consecutive experts, token i taking experts ik .. ik+k-1 mod E (NeMo
    AutoModel's `fake_balanced_gate`, components/moe/layers.py FakeBalancedGate), so most tokens reach
    one or two ranks of a single node."""
    moe_expert_gemm: ExpertGemm | None = None
    """How a rank's routed experts run on a GPU. grouped: one grouped GEMM kernel over every expert's
    rows (torch._grouped_mm, DeepGEMM, CUTLASS grouped GEMMs: costs/moe_gemm.py's measured rate).
    multi_stream: one cuBLAS GEMM per expert spread over a few CUDA streams, Transformer Engine's
    GroupedLinear by default (`general_grouped_gemm`; `NVTE_USE_CUTLASS_GROUPED_GEMM=1` selects its
    CUTLASS grouped kernel instead), which runs below the grouped kernel when each expert's GEMM is
    small: 0.87 of it at 2,048 x 768 outputs an expert, 0.965 at 4,096 x 768 (TE PR #2045, H100). Unset:
    the framework's (megatron-lm multi_stream, the others grouped); CPU ranks keep their calibrated rate."""
    moe_fp8_quantize: ExpertQuantize | None = None
    """Under training.fp8, how the routed experts' GEMM inputs (and, in backward, their output
    gradients) are quantized. per_expert: each local expert's rows as a tensor of its own, one quantize
    call (and its kernels) per expert, each paying the per-op time of any op (ComputeModel.op_overhead_us):
    Transformer Engine's GroupedLinear up to 2.16 (`tex.split_quantize` over the experts' splits, each
    quantized individually unless the recipe is delayed scaling: transformer_engine/pytorch/csrc/
    extensions/cast.cpp `multi_tensor_quantize_impl`; current scaling runs amax, scale and cast kernels
    per expert, quantizer.cpp `Float8CurrentScalingQuantizer::quantize_impl`). grouped: one call over
    all the experts' rows (TE 2.17's grouped-tensor path `tex.group_quantize`; TE's fused multi-tensor
    cast-transpose under delayed scaling, one kernel for every expert; DeepGEMM's and torchao's grouped
    casts). Unset: the framework's: megatron-lm per_expert (the TE releases its published rows ran)
    except under fp8_recipe tensorwise_delayed, the others grouped. costs/moe_gemm.py."""


class MoeParallelismKeys(Strict):
    """Parallelism keys of MoE layers."""

    expert_tensor_parallel_degree: int | None = Field(default=None, gt=0)
    """Ranks each expert's matrices are split over (etp; Megatron-Core `--expert-tensor-parallel-size`).
    Unset: tensor_parallel_degree, and expert parallel is carved out of data parallel (ep divides dp).
    Set: MoE parallel folding (Liu et al. 2025, arXiv 2504.14960; Megatron-Core parallel_state): the
    expert layers get their own grid of etp x ep x edp over each pipeline stage's tp x cp x dp ranks,
    etp innermost, so ep * etp must divide tp * cp * dp (e.g. DeepSeek-V3 EP64 over TP2 x DP32, etp 1)."""
    moe_token_dispatcher: Dispatcher = "alltoall"
    """How tokens reach their experts. alltoall: NCCL all-to-all of every (token, expert) copy, at the
    cluster's link rates (Megatron-Core's alltoall dispatcher, torchtitan). allgather: all-gather of the
    ep group's tokens, reduce-scatter back (Megatron-Core's allgather dispatcher). deepep / hybridep:
    DeepSeek's DeepEP and NVIDIA's HybridEP kernels (Megatron-Core's flex dispatcher): each token crosses
    the scale-out tier once per destination node and fans out over NVLink, at the bandwidths the DeepEP
    README measures (costs/moe_dispatch.py)."""
    moe_overlap_ep_comm: bool = False
    """Overlap the expert all-to-alls with computation (Megatron-Core
    `--overlap-moe-expert-parallel-comm`: the dispatch/combine of one micro-batch runs on a communication
    stream during another's forward or backward compute; DeepSeek-V3 sec. 3.2.1 does the same in
    DualPipe). Only the part longer than the compute it hides behind stays exposed."""
