"""Multi-head latent attention (MLA): its parameters, saved activations and the latent that context
parallel exchanges, one block, one micro-batch, one tensor-parallel rank (its operators are
costs/ops.py's `mla_attention_forward`, beside the grouped-query attention they replace).

Shapes: DeepSeek-V2 (arXiv 2405.04434) sec. 2.1, eq. (9)-(11) for the key/value latent
c_KV = W_DKV h, k_C = W_UK c_KV, v_C = W_UV c_KV; eq. (12)-(13) for the query latent
c_Q = W_DQ h, q_C = W_UQ c_Q; eq. (14)-(17) for the decoupled rotary q_R = RoPE(W_QR c_Q) (per head)
and k_R = RoPE(W_KR h) (one, shared by all heads); eq. (18)-(19) for attention over [q_C; q_R] and
[k_C; k_R] and the output projection W_O. Hugging Face's modeling_deepseek_v3.py `DeepseekV3Attention`
fuses them as q_a_proj [h -> q_lora_rank], q_a_layernorm, q_b_proj [q_lora_rank -> heads *
(nope + rope)] (or q_proj [h -> heads * (nope + rope)] when q_lora_rank is null),
kv_a_proj_with_mqa [h -> kv_lora_rank + rope], kv_a_layernorm, kv_b_proj [kv_lora_rank -> heads *
(nope + v)], o_proj [heads * v -> h]; training decompresses the latent into per-head keys and values.

Tensor parallel (Megatron-Core multi_latent_attention.py): the down-projections and their norms are
duplicated on every tp rank (`parallel_mode="duplicated"`), the up-projections column-parallel over
heads, the output projection row-parallel.
"""

from __future__ import annotations

from plancast.simulator.costs.dsa import dsa_saved_elements, dsa_tensor_elements, mean_dsa_layer_params
from plancast.simulator.costs.ops import MlaRanks, Shape
from plancast.simulator.model_sparse import indexer_layer_share
from plancast.simulator.scenario import Model

MLA_PROJECTIONS = frozenset({"q_down", "q_up", "q_proj", "kv_down", "kv_up"})
"""The GEMMs `mla_attention_forward` issues before the attention core."""


def mla_projection_features(name: str, x: Shape, r: MlaRanks) -> float:
    """Output features per token of MLA projection `name` on one tp rank (what per-op recompute saves)."""
    nope = x.qk_dim - r.rope
    features = {
        "q_down": r.q_lora,
        "q_up": x.q_dim / x.tp,
        "q_proj": x.q_dim / x.tp,
        "kv_down": r.kv_lora + r.rope,
        "kv_up": x.heads * (nope + x.v_dim) / x.tp,
    }
    return float(features[name])


def mla_layer_params(m: Model, hidden: int, heads: int) -> tuple[int, float]:
    """(tp-sharded, replicated) parameters of one MLA attention: the up- and output projections are
    split over tp; the down-projections and the two latent RMSNorms are duplicated (module docstring).
    No biases (DeepSeek-V2/V3 and Kimi-K2 set attention_bias = false)."""
    q_lora, kv_lora, rope_dim = m.q_lora_rank or 0, m.kv_lora_rank or 0, m.qk_rope_head_dim or 0
    qk, v = m.qk_head_dim, m.value_head_dim
    q_sharded = (q_lora if q_lora else hidden) * heads * qk  # q_b_proj, or q_proj without compression
    q_replicated = hidden * q_lora + q_lora  # q_a_proj and q_a_layernorm
    kv_sharded = kv_lora * heads * (qk - rope_dim + v)  # kv_b_proj
    kv_replicated = hidden * (kv_lora + rope_dim) + kv_lora  # kv_a_proj_with_mqa and kv_a_layernorm
    out = heads * v * hidden  # o_proj
    indexer = mean_dsa_layer_params(m, hidden)  # DeepSeek Sparse Attention's, duplicated (costs/dsa.py)
    return q_sharded + kv_sharded + out, q_replicated + kv_replicated + indexer


def mla_tensor_elements(m: Model, hidden: int, heads: int, tp: int) -> list[int]:
    """One MLA attention's parameter tensors on one tp rank, in runtime/mla.py's registration order."""
    q_lora, kv_lora, rope_dim = m.q_lora_rank or 0, m.kv_lora_rank or 0, m.qk_rope_head_dim or 0
    qk, v = m.qk_head_dim, m.value_head_dim
    q = [hidden * q_lora, q_lora, q_lora * heads * qk // tp] if q_lora else [hidden * heads * qk // tp]
    kv = [hidden * (kv_lora + rope_dim), kv_lora, kv_lora * heads * (qk - rope_dim + v) // tp]
    return [*q, *kv, heads * v * hidden // tp, *dsa_tensor_elements(m, hidden)]


def mla_saved_elements(x: Shape, r: MlaRanks) -> tuple[float, float]:
    """(projections, output) elements per local token one MLA block keeps for backward, replacing
    Korthikanti et al. 2022's QKV term (h + 2 kv) / t and out-projection input h / t: the latents each
    norm and up-projection reads (duplicated over tp, so not divided), the per-head Q, K (nope + rope)
    and V the attention core reads, and the attention output the output projection reads. Under context
    parallel the key/value up-projection's input and the K and V it makes span all kv_s tokens the rank
    gathered (costs/ops.py `mla_attention_forward`), kv_s / s of them per local token."""
    gathered = (x.kv_s or x.s) / x.s
    local = 2 * r.q_lora + r.kv_lora + r.rope + x.q_dim / x.tp  # q_a out, q_b in, kv_a out (+k_pe), Q
    per_kv_token = r.kv_lora + (x.q_dim + x.o_dim) / x.tp  # kv_b in; K (heads x (nope + rope)) and V
    if x.dsa is not None:  # absorbed: one latent a key token, the indexer's tensors (costs/dsa.py)
        sparse_local, per_kv_token = dsa_saved_elements(x, r, x.dsa)
        local += sparse_local
    return local + gathered * per_kv_token, x.o_dim / x.tp


def cp_kv_elements_per_token(m: Model, tp: int) -> int:
    """Elements per token a rank contributes to the context-parallel K/V exchange on one tp rank: the
    normalised latent c_KV and the rotary key k_R, kv_lora_rank + qk_rope_head_dim, for MLA (duplicated
    over tp, so whole on each; the receiver up-projects them, `mla_attention_forward`), else the packed K
    and V of its key/value heads split over tp. Under DeepSeek Sparse Attention the indexer's one key a
    token (index_head_dim) goes with the latent: every query scores every earlier token (costs/dsa.py); under
    index sharing only the layers with an indexer send it (a mean block's share)."""
    if m.kv_lora_rank is not None:
        indexer = round((m.index_head_dim or 0) * indexer_layer_share(m, m.num_hidden_layers))
        return m.kv_lora_rank + (m.qk_rope_head_dim or 0) + indexer
    return 2 * (m.kv_heads * m.qk_head_dim // tp)
