"""Gated DeltaNet keys of a Hugging Face `config.json` (Qwen3-Next, `qwen3_next`) -> the scenario's
linear-attention keys (simulator/model_linear.py). Key names and defaults per transformers'
configuration_qwen3_next.py (Qwen3NextConfig): `layer_types` where the config lists them, else
"full_attention" every `full_attention_interval`-th layer (`bool((i + 1) % interval)` linear), and
modeling_qwen3_next.py: its full attention always gates its output (`q_proj` of 2 x heads x head_dim) and
normalises each query and key head (`q_norm`, `k_norm`), neither named by a config key; Megatron-Bridge's
qwen3_next_bridge.py sets the same (`attention_output_gate = True`, `qk_layernorm = True`) and maps the
checkpoint's one multi-token-prediction layer (`mtp.layers.0`), which config.json does not name."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from plancast.simulator.importers._common import ConfigImportError
from plancast.simulator.importers._common import positive_int as _positive_int
from plancast.simulator.model_linear import LINEAR_KEYS

LINEAR_TYPES = frozenset({"qwen3_next"})
"""model_type values with Gated DeltaNet layers."""

LINEAR_READ = (*LINEAR_KEYS, "full_attention_interval", "attn_output_gate")
"""The config keys read here."""

_TYPES = frozenset({"linear_attention", "full_attention"})


def hf_linear_keys(config: Mapping[str, Any], model_type: str) -> tuple[dict[str, Any], list[str]]:
    """The linear-attention keys of the `[model]` table (none for other model types), and notes."""
    if model_type not in LINEAR_TYPES:
        return {}, []
    model: dict[str, Any] = {}
    for key in LINEAR_KEYS:
        if config.get(key) is None:
            raise ConfigImportError(f"{key}: required key of a Gated DeltaNet model is missing")
        model[key] = _positive_int(config[key], key)
    layers = _positive_int(config.get("num_hidden_layers"), "num_hidden_layers")
    model["layer_types"] = _layer_types(config, layers)
    gate = config.get("attn_output_gate", True)
    if not isinstance(gate, bool):
        raise ConfigImportError(f"attn_output_gate: expected true or false, got {gate!r}")
    model["attn_output_gate"] = gate
    model["qk_layernorm"] = True
    notes = [
        "the Gated DeltaNet and full-attention layers are priced as their mean block on every pipeline "
        "stage (exact on stages of a multiple of full_attention_interval layers), and the shared expert's "
        "sigmoid gate (hidden_size parameters a layer) is not counted",
        "the checkpoint's multi-token-prediction layer is not named by config.json: num_nextn_predict_layers "
        "stays 0; set it to 1 to price training with it (Megatron-Bridge's qwen3_next_bridge.py maps one)",
    ]
    return model, notes


def _layer_types(config: Mapping[str, Any], layers: int) -> list[str]:
    """Each layer's type: config.json's `layer_types`, else Qwen3NextConfig's rule over the interval."""
    types = config.get("layer_types")
    if types is not None:
        if not isinstance(types, list) or not set(types) <= _TYPES or len(types) != layers:
            raise ConfigImportError(
                f"layer_types: expected {layers} entries of 'linear_attention' / 'full_attention', got "
                f"{types!r}"
            )
        return list(types)
    if config.get("full_attention_interval") is None:
        raise ConfigImportError(
            "full_attention_interval: required (or layer_types) to tell the Gated DeltaNet layers from the "
            "full-attention ones; Qwen3-Next: 4"
        )
    interval = _positive_int(config["full_attention_interval"], "full_attention_interval")
    return ["linear_attention" if (i + 1) % interval else "full_attention" for i in range(layers)]
