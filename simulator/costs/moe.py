"""Mixture-of-experts costs of one MoE layer, one micro-batch, one rank: router, routed and shared
experts, and the token dispatch/combine all-to-alls over the expert-parallel group.

Routing (Shazeer et al. 2017; GShard, Lepikhin et al. 2020; Switch, Fedus et al. 2021): each of the
rank's T tokens visits top-k of E experts. Under expert parallelism ep (Megatron-Core, torchtitan) a
rank holds E / ep experts and receives their tokens from its ep group, so one local expert sees
ep * T * k / E tokens on average, times a load factor: the capacity factor when routing has a capacity
(every slot padded and computed), else ``DROPLESS_IMBALANCE``. Experts are split over tensor
parallel like the dense MLP (Megatron-Core's default expert_tensor_parallel_size = tp).
"""

from __future__ import annotations

import math

from plancast.simulator.costs.ops import (
    DTYPE_BYTES,
    Op,
    Shape,
    _elementwise,
    _gemm,
    layer_forward,
    linear,
    swiglu,
)
from plancast.simulator.scenario import Model, Scenario

DROPLESS_IMBALANCE = 1.25
"""Busiest-expert load over the mean load without a capacity: Switch Transformer found capacity factor
1.25 drops under 1% of tokens (Fedus et al. 2021, sec. 2.2 and Table 1), i.e. expert loads stay within
~1.25x the mean; the GEMMs of a dropless layer wait for the busiest expert."""

DENSE_MLP_OPS = frozenset({"gate_up", "swiglu", "fc1", "gelu", "fc2"})
"""The dense MLP's ops in ops.layer_forward, which an MoE layer replaces."""


def load_factor(m: Model) -> float:
    """Token slots computed per expert over the mean load: the capacity factor, else the imbalance."""
    return m.moe_capacity_factor if m.moe_capacity_factor is not None else DROPLESS_IMBALANCE


def dispatch_tokens(m: Model, tokens: float) -> float:
    """Token slots one rank sends in one dispatch (and receives back in one combine): T * k dropless,
    E * capacity with capacity = ceil(factor * T * k / E) (GShard sec. 3.2, as the runtime pads)."""
    if m.moe_capacity_factor is None:
        return tokens * m.num_experts_per_tok
    return m.num_experts * math.ceil(m.moe_capacity_factor * tokens * m.num_experts_per_tok / m.num_experts)


def _mlp(name: str, rows: float, h: int, ffn_local: float, x: Shape) -> list[Op]:
    """One expert's MLP on `rows` tokens (SwiGLU: gate+up then down, GELU: fc1 then fc2)."""
    d = x.dtype_bytes
    if x.swiglu:
        act = swiglu(f"{name}_swiglu", rows * ffn_local, x)
        return [
            *linear(f"{name}_gate_up", rows, h, 2 * ffn_local, x),
            act,
            *linear(f"{name}_down", rows, ffn_local, h, x),
        ]
    act = _elementwise(f"{name}_gelu", rows * ffn_local, d)
    return [*linear(f"{name}_fc1", rows, h, ffn_local, x), act, *linear(f"{name}_fc2", rows, ffn_local, h, x)]


def moe_block_forward(x: Shape, m: Model, ep: int, factor: float | None = None) -> tuple[Op, ...]:
    """Router, permutation, the rank's E / ep experts, shared experts, unpermutation (forward).
    `factor` overrides the load factor (1.0: the mean load, for model FLOPs)."""
    tokens = x.b * x.s
    d, h, experts = x.dtype_bytes, x.h, m.num_experts
    ffn_local = m.expert_ffn_size / x.tp
    slots = dispatch_tokens(m, tokens)
    # router: a [h, E] GEMM on every token (replicated over tp), softmax + top-k over E scores
    ops = [_gemm("router", tokens, h, experts, d), _elementwise("router_topk", tokens * experts, 4)]
    ops.append(_elementwise("permute", slots * h, d))  # gather tokens into per-expert order
    rows = ep * tokens * m.num_experts_per_tok / experts * (factor or load_factor(m))
    if m.moe_capacity_factor is not None and factor is None:
        rows = ep * slots / experts  # every padded slot is computed
    for _ in range(experts // ep):
        ops += _mlp("expert", rows, h, ffn_local, x)
    for _ in range(m.n_shared_experts):  # DeepSeek-MoE shared experts see every token (Dai et al. 2024)
        ops += _mlp("shared", tokens, h, ffn_local, x)
    ops.append(
        _elementwise("unpermute", slots * h, d, extra_bytes=slots * h * d)
    )  # weighted sum of k outputs
    return tuple(ops)


def moe_layer_forward(x: Shape, m: Model, ep: int, factor: float | None = None) -> tuple[Op, ...]:
    """A transformer block whose MLP is an MoE block: attention as ops.layer_forward, then the MoE."""
    dense = layer_forward(x)
    head = [op for op in dense if op.name not in DENSE_MLP_OPS and op.name != "dropout_residual2"]
    tail = [op for op in dense if op.name == "dropout_residual2"]
    return (*head, *moe_block_forward(x, m, ep, factor), *tail)


def all_to_all_bytes(s: Scenario) -> int:
    """Payload one rank sends in one dispatch or combine all-to-all: its token slots x hidden size in the
    compute dtype (each tp rank exchanges its tokens over its own ep group)."""
    tokens = s.training.micro_batch_size * s.training.seq_len // s.cp
    return int(dispatch_tokens(s.model, tokens) * s.model.hidden_size * DTYPE_BYTES[s.training.dtype])


def moe_activation_bytes(x: Shape, m: Model) -> float:
    """Bytes an MoE block keeps for backward per micro-batch, replacing the dense MLP's
    (3 or 2) * d * s * b * ffn / t of Korthikanti et al. 2022 sec. 4.1: router logits (fp32), the
    dispatched token slots (expert inputs), the experts' intermediate activations, the shared experts'."""
    tokens, d = x.b * x.s, x.dtype_bytes
    slots = dispatch_tokens(m, tokens) * (1.0 if m.moe_capacity_factor is not None else load_factor(m))
    per_slot = (3 if x.swiglu else 2) * m.expert_ffn_size / x.tp
    router = 4 * tokens * m.num_experts
    routed = d * slots * (x.h + per_slot)
    shared = d * tokens * per_slot * m.n_shared_experts
    return router + routed + shared
