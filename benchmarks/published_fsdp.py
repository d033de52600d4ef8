"""Published runs that shard with FSDP: torchtitan (FSDP2) and MosaicML llm-foundry (PyTorch FSDP).
Data only; benchmarks/published_data.py gathers them."""

from __future__ import annotations

from benchmarks.published_record import (
    PublishedRun,
    Reported,
    cluster_table,
    plan_table,
    training_table,
)
from plancast.simulator import catalog

# -------------------------------------------------------------------------------------- torchtitan
TORCHTITAN_A100 = (
    "torchtitan docs/performance.md (commit 0413364), 'Llama 3 / Llama 2 performance numbers': FSDP2 on "
    "64 A100 80GB, WPS = tokens/s per GPU, https://github.com/pytorch/torchtitan"
)
TORCHTITAN_H100 = (
    "torchtitan docs/performance.md (commit eaea6f6), Tables 1 and 3: Llama 3.1 8B FSDP on H100 "
    "(Grand Teton), TPS/GPU of the rows 'FSDP' and 'FSDP + torch.compile' (torch nightly 2024-12-23), "
    "https://github.com/pytorch/torchtitan"
)
# name, preset, seq, GPUs, local batch, recompute, tokens/s per GPU, step s, Memory(GiB) (H100 Tables 1
# and 3; the A100 tables report none). Step s = local batch x seq / (tokens/s per GPU). The A100 tables
# and the H100 'FSDP' rows ran eagerly (torchtitan's default); '-compile' rows are 'FSDP + torch.compile'.
_TORCHTITAN_ROWS = (
    ("a100-llama3-8b-selective", "llama3-8b", 8192, 64, 1, "selective", 2973, 2.756, None),
    ("a100-llama3-70b-full", "llama3-70b", 8192, 64, 1, "full", 331, 24.75, None),
    ("a100-llama2-13b-none", "llama2-13b", 4096, 64, 2, "none", 2162, 3.789, None),
    ("a100-llama2-13b-selective", "llama2-13b", 4096, 64, 2, "selective", 1904, 4.302, None),
    ("a100-llama2-70b-b1-selective", "llama2-70b", 4096, 64, 1, "selective", 355, 11.54, None),
    ("a100-llama2-70b-b2-full", "llama2-70b", 4096, 64, 2, "full", 353, 23.21, None),
    ("h100-llama3-8b-8gpu", "llama3-8b", 8192, 8, 2, "selective", 5762, 2.844, 82.4),
    ("h100-llama3-8b-128gpu", "llama3-8b", 8192, 128, 2, "selective", 5605, 2.923, 67.0),
    ("h100-llama3-8b-8gpu-compile", "llama3-8b", 8192, 8, 2, "selective", 6667, 2.457, 77.0),
    ("h100-llama3-8b-128gpu-compile", "llama3-8b", 8192, 128, 2, "selective", 6514, 2.515, 62.0),
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


def torchtitan() -> list[PublishedRun]:
    runs = []
    for name, preset, seq, gpus, local, recompute, tps, step_s, memory_gib in _TORCHTITAN_ROWS:
        h100, compiled = name.startswith("h100"), name.endswith("-compile")
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
            "torch.compile fuses the elementwise ops: elementwise 'fused'"
            if compiled
            else "no torch.compile (torchtitan's default): elementwise 'eager', the framework's default",
        )
        runs.append(
            PublishedRun(
                f"torchtitan-{name}",
                "torchtitan",
                TORCHTITAN_H100 if h100 else TORCHTITAN_A100,
                {"preset": preset},
                training_table(
                    seq,
                    local,
                    local * gpus,
                    "bf16",
                    recompute,
                    flash_attention=True,
                    selective_recompute="op",
                    **({"elementwise": "fused"} if compiled else {}),
                ),
                plan_table(zero_stage=3, fsdp_reduce_dtype="fp32"),
                cluster_table("dgx-h100-80gb", gpus, gpu=_H100_96GB)
                if h100
                else cluster_table("dgx-a100-80gb", gpus),
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


def mosaic() -> list[PublishedRun]:
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
                training_table(2048, mbs, gbs, "bf16", "full" if ac else "none", flash_attention=True),
                plan_table(zero_stage=3, **_MOSAIC_FSDP),
                cluster_table(f"dgx-{gpu}-80gb", gpus),
                "fsdp",
                step_s,
                Reported(tokens_s, "tokens/s"),
                assumptions,
            )
        )
    return runs
