"""Published runs on Blackwell (DGX B200, GB200 NVL72, GB300 NVL72) in FP8, MXFP8 and NVFP4: Megatron-Bridge's
dense Llama 3 rows. Data only; benchmarks/published_data.py gathers them, benchmarks/published_runs.py
scores them (never fitted on).

Each row is the table's line as printed: system, GPUs, precision, GBS, MBS, sequence length, FSDP, TP, PP,
CP, VP, tokens/s/GPU. What the table leaves open is in `_ASSUMPTIONS`. Left out: 26.02's GB200 NVFP4 and
MXFP8 Llama 3.1 405B rows (PP 16 x VP 8 = 128 virtual stages over 126 layers, which Megatron splits by
counting the embedding and the loss as layers; plancast needs a layer in every stage).
"""

from __future__ import annotations

from benchmarks.published_record import PublishedRun, Reported, plan_table, training_table

_ARCHIVE = "NVIDIA-NeMo/Megatron-Bridge docs/performance-summary-archive.md"
RELEASES = {
    "26.02": ("megatron-bridge-2026", f"{_ARCHIVE}, '26.02 NeMo Container', LLAMA3_70B / LLAMA3.1_405B"),
    "25.11": ("megatron-bridge-2025", f"{_ARCHIVE}, '25.11 NeMo Container', System DGX-GB300 / GB200 / B200"),
}
"""Table release -> (source, citation)."""

# The table's precision -> training.fp8_recipe (simulator/costs/fp8.py). 26.02 prints "FP8" where 25.11
# printed "FP8-CS" for the same systems and models: taken as the same per-tensor current scaling.
RECIPES = {"FP8-CS": "tensorwise_current", "FP8": "tensorwise_current", "MXFP8": "mxfp8",
           "FP8-MX": "mxfp8", "NVFP4": "nvfp4"}
# System -> blocks whose activations the FSDP rows offload to the Grace CPU (_ASSUMPTIONS).
OFFLOAD = {"DGX-GB300": 20, "DGX-GB200": 40}
SYSTEMS = {"DGX-GB300": ("gb300-nvl72", 4), "DGX-GB200": ("gb200-nvl72", 4), "DGX-B200": ("dgx-b200", 8)}
"""System -> (cluster preset, GPUs per node): a GB200/GB300 compute tray holds 4 GPUs, a DGX B200 8."""

_ASSUMPTIONS = (
    "Megatron-core with Transformer Engine: framework megatron-lm, fused (cuDNN) attention, bf16 around the "
    "narrow GEMMs; distributed optimizer (zero_stage 1), FSDP > 0: Megatron FSDP as zero_stage 3",
    "precision -> training.fp8_recipe: FP8-CS and 26.02's FP8 tensorwise_current, MXFP8 / FP8-MX mxfp8, "
    "NVFP4 nvfp4",
    "sequence parallel with tp > 1; tensor-parallel communication overlapped but under NVFP4, and gradients "
    "reduced in bf16 (training.grad_accumulation_fp32 = false): NVIDIA-NeMo/Megatron-Bridge "
    "scripts/performance/configs/llama/llama3_llm_pretrain.py (userbuffers_*_b200_*, "
    "`tp_comm_overlap = False if precision == 'nvfp4'`, `grad_reduce_in_fp32 = False`)",
    "no activation recompute: not stated in the table, none in the scripts' configs for these rows; the FSDP "
    "rows offload the activations of their first 20 (GB300) or 40 (GB200) layers to the Grace CPU: "
    "scripts/performance/configs/llama/llama3_workload_base_configs.py LLAMA3_70B_PRETRAIN_CONFIG_"
    "GB300/GB200_FP8_CS_V1 cpu_offloading_num_layers (activations only: utils/helpers.py sets "
    "cpu_offloading_weights = False) = training.activation_offload_num_layers",
    "FP8 primary weights but under NVFP4: scripts/performance/utils/precision.py picks "
    "bf16_with_fp8_current_scaling_mixed and bf16_with_mxfp8_mixed (fp8_param_gather = True) and "
    "bf16_with_nvfp4_mixed (fp8_param_gather = False; fp4_param unsupported), "
    "src/megatron/bridge/training/mixed_precision.py: training.fp8_param",
    "the loss as Transformer Engine's fused cross-entropy: src/megatron/bridge/recipes/llama/llama3.py sets "
    "cross_entropy_loss_fusion = True, cross_entropy_fusion_impl = 'te' (training.fused_cross_entropy)",
    "GB200 / GB300 NVL72: the GPUs of a run in NVLink domains of up to 72 (64 of a rack at 64 and 256 GPUs)",
)

# name, release, system, model preset, GPUs, precision, GBS, MBS, seq, FSDP, TP, PP, CP, VP, tokens/s/GPU
_ROWS: tuple[tuple[str, str, str, str, int, str, int, int, int, int, int, int, int, int, float], ...] = (
    ("bridge-gb300-nvfp4-llama3-70b-64gpu", "26.02", "DGX-GB300", "llama3-70b",
     64, "NVFP4", 256, 1, 8192, 0, 1, 4, 1, 5, 6798),
    ("bridge-gb200-nvfp4-llama3-70b-64gpu", "26.02", "DGX-GB200", "llama3-70b",
     64, "NVFP4", 256, 1, 8192, 0, 2, 4, 1, 5, 4458),
    ("bridge-gb300-mxfp8-llama3-70b-64gpu", "26.02", "DGX-GB300", "llama3-70b",
     64, "MXFP8", 256, 1, 8192, 0, 1, 4, 1, 5, 4596),
    ("bridge-gb200-mxfp8-llama3-70b-64gpu", "26.02", "DGX-GB200", "llama3-70b",
     64, "MXFP8", 256, 1, 8192, 0, 2, 4, 1, 5, 3613),
    ("bridge-gb300-fp8-llama3-70b-64gpu-fsdp", "26.02", "DGX-GB300", "llama3-70b",
     64, "FP8", 256, 2, 8192, 64, 1, 1, 1, 1, 5003),
    ("bridge-gb200-fp8-llama3-70b-64gpu-fsdp", "26.02", "DGX-GB200", "llama3-70b",
     64, "FP8", 256, 2, 8192, 64, 1, 1, 1, 1, 4040),
    ("bridge-gb300-nvfp4-llama31-405b-256gpu", "26.02", "DGX-GB300", "llama3-405b",
     256, "NVFP4", 1536, 1, 8192, 0, 4, 8, 1, 4, 1333),
    ("bridge-gb300-mxfp8-llama31-405b-256gpu", "26.02", "DGX-GB300", "llama3-405b",
     256, "MXFP8", 1536, 1, 8192, 0, 2, 8, 2, 4, 931),
    ("bridge-gb300-fp8-llama31-405b-256gpu", "26.02", "DGX-GB300", "llama3-405b",
     256, "FP8", 1536, 1, 8192, 0, 4, 8, 1, 4, 988),
    ("bridge-gb200-fp8-llama31-405b-256gpu", "26.02", "DGX-GB200", "llama3-405b",
     256, "FP8", 1536, 1, 8192, 0, 4, 16, 1, 4, 793),
    ("bridge-gb300-fp8cs-llama3-8b-8gpu", "25.11", "DGX-GB300", "llama3-8b",
     8, "FP8-CS", 128, 2, 8192, 0, 1, 1, 1, 1, 37556),
    ("bridge-gb300-fp8mx-llama3-8b-8gpu", "25.11", "DGX-GB300", "llama3-8b",
     8, "FP8-MX", 128, 2, 8192, 0, 1, 1, 1, 1, 36108),
    ("bridge-gb300-fp8cs-llama3-70b-64gpu-fsdp", "25.11", "DGX-GB300", "llama3-70b",
     64, "FP8-CS", 256, 2, 8192, 64, 1, 1, 1, 1, 4520),
    ("bridge-gb300-fp8cs-llama31-405b-256gpu", "25.11", "DGX-GB300", "llama3-405b",
     256, "FP8-CS", 1536, 1, 8192, 0, 2, 8, 2, 4, 999),
    ("bridge-gb200-fp8cs-llama3-8b-8gpu", "25.11", "DGX-GB200", "llama3-8b",
     8, "FP8-CS", 128, 2, 8192, 0, 1, 1, 1, 1, 31508),
    ("bridge-gb200-fp8mx-llama3-8b-8gpu", "25.11", "DGX-GB200", "llama3-8b",
     8, "FP8-MX", 128, 2, 8192, 0, 1, 1, 1, 1, 29789),
    ("bridge-gb200-fp8cs-llama3-70b-64gpu-fsdp", "25.11", "DGX-GB200", "llama3-70b",
     64, "FP8-CS", 256, 2, 8192, 64, 1, 1, 1, 1, 4312),
    ("bridge-gb200-fp8cs-llama31-405b-256gpu", "25.11", "DGX-GB200", "llama3-405b",
     256, "FP8-CS", 1536, 1, 8192, 0, 4, 16, 1, 4, 813),
    ("bridge-b200-fp8cs-llama3-8b-8gpu", "25.11", "DGX-B200", "llama3-8b",
     8, "FP8-CS", 128, 2, 8192, 0, 1, 1, 1, 1, 30624),
    ("bridge-b200-fp8mx-llama3-8b-8gpu", "25.11", "DGX-B200", "llama3-8b",
     8, "FP8-MX", 128, 2, 8192, 0, 1, 1, 1, 1, 29521),
    ("bridge-b200-fp8cs-llama31-405b-128gpu", "25.11", "DGX-B200", "llama3-405b",
     128, "FP8-CS", 64, 1, 8192, 0, 4, 8, 2, 8, 661),
    ("bridge-b200-fp8mx-llama31-405b-128gpu", "25.11", "DGX-B200", "llama3-405b",
     128, "FP8-MX", 64, 1, 8192, 0, 4, 8, 2, 8, 624),
)


def blackwell_runs() -> tuple[PublishedRun, ...]:
    """The rows above as PublishedRuns (cluster from the system, recipe from the precision)."""
    runs = []
    for name, release, system, preset, gpus, precision, gbs, mbs, seq, fsdp, tp, pp, cp, vp, tps in _ROWS:
        source, citation = RELEASES[release]
        extra: dict[str, object] = {"context_parallel_degree": cp} if cp > 1 else {}
        if tp > 1 and precision != "NVFP4":  # the scripts turn userbuffers off under NVFP4
            extra["tp_comm_overlap"] = True
        if not fsdp:  # Megatron-core's distributed optimizer (use_distributed_optimizer)
            extra["distributed_optimizer"] = True
            # the Llama 3 recipes' DistributedDataParallelConfig: overlap_grad_reduce and overlap_param_gather
            # (src/megatron/bridge/recipes/llama/llama3.py, v0.2.0 and v0.3.0)
            extra |= {"overlap_grad_reduce": True, "overlap_param_gather": True}
        plan = plan_table(tp, pp, vp, sequence_parallel=tp > 1, zero_stage=3 if fsdp else 1, **extra)
        offload = {"activation_offload": True, "activation_offload_num_layers": OFFLOAD.get(system)}
        training = training_table(
            seq, mbs, gbs, "bf16", "none", flash_attention=True, fp8=True, fp8_recipe=RECIPES[precision],
            grad_accumulation_fp32=False, fp8_param=precision != "NVFP4", fused_cross_entropy="te",
            **(offload if fsdp else {}),
        )
        cluster, per_node = SYSTEMS[system]
        runs.append(
            PublishedRun(
                name,
                source,
                citation,
                {"preset": preset},
                training,
                plan,
                {"preset": cluster, "num_nodes": gpus // per_node},
                "megatron-lm",
                gbs * seq / (tps * gpus),
                Reported(tps, "tokens/s/GPU"),
                _ASSUMPTIONS,
            )
        )
    return tuple(runs)
