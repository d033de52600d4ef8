"""The `[model]` keys of sliding-window attention (Hugging Face config.json names): how many tokens a
windowed layer's queries attend back to, and which layers are windowed. gpt-oss (openai/gpt-oss-120b
config.json: sliding_window 128, layer_types alternating "sliding_attention" / "full_attention") and
Mistral-7B v0.1 (sliding_window 4096 on every layer) declare them. `model_shapes.ModelShapes` inherits
them; what a window saves depends on the kernel (costs/attention.py `window_work`). Beside them, gpt-oss's
attention sinks (`attention_sinks`), which no config.json key names.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from plancast.simulator.fields import Strict
from plancast.simulator.schedules import PlanProblem

LayerType = Literal["sliding_attention", "full_attention", "linear_attention"]
"""Hugging Face's names for a windowed and a full causal attention layer (GptOssConfig.layer_types), and
for a Gated DeltaNet layer (Qwen3NextConfig.layer_types; model_linear.py)."""


class ModelWindow(Strict):
    """Sliding-window attention keys (both optional)."""

    sliding_window: int | None = Field(default=None, gt=0)
    """Tokens a windowed layer's query attends to, itself included (Hugging Face's `sliding_window`;
    gpt-oss 128: Megatron-Bridge passes window_size (127, 0) to Transformer Engine, NeMo AutoModel's
    FlexAttention keeps key j for query i when 0 <= i - j < 128). Unset: every layer attends to its
    whole causal prefix. A kernel that skips the key blocks the window empties computes less
    (training.sliding_window_skip); `plancast import hf` leaves it unset where use_sliding_window is false."""
    attention_sinks: bool = False
    """Every attention head has a learned sink logit in its softmax's denominator (gpt-oss: transformers'
    GptOssAttention `sinks`, Megatron-Bridge softmax_type 'learnable'; no config.json key, so the
    gpt-oss-120b preset and `plancast import hf` of a gpt_oss config set it). Its one parameter a head is
    not counted. Priced where a kernel does not take it: after FlexAttention (training.attention_backend
    'flex') NeMo AutoModel rescales the output by sigmoid(lse - sink) (costs/ops.py `sink_rescale`);
    cuDNN's fused kernel (Transformer Engine, 'te') applies it inside, at no extra cost."""
    layer_types: list[LayerType] | None = None
    """Each layer's attention, one entry per layer (Hugging Face's `layer_types`; gpt-oss alternates
    "sliding_attention" and "full_attention", starting with a windowed layer; Qwen3-Next repeats three
    "linear_attention" layers and one "full_attention", model_linear.py). Unset with sliding_window:
    every layer is windowed (Mistral-7B v0.1)."""


def sliding_layer_share(m: ModelWindow, num_layers: int) -> float:
    """Share of the model's layers that attend through the window (0 without sliding_window). Costs
    price every block of a stage alike, so a windowed model is priced at this mean (exact per stage for
    gpt-oss's alternating layers on stages of an even layer count)."""
    if m.sliding_window is None or num_layers <= 0:
        return 0.0
    if m.layer_types is None:
        return 1.0
    return m.layer_types.count("sliding_attention") / num_layers


def window_problems(m: ModelWindow, num_layers: int) -> list[PlanProblem]:
    """layer_types that do not give one entry per layer, or name windowed layers without a window."""
    out = list[PlanProblem]()
    if m.layer_types is None:
        return out
    if len(m.layer_types) != num_layers:
        out.append(
            PlanProblem(
                "model.layer_types",
                f"has {len(m.layer_types)} entries for num_hidden_layers = {num_layers}; give one "
                "'sliding_attention', 'full_attention' or 'linear_attention' per layer, as the model's "
                "config.json does",
            )
        )
    if m.sliding_window is None and "sliding_attention" in m.layer_types:
        out.append(
            PlanProblem(
                "model.sliding_window",
                "layer_types names sliding_attention layers but no window is set; set sliding_window "
                "from the model's config.json (gpt-oss: 128)",
            )
        )
    return out
