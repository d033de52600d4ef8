"""Parameter counts: whole model, one layer, and what one rank holds under tensor/pipeline parallelism.

GPT-style models (LayerNorm) carry biases on every linear layer; Llama-style ones (RMSNorm) carry
none, as in the reference implementations (GPT-2/Megatron-LM and meta-llama respectively).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from plancast.simulator.costs.gdn import gdn_params, gdn_tensors
from plancast.simulator.costs.mla import mla_layer_params, mla_tensor_elements
from plancast.simulator.model_linear import linear_layer_share
from plancast.simulator.scenario import Model


def _has_bias(m: Model) -> bool:
    return m.norm == "layernorm"


@dataclass(frozen=True, slots=True)
class LayerParams:
    """Parameters of one transformer block, split into what tensor parallel shards and what it replicates."""

    # a hybrid's mean block (costs/gdn.py) holds a share of each layer type's: not a whole number
    sharded: float  # attention and MLP matrices (and their column-parallel biases): divided by tp
    replicated: float  # norms and row-parallel output biases: a full copy on every tp rank

    @property
    def total(self) -> float:
        return self.sharded + self.replicated

    def per_rank(self, tp: int) -> float:
        return self.sharded / tp + self.replicated


def _mlp_params(m: Model, width: int) -> int:
    """One MLP (or expert) of `width`: GELU and squared ReLU 2 matrices, SwiGLU 3, plus the column-parallel
    bias."""
    return (3 if m.activation == "swiglu" else 2) * m.hidden_size * width + (width if _has_bias(m) else 0)


def layer_params(m: Model, moe: bool = False) -> LayerParams:
    """One block: attention (GQA-aware QKV and output projection, or MLA: costs/mla.py), MLP (GELU and
    squared ReLU: 2 matrices, SwiGLU: 3), two norms.
    With `moe` the MLP is replaced by the shared experts (sharded like it), the router (replicated, a
    [h, E] matrix) and the routed experts, which expert_params counts apart (they shard over ep too)."""
    h = m.hidden_size
    bias = _has_bias(m)
    attention, attention_replicated = _attention_params(m)
    share = linear_layer_share(m.layer_types, m.num_hidden_layers) if m.has_linear_attention else 0.0
    if share:  # a hybrid's mean block: its Gated DeltaNet mixers' share (costs/gdn.py)
        linear, linear_replicated = gdn_params(m)
        attention += share * (linear - attention)
        attention_replicated += share * (linear_replicated - attention_replicated)
    mlp = m.n_shared_experts * _mlp_params(m, m.expert_ffn_size) if moe else _mlp_params(m, m.ffn_size)
    norm = 2 * (2 * h if m.norm == "layernorm" else h)
    row_bias = 2 * h if bias else 0  # biases of the row-parallel out-projection and second MLP matrix
    router = h * m.num_experts if moe else 0
    return LayerParams(sharded=attention + mlp, replicated=attention_replicated + norm + row_bias + router)


def _attention_params(m: Model) -> tuple[float, float]:
    """(tp-sharded, replicated) parameters of one attention: QKV of num_attention_heads query and
    num_key_value_heads key/value heads of head_dim (and their column-parallel bias), the output
    projection [heads * head_dim -> h]; or MLA's (costs/mla.py)."""
    h = m.hidden_size
    if m.is_mla:
        return mla_layer_params(m, h, m.num_attention_heads)
    q_dim, kv_dim = m.num_attention_heads * m.qk_head_dim, m.kv_heads * m.qk_head_dim
    gate = h * q_dim if m.attn_output_gate else 0  # the output gate's half of the query projection
    qkv = h * (q_dim + 2 * kv_dim) + gate + (q_dim + 2 * kv_dim if _has_bias(m) else 0)
    qk_norm = 2 * m.qk_head_dim if m.qk_layernorm else 0  # one RMSNorm weight each for q and k heads
    return qkv + q_dim * h, qk_norm


def mtp_params(m: Model) -> tuple[LayerParams, int]:
    """One multi-token-prediction depth (DeepSeek-V3 sec. 2.2, Figure 3): its transformer block (an MoE
    block when the model's layers past first_k_dense_replace are), the RMSNorms of the hidden state and of
    the embedding, the projection M [2h -> h] (tp-sharded) and the shared head's own final norm; and the
    block's routed experts. The embedding and output head are the main model's (shared)."""
    h = m.hidden_size
    moe = m.is_moe_layer(m.num_hidden_layers)
    block = layer_params(m, moe=moe)
    norms = 3 * (2 * h if m.norm == "layernorm" else h)
    params = LayerParams(sharded=block.sharded + 2 * h * h, replicated=block.replicated + norms)
    return params, expert_params(m) if moe else 0


def mtp_parameters(m: Model) -> int:
    """All parameters of the multi-token-prediction module (num_nextn_predict_layers depths), beyond the
    main model's `count_parameters` (DeepSeek-V3: 671B main + 14B MTP as its checkpoint stores it, which
    holds its own copy of the embedding and head)."""
    params, experts = mtp_params(m)
    return round(m.num_nextn_predict_layers * (params.total + experts))


def expert_params(m: Model) -> int:
    """Routed experts of one MoE layer (0 for a dense layer's model): E MLPs of moe_intermediate_size."""
    return m.num_experts * _mlp_params(m, m.expert_ffn_size)


def moe_layer_count(m: Model, first: int = 0, count: int | None = None) -> int:
    """MoE layers among global layers [first, first + count) (all layers by default)."""
    end = m.num_hidden_layers if count is None else first + count
    if not m.is_moe:
        return 0
    return max(0, end - max(first, m.first_k_dense_replace))  # Model.is_moe_layer: i >= first_k_dense_replace


def embedding_params(m: Model) -> int:
    """Token embedding plus the learned position table (rotary positions have no parameters)."""
    positions = m.max_position_embeddings * m.hidden_size if m.position_embedding == "learned" else 0
    return m.vocab_size * m.hidden_size + positions


def head_params(m: Model) -> int:
    """Final norm plus the output projection (zero extra when tied to the embedding)."""
    norm = 2 * m.hidden_size if m.norm == "layernorm" else m.hidden_size
    return norm + (0 if m.tie_word_embeddings else m.vocab_size * m.hidden_size)


def count_parameters(m: Model) -> int:
    """All parameters of the model (tied embeddings counted once; every expert of an MoE), without the
    multi-token-prediction module, as published counts are (`mtp_parameters`)."""
    moe = moe_layer_count(m)
    layers = (m.num_hidden_layers - moe) * layer_params(m).total
    layers += moe * (layer_params(m, moe=True).total + expert_params(m))
    return round(embedding_params(m) + layers + head_params(m))  # a hybrid's layers are counted as a mean


def stage_expert_parameters(m: Model, first_layer: int, layers: int, *, tp: int, ep: int) -> float:
    """Routed-expert parameters one rank holds for `layers` blocks from global layer `first_layer`:
    E / ep experts per MoE layer, each split over tp (Megatron-Core expert_tensor_parallel_size = tp)."""
    return moe_layer_count(m, first_layer, layers) * expert_params(m) / (tp * ep)


def stage_parameters(
    m: Model,
    layers: int,
    *,
    first: bool,
    last: bool,
    tp: int,
    pipelined: bool,
    vocab_tp: int,
    first_layer: int = 0,
    ep: int = 1,
    etp: int | None = None,
) -> float:
    """Parameters one rank holds for one (virtual) stage of `layers` blocks under tensor parallel `tp`
    (for an MoE, global layers from `first_layer`, routed experts split over `ep` and over `etp`,
    default tp: simulator/mesh.py's folded expert grid).

    The embedding lives on the first stage and the head on the last, split over `vocab_tp` ranks
    (tp for Megatron-LM's vocab-parallel layers, 1 when replicated);
    with tied embeddings and more than one stage, the last stage keeps its own copy of the embedding
    matrix for the output layer (Megatron-LM, Narayanan et al. 2021 sec. 2.2 / `shared_embedding`).
    """
    moe = moe_layer_count(m, first_layer, layers)
    total = (layers - moe) * layer_params(m).per_rank(tp) + moe * layer_params(m, moe=True).per_rank(tp)
    total += stage_expert_parameters(m, first_layer, layers, tp=etp or tp, ep=ep)
    vocab_matrix = m.vocab_size * m.hidden_size / vocab_tp
    if first:
        total += vocab_matrix + (embedding_params(m) - m.vocab_size * m.hidden_size)
    if last:
        norm = head_params(m) - (0 if m.tie_word_embeddings else m.vocab_size * m.hidden_size)
        total += norm + _mtp_rank_params(m, tp=tp, ep=ep)[0]
        if not m.tie_word_embeddings or (pipelined and not first):
            total += vocab_matrix
    return total


def _mtp_rank_params(m: Model, *, tp: int, ep: int) -> tuple[float, float]:
    """(all, routed-expert) parameters of the multi-token-prediction depths one last-stage rank holds."""
    params, experts = mtp_params(m)
    depth = m.num_nextn_predict_layers
    return depth * (params.per_rank(tp) + experts / (tp * ep)), depth * experts / (tp * ep)


def chunk_tensor_bytes(
    m: Model,
    tp: int,
    *,
    layers: int,
    has_embedding: bool,
    has_head: bool,
    dtype_bytes: int = 4,
    first_layer: int = 0,
    vocab_tp: int = 1,
) -> list[int]:
    """Bytes of each dense parameter tensor of a model chunk on one tp rank, in registration order, as
    runtime/model.py builds it (bias-free linears; embedding and head split over `vocab_tp`, 1 when
    replicated). DDP's gradient buckets are formed over this list (simulator/costs/tp_comm.py,
    `ddp_bucket_bytes`). An MoE layer (global index from `first_layer`) holds its router and shared
    experts here; its routed experts are reduced by a second reducer over the expert-data-parallel
    group (`chunk_expert_bytes`)."""
    h = m.hidden_size
    attention = _attention_tensors(m, tp)
    norm = [h, h] if m.norm == "layernorm" else [h]
    vocab_rows = m.vocab_size // vocab_tp
    sizes: list[int] = []
    if has_embedding:
        sizes.append(vocab_rows * h)
        if m.position_embedding == "learned":
            sizes.append(m.max_position_embeddings * h)
    mlp = _mlp_tensors(m, m.ffn_size, tp)
    moe = [h * m.num_experts] + _mlp_tensors(m, m.expert_ffn_size, tp) * m.n_shared_experts
    linear = gdn_tensors(m, tp) if m.has_linear_attention else attention
    for layer in range(first_layer, first_layer + layers):
        kind = m.layer_types[layer] if m.layer_types and layer < len(m.layer_types) else "full_attention"
        sizes += [*norm, *(linear if kind == "linear_attention" else attention)]
        sizes += norm + (moe if m.is_moe_layer(layer) else mlp)
    if has_head:
        sizes += norm
        if not (m.tie_word_embeddings and has_embedding):
            sizes.append(vocab_rows * h)
    return [n * dtype_bytes for n in sizes]


def _attention_tensors(m: Model, tp: int) -> list[int]:
    """One attention's parameter tensors on one tp rank, as runtime/model.py registers them (wq, wk, wv,
    wo; or MLA's, costs/mla.py)."""
    h = m.hidden_size
    if m.is_mla:
        return mla_tensor_elements(m, h, m.num_attention_heads, tp)
    q_dim, kv_dim = m.num_attention_heads * m.qk_head_dim, m.kv_heads * m.qk_head_dim
    qk_norm = [m.qk_head_dim] * 2 if m.qk_layernorm else []
    wq = h * q_dim * (2 if m.attn_output_gate else 1) // tp  # with the output gate's half
    return [wq, h * kv_dim // tp, h * kv_dim // tp, q_dim * h // tp, *qk_norm]


def _mlp_tensors(m: Model, width: int, tp: int) -> list[int]:
    """One MLP's matrices on one tp rank (SwiGLU: gate, up, down; GELU: fc1, fc2)."""
    h = m.hidden_size
    return [h * width // tp] * (2 if m.activation == "swiglu" else 1) + [width * h // tp]


def chunk_expert_bytes(
    m: Model, tp: int, ep: int, *, first_layer: int, layers: int, dtype_bytes: int = 4
) -> int:
    """Bytes of the routed-expert gradients of a chunk on one rank (E / ep experts per MoE layer, each split
    over tp): one bucket of the expert reducer (torch DDP's one-bucket-per-chunk rule, `ddp_bucket_bytes`)."""
    moe_layers = moe_layer_count(m, first_layer, layers)
    return moe_layers * (m.num_experts // ep) * sum(_mlp_tensors(m, m.expert_ffn_size, tp)) * dtype_bytes


def rank_parameters(
    m: Model,
    split: Sequence[int],
    owned: Sequence[int],
    *,
    tp: int,
    vocab_tp: int,
    ep: int,
    etp: int | None = None,
) -> tuple[float, float]:
    """(all, routed-expert) parameters one rank holds for its virtual stages `owned` of the layer split
    `split` (one entry per virtual stage): the memory model's and the sweep estimator's one sum."""
    stages = len(split)
    starts = [sum(split[:v]) for v in range(stages)]
    total = sum(
        stage_parameters(
            m,
            split[v],
            first=v == 0,
            last=v == stages - 1,
            tp=tp,
            pipelined=stages > 1,
            vocab_tp=vocab_tp,
            first_layer=starts[v],
            ep=ep,
            etp=etp,
        )
        for v in owned
    )
    experts = sum(stage_expert_parameters(m, starts[v], split[v], tp=etp or tp, ep=ep) for v in owned)
    if stages - 1 in owned:  # the multi-token-prediction depths sit on the last stage
        experts += _mtp_rank_params(m, tp=etp or tp, ep=ep)[1]
    return total, experts
