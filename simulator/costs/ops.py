"""FLOPs and HBM bytes of every operator of one micro-batch on one rank.

A transformer block's forward is a list of `Op`s (GEMMs, attention core, memory-bound elementwise
ops); backward and recompute are derived from it. FLOP counts follow Narayanan et al. 2021 eq. (3)
(24·b·s·h² + 4·b·s²·h per layer for GPT), generalised to grouped-query attention and SwiGLU.
Bytes of elementwise ops follow the tensors they read and write (Korthikanti et al. 2022, sec. 4.1,
lists the same tensors for activation memory).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from plancast.simulator.costs import eager
from plancast.simulator.costs.attention import CAUSAL_FRACTION, fused_attention_rate
from plancast.simulator.costs.fp8 import Recipe, recipe
from plancast.simulator.scenario import Scenario

Category = Literal["matmul", "attention", "memory"]
DTYPE_BYTES = {"fp32": 4, "fp16": 2, "bf16": 2}


@dataclass(frozen=True, slots=True)
class Op:
    """One operator's forward work on one rank."""

    name: str
    category: Category
    flops: float
    bytes: float  # HBM traffic (read + write)
    weight_grad: bool = False  # backward splits into input-grad and weight-grad GEMMs (zero-bubble W)
    fp8: bool = False  # a GEMM run in FP8 (training.fp8, costs/fp8.py)
    peak: str = "fp8"  # the peak_tflops key an fp8 GEMM runs at (training.fp8_recipe)
    rate: float | None = None  # fraction of peak of its kernel, where known per kernel (costs/attention.py)


@dataclass(frozen=True, slots=True)
class Shape:
    """What the op formulas need, read off a scenario once."""

    b: int  # micro-batch size
    s: int  # sequence length on this rank: seq_len / cp (context parallel splits it)
    h: int
    heads: int
    kv_dim: int  # kv_heads * head_dim
    ffn: int
    vocab: int
    tp: int
    vocab_tp: int  # tp when the embedding/head are vocab-parallel, else 1
    sp: bool
    dtype_bytes: int
    swiglu: bool
    rope: bool
    flash: bool
    kv_s: int = 0  # keys each query attends over: the whole sequence under context parallel; 0: s
    fp8: bool = False  # the block's GEMMs in FP8 (training.fp8)
    fp8_recipe: str = "tensorwise_delayed"  # training.fp8_recipe
    fused_attention: float | None = None  # the causal fused kernel's rate (costs/attention.py); None: not it
    eager: bool = False  # elementwise ops as eager PyTorch runs them (training.elementwise, costs/eager.py)
    rmsnorm: bool = False

    @classmethod
    def of(cls, s: Scenario) -> Shape:
        m, t = s.model, s.training
        return cls(
            b=t.micro_batch_size,
            s=t.seq_len // s.cp,
            kv_s=t.seq_len,
            h=m.hidden_size,
            heads=m.num_attention_heads,
            kv_dim=m.kv_heads * m.head_dim,
            ffn=m.ffn_size,
            vocab=m.vocab_size,
            tp=s.tp,
            vocab_tp=s.vocab_tp,
            sp=s.parallelism.sequence_parallel,
            dtype_bytes=DTYPE_BYTES[t.dtype],
            swiglu=m.activation == "swiglu",
            rope=m.position_embedding == "rope",
            flash=t.flash_attention,
            fp8=t.fp8,
            fp8_recipe=t.fp8_recipe,
            fused_attention=fused_attention_rate(
                s.cluster.compute, s.parallelism.framework, t.flash_attention, t.seq_len
            ),
            eager=t.elementwise == "eager",
            rmsnorm=m.norm == "rmsnorm",
        )


def _gemm(name: str, m: float, k: float, n: float, d: int, narrow: Recipe | None = None) -> Op:
    """C[m,n] = A[m,k] @ B[k,n]: 2mkn FLOPs; reads A and B (narrow: their quantized elements and scales),
    writes C."""
    if narrow is None:
        return Op(name, "matmul", 2.0 * m * k * n, d * (m * k + k * n) + d * m * n, True)
    a_b = (narrow.element_bytes + narrow.scale_bytes) * (m * k + k * n)
    return Op(name, "matmul", 2.0 * m * k * n, a_b + d * m * n, True, True, narrow.peak)


def linear(name: str, m: float, k: float, n: float, x: Shape) -> list[Op]:
    """A block's linear layer: its GEMM, under training.fp8 after the quantization of its input in both
    orientations (training.fp8_recipe's reads and writes, costs/fp8.py)."""
    d = x.dtype_bytes
    if not x.fp8:
        return [_gemm(name, m, k, n, d)]
    narrow = recipe(x.fp8_recipe)
    cast = Op(f"{name}_fp8_cast", "memory", 0.0, narrow.cast_bytes(d) * m * k)
    return [cast, _gemm(name, m, k, n, d, narrow)]


def _elementwise(name: str, elements: float, d: int, extra_bytes: float = 0.0) -> Op:
    """Read and write every element once (plus masks or statistics)."""
    return Op(name, "memory", 0.0, 2.0 * elements * d + extra_bytes)


def _eager_op(name: str, elements: float, bytes_per_element: float) -> Op:
    """An eager kernel sequence as one op: its bytes, one per-op overhead (the sequence's kernels queue
    back to back on the stream; their launch gaps are not counted)."""
    return Op(name, "memory", 0.0, elements * bytes_per_element)


def norm(name: str, elements: float, x: Shape) -> Op:
    """A LayerNorm or RMSNorm over `elements`: one kernel, or RMSNorm's eager sequence."""
    if x.eager and x.rmsnorm:
        return _eager_op(name, elements, eager.rms_norm(x.dtype_bytes))
    return _elementwise(name, elements, x.dtype_bytes)


def rope(name: str, elements: float, x: Shape) -> Op:
    """Rotary embedding of q and k over `elements`: one kernel, or eager's complex multiply in fp32."""
    if x.eager:
        return _eager_op(name, elements, eager.rope(x.dtype_bytes))
    return _elementwise(name, elements, x.dtype_bytes)


def swiglu(name: str, elements: float, x: Shape) -> Op:
    """silu(gate) * up over `elements`: one fused kernel (read two, write one), or eager's two."""
    if x.eager:
        return _eager_op(name, elements, eager.swiglu(x.dtype_bytes))
    return _elementwise(name, elements, x.dtype_bytes, extra_bytes=elements * x.dtype_bytes)


def layer_forward(x: Shape) -> tuple[Op, ...]:
    """One transformer block, forward, one micro-batch, one tensor-parallel rank (Megatron-LM split:
    QKV and FC1 column-parallel, out-projection and FC2 row-parallel)."""
    tokens = x.b * x.s
    local_tokens = tokens / x.tp if x.sp else tokens  # elementwise ops on [s, b, h] are sharded by SP
    d, t = x.dtype_bytes, x.tp
    heads = x.heads / t
    qkv_out = (x.h + 2 * x.kv_dim) / t
    ops = [norm("norm1", local_tokens * x.h, x), *linear("qkv", tokens, x.h, qkv_out, x)]
    if x.rope:
        ops.append(rope("rope", tokens * (x.h + x.kv_dim) / t, x))
    head_dim = x.h / x.heads
    # context parallel: s / cp local queries against all s keys, 1/cp of the work under the causal
    # load balance (costs/cp.py)
    kv_s = x.kv_s or x.s
    score_flops = 2.0 * x.b * heads * x.s * kv_s * head_dim
    if x.flash:  # fused kernel: no s x s tensor in HBM (Dao et al. 2022)
        io = d * tokens * (2 * x.h + 2 * x.kv_dim) / t
        if x.fused_attention is None:
            ops.append(Op("attention", "attention", 2 * score_flops, io))
        else:  # Transformer Engine's causal fused kernel: the causal half, at its own rate
            flops = 2 * score_flops * CAUSAL_FRACTION
            ops.append(Op("attention", "attention", flops, io, rate=x.fused_attention))
    else:
        probs = x.b * heads * x.s * kv_s
        ops += [
            Op("scores", "attention", score_flops, d * (tokens * (x.h + x.kv_dim) / t + probs)),
            _elementwise("softmax", probs, d),
            _elementwise("attn_dropout", probs, d, extra_bytes=probs),  # 1-byte mask
            Op("attn_values", "attention", score_flops, d * (probs + tokens * (x.kv_dim + x.h) / t)),
        ]
    if x.eager:
        ops.append(_eager_op("attn_layout", tokens, eager.attention_layout(d, x.h / t, x.kv_dim / t)))
    ops += [
        *linear("out_proj", tokens, x.h / t, x.h, x),
        _elementwise("dropout_residual1", local_tokens * x.h, d, extra_bytes=local_tokens * x.h * (d + 1)),
        norm("norm2", local_tokens * x.h, x),
    ]
    if x.swiglu:
        ops += [*linear("gate_up", tokens, x.h, 2 * x.ffn / t, x), swiglu("swiglu", tokens * x.ffn / t, x)]
    else:
        ops += [*linear("fc1", tokens, x.h, x.ffn / t, x), _elementwise("gelu", tokens * x.ffn / t, d)]
    ops += [
        *linear("fc2", tokens, x.ffn / t, x.h, x),
        _elementwise("dropout_residual2", local_tokens * x.h, d, extra_bytes=local_tokens * x.h * (d + 1)),
    ]
    return tuple(ops)


def gemm_weight_elements(op: Op, x: Shape) -> float:
    """Weight elements of a layer GEMM on one tp rank: its FLOPs are 2 * tokens * weight elements."""
    return op.flops / (2.0 * x.b * x.s)


def attention_core(ops: tuple[Op, ...]) -> tuple[Op, ...]:
    """Ops selective recompute re-runs (Korthikanti et al. 2022 sec. 4.2: QK^T, softmax, dropout, attn-V)."""
    return tuple(
        op for op in ops if op.name in {"scores", "softmax", "attn_dropout", "attn_values", "attention"}
    )


def embedding_forward(x: Shape) -> tuple[Op, ...]:
    """Vocab-parallel embedding lookup (+ positions, dropout) on the first stage."""
    tokens = x.b * x.s
    return (_elementwise("embedding", tokens * x.h, x.dtype_bytes),)


def head_forward(x: Shape) -> tuple[Op, ...]:
    """Final norm, vocab-parallel output projection and cross-entropy (fp32 logits) on the last stage."""
    tokens = x.b * x.s
    local_tokens = tokens / x.tp if x.sp else tokens
    vocab = x.vocab / x.vocab_tp
    return (
        norm("final_norm", local_tokens * x.h, x),
        _gemm("logits", tokens, x.h, vocab, x.dtype_bytes),
        _elementwise("cross_entropy", tokens * vocab, 4, extra_bytes=tokens * vocab * 4),
    )
