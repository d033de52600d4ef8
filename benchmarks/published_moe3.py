"""Published mixture-of-experts training runs of the Megatron-Core MoE team (issue 31): Qwen3-235B-A22B on
256 H100 under five plans, each with its measured step time. Data only; benchmarks/published_data.py
gathers them into MOE_RUNS.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from benchmarks.published_moe2 import TE_EXPERTS
from benchmarks.published_record import (
    PublishedRun,
    Reported,
    cluster_table,
    derive_step_time_s,
    plan_table,
    training_table,
)

MODELZOO = (
    "yanring/Megatron-MoE-ModelZoo examples/qwen3/readme.md (= best_practice/qwen3/readme.md, 'H100'): "
    "256 H100 GPUs, NVLink 4th generation, InfiniBand 8x50 GB/s, Qwen3-235B-A22B BF16, seq 4096, GBS "
    "2048, step time (sec); flags in model_configs/benchmarking/Qwen3-235B-A22B.yaml"
)
_NOTES = (
    "Qwen3 config.json as the qwen3-235b-a22b preset (head_dim 128, q/k norm); the yaml's "
    "--make-vocab-size-divisible-by 1187 keeps the 151,936-token vocabulary",
    "the yaml's learned aux-loss router on real data (--finetune from the released checkpoint, no "
    "--moe-router-force-load-balancing): training.moe_routing_imbalance left at its default",
    "--use-distributed-optimizer: zero_stage 1 with distributed_optimizer; --sequence-parallel under tp; "
    "--expert-tensor-parallel-size 1: the folded expert grid; "
    "--account-for-embedding/loss-in-pipeline-split: the embedding and the loss count as a layer each in the "
    "pipeline split",
    "--overlap-grad-reduce, --overlap-param-gather: parallelism.overlap_grad_reduce and overlap_param_gather",
)
DDP_OVERLAP = {"overlap_grad_reduce": True, "overlap_param_gather": True}
"""The yaml's `--overlap-grad-reduce: true` and `--overlap-param-gather: true` (MODEL_ARGS)."""
NORM_ACT = (
    "recompute 'norm, act' (output-discarding recompute of the norms and the expert activation): recompute "
    "'selective' with recompute_modules ['layernorm', 'moe_act'] (Megatron-Core --recompute-modules)"
)


def _zoo(
    name: str,
    plan: dict[str, Any],
    mbs: int,
    recompute: str,
    step_s: float,
    *notes: str,
    shape: tuple[int, int] = (4096, 2048),
    reported: Reported | None = None,
    **training: Any,
) -> PublishedRun:
    """One row of the table: `plan` as plan_table's keywords plus the dispatcher and overlap; recompute
    "norm, act": the NORM_ACT modules; `shape`: (sequence length, global batch); `reported`: the figure
    where it is not the step time (then `step_s` is derived from it)."""
    modules = {"recompute_modules": ["layernorm", "moe_act"]} if recompute == "norm, act" else {}
    seq, gbs = shape
    row = PublishedRun(
        name,
        "megatron-moe-modelzoo",
        MODELZOO,
        {"preset": "qwen3-235b-a22b"},
        training_table(
            seq,
            mbs,
            gbs,
            "bf16",
            "selective" if modules else recompute,
            flash_attention=True,
            moe_expert_gemm="multi_stream",
            **modules,
            **training,
        ),
        {"expert_tensor_parallel_degree": 1, "zero_stage": 1, "distributed_optimizer": True, **DDP_OVERLAP,
         **plan},
        cluster_table("dgx-h100-80gb", 256),
        "megatron-lm",
        step_s,
        reported or Reported(step_s, "s"),
        (*_NOTES, TE_EXPERTS, *notes),
    )
    return replace(row, measured_step_time_s=round(derive_step_time_s(row), 3)) if reported else row


LONG_CONTEXT = (
    "the readme's '#### Long Context' table (H100, 32 nodes, Qwen3-235B-A22B, DeepEP, bf16): TFLOPS per "
    "GPU as Megatron-Core counts them (benchmarks/published_record.py megatron_core_flops_per_token: "
    "it gives the five 4,096-token rows' TF from their step times within 0.5%); its command: PP=8 VPP=4 "
    "TP=$TP EP=8 CP=$CP GBS=$GBS, A2A_OVERLAP=0, --recompute-granularity selective --recompute-modules "
    "layernorm moe (recompute_modules ['layernorm', 'moe']), micro-batch 1 (the script's default)"
)


def long_context_runs() -> tuple[PublishedRun, ...]:
    """The Long Context table: each sequence length with forced balance and dropless (the readme: 'Add
    --moe-router-force-load-balancing to test forced load balancing')."""
    rows = []
    for seq, cp, forced, dropless in ((16384, 1, 295, 237), (32768, 2, 335, 277), (65536, 4, 368, 320),
                                      (131072, 8, 389, 357)):  # fmt: skip
        plan = {
            **plan_table(4, 8, 4, expert_parallel_degree=8, sequence_parallel=True),
            "moe_token_dispatcher": "deepep",
            **({"context_parallel_degree": cp} if cp > 1 else {}),
        }
        variants = (("forced", forced, {"moe_routing_imbalance": 1.0}), ("dropless", dropless, {}))
        for label, tflops, balance in variants:
            note = (
                "forced balance: training.moe_routing_imbalance = 1.0"
                if balance
                else "dropless, the learned router: training.moe_routing_imbalance left at its default"
            )
            rows.append(
                _zoo(
                    f"modelzoo-qwen3-235b-{seq // 1024}k-cp{cp}-{label}",
                    plan,
                    1,
                    "selective",
                    0.0,
                    LONG_CONTEXT,
                    note,
                    shape=(seq, 256),
                    reported=Reported(tflops, "TFLOP/s/GPU", flop_formula="megatron-core-2025"),
                    recompute_modules=["layernorm", "moe"],
                    **balance,
                )
            )
    return tuple(rows)


def modelzoo_runs() -> tuple[PublishedRun, ...]:
    cross_node = plan_table(2, 8, 4, expert_parallel_degree=32, sequence_parallel=True)
    deepep = {"moe_token_dispatcher": "deepep"}
    return (
        _zoo(
            "modelzoo-qwen3-235b-tp2-pp8-ep32",
            {**cross_node, **deepep},
            1,
            "norm, act",
            19.7,
            "DeepEP",
            NORM_ACT,
        ),
        _zoo(
            "modelzoo-qwen3-235b-tp2-pp8-ep32-a2a-overlap",
            {**cross_node, **deepep, "moe_overlap_ep_comm": True},
            1,
            "norm, act",
            17.6,
            "DeepEP; '+1f1b overlap': --overlap-moe-expert-parallel-comm as moe_overlap_ep_comm",
            NORM_ACT,
        ),
        _zoo(
            "modelzoo-qwen3-235b-tp2-ep8-fsdp",
            {**plan_table(2, 1, expert_parallel_degree=8, sequence_parallel=True), **deepep, "zero_stage": 3},
            4,
            "full",
            17.6,
            "DeepEP; FSDP 'On' (Megatron-FSDP over the 128 data-parallel ranks): zero_stage 3",
        ),
        _zoo(
            "modelzoo-qwen3-235b-tp2-pp32-ep8-alltoall",
            {
                **plan_table(2, 32, 3, expert_parallel_degree=8, sequence_parallel=True),
                "pipeline_layer_split": [0, *[1] * 94, 0],
            },
            1,
            "norm, act",
            24.2,
            "A2A: the alltoall dispatcher; 96 virtual stages of one unit each: the embedding alone, 94 "
            "layers, the loss alone",
            NORM_ACT,
        ),
        _zoo(
            "modelzoo-qwen3-235b-tp4-pp8-ep8",
            {**plan_table(4, 8, 4, expert_parallel_degree=8, sequence_parallel=True), **deepep},
            1,
            "none",
            29.0,
            "DeepEP; recompute column blank: none",
        ),
    )
