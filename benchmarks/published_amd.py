"""Published runs on AMD Instinct MI325X from AMD's ROCm performance results page (Primus with the Megatron-LM
backend): Llama 3.1 8B and 70B on one and eight 8-GPU nodes. Data only; benchmarks/published_data.py gathers
them, benchmarks/published_groups.py scores them (never fitted on). The MI355X rows of MLPerf Training are in
benchmarks/published_mlperf.py.

Each row is the table's line: model, precision, batch, sequence length, FSDP, TP, PP, CP, tokens/s/GPU. The
page draws its tables as images; the rows are as AMD's Primus repository quotes them beside its projection
tool (see CITATION). Left out: that table's 70B FP8 one-node figure (1,135, printed equal to the BF16
one-node figure, so taken as a copy slip), and the MoE row beside it (Mixtral 8x22B, BF16, on 64 MI355X: TP 1,
PP 4, VPP 2, EP 8, micro-batch 2, 3,534 tokens/s/GPU), whose global batch is stated nowhere (its recipe,
examples/megatron/configs/MI355X/mixtral_8x22B_v0.1-BF16-pretrain.yaml, sets 128 for one node; the
projection's own 8-node output, 10,052 ms at 3,260 tokens/s/GPU, implies 256).
"""

from __future__ import annotations

from benchmarks.published_record import PublishedRun, Reported, cluster_table, plan_table, training_table

SOURCE = "amd-rocm-performance"
CITATION = (
    "AMD ROCm Performance Results, 'AI Training' (amd.com/en/developer/resources/rocm-hub/dev-ai/"
    "performance-results.html#ai-training), MI325X dense rows as quoted in AMD-AGI/Primus "
    "docs_deprecated/tech_blogs/projection/projection.md ('Validation: Projected vs. Measured Results', "
    "c8e5c09d, July 2026), columns 1-Node and Measured 8-Node (tok/s/GPU)"
)
_ASSUMPTIONS = (
    "Primus with the Megatron-LM backend and Transformer Engine: framework megatron-lm, fused attention, "
    "distributed optimizer (zero_stage 1); FSDP 'Yes': Primus's use_torch_fsdp2 (zero_stage 3)",
    "FP8: Primus's MI325X recipes set fp8 = hybrid, fp8_recipe = delayed (examples/megatron/configs/MI325X/"
    "llama3.1_*-FP8-pretrain.yaml): training.fp8_recipe tensorwise_delayed",
    "'Batch' is the micro-batch per GPU, one micro-batch per step (global batch = batch x data-parallel "
    "ranks): the table states no global batch",
    "70B (FSDP) rows: full recompute of 72 of the 80 layers, method block, as Primus's MI325X 70B recipes "
    "(recompute_num_layers: 72); 8B rows: no recompute",
    "gradients reduced in bf16 (training.grad_accumulation_fp32 = false), as Megatron's default, and "
    "overlapped with the backward pass: the recipes set overlap_grad_reduce: true; the 8B (distributed "
    "optimizer) recipes also overlap its parameter gather with the next forward (overlap_param_gather: "
    "true, examples/megatron/configs/MI325X/llama3.1_8B-FP8-pretrain.yaml)",
)
# name, model preset, GPUs, precision, batch, seq, FSDP, tokens/s/GPU
_ROWS: tuple[tuple[str, str, int, str, int, int, bool, float], ...] = (
    ("amd-mi325x-fp8-llama31-8b-8gpu", "llama3-8b", 8, "FP8", 2, 8192, False, 16224),
    ("amd-mi325x-fp8-llama31-8b-64gpu", "llama3-8b", 64, "FP8", 2, 8192, False, 16186),
    ("amd-mi325x-fp8-llama31-70b-64gpu-fsdp", "llama3-70b", 64, "FP8", 4, 8192, True, 1726),
    ("amd-mi325x-bf16-llama31-70b-8gpu-fsdp", "llama3-70b", 8, "BF16", 1, 8192, True, 1135),
    ("amd-mi325x-bf16-llama31-70b-64gpu-fsdp", "llama3-70b", 64, "BF16", 1, 8192, True, 1174),
)
RECOMPUTE_NUM_LAYERS_70B = 72
"""Primus's MI325X Llama 3.1 70B recipes: recompute_num_layers 72 (full, block)."""


def amd_runs() -> tuple[PublishedRun, ...]:
    """The rows above as PublishedRuns on the mi325x preset."""
    runs = []
    for name, preset, gpus, precision, batch, seq, fsdp, tps in _ROWS:
        gbs = batch * gpus  # tp = pp = cp = 1: every GPU is a data-parallel rank
        recompute = (
            {"recompute_num_layers": RECOMPUTE_NUM_LAYERS_70B, "recompute_method": "block"} if fsdp else {}
        )
        fp8 = {"fp8": True, "fp8_recipe": "tensorwise_delayed"} if precision == "FP8" else {}
        training = training_table(
            seq, batch, gbs, "bf16", "full" if fsdp else "none", flash_attention=True,
            grad_accumulation_fp32=False, **fp8, **recompute,
        )
        # Megatron's distributed optimizer, Primus's default, with its gather overlapped as the recipes set
        extra = {"distributed_optimizer": True, "overlap_param_gather": True} if not fsdp else {}
        plan = plan_table(zero_stage=3 if fsdp else 1, overlap_grad_reduce=True, **extra)
        runs.append(
            PublishedRun(
                name, SOURCE, CITATION, {"preset": preset}, training, plan, cluster_table("mi325x", gpus),
                "megatron-lm", gbs * seq / (tps * gpus), Reported(tps, "tokens/s/GPU"), _ASSUMPTIONS,
            )
        )
    return tuple(runs)
