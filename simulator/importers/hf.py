"""A Hugging Face `config.json` -> the scenario's `[model]` table (Llama, Mistral, Qwen2/3, GPT-2, GPT-NeoX,
Nemotron; mixture-of-experts Mixtral, Qwen2/3-MoE, gpt-oss, DeepSeek-V2/V3/V3.2, Kimi-K2, GLM-4.5/4.6/4.7,
GLM-5 through importers/hf_moe.py; Qwen3-Next's and Qwen3.5's Gated DeltaNet layers, and Qwen3.5's language
model out of its vision-language config, through importers/hf_linear.py)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from plancast.simulator.importers._common import ConfigImportError
from plancast.simulator.importers._common import positive_int as _positive_int
from plancast.simulator.importers.hf_linear import LINEAR_READ, hf_linear_keys, language_model
from plancast.simulator.importers.hf_moe import DEEPSEEK_TYPES, MOE_TYPES, hf_moe_keys
from plancast.simulator.model_sparse import DSA_KEYS

# model_type -> (MLP gated, i.e. SwiGLU with silu; tie_word_embeddings default of its config class).
# Defaults from transformers' Llama/Mistral/Qwen2/Qwen3/GPT2/GPTNeoX/Nemotron/GptOss configuration_*.py.
_HF_ARCHS: dict[str, tuple[bool, bool]] = {
    "llama": (True, False),
    "mistral": (True, False),
    "qwen2": (True, False),
    "qwen3": (True, False),
    "qwen3_moe": (True, False),
    "nemotron": (False, False),
    "gpt_oss": (True, False),
    "kimi_k2": (True, False),
    "gpt2": (False, True),
    "gpt_neox": (False, False),
    "mixtral": (True, False),
    "qwen2_moe": (True, False),
    "deepseek_v2": (True, False),
    "deepseek_v3": (True, False),
    "deepseek_v32": (True, False),  # DeepseekV32Config is DeepseekV3Config with the indexer's three keys
    "glm4_moe": (True, False),  # transformers' configuration_glm4_moe.py: hidden_act "silu", no tying
    "glm_moe_dsa": (True, False),  # GLM-5: transformers' GlmMoeDsaConfig, hidden_act "silu", no tying
    "qwen3_next": (True, False),  # transformers' Qwen3NextConfig: hidden_act "silu", no tying
    "qwen3_5_text": (True, False),  # Qwen3.5's language models (their text_config), as Qwen3-Next
    "qwen3_5_moe_text": (True, False),
}
_HF_ARCH_NAMES = {
    "LlamaForCausalLM": "llama",
    "MistralForCausalLM": "mistral",
    "Qwen2ForCausalLM": "qwen2",
    "Qwen3ForCausalLM": "qwen3",
    "Qwen3MoeForCausalLM": "qwen3_moe",
    "NemotronForCausalLM": "nemotron",
    "GptOssForCausalLM": "gpt_oss",
    "GPT2LMHeadModel": "gpt2",
    "GPTNeoXForCausalLM": "gpt_neox",
    "MixtralForCausalLM": "mixtral",
    "Qwen2MoeForCausalLM": "qwen2_moe",
    "DeepseekV2ForCausalLM": "deepseek_v2",
    "DeepseekV3ForCausalLM": "deepseek_v3",
    "DeepseekV32ForCausalLM": "deepseek_v32",
    "Glm4MoeForCausalLM": "glm4_moe",
    "GlmMoeDsaForCausalLM": "glm_moe_dsa",
    "Qwen3NextForCausalLM": "qwen3_next",
}
# Architectures whose layers plancast cannot price yet, and why: a clearer refusal than the supported list.
_HF_UNMODELLED: dict[str, str] = {}
# GPT-2 keeps its own key names (transformers GPT2Config.attribute_map).
_GPT2_KEYS = {
    "hidden_size": "n_embd",
    "num_hidden_layers": "n_layer",
    "num_attention_heads": "n_head",
    "max_position_embeddings": "n_positions",
    "intermediate_size": "n_inner",
}
# (hidden, attention) dropout keys: GPT-2's names, and everyone else's (GPT-NeoX, Falcon: hidden_dropout;
# Llama, Mistral, Qwen, Mixtral, DeepSeek: attention_dropout only, no residual dropout module).
_DROPOUT_KEYS = ("resid_pdrop", "attn_pdrop", "hidden_dropout", "attention_dropout")
# Keys that change the model in ways plancast does not represent (noted, not refused).
_HF_NOT_MODELLED = ("attention_bias", "mlp_bias")
# Keys read above or in importers/hf_moe.py, and keys that change neither a shape nor the work of a step
# as plancast models it (token ids, initialisation, dtype of the checkpoint, cache and output flags,
# the embedding's and classifier's dropout, loss weights, RoPE bases, norm eps).
_HF_READ = frozenset(
    {
        "architectures", "model_type", "hidden_size", "num_hidden_layers", "num_attention_heads",
        "vocab_size", "num_key_value_heads", "intermediate_size", "max_position_embeddings",
        "activation_function", "hidden_act", "rms_norm_eps", "rope_theta", "rotary_emb_base",
        "rotary_pct", "tie_word_embeddings", "use_sliding_window", *_GPT2_KEYS.values(),
        "num_local_experts", "num_experts", "n_routed_experts", "num_experts_per_tok",
        "router_aux_loss_coef", "aux_loss_alpha", "moe_intermediate_size",
        "shared_expert_intermediate_size", "decoder_sparse_step", "mlp_only_layers", "n_shared_experts",
        "first_k_dense_replace", "moe_layer_freq", "kv_lora_rank", "q_lora_rank", "qk_nope_head_dim",
        "qk_rope_head_dim", "v_head_dim", "num_nextn_predict_layers", "head_dim", "n_group", "topk_group",
        "experts_per_token", "layer_types", "partial_rotary_factor", "sliding_window", "use_qk_norm",
        *DSA_KEYS, "mlp_layer_types", "qk_head_dim", "index_topk_freq", "index_skip_topk_offset",
        *LINEAR_READ,
        *_DROPOUT_KEYS,
    }
)
_HF_NO_EFFECT = frozenset(
    {
        "torch_dtype", "dtype", "transformers_version", "_name_or_path", "bos_token_id", "eos_token_id",
        "pad_token_id", "initializer_range", "layer_norm_eps", "layer_norm_epsilon", "use_cache",
        "pretraining_tp", "embd_pdrop",
        "summary_activation", "summary_first_dropout", "summary_proj_to_labels", "summary_type",
        "summary_use_proj", "task_specific_params", "n_ctx", "output_router_logits", "router_jitter_noise",
        "max_window_layers", "scale_attn_weights", "reorder_and_upcast_attn",
        "scale_attn_by_inverse_layer_idx", "norm_topk_prob", "routed_scaling_factor", "scoring_func",
        "topk_method", "seq_aux", "ep_size", "use_parallel_residual", "classifier_dropout",
        # positions' frequencies (YaRN, Llama 3.1 scaling), a SwiGLU clamp, the checkpoint's storage
        # format and remote-code class names change no shape and no work of a training step
        "rope_scaling", "initial_context_length", "swiglu_limit", "quantization_config", "auto_map",
        "norm_eps", "rope_parameters", "rope_interleave", "indexer_rope_interleave",
        # the recurrent state's dtype where a kernel keeps one between calls (inference); FLA's chunked
        # training kernels accumulate it in fp32 whatever it says
        "mamba_ssm_dtype",
    }
)


def _hf_model_type(config: Mapping[str, Any]) -> str:
    model_type = _named_model_type(config)
    for key in ("num_local_experts", "num_experts", "n_routed_experts"):
        if config.get(key) and model_type not in MOE_TYPES:
            raise ConfigImportError(
                f"{key}: a mixture-of-experts model ({config[key]} experts) of model_type {model_type!r}; "
                f"plancast imports experts of {sorted(MOE_TYPES)} (or write the [model] MoE keys by hand)"
            )
    return model_type


def _named_model_type(config: Mapping[str, Any]) -> str:
    model_type = config.get("model_type")
    if model_type is None:
        archs = config.get("architectures")
        names = archs if isinstance(archs, list) else []
        known = [_HF_ARCH_NAMES[a] for a in names if isinstance(a, str) and a in _HF_ARCH_NAMES]
        if not known:
            raise ConfigImportError(
                f"model_type: missing, and architectures {archs!r} names no supported model; "
                f"supported model_type values: {sorted(_HF_ARCHS)}"
            )
        return known[0]
    if isinstance(model_type, str) and model_type in _HF_UNMODELLED:
        raise ConfigImportError(f"model_type: {model_type!r} is not supported: {_HF_UNMODELLED[model_type]}")
    if not isinstance(model_type, str) or model_type not in _HF_ARCHS:
        supported = sorted(_HF_ARCHS)
        raise ConfigImportError(f"model_type: {model_type!r} is not supported; supported: {supported}")
    return model_type


def _hf_activation(config: Mapping[str, Any], gated: bool) -> str:
    key = "activation_function" if "activation_function" in config else "hidden_act"
    act = config.get(key, "silu" if gated else "gelu")
    if gated and act in ("silu", "swish"):
        return "swiglu"  # silu gating: Shazeer 2020, "GLU Variants Improve Transformer"
    if not gated and act == "relu2":
        return "relu2"  # squared ReLU: So et al. 2021, "Primer"; Nemotron-4 (arXiv 2402.16819)
    if not gated and isinstance(act, str) and act.startswith("gelu"):
        return "gelu"  # gelu, gelu_new, gelu_fast, gelu_pytorch_tanh: the same two matrices
    mlp = "gated (SwiGLU) MLP expects silu" if gated else "two-matrix MLP expects a gelu variant or relu2"
    raise ConfigImportError(f"{key}: {act!r} is not supported; this model's {mlp}")


def hf_model(config: Mapping[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """The `[model]` table and notes on what it does not model."""
    config, language_notes = language_model(config)  # a vision-language config's language model
    model_type = _hf_model_type(config)
    gated, tie_default = _HF_ARCHS[model_type]
    names = _GPT2_KEYS if model_type == "gpt2" else {}

    def get(key: str) -> object:
        return config.get(names.get(key, key))

    model: dict[str, Any] = {}
    for key in ("hidden_size", "num_hidden_layers", "num_attention_heads", "vocab_size"):
        if get(key) is None:
            raise ConfigImportError(f"{names.get(key, key)}: required key is missing from the config")
        model[key] = _positive_int(get(key), names.get(key, key))
    for key in ("num_key_value_heads", "intermediate_size", "max_position_embeddings"):
        if get(key) is not None:  # GPT-2's n_inner = null means 4h, as plancast's default
            model[key] = _positive_int(get(key), names.get(key, key))
    model["activation"] = _hf_activation(config, gated)
    model["norm"] = "rmsnorm" if "rms_norm_eps" in config else "layernorm"
    rotary = any(k in config for k in ("rope_theta", "rotary_emb_base", "rotary_pct", "rope_parameters"))
    model["position_embedding"] = "rope" if rotary else "learned"
    tie = config.get("tie_word_embeddings", tie_default)
    if not isinstance(tie, bool):
        raise ConfigImportError(f"tie_word_embeddings: expected true or false, got {tie!r}")
    model["tie_word_embeddings"] = tie
    notes = language_notes + [
        f"{k} = {config[k]!r} is not modelled" for k in _HF_NOT_MODELLED if config.get(k) not in (None, False)
    ]
    model.update(_hf_window(config))
    for key in ("rotary_pct", "partial_rotary_factor"):  # GPT-NeoX's and Nemotron's names
        if config.get(key, 1.0) != 1.0:
            notes.append(
                f"{key} = {config[key]!r}: partial rotary is modelled as full (neither has parameters)"
            )
    if model_type in MOE_TYPES:
        moe, moe_notes = hf_moe_keys(config, model_type)
        model.update(moe)
        notes += moe_notes
    linear, linear_notes = hf_linear_keys(config, model_type)
    model.update(linear)
    notes += linear_notes
    head_dim = config.get("head_dim")
    if head_dim is not None and model_type not in DEEPSEEK_TYPES:  # DeepSeek's MLA widths say it all
        head_dim = _positive_int(head_dim, "head_dim")
        if head_dim * model["num_attention_heads"] != model["hidden_size"]:
            model["head_dim"] = head_dim
    model.update(_architecture_keys(config, model_type))
    notes += _architecture_notes(config, model_type)
    unknown = sorted(k for k in config if k not in _HF_READ | _HF_NO_EFFECT | set(_HF_NOT_MODELLED))
    if unknown:
        notes.append(
            f"not read: {', '.join(unknown)} (keys plancast does not know; check they do not change the "
            "model's shape)"
        )
    if model_type in ("qwen2", "qwen2_moe"):
        notes.append(
            "Qwen2's query/key/value biases are not counted (plancast gives biases to LayerNorm models only)"
        )
    return {**model, **_hf_dropout(config, model_type)}, notes


def _hf_dropout(config: Mapping[str, Any], model_type: str) -> dict[str, float]:
    """model.hidden_dropout and attention_dropout as the config sets them, else as transformers' config
    class defaults them: GPT2Config resid_pdrop and attn_pdrop 0.1; 0.0 for the others (LlamaConfig
    attention_dropout 0.0, GPTNeoXConfig hidden_dropout 0.0), whose decoder layers without the key have
    no residual dropout at all."""
    gpt2 = model_type == "gpt2"
    out = {}
    names = _DROPOUT_KEYS[:2] if gpt2 else _DROPOUT_KEYS[2:]
    for key, name in zip(("hidden_dropout", "attention_dropout"), names, strict=True):
        p = config.get(name, 0.1 if gpt2 else 0.0)
        if isinstance(p, bool) or not isinstance(p, int | float) or not 0 <= p < 1:
            raise ConfigImportError(f"{name}: {p!r} is not a dropout probability; give a number in [0, 1)")
        out[key] = float(p)
    return out


def _architecture_keys(config: Mapping[str, Any], model_type: str) -> dict[str, bool]:
    """Modules an architecture's code builds that its config.json names by no shape key."""
    keys = {}
    if model_type in ("qwen3", "qwen3_moe"):
        keys["qk_layernorm"] = True  # Qwen3Attention's q_norm / k_norm (modeling_qwen3.py), no config key
    if model_type == "glm4_moe" and config.get("use_qk_norm") is True:
        keys["qk_layernorm"] = True  # Glm4MoeAttention's q_norm / k_norm (modeling_glm4_moe.py)
    if model_type == "gpt_oss":
        keys["moe_expert_bias"] = True  # GptOssExperts' gate_up_proj_bias / down_proj_bias, no config key
        keys["attention_sinks"] = True  # GptOssAttention's `sinks`, no config key
    return keys


def _architecture_notes(config: Mapping[str, Any], model_type: str) -> list[str]:
    """What an architecture does beyond its config keys that plancast leaves out, said once."""
    notes = []
    if model_type == "nemotron" and not config.get("attention_bias") and not config.get("mlp_bias"):
        notes.append(
            "Nemotron's linear layers have no biases, but plancast counts a LayerNorm model's: "
            "(heads + 2 kv heads) x head_dim + 2 hidden_size + intermediate_size parameters a layer too many"
        )
    if model_type == "gpt_oss":
        notes.append(
            "the attention sinks' parameters (one logit a head) and the experts' and router's biases are "
            "not counted; applying the sinks and adding the experts' biases are priced (model."
            "attention_sinks, model.moe_expert_bias)"
        )
    return notes


def _hf_window(config: Mapping[str, Any]) -> dict[str, Any]:
    """model.sliding_window and layer_types as config.json sets them; none where use_sliding_window is
    false (Qwen2Config carries a sliding_window it leaves off)."""
    window = config.get("sliding_window")
    if window is None or config.get("use_sliding_window") is False:
        return {}
    out: dict[str, Any] = {"sliding_window": _positive_int(window, "sliding_window")}
    types = config.get("layer_types")
    if types is not None:
        if not isinstance(types, list) or not set(types) <= {"sliding_attention", "full_attention"}:
            raise ConfigImportError(
                f"layer_types: {types!r} is not a list of 'sliding_attention' / 'full_attention'; "
                "plancast models no other attention layer type"
            )
        out["layer_types"] = types
    return out


def from_hf_config(config: Mapping[str, Any]) -> dict[str, Any]:
    """The `[model]` table for a Hugging Face `config.json` (Llama, Mistral, Qwen2, GPT-2, GPT-NeoX)."""
    return hf_model(config)[0]
