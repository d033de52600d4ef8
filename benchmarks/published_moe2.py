"""Published mixture-of-experts training runs on H100 (issue 31): NVIDIA Megatron-Bridge's and NeMo
AutoModel's performance tables. Data only; benchmarks/published_data.py gathers them into MOE_RUNS.

Every model is a catalog preset, which carries its config.json (head_dim, multi-head latent
attention, q/k norms: docs/models.md), as a user names it.
"""

from __future__ import annotations

from typing import Any

from benchmarks.published_record import PublishedRun, Reported, cluster_table, plan_table, training_table

BRIDGE_2511 = (
    "NVIDIA-NeMo/Megatron-Bridge docs/performance-summary-archive.md, '25.11 NeMo Container', System "
    "DGX-H100 table"
)
BRIDGE_2602 = (
    "NVIDIA-NeMo/Megatron-Bridge docs/performance-summary-archive.md, '26.02.01 NeMo Container' (the patch "
    "release's figures for the plans the '26.02 NeMo Container' table lists), DGX-H100 rows"
)
PATCH_2602 = (
    "26.02.01 re-measures the 26.02 plans; its figure is taken (26.02 printed 5113 for Qwen3-30B-A3B, "
    "1633 for Qwen3-235B-A22B, 5993 for gpt-oss-120b on the same plans)"
)
BRIDGE_2509 = (
    "NVIDIA-NeMo/Megatron-Bridge docs/performance-summary-archive.md, '25.09 NeMo Container', System "
    "DGX-H100 table"
)
AUTOMODEL = (
    "NVIDIA-NeMo/Automodel docs/performance-summary.md, 'Pre-Training Performance, System: DGX-H100, "
    "Precision: BF16' (time per global step); configs examples/benchmark/configs/*_te_deepep.yaml "
    "(fake_balanced_gate: true, activation_checkpointing: true, DeepEP, FSDP2 over data parallel)"
)
FORCED_BALANCE = "the source force-balances tokens over experts: training.moe_routing_imbalance = 1.0"
TE_EXPERTS = (
    "experts as Transformer Engine's GroupedLinear runs them by default, one cuBLAS GEMM per expert over "
    "its compute streams (common/gemm/cublaslt_gemm.cu; the CUTLASS grouped kernel only with "
    "NVTE_USE_CUTLASS_GROUPED_GEMM=1, which no recipe sets): training.moe_expert_gemm 'multi_stream'"
)
FAKE_GATE = (
    "fake_balanced_gate routes token i to experts ik .. ik+k-1 mod E (FakeBalancedGate, "
    "nemo_automodel/components/moe/layers.py): training.moe_token_spread = 'contiguous'"
)


# The models as a user names them: the catalog presets carry each config.json, head_dim included
# (Qwen3's 128-wide heads over hidden 2048 / 4096, gpt-oss's 64 heads of 64 over 2880; docs/models.md).
QWEN3_30B = {"preset": "qwen3-30b-a3b"}
QWEN3_235B = {"preset": "qwen3-235b-a22b"}
QWEN3_NOTE = "Qwen3 config.json as the qwen3-30b-a3b / qwen3-235b-a22b presets (head_dim 128, q/k norm)"
# openai/gpt-oss-20b config.json: 24 layers, 32 experts top-4, else as gpt-oss-120b.
GPT_OSS_120B = {"preset": "gpt-oss-120b"}
GPT_OSS_20B = {
    **GPT_OSS_120B,
    "num_hidden_layers": 24,
    "num_local_experts": 32,
    "layer_types": ["sliding_attention", "full_attention"] * 12,
}
GPT_OSS_NOTE = (
    "gpt-oss config.json as the gpt-oss-120b preset (64 query heads of 64 over hidden 2880, 128-token "
    "sliding windows on every other layer: sliding_window, layer_types)"
)
# moonshotai/Kimi-K2-Instruct config.json: the kimi-k2 preset (MLA, 384 experts, no MTP module).
KIMI_K2 = {"preset": "kimi-k2"}


DDP_OVERLAP = {"overlap_grad_reduce": True, "overlap_param_gather": True}
"""Every Megatron-Bridge MoE recipe's `DistributedDataParallelConfig(overlap_grad_reduce=True,
overlap_param_gather=True, use_distributed_optimizer=True)` (src/megatron/bridge/recipes/qwen/qwen3_moe.py,
gpt_oss/gpt_oss.py, deepseek/deepseek_v3.py at v0.2.0 and v0.3.0; qwen3_235b_a22b.py at v0.1.0rc3), which
CommOverlapConfig.setup also sets for data-parallel size > 1 (training/comm_overlap.py,
_get_optimizer_overlap_cfgs) unless a script overrides it."""


def _bridge(
    name: str,
    source: str,
    citation: str,
    model: dict[str, Any],
    run: tuple[int, ...],
    rate: float,
    notes: tuple[str, ...],
    **recipe: Any,
) -> PublishedRun:
    """One Megatron-Bridge DGX-H100 row: (gpus, gbs, mbs, tp, pp, vp, ep, fp8) and its tokens/s/GPU;
    `recipe`: what the recipe (scripts/performance/configs) sets, recompute included. Every row as the
    recipes run: the distributed optimizer (zero_stage 1 with distributed_optimizer: every MoE recipe's
    `DistributedDataParallelConfig(use_distributed_optimizer=True)`, src/megatron/bridge/recipes/{qwen,
    deepseek} at v0.1.0rc3, v0.2.0 and v0.3.0, scripts/performance leaving it on), gradients reduced in bf16
    (`grad_reduce_in_fp32 = False`), FP8-CS as the FP8 rows read it (benchmarks/published_fp8.py), and
    gradients reduced and parameters gathered beside the passes (`DDP_OVERLAP`) unless `recipe` says
    otherwise."""
    gpus, gbs, mbs, tp, pp, vp, ep, fp8 = run
    recipe = {**DDP_OVERLAP, **recipe}
    recompute = recipe.pop("recompute", "none")
    modules = {k: recipe.pop(k) for k in ("recompute_modules", "optimizer_moment_dtype") if k in recipe}
    precision = {"fp8": True, "fp8_recipe": "tensorwise_current", "fp8_param": True} if fp8 else {}
    if fp8:  # TE GroupedLinear of these releases (<= 2.16): split_quantize, one call per expert
        precision["moe_fp8_quantize"] = "per_expert"
    training = training_table(
        4096,
        mbs,
        gbs,
        "bf16",
        recompute,
        flash_attention=True,
        moe_routing_imbalance=1.0,
        grad_accumulation_fp32=False,
        moe_expert_gemm="multi_stream",
        **precision,
        **modules,
    )
    plan = plan_table(
        tp,
        pp,
        vp,
        expert_parallel_degree=ep,
        sequence_parallel=tp > 1,
        zero_stage=1,
        distributed_optimizer=True,
        **recipe,
    )
    if ep * tp > 1 and (gpus // (tp * pp)) % ep:
        plan["expert_tensor_parallel_degree"] = 1  # Megatron-Bridge's MoE recipes: etp 1 (folding)
    row = PublishedRun(
        name,
        source,
        citation,
        model,
        training,
        plan,
        cluster_table("dgx-h100-80gb", gpus),
        "megatron-lm",
        0.0,
        Reported(rate, "tokens/s/GPU"),
        (FORCED_BALANCE, TE_EXPERTS, *notes),
    )
    return _with_step_time(row)


def _with_step_time(row: PublishedRun) -> PublishedRun:
    from dataclasses import replace

    from benchmarks.published_record import derive_step_time_s

    return replace(row, measured_step_time_s=round(derive_step_time_s(row), 3))


# The recipes as each release ran them (NVIDIA-NeMo/Megatron-Bridge tags: v0.1.0rc3 for the 25.09 page of
# 2025-10-10, v0.2.0 for 25.11, v0.3.0 for 26.02; scripts/performance/).
RC3_RUN_SCRIPT = "v0.1.0rc3 scripts/performance/run_script.py"
QWEN_2511 = "v0.2.0 scripts/performance/configs/qwen3/workload_base_configs.py"
QWEN_2602 = "v0.3.0 scripts/performance/configs/qwen/qwen3_workload_base_configs.py"


def bridge_runs() -> tuple[PublishedRun, ...]:
    fp8_cs = (
        "FP8-CS: training.fp8 with fp8_recipe 'tensorwise_current' and fp8_param, as the FP8 rows; the "
        "experts' inputs quantized one expert at a time (Transformer Engine GroupedLinear before 2.17: "
        "tex.split_quantize, each split by itself under current scaling): moe_fp8_quantize 'per_expert'"
    )
    fp8_2509 = (
        "the 25.09 DGX-H100 table states no precision; FP8-CS: its Llama 3 8B / 70B / 405B rows (14079, "
        "1619, 302 tokens/s/GPU) are within 4% of 25.11's FP8-CS rows (14451, 1602, 292), and its "
        "footnote calls the parenthesised H100 figures FP8 blockwise, a 'different quantization "
        "granularity'; experts quantized one at a time as the FP8-CS rows (moe_fp8_quantize 'per_expert')"
    )
    no_recompute = "recompute none: set_qwen3_common_configs clears the recipe's recompute"
    qwen30_2511 = (
        QWEN3_NOTE,
        fp8_cs,
        no_recompute,
        f"{QWEN_2511} (H100 FP8_CS): moe_a2a_overlap, alltoall",
        "the publisher calls this figure a regression: 'the perf in 25.11 is 2X slower than 25.09' "
        "(dropless against 25.09's token-drop plan; NVIDIA-NeMo/Megatron-Bridge issue #1998); scored as "
        "published",
    )
    qwen30_2602 = (
        QWEN3_NOTE,
        fp8_cs,
        no_recompute,
        f"{QWEN_2602} (H100 FP8_CS_V1): moe_a2a_overlap, deepep",
        PATCH_2602,
    )
    qwen235 = (
        QWEN3_NOTE,
        fp8_cs,
        no_recompute,
        f"{QWEN_2511} / {QWEN_2602} (H100 FP8_CS): etp 1, alltoall, moe_a2a_overlap, no tp-comm overlap",
    )
    tokendrop = (
        QWEN3_NOTE,
        fp8_2509,
        "'(tokendrop)': apply_moe_token_drop's capacity factor 1.0, padded to capacity "
        "(src/megatron/bridge/training/utils/moe_token_drop.py), with the alltoall dispatcher it requires",
        f"{RC3_RUN_SCRIPT}: no a2a overlap for Qwen3, CommOverlapConfig(tp_comm_overlap=True); recompute "
        "none (configs/qwen3/qwen3_235b_a22b_llm_pretrain.yaml)",
    )
    dsv3 = (
        fp8_2509,
        f"{RC3_RUN_SCRIPT} for H100: DeepEP (flex dispatcher), overlap_moe_expert_parallel_comm, forced "
        "balance, layout Et|(tt|)*30mL (embedding + 1 layer, 30 x 2 layers, MTP + loss alone), no tp-comm "
        "overlap config",
        "recompute 'selective' with the recipe's recompute_modules ['mla_up_proj', 'mlp']: 'mlp' re-runs "
        "only the 3 dense MLPs (Megatron-Core transformer_layer.py: not for MoE layers), 'mla_up_proj' the "
        "up-projections; not the attention core",
        "the recipe's precision-aware optimizer with bf16 Adam moments (src/megatron/bridge/recipes/"
        "deepseek/deepseek_v3.py: exp_avg_dtype, exp_avg_sq_dtype bfloat16): optimizer_moment_dtype 'bf16'",
    )
    overlap = {"moe_overlap_ep_comm": True}
    b25, b26 = "megatron-bridge-2025", "megatron-bridge-2026"
    return (
        _bridge(
            "bridge-qwen3-30b-a3b-16xh100-2511",
            b25,
            BRIDGE_2511,
            QWEN3_30B,
            (16, 512, 2, 1, 2, 24, 8, 1),
            5275,
            qwen30_2511,
            **overlap,
        ),
        _bridge(
            "bridge-qwen3-30b-a3b-16xh100-2602",
            b26,
            BRIDGE_2602,
            QWEN3_30B,
            (16, 1024, 1, 1, 2, 12, 8, 1),
            9058,
            qwen30_2602,
            moe_token_dispatcher="deepep",
            **overlap,
        ),
        _bridge(
            "bridge-qwen3-235b-a22b-256xh100-2511",
            b25,
            BRIDGE_2511,
            QWEN3_235B,
            (256, 2048, 1, 2, 8, 4, 32, 1),
            1575,
            qwen235,
            **overlap,
        ),
        _bridge(
            "bridge-qwen3-235b-a22b-256xh100-2602",
            b26,
            BRIDGE_2602,
            QWEN3_235B,
            (256, 8192, 1, 2, 8, 4, 32, 1),
            1611,
            (*qwen235, PATCH_2602),
            **overlap,
        ),
        _bridge(
            "bridge-qwen3-235b-a22b-256xh100-2509-tokendrop",
            b25,
            BRIDGE_2509,
            {**QWEN3_235B, "moe_capacity_factor": 1.0},
            (256, 2048, 1, 2, 8, 4, 32, 1),
            1204,
            tokendrop,
            tp_comm_overlap=True,
        ),
        _bridge(
            "bridge-deepseek-v3-1024xh100-2509",
            b25,
            BRIDGE_2509,
            {"preset": "deepseek-v3"},
            (1024, 8192, 1, 2, 8, 4, 64, 1),
            1297,
            dsv3,
            recompute="selective",
            recompute_modules=["mla_up_proj", "mlp"],
            optimizer_moment_dtype="bf16",
            expert_tensor_parallel_degree=1,
            moe_token_dispatcher="deepep",
            pipeline_layer_split=[1, *[2] * 30, 0],
            # run_script.py for H100: comm_overlap.overlap_grad_reduce = False; CommOverlapConfig still sets
            # overlap_param_gather, which plancast's validation refuses without the grad overlap (as
            # Megatron-LM's arguments.py asserts): both off
            overlap_grad_reduce=False,
            overlap_param_gather=False,
            **overlap,
        ),
    )


def _automodel(
    name: str,
    model: dict[str, Any],
    run: tuple[int, ...],
    step_s: float,
    *notes: str,
    attn: str | None = None,
    bias_add: str | None = None,
) -> PublishedRun:
    """One AutoModel DGX-H100 BF16 row: (gpus, gbs, mbs, pp, vp, ep, recompute) and its time per step;
    `attn`: the config's `backend.attn` (TE_ATTN, FLEX_ATTN), as training.attention_backend; `bias_add`:
    how its experts add their biases (AUTOMODEL_BIAS), as training.moe_expert_bias_add."""
    gpus, gbs, mbs, pp, vp, ep, full = run
    attention = {"attention_backend": attn} if attn else {}
    if bias_add:
        attention["moe_expert_bias_add"] = bias_add
    training = training_table(
        4096,
        mbs,
        gbs,
        "bf16",
        "full" if full else "none",
        flash_attention=True,
        elementwise="fused",
        moe_routing_imbalance=1.0,
        moe_token_spread="contiguous",
        **attention,
        master_weights=False,
    )
    plan = plan_table(1, pp, vp, expert_parallel_degree=ep, zero_stage=3, moe_token_dispatcher="deepep")
    return PublishedRun(
        name,
        "nemo-automodel",
        AUTOMODEL,
        model,
        training,
        plan,
        cluster_table("dgx-h100-80gb", gpus),
        "torchtitan",
        step_s,
        Reported(step_s, "s"),
        (
            FORCED_BALANCE,
            FAKE_GATE,
            "the config's activation_checkpointing as recompute 'full' (true) or 'none'",
            "TE linear and rms_norm kernels, fused rope: elementwise 'fused'",
            AUTOMODEL_BF16,
            *notes,
        ),
    )


AUTOMODEL_BF16 = (
    "pure bf16 parameters and optimizer states: the configs set no torch_dtype, which "
    "NeMoAutoModelForCausalLM.from_config turns into bfloat16 (nemo_automodel/_transformers/auto_model.py), "
    "the MoE models' initialize_weights ends in self.to(bfloat16), and torch.optim.Adam keeps its moments "
    "in the parameters' dtype: training.master_weights = false"
)


# The configs' `backend.attn` (examples/benchmark/configs/*_te_deepep.yaml): Transformer Engine's fused
# attention, priced as Megatron-LM's (training.attention_backend 'te': cuDNN's causal kernel over the
# causal half), except gpt-oss's FlexAttention (its attention sinks and sliding windows; the table's
# "TE + DeepEP + FlexAttn"), training.attention_backend 'flex'.
TE_ATTN = "attn: te (Transformer Engine's fused attention): training.attention_backend 'te'"
FLEX_ATTN = (
    "attn: flex (PyTorch FlexAttention, for gpt-oss's sinks and sliding windows; the table's 'TE + DeepEP + "
    "FlexAttn'): training.attention_backend 'flex'; the sinks' rescale after the kernel (sigmoid(lse - "
    "sink), nemo_automodel/components/attention/flex_attention.py) priced by the preset's attention_sinks"
)


AUTOMODEL_BIAS = (
    "expert biases as GroupedExpertsDeepEP adds them at the commit that published the table (89e3a9fd, "
    "nemo_automodel/components/moe/layers.py `_apply_bias`): both projections' one local expert at a "
    "time, fc2's times the routing probability (fp32 through DeepEP): training.moe_expert_bias_add "
    "'per_expert'"
)


def automodel_runs() -> tuple[PublishedRun, ...]:
    mla = f"MLA as the preset's config.json (docs/models.md); {TE_ATTN}"
    return (
        _automodel(
            "automodel-deepseek-v3-1024xh100",
            {"preset": "deepseek-v3"},
            (1024, 8192, 1, 4, 8, 64, 1),
            37.87,
            mla,
            attn="te",
        ),
        _automodel(
            "automodel-deepseek-v3-256xh100",
            {"preset": "deepseek-v3"},
            (256, 512, 1, 4, 8, 64, 1),
            8.18,
            mla,
            attn="te",
        ),
        _automodel("automodel-kimi-k2-256xh100", KIMI_K2, (256, 512, 1, 8, 4, 32, 1), 8.86, mla, attn="te"),
        _automodel(
            "automodel-qwen3-30b-a3b-8xh100",
            QWEN3_30B,
            (8, 512, 4, 1, 1, 8, 1),
            21.773,
            QWEN3_NOTE,
            TE_ATTN,
            attn="te",
        ),
        _automodel(
            "automodel-gpt-oss-20b-8xh100",
            GPT_OSS_20B,
            (8, 256, 2, 1, 1, 8, 1),
            10.04,
            GPT_OSS_NOTE,
            "ep 8, local batch 2, activation_checkpointing true: examples/benchmark/configs/"
            "gptoss_20b_te_deepep.yaml at 89e3a9fdd, the commit that published the table, whose global "
            "batch 256, local batch 2 and pp 1 it matches (the table prints '-' for EP); the yaml turned "
            "activation_checkpointing off in 8df18da3 (2025-11-10), after the table, whose gpt-oss rows "
            "were not measured again",
            FLEX_ATTN,
            AUTOMODEL_BIAS,
            attn="flex",
            bias_add="per_expert",
        ),
        _automodel(
            "automodel-gpt-oss-120b-64xh100",
            GPT_OSS_120B,
            (64, 512, 2, 1, 1, 64, 0),
            4.30,
            GPT_OSS_NOTE,
            "ep 64 from examples/benchmark/configs/gptoss_120b_te_deepep.yaml (the table prints '-')",
            FLEX_ATTN,
            AUTOMODEL_BIAS,
            attn="flex",
            bias_add="per_expert",
        ),
    )
