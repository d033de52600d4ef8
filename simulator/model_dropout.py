"""The `[model]` dropout keys (docs/memory.md): whether a block keeps dropout masks for backward and
writes them in forward. `scenario.Model` inherits them; costs read `dropout_probabilities`, never the
raw keys.

A dropout of probability 0 keeps no mask: torch's `dropout` returns its input untouched when p == 0
(aten/src/ATen/native/Dropout.cpp: the fused `native_dropout` only for 0 < p < 1, `_dropout` returns the
input for p == 0), which is what Megatron-Core's fused bias-dropout-add and attention call.
"""

from __future__ import annotations

from pydantic import Field

from plancast.simulator.fields import Strict

FRAMEWORK_DROPOUT: dict[str, tuple[float, float]] = {
    # `--hidden-dropout` / `--attention-dropout` default to 0.1 (megatron/training/arguments.py
    # `_add_regularization_args`); Megatron-DeepSpeed keeps Megatron's arguments
    "megatron-lm": (0.1, 0.1),
    "deepspeed": (0.1, 0.1),
    # torchtitan's decoders have no dropout module (torchtitan/models/llama3/model.py), nor has
    # plancast's runtime model
    "torchtitan": (0.0, 0.0),
}
"""(hidden, attention) dropout each framework applies when the scenario and its model preset leave it
unset."""


class ModelDropout(Strict):
    """Dropout probabilities (Megatron-LM's names; Hugging Face's `attention_dropout` and
    `hidden_dropout`, GPT-2's `attn_pdrop` and `resid_pdrop`)."""

    hidden_dropout: float | None = Field(default=None, ge=0, lt=1)
    """Dropout after the attention's and the MLP's output projections (Megatron-LM `--hidden-dropout`):
    above 0, each block writes and keeps two 1-byte masks per token and hidden unit (Korthikanti et al.
    2022 sec. 4.1). Unset: the model preset's (Llama-style presets 0.0, as their config.json files and
    Megatron-Bridge's LlamaModelProvider), else parallelism.framework's (megatron-lm and deepspeed 0.1,
    torchtitan 0.0)."""
    attention_dropout: float | None = Field(default=None, ge=0, lt=1)
    """Dropout over the attention probabilities (Megatron-LM `--attention-dropout`, Hugging Face
    `attention_dropout`): above 0 and without flash attention, a 1-byte mask and the dropped copy of the
    scores per query and key are kept (a fused kernel regenerates its mask from the RNG state). Unset:
    as hidden_dropout."""


def dropout_probabilities(model: ModelDropout, framework: str) -> tuple[float, float]:
    """(hidden, attention) dropout of a scenario: the model's keys, else the framework's default."""
    hidden, attention = FRAMEWORK_DROPOUT[framework]
    return (
        hidden if model.hidden_dropout is None else model.hidden_dropout,
        attention if model.attention_dropout is None else model.attention_dropout,
    )
