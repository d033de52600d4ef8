"""Gated DeltaNet layers (Qwen3-Next's linear attention; simulator/model_linear.py has the keys), as
Megatron-Core runs them (megatron/core/ssm/gated_delta_net.py at e867835, `GatedDeltaNet.forward`), one
block, one micro-batch, one tensor-parallel rank:

- `in_proj`, column-parallel: the hidden state to queries and keys (qk = key heads x key width each),
  values and the output gate (v = value heads x value width each), and beta and alpha (one per value
  head); `out_proj`, row-parallel, v -> hidden;
- the depthwise causal convolution with its SiLU (causal_conv1d_fn) over 2 qk + v channels, and the
  layout copies around it (`transpose(...).contiguous()` of its input and of the output, `contiguous()`
  of q, k, v, the gate, beta and alpha after the splits, `repeat_interleave` of q and k up to the value
  heads);
- the L2 norms of q and k (FLA's `l2norm`), the decay g = -exp(A_log) softplus(alpha + dt_bias) in fp32
  and sigmoid(beta): a handful of eager kernels on one value per head;
- the chunked gated delta rule (FLA's `chunk_gated_delta_rule`, chunks of 64 tokens): its work per
  token is Megatron-Bridge's count, 4 x value heads x value width^2 multiply-adds
  (src/megatron/bridge/training/utils/flop_utils.py `gdn_layer_flops`, at 067f987), and its traffic the
  tensors the chunk algorithm reads and writes (q, k at the value heads, v, g, beta in; the WY form's
  w, u and the new values written and read back, one key x value state per head and chunk, the 64-wide
  A, the output); no published rate separates the kernel from attention's, so it runs at the cluster's
  attention_efficiency or its traffic, whichever is slower, with backward twice its forward as every
  core's (Megatron-Bridge counts 3x forward for both passes);
- the gated RMSNorm over each value head (`out_norm`, then x SiLU(gate) in fp32: two kernels).

Context parallel is refused (model_linear.py): Megatron-Core's GatedDeltaNet has no context-parallel form.
A hybrid model's blocks are priced at the mean over its layer types (`blend`): Gated DeltaNet's ops at
the share of linear layers, the full attention's at the rest, as sliding windows are (costs/attention.py
window_work).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from plancast.simulator.costs.op import Op, in_share
from plancast.simulator.model_linear import linear_layer_share

if TYPE_CHECKING:
    from plancast.simulator.costs.ops import Shape
    from plancast.simulator.scenario import Model, Scenario

CHUNK = 64
"""Tokens per chunk of FLA's chunked gated delta rule (`chunk_local_cumsum(g, 64)`, BT = 64)."""

GATE_KERNELS = 7
"""Eager kernels of the decay and beta (gated_delta_net.py: alpha.float(), + dt_bias, softplus, A_log.exp(),
the negation, the product, beta.sigmoid())."""


@dataclass(frozen=True, slots=True)
class Gdn:
    """A hybrid model's Gated DeltaNet widths and the share of its layers that are Gated DeltaNet."""

    key_heads: int
    value_heads: int
    key_dim: int
    value_dim: int
    conv: int
    share: float

    @classmethod
    def of(cls, s: Scenario) -> Gdn | None:
        m = s.model
        if m.linear_num_key_heads is None:
            return None
        return cls.of_model(m, linear_layer_share(m.layer_types, m.num_hidden_layers))

    @classmethod
    def of_model(cls, m: Model, share: float) -> Gdn:
        """`m`'s widths (validation has checked all five are set) with `share` of its layers linear."""
        return cls(
            m.linear_num_key_heads or 0,
            m.linear_num_value_heads or 0,
            m.linear_key_head_dim or 0,
            m.linear_value_head_dim or 0,
            m.linear_conv_kernel_dim or 0,
            share,
        )

    @property
    def qk(self) -> int:
        """Width of all query (or key) heads."""
        return self.key_heads * self.key_dim

    @property
    def v(self) -> int:
        """Width of all value heads (and of the output gate)."""
        return self.value_heads * self.value_dim

    @property
    def in_proj(self) -> int:
        """in_proj's output features: q, k, v, the gate, beta and alpha (gated_delta_net.py in_proj_dim)."""
        return 2 * self.qk + 2 * self.v + 2 * self.value_heads

    @property
    def repeated_qk(self) -> int:
        """Width of q (or k) after repeat_interleave up to the value heads."""
        return self.value_heads * self.key_dim


Projection = tuple[str, float, float, float]
"""(name, m, k, n) of a linear layer's GEMM (costs/ops.py `linear`)."""


def gdn_projections(x: Shape, g: Gdn) -> tuple[Projection, Projection]:
    """(name, m, k, n) of in_proj and out_proj on one tp rank (costs/ops.py `linear` builds them)."""
    tokens, t = x.b * x.s, x.tp
    return ("gdn_in_proj", tokens, x.h, g.in_proj / t), ("gdn_out_proj", tokens, g.v / t, x.h)


def gdn_mixer(x: Shape, g: Gdn) -> list[Op]:
    """The ops between in_proj and out_proj (module docstring), one tp rank."""
    rows, d = x.b * x.s / x.tp, x.dtype_bytes  # a token's heads are split over tp
    conv = 2 * g.qk + g.v
    heads = g.value_heads
    layout = d * rows * (2 * conv + 2 * conv + 2 * (g.v + 2 * heads) + 2 * g.v)  # copies: read and write
    layout += d * rows * (2 * g.qk + 2 * g.repeated_qk)  # repeat_interleave of q and k
    state = heads * g.key_dim * g.value_dim / CHUNK  # one key x value state per head and chunk, a token
    core_io = d * rows * (2 * g.repeated_qk + g.v + heads + heads * CHUNK + g.v)  # q k v beta in, A o out
    core_io += rows * 4 * heads  # g's fp32 cumulative sum
    core_io += 2 * d * rows * (heads * g.key_dim + 2 * g.v + state)  # w, u, new values and states
    return [
        Op("gdn_layout", "memory", 0.0, layout, calls=6),
        Op("gdn_conv", "attention", 2.0 * rows * g.conv * conv, 2 * d * rows * conv),
        Op("gdn_l2norm", "memory", 0.0, 2 * d * rows * 2 * g.qk, calls=2),
        Op("gdn_gates", "memory", 0.0, rows * heads * (d + 4 + 4 + 4 + d + d), calls=GATE_KERNELS),
        Op("gdn_core", "attention", 8.0 * rows * heads * g.value_dim**2, core_io),
        Op("gdn_norm", "memory", 0.0, rows * g.v * (3 * d + 4), calls=2),
    ]


def output_gate(x: Shape) -> Op:
    """The gated full attention's sigmoid(gate) x output (Qwen3NextAttention: `attn_output * sigmoid(gate)`,
    two kernels): reads the output and the gate, writes the product."""
    elements = x.b * x.s * x.o_dim / x.tp
    return Op("attn_output_gate", "memory", 0.0, 3 * x.dtype_bytes * elements, calls=2)


def blend(full: list[Op], linear: list[Op], share: float) -> list[Op]:
    """A hybrid block's attention: the full-attention layers' ops at 1 - `share`, the Gated DeltaNet
    layers' at `share` (work, traffic and calls; a GEMM's per-call term e(F) then sees the blended
    size, within half_gflop / peak, ~0.4 us, of the mean of the two)."""
    return [in_share(op, 1.0 - share) for op in full] + [in_share(op, share) for op in linear]


def gdn_saved_bytes(x: Shape, g: Gdn, gemm_input_bytes: float) -> float:
    """Bytes a Gated DeltaNet layer keeps for backward beyond its in_proj input (the block's norm output,
    costs/memory.py counts it): the convolution's input (causal_conv1d_fn saves it), the L2 norms'
    outputs, the rule's q and k at the value heads, v, g (fp32) and beta, its 64-wide A (FLA
    `save_for_backward(q, q_rstd, k, k_rstd, v, g, beta, A, ...)`), the gated norm's inputs (the rule's
    output and the gate) and out_proj's input (`gemm_input_bytes` an element)."""
    rows, d = x.b * x.s / x.tp, x.dtype_bytes
    heads = g.value_heads
    saved = (2 * g.qk + g.v) + 2 * g.qk + 2 * g.repeated_qk + g.v + heads + heads * CHUNK + 2 * g.v
    return rows * (d * saved + 4 * heads + 4 * heads + gemm_input_bytes * g.v)  # fp32 g and softplus input


def gdn_params(m: Model) -> tuple[int, int]:
    """(tp-sharded, replicated) parameters of a Gated DeltaNet layer's mixer: in_proj, the convolution's
    weights, dt_bias and A_log (one per value head), out_proj; the gated norm's weight (one value head
    wide) replicated."""
    g, h = Gdn.of_model(m, 1.0), m.hidden_size
    sharded = h * g.in_proj + (2 * g.qk + g.v) * g.conv + 2 * g.value_heads + g.v * h
    return sharded, g.value_dim


def gdn_tensors(m: Model, tp: int) -> list[int]:
    """A Gated DeltaNet mixer's tensors on one tp rank (in_proj, conv1d, dt_bias, A_log, out_norm,
    out_proj), for the gradient buckets (costs/params.py chunk_tensor_bytes)."""
    sharded, norm = gdn_params(m)
    return [sharded // tp, norm]
