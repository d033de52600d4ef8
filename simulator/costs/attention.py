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
"""

from __future__ import annotations

from plancast.simulator.cluster import ComputeModel

CAUSAL_FRACTION = 0.5
"""Share of the s x s scores a causal kernel computes (FA3 paper sec. 4.1: causal FLOPs = full / 2)."""


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
