"""Mixture-of-experts keys of a Hugging Face `config.json` (Mixtral, Qwen2-MoE, DeepSeek-V2/V3) ->
the scenario's MoE keys (docs/moe.md). Key names per transformers' configuration_mixtral.py,
configuration_qwen2_moe.py and DeepSeek's configuration_deepseek.py."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from plancast.simulator.importers._common import ConfigImportError
from plancast.simulator.importers._common import positive_int as _positive_int

MOE_TYPES = frozenset({"mixtral", "qwen2_moe", "deepseek_v2", "deepseek_v3"})
"""model_type values with routed experts."""

_EXPERTS_KEY = {"mixtral": "num_local_experts", "qwen2_moe": "num_experts"}  # DeepSeek: n_routed_experts
_AUX_KEY = {"deepseek_v2": "aux_loss_alpha", "deepseek_v3": "aux_loss_alpha"}  # others: router_aux_loss_coef


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
        "num_local_experts": _int(config, _EXPERTS_KEY.get(model_type, "n_routed_experts")),
        "num_experts_per_tok": _int(config, "num_experts_per_tok"),
    }
    notes: list[str] = []
    aux = config.get(_AUX_KEY.get(model_type, "router_aux_loss_coef"))
    if isinstance(aux, int | float) and not isinstance(aux, bool) and aux >= 0:
        model["router_aux_loss_coef"] = float(aux)
    if model_type == "mixtral":
        return model, notes
    expert = _int(config, "moe_intermediate_size")
    model["moe_intermediate_size"] = expert
    if model_type == "qwen2_moe":
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
    model["first_k_dense_replace"] = _int(config, "first_k_dense_replace", 0)
    if config.get("moe_layer_freq", 1) != 1:
        notes.append(
            f"moe_layer_freq = {config['moe_layer_freq']!r} is not modelled (every layer after "
            "first_k_dense_replace is an MoE layer)"
        )
    if config.get("kv_lora_rank"):
        notes.append(
            "multi-head latent attention (kv_lora_rank, q_lora_rank) is modelled as multi-head attention "
            "with head_dim = hidden_size / num_attention_heads (DeepSeek-V3: 4h^2 = 206M vs MLA's ~187M "
            "parameters per layer)"
        )
    if config.get("num_nextn_predict_layers"):
        notes.append("num_nextn_predict_layers (multi-token prediction module) is not modelled")
    return model, notes
