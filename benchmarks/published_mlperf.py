"""Published runs from MLPerf Training v5.1 (MLCommons, November 2025): the Llama 3.1 8B and 405B pretraining
submissions on AMD Instinct MI355X and NVIDIA B200 / GB200 / GB300, each with the configuration file the
submitter published beside its logs. Data only; benchmarks/published_data.py gathers them,
benchmarks/published_groups.py scores them (never fitted on).

The measured figure is the median over a run's logged steps (result_0.txt of each system): NeMo's
`tracked_stats.train_step_time` (s per global batch) for the NVIDIA stack, and AMD's
`tracked_stats.throughput` (samples/s) for the ROCm stack, turned into tokens/s at the 8192-token sequence.
Time-to-train is not used: it includes evaluation and depends on convergence.

Left out: MI350X (no preset: an air-cooled MI355X at lower clocks and power), the H100 / H200 submissions
(Hopper is scored elsewhere), the 512-GPU Llama 3.1 405B runs on GB200 and GB300 (their implementation folders
hold an FP8 and an NVFP4 configuration of the same shape, and the log does not say which ran) and the LoRA
fine-tuning benchmark (plancast trains every weight).
"""

from __future__ import annotations

from benchmarks.published_record import PublishedRun, Reported, plan_table, training_table

SOURCE = "mlperf-training-v5.1"
_REPO = "mlcommons/training_results_v5.1"
RECIPES = {"FP8": "tensorwise_current", "NVFP4": "nvfp4", "FP8-DELAYED": "tensorwise_delayed"}
"""The configuration's precision -> training.fp8_recipe (simulator/costs/fp8.py)."""
SYSTEMS = {"GB200": ("gb200-nvl72", 4), "GB300": ("gb300-nvl72", 4), "B200": ("dgx-b200", 8),
           "MI355X": ("mi355x", 8)}
"""Accelerator -> (cluster preset, GPUs per node as the submission's system description counts them)."""

_ASSUMPTIONS = (
    "NeMo on Megatron-core with Transformer Engine: framework megatron-lm, fused attention, distributed "
    "optimizer (USE_DIST_OPTIMIZER=True: zero_stage 1), gradients reduced in bf16 "
    "(grad_reduce_in_fp32 = False), no activation recompute (none is configured)",
    "NVIDIA FP8 configurations: FP8_RECIPE='tensorwise' (per-tensor current scaling) with "
    "FP8_PARAM_GATHER=True: training.fp8_recipe tensorwise_current, training.fp8_param",
    "NVIDIA NVFP4 configurations (config_common_fp4.sh): FP4_RECIPE='nvfp4' with the random Hadamard "
    "transform, stochastic rounding and 2D quantization off, no FP8 primary weights; their FP8 attention "
    "(config_common_fp8attn.sh, FP8_DPA=True) is not modelled: attention is priced in bf16",
    "AMD MI355X: NeMo on ROCm with Transformer Engine, fp8='hybrid' with amax history 4 (delayed scaling) "
    "and fp8_params (src/train.py): training.fp8_recipe tensorwise_delayed, training.fp8_param; its "
    "DistributedDataParallelConfig leaves overlap_grad_reduce at Megatron-core's default (off)",
    "NVIDIA configurations: OVERLAP_GRAD_REDUCE=True and OVERLAP_PARAM_GATHER=True (config_common.sh): "
    "parallelism.overlap_grad_reduce and overlap_param_gather (the distributed optimizer's parameter "
    "all-gather runs beside the next forward, simulator/engine/param_gather.py)",
    "tensor-parallel communication overlapped where tp > 1 and the configuration leaves TP_COMM_OVERLAP on "
    "(MC_TP_OVERLAP_AG/RS=True in config_common.sh); the NVFP4 405B configurations set it False, and the "
    "University of Florida's DGX B200 405B configurations comment it out (`#export TP_COMM_OVERLAP=True`) "
    "where every other 405B configuration of the round sets it, their GB200 one of the same shape included "
    "(b200_nemo/config_GB200_128x4x144xtp4pp8cp2_cg.sh): taken as off, the implementation's own default "
    "when unset (NVIDIA's llama31_405b conf/custom.yaml, MLPerf Training v5.0: "
    "`ub_tp_comm_overlap: ${oc.decode:${oc.env:TP_COMM_OVERLAP,False}}`)",
    "CUDA graphs (config_common_cg.sh) are not modelled: per-kernel launch costs stay in the prediction",
    "GB200 / GB300 NVL72: the GPUs of a run in NVLink domains of up to 72, as the Megatron-Bridge rows",
)

# name, org/system folder, config file, accelerator, model preset, GPUs, precision, GBS, MBS, TP, PP, CP, VP,
# measured value, unit ("s": median train_step_time; "samples/s": median throughput)
_Row = tuple[str, str, str, str, str, int, str, int, int, int, int, int, int, float, str]
_ROWS: tuple[_Row, ...] = (
    ("mlperf51-gb200-nvfp4-llama31-8b-8gpu", "NVIDIA/tyche_ngpu8_ngc25.09_nemo",
     "config_GB200_2x4x2xtp1pp1cp1_8b_fp4.sh", "GB200", "llama3-8b", 8, "NVFP4", 16, 2, 1, 1, 1, 1,
     0.4049, "s"),
    ("mlperf51-gb200-fp8-llama31-8b-72gpu", "NVIDIA/tyche_ngpu72_ngc25.09_nemo",
     "config_GB200_18x4x1xtp1pp1cp2_8b.sh", "GB200", "llama3-8b", 72, "FP8", 36, 1, 1, 1, 2, 1, 0.1686, "s"),
    ("mlperf51-gb200-fp8-llama31-8b-512gpu", "NVIDIA/tyche_ngpu512_ngc25.09_nemo",
     "config_GB200_128x4x1xtp2pp1cp4_8b.sh", "GB200", "llama3-8b", 512, "FP8", 64, 1, 2, 1, 4, 1,
     0.0890, "s"),
    ("mlperf51-gb300-nvfp4-llama31-8b-8gpu", "NVIDIA/theia_ngpu8_ngc25.09_nemo",
     "config_GB300_2x4x2xtp1pp1cp1_8b_fp4.sh", "GB300", "llama3-8b", 8, "NVFP4", 16, 2, 1, 1, 1, 1,
     0.3456, "s"),
    ("mlperf51-gb300-fp8-llama31-8b-72gpu", "NVIDIA/theia_ngpu72_ngc25.09_nemo",
     "config_GB300_18x4x1xtp1pp1cp2_8b.sh", "GB300", "llama3-8b", 72, "FP8", 36, 1, 1, 1, 2, 1, 0.1472, "s"),
    ("mlperf51-gb300-fp8-llama31-8b-512gpu", "NVIDIA/theia_ngpu512_ngc25.09_nemo",
     "config_GB300_128x4x1xtp2pp1cp4_8b.sh", "GB300", "llama3-8b", 512, "FP8", 64, 1, 2, 1, 4, 1,
     0.0855, "s"),
    ("mlperf51-gb200-nvfp4-llama31-405b-2560gpu", "NVIDIA/hsg_ngpu2560_ngc25.09_nemo",
     "config_GB200_640x4x24xtp4pp8cp2_cg_fp4.sh", "GB200", "llama3-405b", 2560, "NVFP4", 960, 1, 4, 8, 2, 8,
     3.1955, "s"),
    ("mlperf51-gb200-nvfp4-llama31-405b-5120gpu", "NVIDIA/hsg_ngpu5120_ngc25.09_nemo",
     "config_GB200_1280x4x16xtp4pp8cp2_cg_fp4.sh", "GB200", "llama3-405b", 5120, "NVFP4", 1280, 1, 4, 8, 2,
     8, 2.2279, "s"),
    ("mlperf51-b200-fp8-llama31-8b-8gpu", "University-of-Florida/hpg.dgxb200x8.n1",
     "config_DGXB200_1x8x2xtp1pp1cp1_8b.sh", "B200", "llama3-8b", 8, "FP8", 16, 2, 1, 1, 1, 1, 0.5436, "s"),
    ("mlperf51-b200-fp8-llama31-8b-16gpu", "University-of-Florida/hpg.dgxb200x8.n2",
     "config_DGXB200_2x8x2xtp1pp1cp1_8b.sh", "B200", "llama3-8b", 16, "FP8", 32, 2, 1, 1, 1, 1, 0.5712, "s"),
    ("mlperf51-b200-fp8-llama31-8b-32gpu", "University-of-Florida/hpg.dgxb200x8.n4",
     "config_DGXB200_4x8x1xtp1pp1cp2_8b.sh", "B200", "llama3-8b", 32, "FP8", 16, 1, 1, 1, 2, 1, 0.1877, "s"),
    ("mlperf51-b200-fp8-llama31-8b-64gpu", "University-of-Florida/hpg.dgxb200x8.n8",
     "config_DGXB200_8x8x1xtp1pp1cp2_8b.sh", "B200", "llama3-8b", 64, "FP8", 32, 1, 1, 1, 2, 1, 0.1894, "s"),
    ("mlperf51-b200-fp8-llama31-8b-128gpu", "University-of-Florida/hpg.dgxb200x8.n16",
     "config_DGXB200_16x8x1xtp1pp1cp2_8b.sh", "B200", "llama3-8b", 128, "FP8", 64, 1, 1, 1, 2, 1, 0.1928,
     "s"),
    ("mlperf51-b200-fp8-llama31-8b-256gpu", "University-of-Florida/hpg.dgxb200x8.n32",
     "config_DGXB200_32x8x1xtp1pp1cp2_8b.sh", "B200", "llama3-8b", 256, "FP8", 128, 1, 1, 1, 2, 1, 0.2213,
     "s"),
    ("mlperf51-b200-fp8-llama31-405b-256gpu", "University-of-Florida/hpg.dgxb200x8.n32",
     "config_DGXB200_32x8x144xtp4pp8cp2_cg.sh", "B200", "llama3-405b", 256, "FP8", 576, 1, 4, 8, 2, 8,
     27.6409, "s"),
    ("mlperf51-b200-fp8-llama31-405b-448gpu", "University-of-Florida/hpg.dgxb200x8.n56",
     "config_DGXB200_56x8x144xtp4pp8cp2_cg.sh", "B200", "llama3-405b", 448, "FP8", 1008, 1, 4, 8, 2, 8,
     27.9165, "s"),
    ("mlperf51-mi355x-fp8-llama31-8b-8gpu-amd", "AMD/MI355X_EPYC_9575F_pytorch",
     "config_MI355X_1x8x1_8b.sh", "MI355X", "llama3-8b", 8, "FP8-DELAYED", 32, 2, 1, 1, 1, 1, 30.653,
     "samples/s"),
    ("mlperf51-mi355x-fp8-llama31-8b-8gpu-gigacomputing", "GigaComputing/G893-ZX1-AAX4_pytorch",
     "config_MI355X_1x8x1_8b.sh", "MI355X", "llama3-8b", 8, "FP8-DELAYED", 32, 2, 1, 1, 1, 1, 29.094,
     "samples/s"),
)
TP_OVERLAP_OFF = {"config_DGXB200_32x8x144xtp4pp8cp2_cg.sh", "config_DGXB200_56x8x144xtp4pp8cp2_cg.sh"}
"""Configurations with tp > 1 that leave TP_COMM_OVERLAP unset (the line commented out), see _ASSUMPTIONS."""
SEQ_LEN = 8192
"""Both benchmarks train on 8192-token sequences (the logs' max_sequence_length)."""


def _citation(system: str, config: str, unit: str) -> str:
    org, folder = system.split("/")
    stat = "median tracked_stats.train_step_time" if unit == "s" else "median tracked_stats.throughput"
    return f"{_REPO} {org}/results/{folder}/*/result_0.txt ({stat}); configuration {config}"


def _run(row: _Row) -> PublishedRun:
    name, system, config, gpu, preset, gpus, precision, gbs, mbs, tp, pp, cp, vp, value, unit = row
    extra: dict[str, object] = {"context_parallel_degree": cp} if cp > 1 else {}
    if gpu != "MI355X":  # NVIDIA's config_common.sh: OVERLAP_GRAD_REDUCE=True, OVERLAP_PARAM_GATHER=True
        extra["overlap_grad_reduce"] = True
        extra["overlap_param_gather"] = True
    if tp > 1 and precision != "NVFP4" and config not in TP_OVERLAP_OFF:  # NVFP4's set TP_COMM_OVERLAP=False
        extra["tp_comm_overlap"] = True
    plan = plan_table(tp, pp, vp, sequence_parallel=tp > 1, zero_stage=1, distributed_optimizer=True, **extra)
    training = training_table(
        SEQ_LEN, mbs, gbs, "bf16", "none", flash_attention=True, fp8=True, fp8_recipe=RECIPES[precision],
        fp8_param=precision != "NVFP4", grad_accumulation_fp32=False,
    )
    cluster, per_node = SYSTEMS[gpu]
    # samples/s x tokens per sample = tokens/s over the whole system
    reported = Reported(value, "s") if unit == "s" else Reported(value * SEQ_LEN, "tokens/s")
    step_s = value if unit == "s" else gbs / value
    return PublishedRun(
        name, SOURCE, _citation(system, config, unit), {"preset": preset}, training, plan,
        {"preset": cluster, "num_nodes": gpus // per_node}, "megatron-lm", step_s, reported, _ASSUMPTIONS,
    )


def mlperf_runs() -> tuple[PublishedRun, ...]:
    """The rows above as PublishedRuns (cluster from the accelerator, recipe from the precision)."""
    return tuple(_run(row) for row in _ROWS)
