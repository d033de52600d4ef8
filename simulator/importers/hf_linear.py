"""Gated DeltaNet keys of a Hugging Face `config.json` (Qwen3-Next, `qwen3_next`; Qwen3.5's language model,
the `text_config` of a `qwen3_5` / `qwen3_5_moe` config, `language_model`) -> the scenario's
linear-attention keys (simulator/model_linear.py). Key names and defaults per transformers'
configuration_qwen3_next.py (Qwen3NextConfig; Qwen3.5's text configs take the same keys and add
`mtp_num_hidden_layers`): `layer_types` where the config lists them, else
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

LINEAR_TYPES = frozenset({"qwen3_next", "qwen3_5_text", "qwen3_5_moe_text"})
"""model_type values with Gated DeltaNet layers (Qwen3.5's language models: its text_config's)."""

VISION_LANGUAGE = {"qwen3_5": "qwen3_5_text", "qwen3_5_moe": "qwen3_5_moe_text"}
"""Vision-language model_type -> the model_type of the language model its text_config holds."""

LINEAR_READ = (
    *LINEAR_KEYS, "full_attention_interval", "attn_output_gate", "mtp_num_hidden_layers",
    "mtp_use_dedicated_embeddings",
)
"""The config keys read here."""


def language_model(config: Mapping[str, Any]) -> tuple[Mapping[str, Any], list[str]]:
    """The language model's config of a vision-language one (Qwen3.5: `text_config`, transformers'
    Qwen3_5MoeConfig.sub_configs), with a note that its vision encoder is left out; any other as it is."""
    model_type = config.get("model_type")
    if not isinstance(model_type, str) or model_type not in VISION_LANGUAGE:
        return config, []
    text = config.get("text_config")
    if not isinstance(text, Mapping):
        raise ConfigImportError(
            f"text_config: a {model_type!r} config holds its language model there; missing or not a table"
        )
    out = {**text, "model_type": VISION_LANGUAGE[model_type]}
    if "tie_word_embeddings" not in out and "tie_word_embeddings" in config:
        out["tie_word_embeddings"] = config["tie_word_embeddings"]
    note = (
        f"{model_type}: the language model (text_config) is imported; the vision encoder (vision_config) is "
        "not modelled, so image and video tokens are priced as text"
    )
    return out, [note]

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
    if model_type != "qwen3_next":  # Qwen3.5 names its MTP depth (Qwen3_5MoeTextConfig)
        depth = config.get("mtp_num_hidden_layers", 1)  # its default
        model["num_nextn_predict_layers"] = 0 if depth == 0 else _positive_int(depth, "mtp_num_hidden_layers")
    notes = [
        "the Gated DeltaNet and full-attention layers are priced as their mean block on every pipeline "
        "stage (exact on stages of a multiple of full_attention_interval layers)"
    ]
    if config.get("shared_expert_intermediate_size"):
        notes.append("the shared expert's sigmoid gate (hidden_size parameters a layer) is not counted")
    if model_type == "qwen3_next":
        notes.append(
            "the checkpoint's multi-token-prediction layer is not named by config.json: "
            "num_nextn_predict_layers stays 0; set it to 1 to price training with it (Megatron-Bridge's "
            "qwen3_next_bridge.py maps one)"
        )
    if config.get("mtp_use_dedicated_embeddings"):
        notes.append("mtp_use_dedicated_embeddings = true is not modelled: MTP shares the embedding")
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
