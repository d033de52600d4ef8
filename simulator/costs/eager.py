"""Elementwise ops as eager PyTorch runs them (`training.elementwise = "eager"`).

Fused stacks (Megatron-LM and DeepSpeed with their fused kernels, Transformer Engine, torch.compile) read
and write each elementwise op's tensors once: the counts of costs/ops.py. Eager PyTorch runs some of
those ops as a sequence of kernels, each reading and writing the whole tensor, some in fp32. Here are
the bytes per element of the sequences torchtitan issues without torch.compile (which it runs only
when asked) and plancast's runtime issues too; ops that are one kernel in eager PyTorch (LayerNorm,
GELU, the residual add, the embedding) keep the fused counts.

Source, per op (d = bytes of the activation dtype; an fp32 activation needs no casts):
- RMSNorm: `torch.nn.RMSNorm` runs ATen's composite `rms_norm` (aten/src/ATen/native/layer_norm.cpp):
  upcast to fp32, pow, mean, add eps, rsqrt, multiply, cast back, multiply by the weight.
  torch's CPU build runs it so to this day (torch 2.13, profiled: aten::to, pow, mean, add_, rsqrt,
  mul, type_as). CUDA builds gained a fused kernel (`_fused_rms_norm`, pytorch/pytorch#153666,
  May 2025) after torchtitan's published H100 runs (torch nightly of 2024-12-23), so on a current
  CUDA torch this sequence overcounts RMSNorm (docs/calibration.md).
- RoPE: torchtitan's `apply_rotary_emb` (torchtitan/models/llama/model.py) views q and k as complex
  fp32 (`xq.float()`), multiplies by `freqs_cis` and casts back (`type_as`).
- SwiGLU: `F.silu(w1(x)) * w3(x)`: a silu kernel and a multiply kernel.
- Attention layout: `repeat_kv` copies k and v out to every query head under grouped-query
  attention, and `output.transpose(1, 2).contiguous()` copies the attention output back to [b, s, h]
  (torchtitan's Attention.forward; plancast's runtime: `repeat_interleave`, `transpose().reshape()`).

A sequence is priced as one op: its bytes at the HBM rate and one per-op overhead; its kernels queue
back to back on the stream, and no measurement here separates their launch gaps from that overhead.
"""

from __future__ import annotations

FP32 = 4


def _casts(d: int) -> float:
    """Bytes per element of an upcast to fp32 and the cast back (none for fp32)."""
    return 2.0 * (d + FP32) if d < FP32 else 0.0


def rms_norm(d: int) -> float:
    """Bytes per element of the composite RMSNorm: pow (read 4, write 4), mean (read 4), multiply by
    rsqrt (read 4, write 4), multiply by the weight (read d, write d), and the casts; add-eps and rsqrt
    run on one value per row."""
    return _casts(d) + 8.0 + 4.0 + 8.0 + 2.0 * d


def rope(d: int) -> float:
    """Bytes per element of q and k: the complex multiply (read 4, write 4) between the casts."""
    return _casts(d) + 8.0


def swiglu(d: int) -> float:
    """Bytes per element of the FFN width: silu (read d, write d), multiply (read 2d, write d)."""
    return 5.0 * d


def attention_layout(d: int, h: float, kv: float) -> float:
    """Bytes per token of the copies around the attention kernel on one tp rank (`h` query and `kv`
    key/value features there): the output copy (read and write h) and, under grouped-query attention,
    k and v each copied out to h features (read kv, write h)."""
    out = 2.0 * d * h
    return out if kv >= h else out + 2.0 * d * (kv + h)
