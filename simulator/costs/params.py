"""Parameter counts: whole model, one layer, and what one rank holds under tensor/pipeline parallelism.

GPT-style models (LayerNorm) carry biases on every linear layer; Llama-style ones (RMSNorm) carry
none, as in the reference implementations (GPT-2/Megatron-LM and meta-llama respectively).
"""

from __future__ import annotations

from dataclasses import dataclass

from plancast.simulator.scenario import Model


def _has_bias(m: Model) -> bool:
    return m.norm == "layernorm"


@dataclass(frozen=True, slots=True)
class LayerParams:
    """Parameters of one transformer block, split into what tensor parallel shards and what it replicates."""

    sharded: int  # attention and MLP matrices (and their column-parallel biases): divided by tp
    replicated: int  # norms and row-parallel output biases: a full copy on every tp rank

    @property
    def total(self) -> int:
        return self.sharded + self.replicated

    def per_rank(self, tp: int) -> float:
        return self.sharded / tp + self.replicated


def layer_params(m: Model) -> LayerParams:
    """One block: QKV (GQA-aware), output projection, MLP (GELU: 2 matrices, SwiGLU: 3), two norms."""
    h, f, kv_dim = m.hidden_size, m.ffn_size, m.kv_heads * m.head_dim
    bias = _has_bias(m)
    qkv = h * (h + 2 * kv_dim) + (h + 2 * kv_dim if bias else 0)
    out = h * h
    mlp = (2 if m.activation == "gelu" else 3) * h * f + (f if bias else 0)
    norm = 2 * (2 * h if m.norm == "layernorm" else h)
    row_bias = 2 * h if bias else 0  # biases of the row-parallel out-projection and second MLP matrix
    return LayerParams(sharded=qkv + out + mlp, replicated=norm + row_bias)


def embedding_params(m: Model) -> int:
    """Token embedding plus the learned position table (rotary positions have no parameters)."""
    positions = m.max_position_embeddings * m.hidden_size if m.position_embedding == "learned" else 0
    return m.vocab_size * m.hidden_size + positions


def head_params(m: Model) -> int:
    """Final norm plus the output projection (zero extra when tied to the embedding)."""
    norm = 2 * m.hidden_size if m.norm == "layernorm" else m.hidden_size
    return norm + (0 if m.tie_word_embeddings else m.vocab_size * m.hidden_size)


def count_parameters(m: Model) -> int:
    """All parameters of the model (tied embeddings counted once)."""
    return embedding_params(m) + m.num_hidden_layers * layer_params(m).total + head_params(m)


def stage_parameters(
    m: Model, layers: int, *, first: bool, last: bool, tp: int, pipelined: bool, vocab_tp: int
) -> float:
    """Parameters one rank holds for one (virtual) stage of `layers` blocks under tensor parallel `tp`.

    The embedding lives on the first stage and the head on the last, split over `vocab_tp` ranks
    (tp for Megatron-LM's vocab-parallel layers, 1 when replicated);
    with tied embeddings and more than one stage, the last stage keeps its own copy of the embedding
    matrix for the output layer (Megatron-LM, Narayanan et al. 2021 sec. 2.2 / `shared_embedding`).
    """
    total = layers * layer_params(m).per_rank(tp)
    vocab_matrix = m.vocab_size * m.hidden_size / vocab_tp
    if first:
        total += vocab_matrix + (embedding_params(m) - m.vocab_size * m.hidden_size)
    if last:
        norm = head_params(m) - (0 if m.tie_word_embeddings else m.vocab_size * m.hidden_size)
        total += norm
        if not m.tie_word_embeddings or (pipelined and not first):
            total += vocab_matrix
    return total


def chunk_tensor_bytes(
    m: Model,
    tp: int,
    *,
    layers: int,
    has_embedding: bool,
    has_head: bool,
    dtype_bytes: int = 4,
    vocab_tp: int = 1,
) -> list[int]:
    """Bytes of each parameter tensor of a model chunk on one tp rank, in registration order, as
    runtime/model.py builds it (bias-free linears; embedding and head split over `vocab_tp`, 1 when
    replicated). DDP's gradient buckets are formed over this list (simulator/costs/tp_comm.py,
    `ddp_bucket_bytes`)."""
    h, d = m.hidden_size, m.head_dim
    norm = [h, h] if m.norm == "layernorm" else [h]
    vocab_rows = m.vocab_size // vocab_tp
    sizes: list[int] = []
    if has_embedding:
        sizes.append(vocab_rows * h)
        if m.position_embedding == "learned":
            sizes.append(m.max_position_embeddings * h)
    mlp = [h * m.ffn_size // tp] * (2 if m.activation == "swiglu" else 1) + [m.ffn_size * h // tp]
    for _ in range(layers):
        sizes += [*norm, h * h // tp, h * m.kv_heads * d // tp, h * m.kv_heads * d // tp, h * h // tp]
        sizes += norm + mlp
    if has_head:
        sizes += norm
        if not (m.tie_word_embeddings and has_embedding):
            sizes.append(vocab_rows * h)
    return [n * dtype_bytes for n in sizes]
