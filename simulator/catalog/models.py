"""Model presets, with Hugging Face config.json key names. Each entry cites its paper or config."""

from __future__ import annotations


def _gpt(
    hidden: int, layers: int, heads: int, vocab: int = 51200, positions: int = 2048
) -> dict[str, object]:
    """A GPT-style decoder: GELU MLP of 4h, LayerNorm, learned positions, tied embeddings."""
    return {
        "hidden_size": hidden,
        "num_hidden_layers": layers,
        "num_attention_heads": heads,
        "vocab_size": vocab,
        "activation": "gelu",
        "norm": "layernorm",
        "position_embedding": "learned",
        "max_position_embeddings": positions,
        "tie_word_embeddings": True,
    }


def _llama(
    hidden: int, layers: int, heads: int, kv_heads: int, ffn: int, vocab: int, positions: int
) -> dict[str, object]:
    """A Llama-style decoder: SwiGLU MLP, RMSNorm, rotary positions, untied embeddings, no dropout (their
    config.json files: attention_dropout 0.0 and no hidden dropout module; Megatron-Bridge's
    LlamaModelProvider sets both to 0.0)."""
    return {
        "hidden_size": hidden,
        "num_hidden_layers": layers,
        "num_attention_heads": heads,
        "num_key_value_heads": kv_heads,
        "intermediate_size": ffn,
        "vocab_size": vocab,
        "activation": "swiglu",
        "norm": "rmsnorm",
        "position_embedding": "rope",
        "max_position_embeddings": positions,
        "tie_word_embeddings": False,
        "hidden_dropout": 0.0,
        "attention_dropout": 0.0,
    }


def _moe(base: dict[str, object], **moe: object) -> dict[str, object]:
    """A Llama-style decoder whose MLPs are mixture-of-experts blocks (docs/moe.md keys)."""
    return {**base, **moe}


_MLA: dict[str, object] = {
    "kv_lora_rank": 512,
    "qk_nope_head_dim": 128,
    "qk_rope_head_dim": 64,
    "v_head_dim": 128,
}
"""Multi-head latent attention as DeepSeek-V2/V3 and Kimi-K2 size it (their config.json files)."""


MODELS: dict[str, dict[str, object]] = {
    # GPT-3 family: Brown et al. 2020, Table 2.1 (vocab 50,257 padded to 51,200 as in Megatron-LM).
    "gpt3-125m": _gpt(768, 12, 12),
    "gpt3-350m": _gpt(1024, 24, 16),
    "gpt3-760m": _gpt(1536, 24, 16),
    "gpt3-1.3b": _gpt(2048, 24, 16),
    "gpt3-2.7b": _gpt(2560, 32, 32),
    "gpt3-6.7b": _gpt(4096, 32, 32),
    "gpt3-13b": _gpt(5120, 40, 40),
    "gpt3-175b": _gpt(12288, 96, 96),
    # Megatron-LM weak-scaling sizes: Narayanan et al. 2021, "Efficient Large-Scale Language Model
    # Training on GPU Clusters", Table 1.
    "megatron-1.7b": _gpt(2304, 24, 24),
    "megatron-3.6b": _gpt(3072, 30, 32),
    "megatron-7.5b": _gpt(4096, 36, 32),
    "megatron-18b": _gpt(6144, 40, 48),
    "megatron-39b": _gpt(8192, 48, 64),
    "megatron-76b": _gpt(10240, 60, 80),
    "megatron-145b": _gpt(12288, 80, 96),
    "megatron-310b": _gpt(16384, 96, 128),
    "megatron-530b": _gpt(20480, 105, 128),
    "megatron-1t": _gpt(25600, 128, 160),
    # Korthikanti et al. 2022, Table 3 (22B; 175B, 530B and 1T are the rows above).
    "megatron-22b": _gpt(6144, 48, 64),
    # Llama 2: Touvron et al. 2023 and the meta-llama/Llama-2-*-hf config.json files.
    "llama2-7b": _llama(4096, 32, 32, 32, 11008, 32000, 4096),
    "llama2-13b": _llama(5120, 40, 40, 40, 13824, 32000, 4096),
    "llama2-70b": _llama(8192, 80, 64, 8, 28672, 32000, 4096),
    # Llama 3 / 3.1: Dubey et al. 2024, Table 3, and the meta-llama/Meta-Llama-3*-hf config.json files.
    "llama3-8b": _llama(4096, 32, 32, 8, 14336, 128256, 8192),
    "llama3-70b": _llama(8192, 80, 64, 8, 28672, 128256, 8192),
    "llama3-405b": _llama(16384, 126, 128, 8, 53248, 128256, 8192),
    # Mixture of experts, from each model's Hugging Face config.json (tests/data/importers/ holds the
    # files; docs/models.md). DeepSeek and Kimi attend with multi-head latent attention (_MLA).
    # mistralai/Mixtral-8x7B-v0.1: 46.7B total, 12.9B active (Jiang et al. 2024).
    "mixtral-8x7b": _moe(
        _llama(4096, 32, 32, 8, 14336, 32000, 32768),
        num_local_experts=8,
        num_experts_per_tok=2,
        router_aux_loss_coef=0.02,
    ),
    # mistralai/Mixtral-8x22B-v0.1: 141B total, 39B active.
    "mixtral-8x22b": _moe(
        _llama(6144, 56, 48, 8, 16384, 32000, 65536),
        num_local_experts=8,
        num_experts_per_tok=2,
        router_aux_loss_coef=0.001,
    ),
    # deepseek-ai/DeepSeek-V3: 671B total, 37B active (arXiv 2412.19437), plus its one-depth MTP module
    # (sec. 2.2) and node-limited routing over 8 groups, 4 per token (sec. 2.1.2).
    "deepseek-v3": _moe(
        _llama(7168, 61, 128, 128, 18432, 129280, 163840),
        num_local_experts=256,
        num_experts_per_tok=8,
        moe_intermediate_size=2048,
        n_shared_experts=1,
        first_k_dense_replace=3,
        router_aux_loss_coef=0.001,
        **_MLA,
        q_lora_rank=1536,
        num_nextn_predict_layers=1,
        n_group=8,
        topk_group=4,
    ),
    # moonshotai/Kimi-K2-Instruct: 1.04T total, 32.6B active (Kimi K2 report, arXiv 2507.20534, Table 2;
    # its checkpoint holds 1.026T weights, the count plancast gives); DeepSeek-V3's shape with 384
    # experts, 64 heads, one dense layer, no MTP, ungrouped routing.
    "kimi-k2": _moe(
        _llama(7168, 61, 64, 64, 18432, 163840, 131072),
        num_local_experts=384,
        num_experts_per_tok=8,
        moe_intermediate_size=2048,
        n_shared_experts=1,
        first_k_dense_replace=1,
        router_aux_loss_coef=0.001,
        **_MLA,
        q_lora_rank=1536,
    ),
    # Qwen/Qwen3-30B-A3B and Qwen3-235B-A22B: 30.5B / 3.3B and 235B / 22B (Qwen3 report, arXiv
    # 2505.09388, Table 2); head_dim 128 beside hidden / heads = 64 and 64; per-head q/k RMSNorm.
    "qwen3-30b-a3b": _moe(
        _llama(2048, 48, 32, 4, 6144, 151936, 40960),
        num_local_experts=128,
        num_experts_per_tok=8,
        moe_intermediate_size=768,
        router_aux_loss_coef=0.001,
        head_dim=128,
        qk_layernorm=True,
    ),
    "qwen3-235b-a22b": _moe(
        _llama(4096, 94, 64, 4, 12288, 151936, 40960),
        num_local_experts=128,
        num_experts_per_tok=8,
        moe_intermediate_size=1536,
        router_aux_loss_coef=0.001,
        head_dim=128,
        qk_layernorm=True,
    ),
    # openai/gpt-oss-120b: 116.8B total, 5.1B active (gpt-oss model card, arXiv 2508.10925, Table 1); 64
    # query heads of 64 over hidden 2880; 128-token sliding windows on every other layer (config.json
    # layer_types), attention sinks (attention_sinks) and biased experts (moe_expert_bias; docs/models.md).
    "gpt-oss-120b": _moe(
        _llama(2880, 36, 64, 8, 2880, 201088, 131072),
        num_local_experts=128,
        num_experts_per_tok=4,
        router_aux_loss_coef=0.9,
        head_dim=64,
        sliding_window=128,
        layer_types=["sliding_attention", "full_attention"] * 18,
        moe_expert_bias=True,
        attention_sinks=True,
    ),
    # deepseek-ai/DeepSeek-V2-Lite: 15.7B total, 2.4B active (arXiv 2405.04434); MLA without query
    # compression (q_lora_rank null).
    "deepseek-v2-lite": _moe(
        _llama(2048, 27, 16, 16, 10944, 102400, 163840),
        num_local_experts=64,
        num_experts_per_tok=6,
        moe_intermediate_size=1408,
        n_shared_experts=2,
        first_k_dense_replace=1,
        router_aux_loss_coef=0.001,
        **_MLA,
    ),
    # zai-org/GLM-5: 744B total, 40B active (the GLM-5 release); DeepSeek-V3.2's shape (transformers'
    # GlmMoeDsaConfig, Megatron-Bridge's glm5_bridge.py): MLA over 64 heads (queries 192 + 64 wide, values
    # 256), 256 experts after 3 dense layers, one MTP depth, DeepSeek Sparse Attention's 32-head indexer.
    "glm-5": _moe(
        _llama(6144, 78, 64, 64, 12288, 154880, 202752),
        num_local_experts=256,
        num_experts_per_tok=8,
        moe_intermediate_size=2048,
        n_shared_experts=1,
        first_k_dense_replace=3,
        kv_lora_rank=512,
        qk_nope_head_dim=192,
        qk_rope_head_dim=64,
        v_head_dim=256,
        q_lora_rank=2048,
        num_nextn_predict_layers=1,
        index_topk=2048,
        index_n_heads=32,
        index_head_dim=128,
    ),
    # Qwen/Qwen3-Next-80B-A3B (config.json, tests/data/importers/): 80B total, 3B active; three Gated
    # DeltaNet layers to one gated full-attention layer (model_linear.py), 512 experts of 512 and one
    # shared expert of the same width, 16 query heads of 256 over 2 key/value heads.
    "qwen3-next-80b-a3b": _moe(
        _llama(2048, 48, 16, 2, 5120, 151936, 262144),
        num_local_experts=512,
        num_experts_per_tok=10,
        moe_intermediate_size=512,
        n_shared_experts=1,
        router_aux_loss_coef=0.001,
        head_dim=256,
        qk_layernorm=True,
        attn_output_gate=True,
        linear_num_key_heads=16,
        linear_num_value_heads=32,
        linear_key_head_dim=128,
        linear_value_head_dim=128,
        linear_conv_kernel_dim=4,
        layer_types=["linear_attention" if (i + 1) % 4 else "full_attention" for i in range(48)],
    ),
    # Qwen/Qwen1.5-MoE-A2.7B: 14.3B total, 2.7B active; one shared expert of 5632 = 4 x 1408.
    "qwen1.5-moe-a2.7b": _moe(
        _llama(2048, 24, 16, 16, 5632, 151936, 8192),
        num_local_experts=60,
        num_experts_per_tok=4,
        moe_intermediate_size=1408,
        n_shared_experts=4,
        router_aux_loss_coef=0.001,
    ),
    # Tiny models that train on a CPU in seconds (plancast's own test sizes).
    "tiny-gpt": _gpt(64, 4, 4, vocab=256, positions=256),
    "tiny-llama": _llama(64, 4, 4, 2, 176, 256, 256),
    "small-gpt": _gpt(256, 8, 8, vocab=1024, positions=512),
    "tiny-moe": _moe(
        _llama(64, 4, 4, 2, 176, 256, 256),
        num_local_experts=4,
        num_experts_per_tok=2,
        moe_intermediate_size=64,
        first_k_dense_replace=1,
    ),
}
