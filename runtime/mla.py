"""Multi-head latent attention (DeepSeek-V2, arXiv 2405.04434, sec. 2.1, eq. (9)-(19)), as training runs it:
the hidden state is compressed to a query latent (or projected to queries directly when there is no
query compression) and a key/value latent plus one shared rotary key, the latents are normalised
(RMSNorm) and up-projected to per-head keys (non-rotary part) and values, and attention runs over
queries and keys of qk_nope_head_dim + qk_rope_head_dim and values of v_head_dim. Module shapes follow
Hugging Face's modeling_deepseek_v3.py `DeepseekV3Attention`; the parameters register in the order
simulator/costs/mla.py `mla_tensor_elements` lists (the DDP buckets the simulator predicts).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint

from plancast.runtime.attention import attention_core, rotary


@dataclass(frozen=True, slots=True)
class MLAConfig:
    """MLA's ranks and head widths (scenario keys of the same names, simulator/model_shapes.py)."""

    q_lora_rank: int  # 0: no query compression
    kv_lora_rank: int
    qk_nope_head_dim: int
    qk_rope_head_dim: int
    v_head_dim: int


class MLAttention(nn.Module):
    """Causal multi-head latent attention over the whole sequence of one rank (no tensor or context
    parallel: runtime/model_support.py refuses those plans)."""

    def __init__(
        self, h: int, heads: int, mla: MLAConfig, *, rope: bool, selective_recompute: bool = False
    ) -> None:
        super().__init__()
        self.mla, self.rope, self.selective_recompute = mla, rope, selective_recompute
        qk = mla.qk_nope_head_dim + mla.qk_rope_head_dim
        if mla.q_lora_rank:
            self.wq_a = nn.Linear(h, mla.q_lora_rank, bias=False)
            self.q_norm = nn.RMSNorm(mla.q_lora_rank, eps=1e-6)
            self.wq_b = nn.Linear(mla.q_lora_rank, heads * qk, bias=False)
        else:
            self.wq = nn.Linear(h, heads * qk, bias=False)
        self.wkv_a = nn.Linear(h, mla.kv_lora_rank + mla.qk_rope_head_dim, bias=False)
        self.kv_norm = nn.RMSNorm(mla.kv_lora_rank, eps=1e-6)
        self.wkv_b = nn.Linear(mla.kv_lora_rank, heads * (mla.qk_nope_head_dim + mla.v_head_dim), bias=False)
        self.wo = nn.Linear(heads * mla.v_head_dim, h, bias=False)

    def _queries(self, x: torch.Tensor) -> torch.Tensor:
        if self.mla.q_lora_rank:
            return self.wq_b(self.q_norm(self.wq_a(x)))
        return self.wq(x)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s = x.shape[0], x.shape[1]
        nope, rope, v_dim = self.mla.qk_nope_head_dim, self.mla.qk_rope_head_dim, self.mla.v_head_dim
        q = self._queries(x).view(b, s, -1, nope + rope).transpose(1, 2)
        heads = q.shape[1]
        latent, k_rope = self.wkv_a(x).split([self.mla.kv_lora_rank, rope], dim=-1)
        kv = self.wkv_b(self.kv_norm(latent)).view(b, s, heads, nope + v_dim).transpose(1, 2)
        k_nope, v = kv.split([nope, v_dim], dim=-1)
        k_rope = k_rope.view(b, 1, s, rope)  # one rotary key, shared by every head (eq. 15)
        q_nope, q_rope = q.split([nope, rope], dim=-1)
        if self.rope:
            q_rope, k_rope = rotary(q_rope), rotary(k_rope)
        q = torch.cat([q_nope, q_rope], dim=-1)
        k = torch.cat([k_nope, k_rope.expand(b, heads, s, rope)], dim=-1)
        if self.selective_recompute and torch.is_grad_enabled():
            out = checkpoint(attention_core, q, k, v, None, use_reentrant=False)
        else:
            out = attention_core(q, k, v)
        return self.wo(out.transpose(1, 2).reshape(b, s, -1))
