"""The scenario key naming the attention kernel a plan runs (docs/scenario.md), where the framework alone
does not say it: NeMo AutoModel, a torchtitan-style FSDP2 stack, runs Transformer Engine's attention
(`backend.attn: te`), and Megatron-LM can run another. Declared here, inherited by scenario.Training."""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

from pydantic import Field

from plancast.simulator.fields import Strict

if TYPE_CHECKING:
    from plancast.simulator.scenario import Training

IndexerLoss = Literal["sparse", "dense", "off"]
"""How DeepSeek Sparse Attention's indexer is trained (training.dsa_indexer_loss, costs/dsa.py)."""

AttentionBackend = Literal["te", "sdpa", "flex"]
"""te: Transformer Engine's DotProductAttention (its fused cuDNN kernel on Hopper and Blackwell);
sdpa: PyTorch's scaled_dot_product_attention or FlashAttention-2; flex: PyTorch FlexAttention
(costs/attention.py prices all three)."""


class AttentionTrainingKeys(Strict):
    """Training key of the attention kernel."""

    attention_backend: AttentionBackend | None = None
    """Which kernel runs the attention core under flash_attention (simulator/costs/attention.py).
    te: Transformer Engine's DotProductAttention, whose fused backend on Hopper and Blackwell is cuDNN's
    causal kernel, priced over the causal half of the scores at the cluster's measured
    `fused_attention_efficiency` (NeMo AutoModel's `backend.attn: te`, Megatron-LM's
    `--attention-backend fused`). sdpa: torch's scaled_dot_product_attention / FlashAttention-2, priced
    over the full count at `attention_efficiency`, the rate the published torchtitan rows score with
    (AutoModel's `backend.attn: sdpa`). flex: PyTorch FlexAttention (AutoModel's `backend.attn: flex`,
    which its gpt-oss runs for the attention sinks), priced as sdpa at the cluster's
    `flex_attention_relative` of FlashAttention-2's rate. Unset: parallelism.framework's (megatron-lm te,
    the others sdpa)."""
    sliding_window_skip: bool | None = None
    """Whether the attention kernel skips the key blocks a model.sliding_window empties
    (costs/attention.py `window_work`): true, a windowed layer costs the blocks its band touches (a
    128-token window at 4,096 tokens: 63 of the 528 causal 128 x 128 blocks); false, it costs what a
    causal layer does. Unset: true under attention_backend "flex" (a FlexAttention BlockMask lists, per
    128-row query block, only the key blocks its mask leaves partly or fully open, and the kernel visits
    only those: torch/nn/attention/flex_attention.py, `_DEFAULT_SPARSE_BLOCK_SIZE = 128`; NeMo
    AutoModel's gpt-oss builds one for its sliding layers), false otherwise: torch SDPA takes a window
    only as a dense mask, and no published figure says whether cuDNN's fused kernel (Transformer
    Engine's, which takes gpt-oss's window from cuDNN 9.2) skips the tiles outside its band."""
    packed_document_tokens: int | None = Field(default=None, gt=0)
    """Sequences packed from documents of about this many tokens, each attending only within itself
    (Megatron-Core's THD format with cu_seqlens, which Megatron-Bridge's packed SFT runs; FlashAttention's
    varlen kernel; a FlexAttention document mask): the fused core computes each document's causal
    triangle, (L + 1) / (seq_len + 1) of one seq_len-long sequence's for documents of L tokens
    (costs/attention.py `window_work`). Where lengths differ, give the token-weighted mean length
    sum(d^2) / sum(d), for which that fraction is exact (the length Megatron-Bridge's FLOP count takes
    for packed batches, flop_utils.py `core_attn_seq_factor`; a plain mean undercounts). Needs
    flash_attention (an unfused core computes every score, masked or not); a dense block-diagonal mask
    in torch SDPA skips nothing either: leave the key unset there. Model FLOPs (MFU) keep Narayanan et
    al.'s full seq_len x seq_len scores, as for sliding windows (costs/model_flops.py). Unset: one
    document per sequence."""
    dsa_indexer_loss: IndexerLoss | None = None
    """How a DeepSeek Sparse Attention model (model.index_topk) trains its indexer (costs/dsa.py). sparse:
    the KL loss over the selected top-k keys only (Megatron-Core's `dsa_indexer_use_sparse_loss`, which
    Megatron-Bridge's GLM-5 recipes set, and DeepSeek-V3.2's sparse training stage, arXiv 2512.02556 sec.
    2.1.1); dense: over every causal key (the dense warm-up stage's loss); off: the indexer is not
    trained, its top-k computed without gradients (`dsa_indexer_loss_coeff = 0`). Unset: sparse."""


def attention_backend_problems(training: Training, sparse: bool = False) -> list[tuple[str, str]]:
    """(path, message) when attention_backend names a fused kernel the plan does not run: without
    flash_attention the attention core is priced unfused (s x s scores) and the key would change nothing;
    and packed documents the core would not skip (unfused), longer than the sequence, or over DeepSeek
    Sparse Attention (`sparse`: its indexer's top-k over packed documents is not modelled)."""
    out = _packing_problems(training, sparse)
    if training.attention_backend is None or training.flash_attention:
        return out
    return [
        *out,
        (
            "training.attention_backend",
            f"{training.attention_backend!r} names a fused attention kernel, but training.flash_attention is "
            "false (the attention core is then priced unfused, and this key would change nothing): set "
            "flash_attention = true, or remove attention_backend",
        ),
    ]


def _packing_problems(training: Training, sparse: bool) -> list[tuple[str, str]]:
    doc = training.packed_document_tokens
    if doc is None:
        return []
    path = "training.packed_document_tokens"
    if doc > training.seq_len:
        return [(path, f"= {doc} exceeds seq_len ({training.seq_len}); no document outgrows its sequence")]
    if not training.flash_attention:
        return [
            (
                path,
                "saves work only in a fused kernel that takes the documents' boundaries, but "
                "training.flash_attention is false (the unfused core computes every score, masked or not): "
                "set flash_attention = true, or remove packed_document_tokens",
            )
        ]
    if sparse:
        return [(path, "over DeepSeek Sparse Attention (model.index_topk) is not modelled; remove it")]
    return []
