"""The attention core as the kernels run it: which kernel a plan's framework calls, what it computes and at
what rate.

A causal kernel (FlashAttention-2/3, cuDNN's fused attention) skips the score blocks above the diagonal:
it computes about half of the s x s scores, so its FLOPs are half the full count (the FlashAttention-3
paper, arXiv 2407.08608 sec. 4.1, counts causal FLOPs so). Megatron-LM runs attention through Transformer
Engine's DotProductAttention, whose fused backend on Hopper and Blackwell is cuDNN's kernel (TE docs,
"Attention backends": FusedAttention, sm90+), and so does any plan whose training.attention_backend is
"te" (NeMo AutoModel's `backend.attn: te`); that kernel is priced here, at its causal count and the
cluster's `fused_attention_efficiency`, whose curve over the sequence length is measured per GPU
(simulator/catalog/clusters.py); on ROCm the fused backend is Composable Kernel's, priced over the same
causal half at the AMD presets' attention rate (clusters.toml: no ROCm kernel rate measured yet). Other
stacks (torchtitan's SDPA and FlashAttention-2 in the published rows) keep the model's full count at
`attention_efficiency`, the rate the published dense rows score with (docs/calibration.md): a causal
count for them waits on an A100 measurement of the same kernels.

Both rates were measured at head dim 128; a fused kernel runs narrower heads slower (each tile does less
math per byte of K/V it loads and per softmax): `head_dim_rate` scales either rate by its kernel family's
published fwd+bwd ratio (FlashAttention-3 paper figs. 5-6, below). MLA (192-wide query/key, 128-wide
values) and any head of 128 or wider keep the measured rate: no fwd+bwd point above 128 is published.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from plancast.simulator.cluster import ComputeModel
from plancast.simulator.model_window import sliding_layer_share

if TYPE_CHECKING:
    from plancast.simulator.scenario import Scenario

CAUSAL_FRACTION = 0.5
"""Share of the s x s scores a causal kernel computes (FA3 paper sec. 4.1: causal FLOPs = full / 2)."""


HEAD_DIM_MEASURED = 128
"""Head dim at which `fused_attention_efficiency` (gpu_ops: Llama 3 8B and MPT-7B shapes) and
`attention_efficiency` (FA2 on H100, FA3 paper abstract) were measured."""


def _fwd_bwd_tflops(fwd: float, bwd: float) -> float:
    """Rate of one forward and its backward, the backward doing 2.5x the forward's FLOPs (the FLOP count
    of the FlashAttention-2 paper, arXiv 2307.08691 sec. 4.1, which FA3's figures use)."""
    return 3.5 / (1 / fwd + 2.5 / bwd)


# FlashAttention-3 paper (Shah et al., arXiv 2407.08608) on H100 SXM5, BF16, seq 4k, no causal mask,
# TFLOPs/s at head dim 64 / 128: fig. 5a/5c forward, cuDNN 408 / 609, FlashAttention-2 321 / 368;
# fig. 6a/6b backward, cuDNN 417 / 499, FlashAttention-2 279 / 310 (16k gives 0.80 and 0.90).
HEAD_DIM_64_RATE = {
    "te": _fwd_bwd_tflops(408, 417) / _fwd_bwd_tflops(609, 499),  # cuDNN, as Transformer Engine runs it
    "sdpa": _fwd_bwd_tflops(321, 279) / _fwd_bwd_tflops(368, 310),  # FlashAttention-2 / torch SDPA
}
"""fwd+bwd rate at head dim 64 over the rate at 128, per kernel family: 0.79 cuDNN, 0.89 FA2."""


def head_dim_rate(qk_head_dim: int, v_head_dim: int, family: str) -> float:
    """A fused attention kernel's rate at these head widths over its rate at head dim 128: its
    HEAD_DIM_64_RATE at 64 or narrower, linear between 64 and 128, 1 from 128 up (no wider point
    measured fwd+bwd). The width is the FLOP-weighted mean of the score (qk) and value (v) GEMMs'."""
    width = (qk_head_dim + v_head_dim) / 2
    low = HEAD_DIM_64_RATE[family]
    if width >= HEAD_DIM_MEASURED:
        return 1.0
    if width <= HEAD_DIM_MEASURED / 2:
        return low
    return low + (1 - low) * (width - HEAD_DIM_MEASURED / 2) / (HEAD_DIM_MEASURED / 2)


def runs_te_attention(framework: str, backend: str | None) -> bool:
    """Whether the attention core runs Transformer Engine's DotProductAttention: training.attention_backend
    where set (NeMo AutoModel's `backend.attn: te` on a torchtitan-style stack), else the framework's
    (Megatron-LM's)."""
    return backend == "te" if backend is not None else framework == "megatron-lm"


def fused_attention_rate(
    compute: ComputeModel, framework: str, flash: bool, seq_len: int, backend: str | None = None
) -> float | None:
    """Fraction of peak the causal fused (cuDNN, via Transformer Engine) kernel reaches on `seq_len`
    tokens over its causal count: e_max x s / (s + s_half); None where the plan runs another kernel
    (`backend`: training.attention_backend) or the cluster has no measured rate for it."""
    e_max = compute.fused_attention_efficiency
    if not runs_te_attention(framework, backend) or not flash or e_max is None:
        return None
    return e_max * seq_len / (seq_len + compute.fused_attention_half_seq)


def flash_kernel_relative(compute: ComputeModel, backend: str | None) -> float:
    """The rate of the kernel priced at `attention_efficiency` (FlashAttention-2's) over FA2's: PyTorch
    FlexAttention's measured ratio (the cluster's `flex_attention_relative`) under backend 'flex', else 1.
    FlexAttention's BlockMask skips the blocks above the diagonal as FA2's causal kernel does, so it takes
    the same count as the sdpa path (the full count the published torchtitan rows score with)."""
    return compute.flex_attention_relative if backend == "flex" else 1.0


KEY_BLOCK = 128
"""Rows and columns of one score block a block-sparse kernel skips or computes whole (FlexAttention's
`_DEFAULT_SPARSE_BLOCK_SIZE`, torch/nn/attention/flex_attention.py)."""


def window_block_fraction(seq_len: int, window: int, block: int = KEY_BLOCK) -> float:
    """Score blocks a block-sparse kernel computes for one windowed layer over those of a causal one:
    query block q needs min(q + 1, ceil((window - 1) / block) + 1) key blocks against causal's q + 1
    (a 128-token window at 4,096 tokens: 63 of 528 blocks)."""
    n = math.ceil(seq_len / block)
    k = math.ceil((window - 1) / block) + 1
    if n <= k:
        return 1.0
    return (k * (k + 1) / 2 + (n - k) * k) / (n * (n + 1) / 2)


def skips_window(s: Scenario) -> bool:
    """Whether the plan's attention kernel skips the key blocks a sliding window empties:
    training.sliding_window_skip where set, else only FlexAttention's (scenario_attention.py)."""
    t = s.training
    return t.sliding_window_skip if t.sliding_window_skip is not None else t.attention_backend == "flex"


def window_work(s: Scenario) -> float:
    """The attention core's work over a causal seq_len-long sequence's, averaged over the layers: a
    windowed layer at window_block_fraction where the fused kernel skips the emptied blocks, 1 elsewhere
    (an unfused core computes every score, masked or not); with training.packed_document_tokens L, each
    document's own causal triangle, (L + 1) / (seq_len + 1) of the sequence's, its windows over L."""
    m, t = s.model, s.training
    doc = min(t.packed_document_tokens or t.seq_len, t.seq_len) if t.flash_attention else t.seq_len
    packed = (doc + 1) / (t.seq_len + 1)  # documents of L tokens: (s / L) L (L + 1) / 2 over s (s + 1) / 2
    share = sliding_layer_share(m, m.num_hidden_layers)
    if not share or m.sliding_window is None or not t.flash_attention or not skips_window(s):
        return packed
    return packed * (1 - share + share * window_block_fraction(doc, m.sliding_window))
