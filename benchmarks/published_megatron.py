"""Published runs of Megatron-LM and its descendants: Korthikanti et al. 2022, Narayanan et al. 2021,
MegaScale, Llama 3 and BLOOM-176B (Megatron-DeepSpeed). Data only; benchmarks/published_data.py
gathers them."""

from __future__ import annotations

from typing import Any

from benchmarks.published_record import (
    PublishedRun,
    Reported,
    cluster_table,
    plan_table,
    training_table,
)
from plancast.simulator import catalog

# ------------------------------------------------------------------------- Korthikanti et al. 2022
KORTHIKANTI = "Korthikanti et al. 2022, arXiv:2205.05198, Tables 3 and 5 (iteration time, Selene A100 80GB)"
# Table 3 plan, Table 5 times: preset, tp, pp, global batch, micro-batch, v, full s, SP+selective s
_KORTHIKANTI_ROWS = (
    ("megatron-22b", 8, 1, 4, 4, 1, 1.42, 1.10),
    ("gpt3-175b", 8, 8, 64, 1, 3, 18.13, 13.75),
    ("megatron-530b", 8, 35, 280, 1, 3, 49.05, 37.83),
    ("megatron-1t", 8, 64, 512, 1, 1, 94.42, 71.49),
)


def korthikanti() -> list[PublishedRun]:
    runs = []
    for preset, tp, pp, gbs, mbs, v, full_s, selective_s in _KORTHIKANTI_ROWS:
        for label, sp, recompute, step_s in (
            ("full", False, "full", full_s),
            ("sp-selective", True, "selective", selective_s),
        ):
            runs.append(
                PublishedRun(
                    f"korthikanti2022-{preset}-{label}",
                    "korthikanti2022",
                    KORTHIKANTI,
                    {"preset": preset},
                    training_table(2048, mbs, gbs, "fp16", recompute),
                    plan_table(tp, pp, v, sequence_parallel=sp),
                    cluster_table("dgx-a100-80gb", tp * pp),
                    "megatron-lm",
                    step_s,
                    Reported(step_s, "s"),
                )
            )
    return runs


# -------------------------------------------------------------------------- Narayanan et al. 2021
NARAYANAN = (
    "Narayanan et al. 2021 (SC'21), 'Efficient Large-Scale Language Model Training on GPU Clusters Using "
    "Megatron-LM', arXiv:2104.04473"
)
_NARAYANAN_COMMON = (
    "fp16 mixed precision (the paper says 'mixed precision'; Megatron-LM 2021 trained GPT in fp16)",
    "full recompute: eq. 3 counts the recompute forward and examples/sc21 pass --recompute-method uniform",
)
_SC21 = "micro-batch and virtual stages from NVIDIA/Megatron-LM examples/sc21/run_table_1.sh"
# Table 1: preset, tp, pp, GPUs, batch, achieved TFLOP/s per GPU, then (run_table_1.sh) micro-batch, v;
# measured step time = eq. 3 FLOPs / (TFLOP/s x GPUs), rounded.
_TABLE1 = (
    ("megatron-1.7b", 1, 1, 32, 512, 137, 16, 1, 3.528),
    ("megatron-3.6b", 2, 1, 64, 512, 138, 16, 1, 3.697),
    ("megatron-7.5b", 4, 1, 128, 512, 142, 16, 1, 3.696),
    ("megatron-18b", 8, 1, 256, 1024, 135, 8, 1, 9.399),
    ("megatron-39b", 8, 2, 512, 1536, 138, 4, 1, 14.45),
    ("megatron-76b", 8, 4, 1024, 1792, 140, 2, 3, 16.06),
    ("megatron-145b", 8, 8, 1536, 2304, 148, 2, 2, 24.82),
    ("megatron-310b", 8, 16, 1920, 2160, 155, 1, 2, 37.61),
    ("megatron-530b", 8, 35, 2520, 2520, 163, 1, 3, 54.09),
    ("megatron-1t", 8, 64, 3072, 3072, 163, 1, 1, 102.6),
)
# Table 2: preset, scheme, pp, v, GPUs, batch, micro-batch, TFLOP/s, step s. ZeRO-3 runs without model
# parallelism (DeepSpeed inside Megatron-LM); PTD model-parallel size 96 = tp8 x pp12, 280 = tp8 x pp35.
_TABLE2 = (
    ("gpt3-175b", "zero3", 1, 1, 384, 1536, 4, 144, 81.58),
    ("gpt3-175b", "zero3", 1, 1, 768, 1536, 2, 88, 66.75),
    ("gpt3-175b", "zero3", 1, 1, 1536, 1536, 1, 44, 66.75),
    ("megatron-530b", "zero3", 1, 1, 640, 2560, 4, 138, 255.5),
    ("megatron-530b", "zero3", 1, 1, 1120, 2240, 2, 98, 179.9),
    ("megatron-530b", "zero3", 1, 1, 2240, 2240, 1, 48, 183.7),
    ("gpt3-175b", "ptd", 12, 4, 384, 1536, 1, 153, 76.78),
    ("gpt3-175b", "ptd", 12, 4, 768, 1536, 1, 149, 39.42),
    ("gpt3-175b", "ptd", 12, 4, 1536, 1536, 1, 141, 20.83),
    ("megatron-530b", "ptd", 35, 3, 560, 2240, 1, 171, 206.2),
    ("megatron-530b", "ptd", 35, 3, 1120, 2240, 1, 167, 105.6),
    ("megatron-530b", "ptd", 35, 3, 2240, 2240, 1, 159, 55.45),
)
_PTD_NOTE = (
    "tp8 (as every Table 1 row with model-parallel size > 8); interleaved as sec. 5.1: 2 layers per virtual "
    "stage for 175B (run_figure_12.sh, same model and tp/pp), 1 for 530B (run_table_1.sh)"
)
_ZERO3_NOTE = "ZeRO-3 through the DeepSpeed library integrated into Megatron-LM (sec. 5.2)"


def _narayanan_run(
    name: str,
    where: str,
    preset: str,
    mbs: int,
    gbs: int,
    plan: dict[str, Any],
    gpus: int,
    tflops: float,
    step_s: float,
    note: str,
) -> PublishedRun:
    return PublishedRun(
        name,
        "narayanan2021",
        f"{NARAYANAN}, {where}",
        {"preset": preset},
        training_table(2048, mbs, gbs, "fp16", "full"),
        plan,
        cluster_table("dgx-a100-80gb", gpus),
        "deepspeed" if plan.get("zero_stage") == 3 else "megatron-lm",
        step_s,
        Reported(tflops, "TFLOP/s/GPU", "narayanan2021-eq3"),
        (*_NARAYANAN_COMMON, note),
    )


def narayanan() -> list[PublishedRun]:
    runs = [
        _narayanan_run(
            f"narayanan2021-t1-{preset.removeprefix('megatron-')}",
            "Table 1 (weak scaling)",
            preset,
            mbs,
            gbs,
            plan_table(tp, pp, v),
            gpus,
            tflops,
            step_s,
            _SC21,
        )
        for preset, tp, pp, gpus, gbs, tflops, mbs, v, step_s in _TABLE1
    ]
    for preset, scheme, pp, v, gpus, gbs, mbs, tflops, step_s in _TABLE2:
        zero3 = scheme == "zero3"
        plan = plan_table(zero_stage=3) if zero3 else plan_table(8, pp, v)
        runs.append(
            _narayanan_run(
                f"narayanan2021-t2-{scheme}-{preset}-{gpus}",
                f"Table 2 ({scheme})",
                preset,
                mbs,
                gbs,
                plan,
                gpus,
                tflops,
                step_s,
                _ZERO3_NOTE if zero3 else _PTD_NOTE,
            )
        )
    return runs


# ------------------------------------------------------------------------------ MegaScale (NSDI'24)
MEGASCALE = (
    "Jiang et al. 2024 (NSDI'24), 'MegaScale: Scaling Large Language Model Training to More Than 10,000 "
    "GPUs', arXiv:2402.15627, Table 2, Megatron-LM baseline rows (iteration time), model of Table 1 and "
    "sec. 6.1"
)
# GPUs, batch, Megatron-LM iteration time (s)
_MEGASCALE_ROWS = (
    (256, 768, 40.0),
    (512, 768, 21.2),
    (768, 768, 15.2),
    (1024, 768, 11.9),
    (3072, 6144, 29.02),
    (6144, 6144, 14.78),
    (8192, 6144, 12.24),
    (12288, 6144, 8.57),
)


def megascale() -> list[PublishedRun]:
    model = {"preset": "gpt3-175b", "num_attention_heads": 128, "vocab_size": 64000}  # Table 1, sec. 6.1
    assumptions = (
        "A100 80GB: the paper says NVIDIA Ampere GPUs; eight 200G NICs per node (sec. 3.6) = dgx-a100-80gb",
        "micro-batch 1, bf16: not stated",
        "sequence parallel + selective recompute (Korthikanti et al. 2022, Megatron-LM's 175B recipe): not "
        "stated; without recompute the first stage of tp8 pp8 does not fit 80 GB",
        "no distributed optimizer (Megatron-LM's default); ZeRO-2 is MegaScale's own, not the baseline's",
    )
    return [
        PublishedRun(
            f"megascale2024-megatron-{gpus}",
            "megascale2024",
            MEGASCALE,
            model,
            training_table(2048, 1, gbs, "bf16", "selective"),
            plan_table(8, 8, 6, sequence_parallel=True),
            cluster_table("dgx-a100-80gb", gpus),
            "megatron-lm",
            step_s,
            Reported(step_s, "s"),
            assumptions,
        )
        for gpus, gbs, step_s in _MEGASCALE_ROWS
    ]


# ---------------------------------------------------------------------------- Llama 3 (Dubey 2024)
LLAMA3 = (
    "Llama Team 2024, 'The Llama 3 Herd of Models', arXiv:2407.21783, sec. 3.3.2 and Table 4 (Llama 3 "
    "405B pre-training, TFLOPs/GPU)"
)
_LLAMA3_ASSUMPTIONS = (
    "TFLOPs/GPU by the PaLM appendix-B formula with N = 405e9 (the paper's MFU cites Chowdhery et al.)",
    "H100 80GB HBM3 on 400 Gb/s RoCE per GPU (sec. 3.3.1) = dgx-h100-80gb; the 1:7 oversubscribed "
    "aggregation layer is not modelled",
    "micro-batch 1; 8 virtual stages per rank, one layer each, the first chunk only the embedding and the "
    "last only the output layer and loss: the paper's interleaved schedule 'reduce[s] one Transformer layer "
    "each from the first and the last stages ... the first model chunk on the first stage has only the "
    "embedding' (sec. 3.3.2), which with 126 layers on pp16 and equal chunks holds only for V = 8 "
    "(16 x 8 - 2 = 126); V and N themselves are not stated",
    "sequence parallel (TP cites Korthikanti et al. 2023), fused attention and fused elementwise kernels "
    "(elementwise 'fused', as Megatron-LM's, whose parallelism the paper cites): not stated",
    "FSDP that keeps gathered weights after forward and reduce-scatters fp32-accumulated gradients once "
    "per step = Megatron's distributed optimizer: zero_stage 1",
)


_LLAMA3_SPLIT = [0] + [1] * 126 + [0]  # 16 ranks x 8 chunks; 126 layers (llama3-405b)


def llama3_row(
    gpus: int, tp: int, pp: int, cp: int, seq: int, gbs: int, tflops: float, step_s: float
) -> PublishedRun:
    extra = {"context_parallel_degree": cp} if cp > 1 else {}
    return PublishedRun(
        f"llama3-405b-{gpus}" + (f"-cp{cp}-{seq}" if cp > 1 else ""),
        "llama3-2024",
        LLAMA3,
        {"preset": "llama3-405b"},
        # no activation checkpointing at 8K (sec. 3.3.2); fp32 gradient accumulation ("numerical stability")
        training_table(
            seq,
            1,
            gbs,
            "bf16",
            "none",
            flash_attention=True,
            grad_accumulation_fp32=True,
            elementwise="fused",
        ),
        plan_table(
            tp, pp, 8, sequence_parallel=True, zero_stage=1, pipeline_layer_split=_LLAMA3_SPLIT, **extra
        ),
        cluster_table("dgx-h100-80gb", gpus),
        "other",
        step_s,
        Reported(tflops, "TFLOP/s/GPU", "palm-appendix-b", 405e9),
        _LLAMA3_ASSUMPTIONS,
    )


# ------------------------------------------------------------------------------------ BLOOM-176B
BLOOM = (
    "bigscience-workshop/bigscience train/tr11-176B-ml/README.md: 'Important checkpoints' log line at "
    "iteration 85376 (elapsed time per iteration 104.70 s, global batch 2048, TFLOPs 149.77), setup in "
    "'Architecture', 'Replica setup', 'Deepspeed config'; Le Scao et al. 2022, arXiv:2211.05100"
)
# Jean Zay: 4 Omni-Path links of 100 Gb/s per 8-GPU node (README 'Hardware') = 6.25 GB/s per GPU.
_OMNIPATH_TIERS = [
    catalog.CLUSTERS["dgx-a100-80gb"]["tiers"][0],  # type: ignore[index]
    {**catalog.CLUSTERS["dgx-a100-80gb"]["tiers"][1], "name": "omnipath", "bandwidth_GBps": 4 * 100 / 8 / 8},  # type: ignore[index]
]


def bloom() -> PublishedRun:
    model = {
        "hidden_size": 14336,
        "num_hidden_layers": 70,
        "num_attention_heads": 112,
        "vocab_size": 250880,
        "activation": "gelu",
        "norm": "layernorm",
        "position_embedding": "rope",
        "tie_word_embeddings": True,
    }
    return PublishedRun(
        "bloom-176b-384gpu",
        "bloom2022",
        BLOOM,
        model,
        # BF16Optimizer accumulates gradients in fp32; DeepSpeed activation checkpointing
        training_table(2048, 2, 2048, "bf16", "full", grad_accumulation_fp32=True),
        plan_table(4, 12, zero_stage=1),
        cluster_table("dgx-a100-80gb", 384, tiers=_OMNIPATH_TIERS),
        "deepspeed",
        104.70,
        Reported(104.70, "s"),
        (
            "ALiBi positions: no parameters, written as 'rope' (plancast's parameter-free option)",
            "vocabulary 250,680 padded to 250,880 (README 'Sizes of each layer': embedding 250880 x 14336)",
            "Omni-Path latency and efficiency: those of the dgx-a100-80gb InfiniBand tier",
            "DeepSpeed's pipeline schedule (1F1B-like TrainSchedule): 1F1B",
        ),
    )
