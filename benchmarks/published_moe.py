"""Published runs that need expert or context parallelism (issue 13): DeepSeek-V3, Llama 3 at 128K
context, gpt-oss-120b on Megatron-Bridge. Data only; benchmarks/published_data.py gathers them."""

from __future__ import annotations

from benchmarks.published_megatron import llama3_row
from benchmarks.published_moe2 import DDP_OVERLAP, TE_EXPERTS
from benchmarks.published_record import (
    PublishedRun,
    Reported,
    cluster_table,
    plan_table,
    training_table,
)

# --------------------------------------------------------------- MoE and long context (issue 13)
DEEPSEEK_V3 = (
    "DeepSeek-AI 2024, 'DeepSeek-V3 Technical Report', arXiv:2412.19437: sec. 1 (180K H800 GPU hours per "
    "trillion tokens, 2048 H800), sec. 3.1-3.2 (PP16, EP64 over 8 nodes, ZeRO-1 DP, DualPipe), sec. 4.2 "
    "(batch 15360, seq 4096); shapes from deepseek-ai/DeepSeek-V3 config.json"
)
GPT_OSS = (
    "NVIDIA-NeMo/Megatron-Bridge docs/performance-summary-archive.md, '26.02.01 NeMo Container' (the patch "
    "release re-measuring the '26.02' plans; 26.02 printed 5993), GPT OSS 120B, DGX-H100 BF16 row: 64 GPUs, "
    "GBS 1280, MBS 1, seq 4096, TP1 PP4 EP8, 5984 tokens/s/GPU"
)


GPT_OSS_2511 = (
    "NVIDIA-NeMo/Megatron-Bridge docs/performance-summary-archive.md, '25.11 NeMo Container', System "
    "DGX-H100, GPT OSS 120B row: 64 GPUs, BF16, GBS 512, MBS 4, seq 4096, TP1 PP4 VP1 EP8, 5630 "
    "tokens/s/GPU; micro-batch from the recipe that table was published with (commit 44dae92b0, 'Added "
    "25.11 starter pack', tag v0.2.1): scripts/performance/configs/gpt_oss/workload_base_configs.py "
    "GPT_OSS_120B_H100_BF16_BASE_CONFIG = BASE_GPT_OSS_120B_CONFIG (micro_batch_size 1, GBS 512, EP8) "
    "with PP4"
)
# The table's MBS 4 for this row is not what ran: its GA column (2) is impossible for its own plan (GBS 512
# over 16 data-parallel ranks is 8 micro-batches at MBS 4, 32 at MBS 1) and equals the Blackwell rows' MBS 4
# over 64 ranks (512 / (4 x 64)), from which both columns were carried; only the Blackwell presets of that
# commit set micro_batch_size 4, and the 26.02 table prints the same H100 plan at MBS 1.


def moe_and_long_context() -> tuple[PublishedRun, ...]:
    # DeepSeek-V3: the catalog preset (its config.json: MLA, the MTP module, node-limited routing). H800:
    # the hgx-h800 preset (H100 SXM compute; NVLink 160 GB/s and IB 50 GB/s as sec. 3.2.2 measures).
    deepseek = {"preset": "deepseek-v3"}
    h800 = {"preset": "hgx-h800", "num_nodes": 256}
    # gpt-oss-120b: the catalog preset (openai/gpt-oss-120b config.json: 64 query heads of 64 over hidden
    # 2880, 8 key/value heads), as the AutoModel rows name it.
    gpt_oss = {"preset": "gpt-oss-120b"}
    gpt_oss_notes = (
        "gpt-oss config.json as the gpt-oss-120b preset, its 128-token sliding windows on every other "
        "layer (sliding_window, layer_types) priced as causal layers: no published figure says whether "
        "cuDNN's kernel skips the tiles outside the band (training.sliding_window_skip unset)",
        "attention as cuDNN's fused kernel (the framework's): the NeMo 25.11 container ships cuDNN "
        "9.13.1.26, 26.02 ships 9.18.0.50 (Megatron-Bridge docs/releases/software-versions.md), and "
        "Transformer Engine 2.9-2.12 hand the learnable-softmax (sink) attention to cuDNN from 9.13.1 "
        "(common/fused_attn/fused_attn.cpp), so no unfused fallback; eager, no CUDA graphs (the H100 "
        "recipes set none)",
        "recompute 'selective' with the H100 recipe's recompute_modules ['layernorm', 'moe_act'] (norms and "
        "the expert activation, scripts/performance/configs/gpt_oss, GPT_OSS_120B_*H100*); "
        "no virtual stages (VP n/a)",
        "forced balance (the page's footnote; set_gpt_oss_common_configs: moe_router_force_load_balancing "
        "= True): training.moe_routing_imbalance = 1.0",
        "distributed optimizer (the recipe's ddp.use_distributed_optimizer = True, megatron/bridge/recipes/"
        "gpt_oss, v0.2.0 and v0.3.0): zero_stage 1 with distributed_optimizer; bf16 gradients "
        "(scripts/performance/configs/gpt_oss set_gpt_oss_common_configs: ddp.grad_reduce_in_fp32 = False): "
        "grad_accumulation_fp32 false; gradients reduced and parameters gathered beside the passes (the "
        "recipe's ddp.overlap_grad_reduce and overlap_param_gather = True): parallelism.overlap_grad_reduce "
        "and overlap_param_gather",
        TE_EXPERTS,
        "expert biases as Megatron-Core 0.15 / 0.16 add them (NeMo 25.11 ships dev 0.15.0, 26.02 main "
        "0.16.0): fc1's inside TE's GroupedLinear, fc2's times the routing probability one local expert "
        "at a time (TEGroupedMLP._apply_bias, megatron/core/transformer/moe/experts.py): "
        "training.moe_expert_bias_add 'per_expert_down'",
    )
    balanced = {
        "moe_expert_bias_add": "per_expert_down",
        "moe_expert_gemm": "multi_stream",
        "moe_routing_imbalance": 1.0,
        "grad_accumulation_fp32": False,
        "recompute_modules": ["layernorm", "moe_act"],
    }
    return (
        PublishedRun(
            "deepseek-v3-2048xh800",
            "deepseek-v3-2024",
            DEEPSEEK_V3,
            deepseek,
            training_table(
                4096,
                1,
                15360,
                "bf16",
                "selective",
                flash_attention=True,
                recompute_modules=["layernorm", "mla_up_proj", "moe_act"],
                fp8=True,
                fp8_recipe="blockwise",
                moe_fp8_quantize="grouped",
                elementwise="fused",
                activation_input_store="fp8_recipe",
                attention_output_store="e5m6",
            ),
            {
                "tensor_parallel_degree": 1,
                "pipeline_parallel_degree": 16,
                "expert_parallel_degree": 64,
                "zero_stage": 1,
                "pipeline_parallel_schedule": "DualPipeV",
                "virtual_stages_per_rank": 2,
                "pipeline_parameter_copies": 2,
                "moe_token_dispatcher": "deepep",
                "moe_overlap_ep_comm": True,
            },
            h800,
            "other",
            19.91,
            Reported(180_000, "GPU-h/1T tokens"),
            (
                "fp8: the report's FP8 mixed precision (sec. 3.3) as training.fp8 with bf16 around it, "
                "fp8_recipe 'blockwise': its 1x128 activation tiles and 128x128 weight blocks (sec. 3.3.2); "
                "the activations quantized once before the dispatch (sec. 3.3.4): moe_fp8_quantize 'grouped'",
                "DualPipe (sec. 3.2.1) timed as DualPipeV, its cut-in-half V form with the same bubble "
                "(docs/schedules.md), with moe_overlap_ep_comm: the F&B pairs hide dispatch/combine; its "
                "memory as DualPipe's, which 'requires keeping two copies of the model parameters' (sec. "
                "3.2.1, Table 2): pipeline_parameter_copies 2 (the gradient sum between the copies not "
                "timed); the "
                "cross-node kernels of sec. 3.2.2 (IB once per node, NVLink forwarding) as "
                "moe_token_dispatcher 'deepep'; node-limited routing (at most 4 nodes, sec. 2.1.2) from the "
                "preset's n_group / topk_group",
                "micro-batch 1: not stated; the report recomputes RMSNorm and the MLA up-projections (sec. "
                "3.2.3) and the MoE SwiGLU's output from its cached input (sec. 3.3.3), not the attention "
                "core: recompute 'selective' with recompute_modules ['layernorm', 'mla_up_proj', 'moe_act'], "
                "Megatron-Core's names for that output-discarding recompute",
                "the batch after its ramp (15360 sequences) for the whole run's rate",
                "elementwise 'fused': the report's own kernels (sec. 3.3), not eager PyTorch",
                "the MoE SwiGLU's inputs cached 'in FP8 with our fine-grained quantization method' (sec. "
                "3.3.3): activation_input_store 'fp8_recipe' (the blockwise recipe's 1x128 tile scales "
                "counted), which also narrows the three dense blocks' and the shared experts' SwiGLU inputs "
                "(the report names the MoE's)",
                "the attention output, the input of the Linear after it, cached once in E5M6 with 1x128 "
                "tile scales (sec. 3.3.3): attention_output_store 'e5m6'",
            ),
        ),
        llama3_row(16384, 8, 16, 16, 131072, 128, 380, 15.30),
        PublishedRun(
            "nemo-gpt-oss-120b-64xh100",
            "megatron-bridge-2026",
            GPT_OSS,
            gpt_oss,
            training_table(4096, 1, 1280, "bf16", "selective", flash_attention=True, **balanced),
            {
                **plan_table(1, 4, zero_stage=1, distributed_optimizer=True, **DDP_OVERLAP),
                "expert_parallel_degree": 8,
            },
            cluster_table("dgx-h100-80gb", 64),
            "megatron-lm",
            13.69,
            Reported(5984, "tokens/s/GPU"),
            gpt_oss_notes,
        ),
        PublishedRun(
            "nemo-gpt-oss-120b-64xh100-mbs4",
            "megatron-bridge-2025",
            GPT_OSS_2511,
            gpt_oss,
            training_table(4096, 1, 512, "bf16", "selective", flash_attention=True, **balanced),
            {
                **plan_table(1, 4, zero_stage=1, distributed_optimizer=True, **DDP_OVERLAP),
                "expert_parallel_degree": 8,
            },
            cluster_table("dgx-h100-80gb", 64),
            "megatron-lm",
            5.820,
            Reported(5630, "tokens/s/GPU"),
            gpt_oss_notes,
        ),
    )
