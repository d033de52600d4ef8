"""The scenario key naming the attention kernel a plan runs (docs/scenario.md), where the framework alone
does not say it: NeMo AutoModel, a torchtitan-style FSDP2 stack, runs Transformer Engine's attention
(`backend.attn: te`), and Megatron-LM can run another. Declared here, inherited by scenario.Training."""

from __future__ import annotations

from typing import Literal

from plancast.simulator.fields import Strict

AttentionBackend = Literal["te", "sdpa"]
"""te: Transformer Engine's DotProductAttention (its fused cuDNN kernel on Hopper and Blackwell);
sdpa: PyTorch's scaled_dot_product_attention or FlashAttention-2 (costs/attention.py prices both)."""


class AttentionTrainingKeys(Strict):
    """Training key of the attention kernel."""

    attention_backend: AttentionBackend | None = None
    """Which kernel runs the attention core under flash_attention (simulator/costs/attention.py).
    te: Transformer Engine's DotProductAttention, whose fused backend on Hopper and Blackwell is cuDNN's
    causal kernel, priced over the causal half of the scores at the cluster's measured
    `fused_attention_efficiency` (NeMo AutoModel's `backend.attn: te`, Megatron-LM's
    `--attention-backend fused`). sdpa: torch's scaled_dot_product_attention / FlashAttention-2, priced
    over the full count at `attention_efficiency`, the rate the published torchtitan rows score with
    (AutoModel's `backend.attn: sdpa`). Unset: parallelism.framework's (megatron-lm te, the others sdpa)."""
