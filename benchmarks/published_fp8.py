"""Published runs that train their GEMMs in FP8 (`training.fp8`): Megatron-Bridge's DGX-H100 rows with
per-tensor ("current") scaling. Data only; benchmarks/published_data.py gathers them."""

from __future__ import annotations

from benchmarks.published_record import PublishedRun, Reported, cluster_table, plan_table, training_table

BRIDGE_2511 = (
    "NVIDIA-NeMo/Megatron-Bridge docs/performance-summary-archive.md, '25.11 NeMo Container', System "
    "DGX-H100, Precision FP8-CS (per-tensor current scaling), Tokens / sec / GPU"
)
BRIDGE_2602 = (
    "NVIDIA-NeMo/Megatron-Bridge docs/performance-summary-archive.md, '26.02 NeMo Container', Model "
    "LLAMA3_70B and LLAMA3.1_405B, System DGX-H100, Precision FP8, Tokens / sec / GPU"
)
_ASSUMPTIONS = (
    "Megatron-core with Transformer Engine (`--fp8-format hybrid`): training.fp8 with bf16 around it, "
    "framework megatron-lm (distributed optimizer: zero_stage 1; FSDP > 0 rows: zero_stage 3)",
    "gradients reduced in bf16 (training.grad_accumulation_fp32 = false): the scripts' "
    "`grad_reduce_in_fp32 = False` (scripts/performance/configs/llama/llama3_llm_pretrain.py)",
    "FP8-CS: training.fp8_recipe = tensorwise_current (the 26.02 table's 'FP8' on H100 taken as the same "
    "recipe as 25.11's FP8-CS)",
    "sequence parallel with tp > 1 and fused attention: the recipes' defaults, not stated in the table",
    "tensor-parallel communication overlapped where tp > 1 (parallelism.tp_comm_overlap): the performance "
    "scripts run Transformer Engine userbuffers for these shapes (NVIDIA-NeMo/Megatron-Bridge "
    "scripts/performance, userbuffers_fp8_h100_h8192_tp4_mbs1_seqlen8192 for Llama 3 70B, "
    "userbuffers_fp8_h100_h16384_tp8_cp2_mbs1_seqlen8192 for Llama 3.1 405B)",
    "FP8 primary weights: Megatron-Bridge's bf16_with_fp8_current_scaling_mixed sets fp8_param_gather = "
    "True (src/megatron/bridge/training/mixed_precision.py): training.fp8_param",
    "recompute: none, but Llama 3 8B's H100 FP8-CS preset sets recompute_num_layers = 5 "
    "(scripts/performance/configs/llama/llama3_workload_base_configs.py), which set_recompute_overrides "
    "applies as full recompute, method block (scripts/performance/utils/helpers.py)",
)
# Presets of the performance matrix that recompute some layers: name -> recompute_num_layers (block).
_RECOMPUTE_NUM_LAYERS = {"bridge-h100-fp8-llama3-8b-8gpu": 5}
# name, source, citation, preset, GPUs, GBS, MBS, seq, FSDP, TP, PP, CP, VP, tokens/s/GPU
_ROWS = (
    (
        "bridge-h100-fp8-llama3-8b-8gpu",
        "megatron-bridge-2025",
        BRIDGE_2511,
        "llama3-8b",
        8,
        128,
        1,
        8192,
        8,
        1,
        1,
        1,
        1,
        14451,
    ),
    (
        "bridge-h100-fp8-llama3-70b-64gpu",
        "megatron-bridge-2025",
        BRIDGE_2511,
        "llama3-70b",
        64,
        128,
        1,
        8192,
        0,
        4,
        8,
        1,
        5,
        1602,
    ),
    (
        "bridge-h100-fp8-llama31-405b-1024gpu",
        "megatron-bridge-2025",
        BRIDGE_2511,
        "llama3-405b",
        1024,
        512,
        1,
        8192,
        0,
        8,
        8,
        2,
        8,
        292,
    ),
    (
        "bridge-h100-fp8-llama3-70b-64gpu-gbs256",
        "megatron-bridge-2026",
        BRIDGE_2602,
        "llama3-70b",
        64,
        256,
        1,
        8192,
        0,
        4,
        8,
        1,
        5,
        1621,
    ),
    (
        "bridge-h100-fp8-llama31-405b-1024gpu-gbs1536",
        "megatron-bridge-2026",
        BRIDGE_2602,
        "llama3-405b",
        1024,
        1536,
        1,
        8192,
        0,
        8,
        8,
        2,
        8,
        311,
    ),
)


def fp8_runs() -> tuple[PublishedRun, ...]:
    runs = []
    for name, source, citation, preset, gpus, gbs, mbs, seq, fsdp, tp, pp, cp, vp, tps in _ROWS:
        extra: dict[str, object] = {"context_parallel_degree": cp} if cp > 1 else {}
        if tp > 1:
            extra["tp_comm_overlap"] = True
        if not fsdp:  # Megatron-core's distributed optimizer (use_distributed_optimizer)
            extra["distributed_optimizer"] = True
            # the Llama 3 recipes' DistributedDataParallelConfig: overlap_grad_reduce and overlap_param_gather
            # (src/megatron/bridge/recipes/llama/llama3.py, v0.2.0 and v0.3.0)
            extra |= {"overlap_grad_reduce": True, "overlap_param_gather": True}
        plan = plan_table(tp, pp, vp, sequence_parallel=tp > 1, zero_stage=3 if fsdp else 1, **extra)
        runs.append(
            PublishedRun(
                name,
                source,
                citation,
                {"preset": preset},
                training_table(
                    seq,
                    mbs,
                    gbs,
                    "bf16",
                    "full" if name in _RECOMPUTE_NUM_LAYERS else "none",
                    flash_attention=True,
                    fp8=True,
                    fp8_recipe="tensorwise_current",
                    fp8_param=True,
                    grad_accumulation_fp32=False,
                    **(
                        {"recompute_num_layers": _RECOMPUTE_NUM_LAYERS[name], "recompute_method": "block"}
                        if name in _RECOMPUTE_NUM_LAYERS
                        else {}
                    ),
                ),
                plan,
                cluster_table("dgx-h100-80gb", gpus),
                "megatron-lm",
                gbs * seq / (tps * gpus),
                Reported(tps, "tokens/s/GPU"),
                _ASSUMPTIONS,
            )
        )
    return tuple(runs)
