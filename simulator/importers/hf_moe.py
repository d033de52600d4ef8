"""Mixture-of-experts keys of a Hugging Face `config.json` (Mixtral, Qwen2-MoE, Qwen3-MoE, gpt-oss,
DeepSeek-V2/V3/V3.2, Kimi-K2, GLM-4.5, GLM-5) -> the scenario's MoE keys (docs/moe.md) and DeepSeek's
attention and MTP keys (docs/models.md). Key names per transformers' configuration_mixtral.py,
configuration_qwen2_moe.py, configuration_qwen3_moe.py, configuration_gpt_oss.py, configuration_glm4_moe.py,
configuration_glm_moe_dsa.py and DeepSeek's configuration_deepseek.py (which Kimi-K2's config.json names
in auto_map). GLM-4.5 (Glm4MoeForCausalLM,
also GLM-4.6 and 4.7) takes DeepSeek-V3's MoE layout and key names (n_routed_experts, n_shared_experts,
first_k_dense_replace, num_nextn_predict_layers, n_group / topk_group) over grouped-query attention, so it
goes through the same keys without MLA's. GLM-5 (GlmMoeDsaForCausalLM) is DeepSeek-V3.2's shape: MLA,
DeepSeek Sparse Attention's indexer keys, the same MoE keys (and transformers' `mlp_layer_types`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from plancast.simulator.importers._common import ConfigImportError
from plancast.simulator.importers._common import positive_int as _positive_int

MOE_TYPES = frozenset(
    {"mixtral", "qwen2_moe", "qwen3_moe", "gpt_oss", "deepseek_v2", "deepseek_v3", "deepseek_v32", "kimi_k2",
     "glm4_moe", "glm_moe_dsa", "qwen3_next", "qwen3_5_moe_text"}
)  # fmt: skip
"""model_type values with routed experts."""

DEEPSEEK_TYPES = frozenset({"deepseek_v2", "deepseek_v3", "deepseek_v32", "kimi_k2", "glm_moe_dsa"})
"""DeepSeek's modeling code: MLA, shared experts, first dense layers, MTP, group-limited routing."""

_EXPERTS_KEY = {"mixtral": "num_local_experts", "gpt_oss": "num_local_experts"}  # DeepSeek: n_routed_experts
# num_experts; a shared expert's width, not a count
_QWEN_MOE = frozenset({"qwen2_moe", "qwen3_moe", "qwen3_next", "qwen3_5_moe_text"})
_DEEPSEEK_KEYS = (
    "kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim", "n_group", "topk_group",
    "index_topk", "index_n_heads", "index_head_dim",  # DeepSeek-V3.2's sparse attention (model_sparse.py)
)


def _int(config: Mapping[str, Any], key: str, default: int | None = None) -> int:
    value = config.get(key, default)
    if value is None:
        raise ConfigImportError(f"{key}: required key is missing from the config")
    if value == 0 and default == 0:
        return 0
    return _positive_int(value, key)


def hf_moe_keys(config: Mapping[str, Any], model_type: str) -> tuple[dict[str, Any], list[str]]:
    """The MoE keys of the `[model]` table, and notes on what plancast does not model."""
    model: dict[str, Any] = {
        "num_local_experts": _int(config, _experts_key(model_type)),
        "num_experts_per_tok": _int(config, "num_experts_per_tok"),
    }
    notes: list[str] = []
    aux = config.get("aux_loss_alpha" if model_type in DEEPSEEK_TYPES else "router_aux_loss_coef")
    if isinstance(aux, int | float) and not isinstance(aux, bool) and aux >= 0:
        model["router_aux_loss_coef"] = float(aux)
    if model_type in ("mixtral", "gpt_oss"):  # experts as wide as intermediate_size, no shared ones
        return model, notes
    expert = _int(config, "moe_intermediate_size")
    model["moe_intermediate_size"] = expert
    if model_type in _QWEN_MOE:
        # One shared expert of shared_expert_intermediate_size = that many experts' widths (Qwen1.5-MoE:
        # 5632 = 4 x 1408); its sigmoid gate (h parameters) is left out.
        shared = _int(config, "shared_expert_intermediate_size", 0)
        if shared % expert:
            raise ConfigImportError(
                f"shared_expert_intermediate_size: {shared} is not a multiple of moe_intermediate_size "
                f"({expert}); plancast counts shared experts in units of the expert width"
            )
        model["n_shared_experts"] = shared // expert
        if config.get("decoder_sparse_step", 1) != 1 or config.get("mlp_only_layers"):
            notes.append(
                "decoder_sparse_step / mlp_only_layers are not modelled: every layer is an MoE layer"
            )
        return model, notes
    model["n_shared_experts"] = _int(config, "n_shared_experts", 0)
    model["first_k_dense_replace"] = _dense_prefix(config)
    for key in ("index_topk_freq", "index_skip_topk_offset"):  # GLM-5.2's index sharing (model_sparse.py)
        if config.get(key) is not None:
            value = config[key]
            least = 1 if key == "index_topk_freq" else 0
            if isinstance(value, bool) or not isinstance(value, int) or value < least:
                raise ConfigImportError(f"{key}: {value!r}; give a whole number of layers, at least {least}")
            model[key] = value
    if config.get("moe_layer_freq", 1) != 1:
        notes.append(
            f"moe_layer_freq = {config['moe_layer_freq']!r} is not modelled (every layer after "
            "first_k_dense_replace is an MoE layer)"
        )
    model.update(deepseek_shape_keys(config))
    return model, notes


def _dense_prefix(config: Mapping[str, Any]) -> int:
    """The dense layers before the MoE ones: first_k_dense_replace, or the leading "dense" entries of
    `mlp_layer_types` (transformers' GlmMoeDsaConfig: "dense" / "sparse" a layer), which must agree."""
    first = _int(config, "first_k_dense_replace", 0)
    types = config.get("mlp_layer_types")
    if types is None:
        return first
    layers = config.get("num_hidden_layers")
    known = isinstance(types, list) and all(t in ("dense", "sparse") for t in types)
    if not known or len(types) != layers:
        raise ConfigImportError(
            f"mlp_layer_types: expected one 'dense' or 'sparse' a layer ({layers} layers), got {types!r}"
        )
    dense = next((i for i, t in enumerate(types) if t == "sparse"), len(types))
    if "dense" in types[dense:]:
        raise ConfigImportError(
            f"mlp_layer_types: layer {types.index('dense', dense)} is dense after a sparse layer; plancast "
            "places the dense layers first (first_k_dense_replace)"
        )
    if "first_k_dense_replace" in config and first != dense:
        raise ConfigImportError(
            f"mlp_layer_types starts with {dense} dense layers but first_k_dense_replace = {first}"
        )
    return dense


def _experts_key(model_type: str) -> str:
    if model_type in _QWEN_MOE:
        return "num_experts"
    return _EXPERTS_KEY.get(model_type, "n_routed_experts")


def deepseek_shape_keys(config: Mapping[str, Any]) -> dict[str, Any]:
    """Multi-head latent attention (q_lora_rank may be null: no query compression), the MTP depth,
    group-limited routing and DeepSeek-V3.2's sparse-attention indexer, as DeepSeek-V2/V3/V3.2 and Kimi-K2
    declare them (simulator/model_shapes.py, model_sparse.py)."""
    keys: dict[str, Any] = {
        k: _positive_int(config[k], k) for k in _DEEPSEEK_KEYS if config.get(k) is not None
    }
    if config.get("q_lora_rank") is not None and "kv_lora_rank" in keys:
        keys["q_lora_rank"] = _positive_int(config["q_lora_rank"], "q_lora_rank")
    widths = keys.get("qk_nope_head_dim", 0) + keys.get("qk_rope_head_dim", 0)
    if config.get("qk_head_dim") not in (None, widths):  # GLM-5 states the sum too
        raise ConfigImportError(
            f"qk_head_dim: {config['qk_head_dim']!r} is not qk_nope_head_dim + qk_rope_head_dim ({widths})"
        )
    keys["num_nextn_predict_layers"] = _int(config, "num_nextn_predict_layers", 0)
    return keys
