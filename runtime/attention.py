"""The attention pieces every attention module shares: rotary position embedding and the causal
attention core (torch's scaled_dot_product_attention)."""

from __future__ import annotations

import torch
import torch.nn.functional as F  # noqa: N812  (the torch convention)


def rotary(x: torch.Tensor, base: float = 10000.0, positions: torch.Tensor | None = None) -> torch.Tensor:
    """Rotary position embedding (Su et al. 2021, arXiv 2104.09864) on ``x`` of shape (b, heads, s, d).

    ``positions``: the global position of each of the s tokens (context parallel), default 0..s-1.
    """
    seq, dim = x.shape[-2], x.shape[-1]
    inv_freq = 1.0 / (base ** (torch.arange(0, dim, 2, device=x.device, dtype=torch.float32) / dim))
    pos = torch.arange(seq, device=x.device) if positions is None else positions
    angles = torch.outer(pos.to(torch.float32), inv_freq)
    cos, sin = angles.cos().to(x.dtype), angles.sin().to(x.dtype)
    x1, x2 = x[..., 0::2], x[..., 1::2]
    return torch.stack((x1 * cos - x2 * sin, x1 * sin + x2 * cos), dim=-1).flatten(-2)


def attention_core(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None = None
) -> torch.Tensor:
    if mask is None:
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
