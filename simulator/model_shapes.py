"""The `[model]` keys of 2025-2026 model shapes (Hugging Face config.json names, docs/models.md): a head
width independent of hidden_size / num_attention_heads, multi-head latent attention, the multi-token
prediction module and node-limited routing. `scenario.Model` inherits them; costs read the resolved
properties (`qk_head_dim`, `value_head_dim`, `is_mla`), never the raw keys.

Multi-head latent attention (MLA): DeepSeek-V2 (arXiv 2405.04434) sec. 2.1, eq. (9)-(19), with the
shapes of Hugging Face's modeling_deepseek_v3.py `DeepseekV3Attention`: q = W_UQ norm(W_DQ x) (or
W_Q x without q compression), the latent c_KV = norm(W_DKV x) of kv_lora_rank plus a shared rotary
key of qk_rope_head_dim, and per head keys of qk_nope_head_dim + qk_rope_head_dim and values of
v_head_dim up-projected from c_KV.
"""

from __future__ import annotations

from pydantic import Field

from plancast.simulator.expert_bias import ModelExpertBias
from plancast.simulator.model_linear import ModelLinearAttention
from plancast.simulator.model_sparse import ModelSparseAttention
from plancast.simulator.model_window import ModelWindow
from plancast.simulator.schedules import PlanProblem

MLA_DIMS = ("qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim")
"""Head widths every MLA model declares beside kv_lora_rank."""

MODEL_SHAPE_BOUNDS: dict[str, tuple[float, float, str]] = {
    "model.head_dim": (1, 100_000, "100x the widest published heads (Gemma 2: 256)"),
    "model.kv_lora_rank": (1, 1_000_000, "at most a model's width (DeepSeek-V3: 512)"),
    "model.q_lora_rank": (1, 1_000_000, "at most a model's width (DeepSeek-V3: 1536)"),
    "model.qk_nope_head_dim": (1, 100_000, "as head_dim (DeepSeek-V3: 128)"),
    "model.qk_rope_head_dim": (1, 100_000, "as head_dim (DeepSeek-V3: 64)"),
    "model.v_head_dim": (1, 100_000, "as head_dim (DeepSeek-V3: 128)"),
    "model.sliding_window": (1, 100_000_000, "tokens (gpt-oss: 128, Mistral-7B v0.1: 4096)"),
    "model.num_nextn_predict_layers": (0, 100, "multi-token prediction depths (DeepSeek-V3: 1)"),
    "model.n_group": (1, 100_000, "at most num_local_experts (DeepSeek-V3: 8)"),
    "model.topk_group": (1, 100_000, "at most n_group (DeepSeek-V3: 4)"),
}
"""validation.BOUNDS entries of these keys (key path -> (min, max, why))."""


class ModelShapes(ModelWindow, ModelSparseAttention, ModelLinearAttention, ModelExpertBias):
    """Attention and auxiliary-module shapes beyond a GPT/Llama block (all optional), sliding-window
    attention's keys (model_window.py), DeepSeek Sparse Attention's (model_sparse.py) and expert biases
    (expert_bias.py) among them."""

    head_dim: int | None = Field(default=None, gt=0)
    """Width of one query/key/value head; default hidden_size / num_attention_heads. Qwen3, Gemma and
    Mistral-NeMo declare a different one: Q is num_attention_heads * head_dim wide, the output
    projection maps that back to hidden_size."""
    kv_lora_rank: int | None = Field(default=None, gt=0)
    """Multi-head latent attention (DeepSeek-V2/V3, Kimi-K2): rank of the compressed key/value latent
    c_KV (DeepSeek-V3: 512); unset: ordinary (grouped-query) attention. Needs qk_nope_head_dim,
    qk_rope_head_dim and v_head_dim."""
    q_lora_rank: int | None = Field(default=None, gt=0)
    """MLA query compression rank (DeepSeek-V3: 1536); unset (null in config.json) with kv_lora_rank:
    queries are projected from the hidden state directly (DeepSeek-V2-Lite)."""
    qk_nope_head_dim: int | None = Field(default=None, gt=0)
    """MLA: per-head query/key width without rotary position (DeepSeek-V3: 128)."""
    qk_rope_head_dim: int | None = Field(default=None, gt=0)
    """MLA: per-head rotary query width, and the width of the one rotary key all heads share (64)."""
    v_head_dim: int | None = Field(default=None, gt=0)
    """MLA: per-head value width (DeepSeek-V3: 128)."""
    num_nextn_predict_layers: int = Field(default=0, ge=0)
    """Multi-token prediction depth (DeepSeek-V3 sec. 2.2: 1): each depth adds one transformer block,
    two RMSNorms and a 2h -> h projection, and shares the embedding and output head; it runs on the
    last pipeline stage (Megatron-Core's mtp placement). Published parameter counts leave it out."""
    n_group: int | None = Field(default=None, gt=0)
    """Node-limited routing (DeepSeek-V3 sec. 2.1.2): the routed experts form n_group groups (one per
    node in DeepSeek's deployment, 8)."""
    topk_group: int | None = Field(default=None, gt=0)
    """Node-limited routing: each token's experts come from at most topk_group groups (DeepSeek-V3: 4),
    so at most that many nodes receive it across the scale-out tier (costs/routing.py)."""
    qk_layernorm: bool = False
    """RMSNorm over each query and key head before rotary (Qwen3's q_norm/k_norm, Megatron-LM's
    `--qk-layernorm`; Dehghani et al. 2023, arXiv 2302.05442): 2 x head_dim parameters and one
    elementwise op a layer. `plancast import hf` sets it for Qwen3, whose config.json has no key for it."""

    @property
    def is_mla(self) -> bool:
        """Whether attention is multi-head latent attention."""
        return self.kv_lora_rank is not None

    @property
    def qk_head_dim(self) -> int:
        """Per-head query/key width: nope + rope under MLA, else head_dim (resolved by Model)."""
        if self.kv_lora_rank is not None:
            return (self.qk_nope_head_dim or 0) + (self.qk_rope_head_dim or 0)
        assert self.head_dim is not None  # filled by Model._defaults
        return self.head_dim

    @property
    def value_head_dim(self) -> int:
        """Per-head value width: v_head_dim under MLA, else head_dim."""
        if self.kv_lora_rank is not None:
            return self.v_head_dim or 0
        assert self.head_dim is not None  # filled by Model._defaults
        return self.head_dim


def model_shape_problems(m: ModelShapes, num_experts: int) -> list[PlanProblem]:
    """Shape keys that contradict each other: an MLA model without its head widths, node-limited
    routing without experts or with more groups than experts."""
    out = list[PlanProblem]()
    if m.is_mla:
        out += [
            PlanProblem(
                f"model.{k}",
                f"multi-head latent attention (kv_lora_rank) needs {k}; set it "
                "from the model's config.json (DeepSeek-V3: 128, 64, 128)",
            )
            for k in MLA_DIMS
            if getattr(m, k) is None
        ]
    else:
        out += [
            PlanProblem(
                f"model.{k}",
                "has no effect without kv_lora_rank (multi-head latent attention); "
                "set kv_lora_rank or remove it",
            )
            for k in ("q_lora_rank", *MLA_DIMS)
            if getattr(m, k) is not None
        ]
    if m.is_mla and m.qk_layernorm:
        out.append(
            PlanProblem(
                "model.qk_layernorm",
                "multi-head latent attention normalises its latents, not its heads; set qk_layernorm = false",
            )
        )
    if (m.n_group is None) != (m.topk_group is None):
        out.append(
            PlanProblem(
                "model.topk_group",
                "node-limited routing needs both n_group and "
                "topk_group; set both (DeepSeek-V3: 8 and 4) or neither",
            )
        )
    elif m.n_group is not None and m.topk_group is not None:
        if m.topk_group > m.n_group:
            out.append(
                PlanProblem(
                    "model.topk_group",
                    f"{m.topk_group} exceeds n_group ({m.n_group}); a token can reach at most every group",
                )
            )
        if not num_experts or num_experts % m.n_group:
            out.append(
                PlanProblem(
                    "model.n_group",
                    f"{m.n_group} groups need a number of routed experts "
                    f"(num_local_experts = {num_experts}) they divide; fix either",
                )
            )
    return out
