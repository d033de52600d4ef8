"""Published, measured training runs: the validation set of issue 9 (MoE / long-context rows: issue 13).

Each `PublishedRun` is written the way a user would write the run: only what the source says about the
model, batch, plan and machines, plus the framework name. Whatever the source leaves open and had to be
chosen is listed in `assumptions`, one line each. `measured_step_time_s` is the iteration time; when the
source reports throughput instead, `reported` keeps the raw figure and `derive_step_time_s` recomputes
the step time from it with the FLOP formula the source itself used (tests check the two agree).

Pure data: no simulation here. `scenario_dict(run)` gives the TOML-shaped tables for
`plancast.simulator.loader.parse_scenario` (without the framework key); `groups()` the runs that are
several plans of one model on one cluster.
"""

from __future__ import annotations

import copy
import json
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any, Literal

from plancast.simulator import catalog

Framework = Literal["megatron-lm", "torchtitan", "deepspeed", "fsdp", "other"]
Unit = Literal["s", "TFLOP/s/GPU", "tokens/s/GPU", "tokens/s", "GPU-h/1T tokens"]
FlopFormula = Literal["narayanan2021-eq3", "palm-appendix-b"]


@dataclass(frozen=True)
class Reported:
    """The figure as the source prints it."""

    value: float
    unit: Unit
    flop_formula: FlopFormula | None = None
    """For TFLOP/s: the source's FLOPs per step (see `step_flops`)."""
    num_parameters: float | None = None
    """N of the PaLM formula, as the source states the model size."""


@dataclass(frozen=True)
class PublishedRun:
    """One published training run and its measured step time."""

    name: str
    source: str
    citation: str
    model: dict[str, Any] = field(hash=False)
    """[model] table: a preset and/or Hugging Face config keys (read-only; `scenario_dict` copies)."""
    training: dict[str, Any] = field(hash=False)
    parallelism: dict[str, Any] = field(hash=False)
    cluster: dict[str, Any] = field(hash=False)
    framework: Framework
    measured_step_time_s: float
    reported: Reported
    assumptions: tuple[str, ...] = ()
    measured_memory_gib: float | None = None
    """Peak memory per GPU as the source reports it (its `memory_metric`), where it does."""
    memory_metric: str = ""

    @property
    def num_gpus(self) -> int:
        preset = catalog.CLUSTERS[self.cluster["preset"]]
        per_node = int(self.cluster.get("gpus_per_node", preset["gpus_per_node"]))
        return int(self.cluster["num_nodes"]) * per_node

    @property
    def tokens_per_step(self) -> int:
        return int(self.training["global_batch_size"]) * int(self.training["seq_len"])

    @property
    def measured_tokens_per_s(self) -> float:
        return self.tokens_per_step / self.measured_step_time_s


def model_table(run: PublishedRun) -> dict[str, Any]:
    """The [model] table with its preset expanded (explicit keys override, as parse_scenario does)."""
    preset = run.model.get("preset")
    base = catalog.lookup(catalog.MODELS, preset, "model") if preset else {}
    return {**base, **{k: v for k, v in run.model.items() if k != "preset"}}


def step_flops(run: PublishedRun) -> float:
    """FLOPs of one step by the formula the source used to report its TFLOP/s."""
    m, r = model_table(run), run.reported
    s, B = int(run.training["seq_len"]), int(run.training["global_batch_size"])
    h, layers, V = m["hidden_size"], m["num_hidden_layers"], m["vocab_size"]
    if r.flop_formula == "narayanan2021-eq3":
        # Narayanan et al. 2021, eq. 3: 96 B s l h^2 (1 + s/6h + V/16lh), recompute forward included.
        return 96 * B * s * layers * h**2 * (1 + s / (6 * h) + V / (16 * layers * h))
    if r.flop_formula == "palm-appendix-b" and r.num_parameters is not None:
        # Chowdhery et al. 2022 (PaLM), appendix B: 6N + 12 L H Q T per token.
        heads = m["num_attention_heads"]
        return run.tokens_per_step * (6 * r.num_parameters + 12 * layers * heads * (h // heads) * s)
    raise ValueError(f"{run.name}: no FLOP formula for {r.unit}")


def derive_step_time_s(run: PublishedRun) -> float:
    """Step time from the reported figure: s as is; tokens/s -> tokens per step / rate; TFLOP/s ->
    step FLOPs / (TFLOP/s x GPUs); GPU-hours per 10^12 tokens -> tokens per step x that / GPUs."""
    r = run.reported
    if r.unit == "s":
        return r.value
    if r.unit == "tokens/s":
        return run.tokens_per_step / r.value
    if r.unit == "tokens/s/GPU":
        return run.tokens_per_step / (r.value * run.num_gpus)
    if r.unit == "GPU-h/1T tokens":
        return run.tokens_per_step * r.value * 3600 / (1e12 * run.num_gpus)
    return step_flops(run) / (r.value * 1e12 * run.num_gpus)


def scenario_dict(run: PublishedRun) -> dict[str, Any]:
    """The scenario tables for parse_scenario (the consumer adds `parallelism.framework`)."""
    return copy.deepcopy(
        {"model": run.model, "training": run.training, "parallelism": run.parallelism, "cluster": run.cluster}
    )


def _plan(tp: int = 1, pp: int = 1, v: int = 1, **extra: Any) -> dict[str, Any]:
    plan: dict[str, Any] = {"tensor_parallel_degree": tp, "pipeline_parallel_degree": pp, **extra}
    if pp > 1:
        plan["pipeline_parallel_schedule"] = "Interleaved1F1B" if v > 1 else "1F1B"
        plan["virtual_stages_per_rank"] = v
    return plan


def _train(seq: int, mbs: int, gbs: int, dtype: str, recompute: str, **extra: Any) -> dict[str, Any]:
    return {
        "seq_len": seq,
        "micro_batch_size": mbs,
        "global_batch_size": gbs,
        "dtype": dtype,
        "recompute": recompute,
        **extra,
    }


def _cluster(preset: str, gpus: int, **extra: Any) -> dict[str, Any]:
    return {"preset": preset, "num_nodes": gpus // 8, **extra}


# ------------------------------------------------------------------------- Korthikanti et al. 2022
KORTHIKANTI = "Korthikanti et al. 2022, arXiv:2205.05198, Tables 3 and 5 (iteration time, Selene A100 80GB)"
# Table 3 plan, Table 5 times: preset, tp, pp, global batch, micro-batch, v, full s, SP+selective s
_KORTHIKANTI_ROWS = (
    ("megatron-22b", 8, 1, 4, 4, 1, 1.42, 1.10),
    ("gpt3-175b", 8, 8, 64, 1, 3, 18.13, 13.75),
    ("megatron-530b", 8, 35, 280, 1, 3, 49.05, 37.83),
    ("megatron-1t", 8, 64, 512, 1, 1, 94.42, 71.49),
)


def _korthikanti() -> list[PublishedRun]:
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
                    _train(2048, mbs, gbs, "fp16", recompute),
                    _plan(tp, pp, v, sequence_parallel=sp),
                    _cluster("dgx-a100-80gb", tp * pp),
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
        _train(2048, mbs, gbs, "fp16", "full"),
        plan,
        _cluster("dgx-a100-80gb", gpus),
        "deepspeed" if plan.get("zero_stage") == 3 else "megatron-lm",
        step_s,
        Reported(tflops, "TFLOP/s/GPU", "narayanan2021-eq3"),
        (*_NARAYANAN_COMMON, note),
    )


def _narayanan() -> list[PublishedRun]:
    runs = [
        _narayanan_run(
            f"narayanan2021-t1-{preset.removeprefix('megatron-')}",
            "Table 1 (weak scaling)",
            preset,
            mbs,
            gbs,
            _plan(tp, pp, v),
            gpus,
            tflops,
            step_s,
            _SC21,
        )
        for preset, tp, pp, gpus, gbs, tflops, mbs, v, step_s in _TABLE1
    ]
    for preset, scheme, pp, v, gpus, gbs, mbs, tflops, step_s in _TABLE2:
        zero3 = scheme == "zero3"
        plan = _plan(zero_stage=3) if zero3 else _plan(8, pp, v)
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


def _megascale() -> list[PublishedRun]:
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
            _train(2048, 1, gbs, "bf16", "selective"),
            _plan(8, 8, 6, sequence_parallel=True),
            _cluster("dgx-a100-80gb", gpus),
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
    "sequence parallel (TP cites Korthikanti et al. 2023) and fused attention: not stated",
    "FSDP that keeps gathered weights after forward and reduce-scatters fp32-accumulated gradients once "
    "per step = Megatron's distributed optimizer: zero_stage 1",
)


_LLAMA3_SPLIT = [0] + [1] * 126 + [0]  # 16 ranks x 8 chunks; 126 layers (llama3-405b)


def _llama3_row(
    gpus: int, tp: int, pp: int, cp: int, seq: int, gbs: int, tflops: float, step_s: float
) -> PublishedRun:
    extra = {"context_parallel_degree": cp} if cp > 1 else {}
    return PublishedRun(
        f"llama3-405b-{gpus}" + (f"-cp{cp}-{seq}" if cp > 1 else ""),
        "llama3-2024",
        LLAMA3,
        {"preset": "llama3-405b"},
        # no activation checkpointing at 8K (sec. 3.3.2); fp32 gradient accumulation ("numerical stability")
        _train(seq, 1, gbs, "bf16", "none", flash_attention=True, grad_accumulation_fp32=True),
        _plan(tp, pp, 8, sequence_parallel=True, zero_stage=1, pipeline_layer_split=_LLAMA3_SPLIT, **extra),
        _cluster("dgx-h100-80gb", gpus),
        "other",
        step_s,
        Reported(tflops, "TFLOP/s/GPU", "palm-appendix-b", 405e9),
        _LLAMA3_ASSUMPTIONS,
    )


# -------------------------------------------------------------------------------------- torchtitan
TORCHTITAN_A100 = (
    "torchtitan docs/performance.md (commit 0413364), 'Llama 3 / Llama 2 performance numbers': FSDP2 on "
    "64 A100 80GB, WPS = tokens/s per GPU, https://github.com/pytorch/torchtitan"
)
TORCHTITAN_H100 = (
    "torchtitan docs/performance.md (commit eaea6f6), Tables 1 and 3: Llama 3.1 8B FSDP on H100 "
    "(Grand Teton), TPS/GPU without torch.compile, https://github.com/pytorch/torchtitan"
)
# name, preset, seq, GPUs, local batch, recompute, tokens/s per GPU, step s, Memory(GiB) (H100 Tables 1
# and 3; the A100 tables report none)
_TORCHTITAN_ROWS = (
    ("a100-llama3-8b-selective", "llama3-8b", 8192, 64, 1, "selective", 2973, 2.756, None),
    ("a100-llama3-70b-full", "llama3-70b", 8192, 64, 1, "full", 331, 24.75, None),
    ("a100-llama2-13b-none", "llama2-13b", 4096, 64, 2, "none", 2162, 3.789, None),
    ("a100-llama2-13b-selective", "llama2-13b", 4096, 64, 2, "selective", 1904, 4.302, None),
    ("a100-llama2-70b-b1-selective", "llama2-70b", 4096, 64, 1, "selective", 355, 11.54, None),
    ("a100-llama2-70b-b2-full", "llama2-70b", 4096, 64, 2, "full", 353, 23.21, None),
    ("h100-llama3-8b-8gpu", "llama3-8b", 8192, 8, 2, "selective", 5762, 2.844, 82.4),
    ("h100-llama3-8b-128gpu", "llama3-8b", 8192, 128, 2, "selective", 5605, 2.923, 67.0),
)
# torchtitan's train.py logs `gpu_mem_stats.max_reserved_gib`: the caching allocator's reserved peak
TORCHTITAN_MEMORY = "max reserved (torch.cuda.max_memory_reserved)"
# The source's H100s: 96 GB HBM2e at 2.4 TB/s, run at "the default 500W power limit, although tuning it
# up to 700W TDP can potentially provide further speedups" (SXM's tensor peak kept; the 500 W limit
# lowers the clock, GPU.clock_fraction).
_H100_96GB = {
    **catalog.GPUS["H100-SXM5-80GB"],
    "name": "H100-96GB-HBM2e",
    "hbm_GBps": 2400.0,
    "memory_GiB": 96e9 / 2**30,
    "power_W": 700.0,
    "power_limit_W": 500.0,
}


def _torchtitan() -> list[PublishedRun]:
    runs = []
    for name, preset, seq, gpus, local, recompute, tps, step_s, memory_gib in _TORCHTITAN_ROWS:
        h100 = name.startswith("h100")
        assumptions = (
            "selective = per-op selective checkpointing (the source's 'selective op', torchtitan's "
            "default selective_ac_option): selective_recompute 'op'; full = full AC",
            f"seq_len {seq}: torchtitan's train config for {preset} (the MFU column checks with it)",
            "FSDP2 shards parameters (reshard after forward): zero_stage 3; SDPA fused attention",
            "gradients reduce-scattered in fp32: torchtitan's default training.mixed_precision_reduce",
            "HBM2e H100s at a 500 W limit of a 700 W TDP: SXM's peak at the clock the limit holds "
            "(GPU.clock_fraction, 0.89); the source's footnote 2: their peak 'is between SXM and NVL, "
            "and we don't know its exact value'"
            if h100
            else "network of the 64-A100 cluster not stated: dgx-a100-80gb",
        )
        runs.append(
            PublishedRun(
                f"torchtitan-{name}",
                "torchtitan",
                TORCHTITAN_H100 if h100 else TORCHTITAN_A100,
                {"preset": preset},
                _train(
                    seq,
                    local,
                    local * gpus,
                    "bf16",
                    recompute,
                    flash_attention=True,
                    selective_recompute="op",
                ),
                _plan(zero_stage=3, fsdp_reduce_dtype="fp32"),
                _cluster("dgx-h100-80gb", gpus, gpu=_H100_96GB) if h100 else _cluster("dgx-a100-80gb", gpus),
                "torchtitan",
                step_s,
                Reported(tps, "tokens/s/GPU"),
                assumptions,
                measured_memory_gib=memory_gib,
                memory_metric=TORCHTITAN_MEMORY if memory_gib else "",
            )
        )
    return runs


# ----------------------------------------------------------------------------- MosaicML llm-foundry
MOSAIC = (
    "mosaicml/llm-foundry scripts/train/benchmarking/README.md (commit 061f2c7), tables 'H100 80GB BF16' "
    "and 'A100 80GB with 1600 Gbps node-node interconnect (RoCE)', Throughput (T/s); MPT shapes from "
    "scripts/train/yamls/pretrain/mpt-*.yaml"
)
# MPT: d_model, n_heads, n_layers; vocab 50368, GELU MLP 4d, LayerNorm, learned positions, tied (MPT defaults)
_MPT = {"7b": (4096, 32, 32), "13b": (5120, 40, 40), "30b": (7168, 56, 48), "70b": (8192, 64, 80)}
# GPU, model, GPUs, micro-batch, global batch, activation checkpointing, tokens/s (all GPUs), step s,
# the table's "MP Mode" column
_MOSAIC_ROWS = (
    ("h100", "70b", 64, 8, 2048, True, 66523, 63.05, "DEFAULT"),
    ("h100", "70b", 32, 2, 1024, True, 28242, 74.26, "DEFAULT"),
    ("h100", "30b", 8, 3, 504, True, 16022, 64.42, "DEFAULT"),
    ("h100", "13b", 64, 2, 128, False, 307209, 0.8533, "DEFAULT"),
    ("h100", "13b", 8, 2, 16, False, 38336, 0.8548, "DEFAULT"),
    ("h100", "7b", 8, 6, 48, False, 85144, 1.155, "DEFAULT"),
    ("a100", "70b", 64, 8, 2048, True, 26274, 159.6, "PURE"),
    ("a100", "30b", 8, 3, 504, True, 7330, 140.8, "DEFAULT"),
    ("a100", "13b", 8, 2, 48, False, 18097, 5.432, "DEFAULT"),
    ("a100", "7b", 8, 6, 96, False, 37130, 5.295, "DEFAULT"),
)
# The tables were measured by scripts/train/benchmarking/sweep.sh (GIT_COMMIT="v0.0.4", image
# mosaicml/pytorch:2.0.1): llm-foundry v0.0.4 pins mosaicml>=0.14.0,<0.15. Composer 0.14's FSDP
# (composer/trainer/dist_strategy.py, mosaic_fsdp.py): "DEFAULT" and "PURE" both gather bf16 parameters
# and reduce in bf16 (an unset reduce_dtype takes param_dtype), backward_prefetch BACKWARD_POST.
_MOSAIC_FSDP = {"fsdp_backward_prefetch": "post"}


def _mosaic() -> list[PublishedRun]:
    runs = []
    for gpu, size, gpus, mbs, gbs, ac, tokens_s, step_s, mp_mode in _MOSAIC_ROWS:
        d, heads, layers = _MPT[size]
        model = {
            "hidden_size": d,
            "num_attention_heads": heads,
            "num_hidden_layers": layers,
            "vocab_size": 50368,
            "activation": "gelu",
            "norm": "layernorm",
            "position_embedding": "learned",
            "max_position_embeddings": 2048,
        }
        assumptions = (
            "FSDP FULL_SHARD = zero_stage 3; the yamls' flash/triton attention = flash_attention",
            "the H100 table names no network: dgx-h100-80gb"
            if gpu == "h100"
            else "1600 Gb/s RoCE per node = 8 x 200 Gb/s: dgx-a100-80gb",
            f"MP Mode {mp_mode} under Composer 0.14 (llm-foundry v0.0.4, sweep.sh): bf16 gathers and "
            "reductions; FSDP1 backward_prefetch BACKWARD_POST: fsdp_backward_prefetch 'post'",
        )
        runs.append(
            PublishedRun(
                f"mosaic-{gpu}-mpt-{size}-{gpus}gpu",
                "mosaicml-llm-foundry",
                MOSAIC,
                model,
                _train(2048, mbs, gbs, "bf16", "full" if ac else "none", flash_attention=True),
                _plan(zero_stage=3, **_MOSAIC_FSDP),
                _cluster(f"dgx-{gpu}-80gb", gpus),
                "fsdp",
                step_s,
                Reported(tokens_s, "tokens/s"),
                assumptions,
            )
        )
    return runs


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


def _bloom() -> PublishedRun:
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
        _train(2048, 2, 2048, "bf16", "full", grad_accumulation_fp32=True),
        _plan(4, 12, zero_stage=1),
        _cluster("dgx-a100-80gb", 384, tiers=_OMNIPATH_TIERS),
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


# --------------------------------------------------------------- MoE and long context (issue 13)
DEEPSEEK_V3 = (
    "DeepSeek-AI 2024, 'DeepSeek-V3 Technical Report', arXiv:2412.19437: sec. 1 (180K H800 GPU hours per "
    "trillion tokens, 2048 H800), sec. 3.1-3.2 (PP16, EP64 over 8 nodes, ZeRO-1 DP, DualPipe), sec. 4.2 "
    "(batch 15360, seq 4096); shapes from deepseek-ai/DeepSeek-V3 config.json"
)
GPT_OSS = (
    "NVIDIA-NeMo/Megatron-Bridge docs/performance-summary-archive.md, '26.02 NeMo Container', GPT OSS 120B, "
    "DGX-H100 BF16 row: 64 GPUs, GBS 1280, MBS 1, seq 4096, TP1 PP4 EP8, 5993 tokens/s/GPU"
)


GPT_OSS_2511 = (
    "NVIDIA-NeMo/Megatron-Bridge docs/performance-summary-archive.md, '25.11 NeMo Container', System "
    "DGX-H100, GPT OSS 120B row: 64 GPUs, BF16, GBS 512, MBS 4, seq 4096, TP1 PP4 VP1 EP8, 5630 tokens/s/GPU"
)


def _moe_and_long_context() -> tuple[PublishedRun, ...]:
    # DeepSeek-V3: the catalog preset (its config.json; MLA modelled as multi-head attention). H800:
    # the hgx-h800 preset (H100 SXM compute; NVLink 160 GB/s and IB 50 GB/s as sec. 3.2.2 measures).
    deepseek = {"preset": "deepseek-v3"}
    h800 = {"preset": "hgx-h800", "num_nodes": 256}
    # gpt-oss-120b: 64 query heads of 64 = 4096 != hidden 2880, which plancast's attention (head_dim =
    # hidden / heads) cannot hold; 45 heads of 64 (9 key/value heads) keep hidden and head_dim.
    gpt_oss = {
        "hidden_size": 2880,
        "num_hidden_layers": 36,
        "num_attention_heads": 45,
        "num_key_value_heads": 9,
        "intermediate_size": 2880,
        "num_local_experts": 128,
        "num_experts_per_tok": 4,
        "vocab_size": 201088,
        "activation": "swiglu",
        "norm": "rmsnorm",
        "position_embedding": "rope",
        "tie_word_embeddings": False,
    }
    gpt_oss_notes = (
        "shapes from openai/gpt-oss-120b config.json; attention as 45 heads of 64 with 9 key/value heads "
        "(the model's 64 query heads project 2880 -> 4096, not expressible): ~25% fewer attention "
        "parameters; alternating 128-token sliding-window attention not expressible",
        "recompute none and no virtual stages (VP n/a): not stated otherwise",
        "the benchmark force-balances tokens over experts (page footnote): dropless imbalance factor kept",
    )
    return (
        PublishedRun(
            "deepseek-v3-2048xh800",
            "deepseek-v3-2024",
            DEEPSEEK_V3,
            deepseek,
            _train(4096, 1, 15360, "bf16", "selective", flash_attention=True),
            {
                "tensor_parallel_degree": 1,
                "pipeline_parallel_degree": 16,
                "expert_parallel_degree": 64,
                "zero_stage": 1,
                "pipeline_parallel_schedule": "1F1B",
            },
            h800,
            "other",
            19.91,
            Reported(180_000, "GPU-h/1T tokens"),
            (
                "bf16: the report trains in FP8 mixed precision (plancast has no fp8 dtype yet)",
                "1F1B: DualPipe (which hides the all-to-alls behind compute) is not modelled; plancast's "
                "all-to-alls block, and every token is dispatched to its k experts, not to at most 4 "
                "nodes (node-limited routing, sec. 2.1.2)",
                "micro-batch 1: not stated; 'selective' = the report's recompute of RMSNorm and MLA "
                "up-projections",
                "the batch after its ramp (15360 sequences) for the whole run's rate",
            ),
        ),
        _llama3_row(16384, 8, 16, 16, 131072, 128, 380, 15.30),
        PublishedRun(
            "nemo-gpt-oss-120b-64xh100",
            "megatron-bridge-2026",
            GPT_OSS,
            gpt_oss,
            _train(4096, 1, 1280, "bf16", "none", flash_attention=True),
            {**_plan(1, 4), "expert_parallel_degree": 8},
            _cluster("dgx-h100-80gb", 64),
            "megatron-lm",
            13.67,
            Reported(5993, "tokens/s/GPU"),
            gpt_oss_notes,
        ),
        PublishedRun(
            "nemo-gpt-oss-120b-64xh100-mbs4",
            "megatron-bridge-2025",
            GPT_OSS_2511,
            gpt_oss,
            _train(4096, 4, 512, "bf16", "none", flash_attention=True),
            {**_plan(1, 4), "expert_parallel_degree": 8},
            _cluster("dgx-h100-80gb", 64),
            "megatron-lm",
            5.820,
            Reported(5630, "tokens/s/GPU"),
            gpt_oss_notes,
        ),
    )


RUNS: tuple[PublishedRun, ...] = (
    *_korthikanti(),
    *_narayanan(),
    *_megascale(),
    _llama3_row(8192, 8, 16, 1, 8192, 2048, 430, 12.54),
    _llama3_row(16384, 8, 16, 1, 8192, 2048, 400, 6.740),
    *_torchtitan(),
    *_mosaic(),
    _bloom(),
)
"""Dense runs that parse on today's simulator."""

MOE_AND_LONG_CONTEXT_RUNS: tuple[PublishedRun, ...] = _moe_and_long_context()
"""Runs that need expert or context parallelism (issue 13): written with issue 13's key names."""


def groups(runs: tuple[PublishedRun, ...] = RUNS) -> dict[str, tuple[PublishedRun, ...]]:
    """Runs that are several plans of one model on one cluster at one sequence length, by a key naming
    both. Plans of a group may differ in batch: rank them by `measured_tokens_per_s`."""
    by_key: dict[str, list[PublishedRun]] = defaultdict(list)
    for run in runs:
        key = json.dumps([run.model, run.cluster, run.training["seq_len"]], sort_keys=True)
        by_key[key].append(run)
    return {
        f"{members[0].source}:{members[0].name}": tuple(members)
        for members in by_key.values()
        if len(members) > 1
    }
