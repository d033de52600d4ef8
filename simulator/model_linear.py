"""The `[model]` keys of Gated DeltaNet linear-attention layers (Hugging Face config.json names): Qwen3-Next
(`qwen3_next`; config.json: linear_num_key_heads 16, linear_num_value_heads 32, linear_key_head_dim 128,
linear_value_head_dim 128, linear_conv_kernel_dim 4, full_attention_interval 4) mixes three Gated DeltaNet
layers with one gated full-attention layer (Yang et al. 2024, "Gated Delta Networks", arXiv 2412.06464;
Megatron-Core `megatron/core/ssm/gated_delta_net.py`). Which layers are linear is `layer_types`
("linear_attention" / "full_attention", transformers' Qwen3NextConfig). `model_shapes.ModelShapes` inherits
them; costs/gdn.py prices them.
"""

from __future__ import annotations

from collections.abc import Sequence

from pydantic import Field

from plancast.simulator.fields import Strict
from plancast.simulator.schedules import PlanProblem

LINEAR_KEYS = (
    "linear_num_key_heads",
    "linear_num_value_heads",
    "linear_key_head_dim",
    "linear_value_head_dim",
    "linear_conv_kernel_dim",
)
"""The five keys a Gated DeltaNet model declares together."""

LINEAR_BOUNDS: dict[str, tuple[float, float, str]] = {
    "model.linear_num_key_heads": (1, 100_000, "Gated DeltaNet query/key heads (Qwen3-Next: 16)"),
    "model.linear_num_value_heads": (1, 100_000, "Gated DeltaNet value heads (Qwen3-Next: 32)"),
    "model.linear_key_head_dim": (1, 100_000, "Gated DeltaNet query/key head width (Qwen3-Next: 128)"),
    "model.linear_value_head_dim": (1, 100_000, "Gated DeltaNet value head width (Qwen3-Next: 128)"),
    "model.linear_conv_kernel_dim": (1, 1_000, "causal convolution width (Qwen3-Next: 4)"),
}
"""validation.BOUNDS entries of these keys (key path -> (min, max, why))."""


class ModelLinearAttention(Strict):
    """Gated DeltaNet's keys (all five or none) and the full-attention layers' output gate."""

    linear_num_key_heads: int | None = Field(default=None, gt=0)
    """Query and key heads of a Gated DeltaNet layer (Qwen3-Next: 16). Megatron-Core repeats them up to
    the value heads before the recurrence (`repeat_interleave`). Unset: no linear-attention layer."""
    linear_num_value_heads: int | None = Field(default=None, gt=0)
    """Value heads, each with its own recurrent state of key x value width (Qwen3-Next: 32)."""
    linear_key_head_dim: int | None = Field(default=None, gt=0)
    """Width of a query/key head (Qwen3-Next: 128)."""
    linear_value_head_dim: int | None = Field(default=None, gt=0)
    """Width of a value head, and of the gated RMSNorm over each head's output (Qwen3-Next: 128)."""
    linear_conv_kernel_dim: int | None = Field(default=None, gt=0)
    """Width of the depthwise causal convolution over the queries, keys and values (Qwen3-Next: 4)."""
    attn_output_gate: bool = False
    """The full-attention layers' output gate (Qwen3-Next, Qwen3.5): the query projection also emits a
    gate per head element, and sigmoid(gate) scales the attention's output before the out-projection
    (transformers' Qwen3NextAttention: `q_proj` of 2 x heads x head_dim). `plancast import hf` sets it for
    Qwen3-Next, whose config.json has no key for it."""

    @property
    def has_linear_attention(self) -> bool:
        """Whether the model declares Gated DeltaNet layers."""
        return self.linear_num_key_heads is not None


def linear_layer_share(layer_types: Sequence[str] | None, num_layers: int) -> float:
    """Share of the layers that are Gated DeltaNet layers (layer_types 'linear_attention'). Costs price
    every block of a stage alike, so a hybrid model is priced at this mean (exact per stage for
    Qwen3-Next's one-in-four full-attention layers on stages of a multiple of four layers)."""
    if not layer_types or num_layers <= 0:
        return 0.0
    return list(layer_types).count("linear_attention") / num_layers


def linear_attention_problems(
    m: ModelLinearAttention, layer_types: Sequence[str] | None, is_mla: bool, windowed: bool = False
) -> list[PlanProblem]:
    """Gated DeltaNet keys given in part, linear layers without them (or the keys without a linear layer),
    linear attention beside multi-head latent attention or sliding windows (`windowed`; no model pairs
    them, and each prices its share of the layers alone), and the output gate over MLA, whose attention
    plancast does not gate. The first problem found, or none."""
    given = [k for k in LINEAR_KEYS if getattr(m, k) is not None]
    if given and len(given) < len(LINEAR_KEYS):
        return [
            PlanProblem(
                f"model.{k}",
                "Gated DeltaNet layers need linear_num_key_heads, linear_num_value_heads, "
                "linear_key_head_dim, linear_value_head_dim and linear_conv_kernel_dim together; set "
                f"{k} from the model's config.json (Qwen3-Next: 16, 32, 128, 128, 4) or remove the others",
            )
            for k in LINEAR_KEYS
            if getattr(m, k) is None
        ]
    linear = "linear_attention" in (layer_types or ())
    heads, values = m.linear_num_key_heads or 1, m.linear_num_value_heads or 1
    checks = (
        (m.attn_output_gate and is_mla, "model.attn_output_gate",
         "is priced on grouped-query attention (Qwen3-Next, Qwen3.5), not on multi-head latent attention; "
         "remove it or kv_lora_rank"),
        (bool(given) and not linear, "model.layer_types",
         "the Gated DeltaNet keys are set but no layer is 'linear_attention'; list each layer's type "
         "(Qwen3-Next: three 'linear_attention' then one 'full_attention', repeated) or remove the linear_* "
         "keys"),
        (linear and not given, "model.linear_num_key_heads",
         "layer_types names 'linear_attention' layers but their Gated DeltaNet widths are unset; set the "
         "five linear_* keys from the model's config.json"),
        (bool(given) and windowed, "model.sliding_window",
         "Gated DeltaNet layers beside sliding-window layers are not modelled (each prices its share of the "
         "layers as if the other were full attention); remove sliding_window or the linear_* keys"),
        (bool(given) and is_mla, "model.kv_lora_rank",
         "Gated DeltaNet layers beside multi-head latent attention are not modelled (plancast prices "
         "Qwen3-Next's grouped-query full attention); remove kv_lora_rank or the linear_* keys"),
        (values % heads != 0, "model.linear_num_value_heads",
         f"{values} is not a multiple of linear_num_key_heads ({heads}); each query/key head serves a whole "
         "group of value heads"),
    )  # fmt: skip
    return next(([PlanProblem(path, why)] for bad, path, why in checks if bad), [])


def linear_plan_problems(
    m: ModelLinearAttention, tp: int, cp: int, per_op: bool = False
) -> list[PlanProblem]:
    """Plans Megatron-Core's GatedDeltaNet cannot run: heads that tensor parallel does not split whole
    (it divides both head counts by tp), and context parallel ("TODO: support CP",
    megatron/core/ssm/gated_delta_net.py: each rank's recurrence would need the state of the tokens
    before it); and torchtitan's per-op recompute policy (`per_op`), whose saved GEMM outputs plancast
    counts per op of a block, not per layer type of a hybrid's mean block."""
    if per_op and (m.has_linear_attention or m.attn_output_gate):
        return [
            PlanProblem(
                "training.selective_recompute",
                "'op' (torchtitan's per-op policy) is not priced for Gated DeltaNet or gated attention "
                "layers; use recompute 'full', 'none', or selective_recompute 'attention'",
            )
        ]
    if not m.has_linear_attention:
        return []
    out = [
        PlanProblem(
            "parallelism.tensor_parallel_degree",
            f"{tp} does not divide model.{key} ({getattr(m, key)}): each tensor-parallel rank needs whole "
            "Gated DeltaNet heads",
        )
        for key in ("linear_num_key_heads", "linear_num_value_heads")
        if (getattr(m, key) or 1) % tp
    ]
    if cp > 1:
        out.append(
            PlanProblem(
                "parallelism.context_parallel_degree",
                f"{cp}: Gated DeltaNet layers do not run under context parallel (Megatron-Core's "
                "GatedDeltaNet has no context-parallel form: each rank's recurrence needs the state of the "
                "tokens before it); set context_parallel_degree = 1",
            )
        )
    return out
