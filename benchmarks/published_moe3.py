"""Published mixture-of-experts training runs of the Megatron-Core MoE team (issue 31): Qwen3-235B-A22B on
256 H100 under five plans, each with its measured step time. Data only; benchmarks/published_data.py
gathers them into MOE_RUNS.
"""

from __future__ import annotations

from typing import Any

from benchmarks.published_moe2 import TE_EXPERTS
from benchmarks.published_record import PublishedRun, Reported, cluster_table, plan_table, training_table

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
)
NORM_ACT = (
    "recompute 'norm, act' (output-discarding recompute of the norms and the expert activation): recompute "
    "'selective' with recompute_modules ['layernorm', 'moe_act'] (Megatron-Core --recompute-modules)"
)


def _zoo(
    name: str, plan: dict[str, Any], mbs: int, recompute: str, step_s: float, *notes: str
) -> PublishedRun:
    """One row of the table: `plan` as plan_table's keywords plus the dispatcher and overlap; recompute
    "norm, act": the NORM_ACT modules."""
    modules = {"recompute_modules": ["layernorm", "moe_act"]} if recompute == "norm, act" else {}
    return PublishedRun(
        name,
        "megatron-moe-modelzoo",
        MODELZOO,
        {"preset": "qwen3-235b-a22b"},
        training_table(
            4096,
            mbs,
            2048,
            "bf16",
            "selective" if modules else recompute,
            flash_attention=True,
            moe_expert_gemm="multi_stream",
            **modules,
        ),
        {"expert_tensor_parallel_degree": 1, "zero_stage": 1, "distributed_optimizer": True, **plan},
        cluster_table("dgx-h100-80gb", 256),
        "megatron-lm",
        step_s,
        Reported(step_s, "s"),
        (*_NOTES, TE_EXPERTS, *notes),
    )


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
