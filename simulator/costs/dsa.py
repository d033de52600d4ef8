"""DeepSeek Sparse Attention (DSA) over multi-head latent attention: the lightning indexer, the top-k
keys it picks, and the sparse attention core, one block, one micro-batch, one tensor-parallel rank
(simulator/model_sparse.py has the keys; costs/ops.py `mla_attention_forward` issues these ops).

DeepSeek-V3.2 (arXiv 2512.02556) sec. 2.1: the indexer scores I_ts = sum_j w_tj ReLU(q_tj . k_s) over
H^I heads of width d^I for every earlier token s (eq. 1), and the core attends each query to the
index_topk best (eq. 2), MLA in its absorbed (MQA) form: every head's query against the one shared
latent of kv_lora_rank + rope channels, values over kv_lora_rank channels. The work per token follows
Megatron-Core's DSA as Megatron-Bridge counts it (src/megatron/bridge/training/utils/flop_utils.py,
`experimental_attention_variant == "dsa"`, at 067f987):

- the indexer's projections (wq_b from the query latent, wk and weights_proj from the hidden state, a
  LayerNorm on the key) are duplicated over tensor parallel (Megatron-Core dsa.py DSAIndexer:
  `parallel_mode="duplicated"`), on detached inputs: trained, a backward computes their weight gradients
  only (2x forward in all); untrained (`dsa_indexer_loss` off), no backward;
- the index scores are dense over the causal prefix in forward, (s + 1) / 2 keys a query on average,
  H^I (d^I + 1) multiply-adds a pair (the +1: the head weighting); their backward covers the pairs the
  KL loss reads, twice the forward's work per pair: the top-k only under the sparse loss;
- the sparse loss's target is the main attention's distribution over the same keys, a forward-only
  Q.K over heads x (kv_lora_rank + rope) a pair, no backward;
- the core reads k - k(k - 1) / (2 s) keys a query on average (all (s + 1) / 2 when s <= k), heads x
  (2 kv_lora_rank + rope) multiply-adds a pair; its backward twice its forward, as every core's.

The score, target and core kernels are DSA's own (FlashMLA's sparse kernel, DeepGEMM's indexer logits,
Megatron-Core's DSA backends); no published rate separates them from a dense fused kernel, so each is
priced at the cluster's fused-attention rate over its exact pair count where the plan runs Transformer
Engine's kernel, else at the rate the flash kernel reaches over its causal half (attention_efficiency
over the full s x s count, costs/attention.py: the same achieved FLOP/s). Under context parallel a rank
holds s / cp queries against all s keys (each pair once over the ranks).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from plancast.simulator.costs.attention import CAUSAL_FRACTION
from plancast.simulator.costs.op import Op, in_share
from plancast.simulator.model_sparse import indexer_layer_share

if TYPE_CHECKING:
    from plancast.simulator.costs.ops import MlaRanks, Shape
    from plancast.simulator.scenario import Model, Scenario

INDEXER_PROJECTIONS = frozenset({"index_q", "index_k", "index_weights"})
"""The indexer's GEMMs (`indexer_projections`)."""

INDEX_BYTES = 4
"""Bytes of one selected key's index (int32, as DeepSeek's and Megatron-Core's top-k tensors)."""


@dataclass(frozen=True, slots=True)
class Dsa:
    """DeepSeek Sparse Attention's shape and how its indexer trains (training.dsa_indexer_loss)."""

    topk: int
    n_heads: int
    head_dim: int
    loss: str  # sparse, dense or off
    share: float = 1.0  # of the layers that run their own indexer (model_sparse.py indexer_layer_share)

    @classmethod
    def of(cls, s: Scenario) -> Dsa | None:
        m = s.model
        if m.index_topk is None or m.index_n_heads is None or m.index_head_dim is None:
            return None
        loss, share = s.training.dsa_indexer_loss or "sparse", indexer_layer_share(m, m.num_hidden_layers)
        return cls(m.index_topk, m.index_n_heads, m.index_head_dim, loss, share)

    @property
    def trained(self) -> bool:
        return self.loss != "off"


def dense_context(seq: int) -> float:
    """Keys a causal query reads on average over a sequence of `seq` tokens."""
    return (seq + 1) / 2


def sparse_context(seq: int, topk: int) -> float:
    """Keys a query reads on average under top-k selection: query i reads min(i, topk) keys, so
    sum_i min(i, k) / s = k - k (k - 1) / (2 s) once s > k (Megatron-Bridge flop_utils.py)."""
    if seq <= topk:
        return dense_context(seq)
    return topk - topk * (topk - 1) / (2 * seq)


def _rated(name: str, flops: float, io: float, x: Shape, backward: tuple[float, float] | None) -> Op:
    """An attention-category op over exact pair counts (module docstring: the fused kernel's rate, or
    the flash kernel's achieved FLOP/s over its causal half)."""
    if x.fused_attention is not None:
        return Op(name, "attention", flops, io, rate=x.fused_attention, backward=backward)
    relative = x.flash_relative / CAUSAL_FRACTION
    return Op(name, "attention", flops, io, relative_rate=relative, backward=backward)


def indexer_projections(x: Shape, r: MlaRanks, d: Dsa) -> list[tuple[str, float, float, float]]:
    """(name, m, k, n) of the indexer's GEMMs: all the block's tokens (sequence parallel gathers them),
    duplicated on every tp rank."""
    tokens = x.b * x.s
    q_in = r.q_lora or x.h
    return [
        ("index_q", tokens, q_in, d.n_heads * d.head_dim),
        ("index_k", tokens, x.h, d.head_dim),
        ("index_weights", tokens, x.h, d.n_heads),
    ]


def projection_backward(d: Dsa) -> tuple[float, float]:
    """The indexer projections' (input, weight) gradient multiples: detached inputs, so weight gradients
    only, and none when the indexer is not trained."""
    return (0.0, 1.0) if d.trained else (0.0, 0.0)


def dsa_core_ops(x: Shape, r: MlaRanks, d: Dsa) -> list[Op]:
    """The index scores with their top-k, the sparse loss's target and the sparse core (module docstring)."""
    seq = x.kv_s or x.s
    queries, heads = x.b * x.s, x.heads / x.tp  # the rank's queries, each against up to `seq` keys
    dense, sparse = dense_context(seq), sparse_context(seq, d.topk)
    qk, v = r.kv_lora + r.rope, r.kv_lora  # the absorbed widths
    db = x.dtype_bytes
    # read the indexer's queries and keys and the head weights, write the selected keys' indices
    score_io = db * (queries * (d.n_heads * d.head_dim + d.n_heads) + x.b * seq * d.head_dim)
    score_io += INDEX_BYTES * queries * min(d.topk, seq)
    graded = (sparse if d.loss == "sparse" else dense) if d.trained else 0.0
    score_flops = 2.0 * queries * dense * d.n_heads * (d.head_dim + 1)
    ops = [in_share(_rated("index_scores", score_flops, score_io, x, (2.0 * graded / dense, 0.0)), d.share)]
    if d.trained:  # the layers that share a top-k have no indexer to train
        target = sparse if d.loss == "sparse" else dense
        io = db * (queries * heads * qk + x.b * seq * qk)
        target_op = _rated("index_target", 2.0 * queries * target * heads * qk, io, x, (0.0, 0.0))
        ops.append(in_share(target_op, d.share))
    core_io = db * (queries * heads * (qk + v) + x.b * seq * qk) + INDEX_BYTES * queries * min(d.topk, seq)
    ops.append(_rated("attention", 2.0 * queries * sparse * heads * (qk + v), core_io, x, None))
    return ops


def dsa_layer_params(m: Model, hidden: int) -> int:
    """Parameters of one block's indexer, duplicated on every tp rank: wq_b [q_lora_rank (or hidden) ->
    heads x dim], wk [hidden -> dim], k_norm (a LayerNorm: weight and bias), weights_proj [hidden ->
    heads] (Megatron-Core DSAIndexer; DeepSeek-V3.2's inference/model.py Indexer)."""
    return sum(dsa_tensor_elements(m, hidden))


def dsa_tensor_elements(m: Model, hidden: int) -> list[int]:
    """The indexer's parameter tensors (`dsa_layer_params`), none without DSA."""
    if m.index_topk is None or m.index_n_heads is None or m.index_head_dim is None:
        return []
    heads, dim = m.index_n_heads, m.index_head_dim
    return [(m.q_lora_rank or hidden) * heads * dim, hidden * dim, dim, dim, hidden * heads]


def mean_dsa_layer_params(m: Model, hidden: int) -> float:
    """`dsa_layer_params` over the layers that have an indexer: a sharing model's mean block's."""
    return dsa_layer_params(m, hidden) * indexer_layer_share(m, m.num_hidden_layers)


def dsa_saved_elements(x: Shape, r: MlaRanks, d: Dsa) -> tuple[float, float]:
    """(per local token, per gathered key token) elements a DSA block keeps for backward beside MLA's
    latents and queries (costs/mla.py): the absorbed queries and the core's latent output per head, the
    selected indices (int32, counted in elements of the training dtype), and, when the indexer trains,
    its queries, key and head weights; per key token the one latent the core reads, in place of MLA's
    per-head keys and values, and when the indexer trains the key its scores' backward reads."""
    heads = x.heads / x.tp
    local = heads * (r.kv_lora + r.rope) + heads * r.kv_lora
    # a sharing layer reads the top-k tensor of the layer it shares, and has no indexer of its own
    local += d.share * INDEX_BYTES / x.dtype_bytes * min(d.topk, x.kv_s or x.s)
    if d.trained:
        local += d.share * (d.n_heads * d.head_dim + d.n_heads)
    return local, r.kv_lora + r.rope + (d.share * d.head_dim if d.trained else 0)
