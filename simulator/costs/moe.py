"""Mixture-of-experts costs of one MoE layer, one micro-batch, one rank: router, routed and shared
experts, and the token dispatch/combine all-to-alls over the expert-parallel group.

Routing (Shazeer et al. 2017; GShard, Lepikhin et al. 2020; Switch, Fedus et al. 2021): each of the
rank's T tokens visits top-k of E experts. Under expert parallelism ep (Megatron-Core, torchtitan) a
rank holds E / ep experts and receives their tokens from its ep group, so one local expert sees
ep * T * k / E tokens on average, times a load factor: the capacity factor when routing has a capacity
(every slot padded and computed), else training.moe_routing_imbalance. Experts are split over the
expert-tensor-parallel degree etp (Megatron-Core's default: etp = tp; with MoE parallel folding each
rank dispatches its 1/(tp/etp) share of the tensor-parallel group's tokens, simulator/mesh.py).

The local experts run as one grouped GEMM per projection (Megatron-Core GroupedMLP over Transformer
Engine's GroupedLinear, DeepGEMM's grouped GEMMs, torch._grouped_mm): one kernel whose tiles cover
every expert's rows, so it runs at the rate of a GEMM of their total size, not of E/ep small GEMMs,
with each expert's rows padded to the kernel's M tile (DeepGEMM README, contiguous layout: every
expert segment aligned to the 128-row M block, get_mk_alignment_for_contiguous_layout()).
"""

from __future__ import annotations

import math

from plancast.simulator.costs.expert_bias import expert_bias_ops
from plancast.simulator.costs.fp8 import gemm_input_bytes, recipe
from plancast.simulator.costs.moe_gemm import multi_stream_relative
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
from plancast.simulator.costs.recompute import moe_kept_bytes
from plancast.simulator.scenario import Model, Scenario
from plancast.simulator.scenario_moe import DROPLESS_IMBALANCE, Dispatcher

GROUPED_GEMM_M_TILE = 128
"""Rows each expert's segment is padded to in a grouped GEMM (DeepGEMM README, contiguous layout)."""

DENSE_MLP_OPS = frozenset({"gate_up", "swiglu", "fc1", "gelu", "relu2", "fc2"})
"""The dense MLP's ops in ops.layer_forward, which an MoE layer replaces (with their FP8 input casts,
ops.linear's `<name>_fp8_cast`)."""


def _is_dense_mlp(op: Op) -> bool:
    return op.name.removesuffix("_fp8_cast") in DENSE_MLP_OPS


def load_factor(m: Model, imbalance: float = DROPLESS_IMBALANCE) -> float:
    """Token slots computed per expert over the mean load: the capacity factor, else the imbalance."""
    return m.moe_capacity_factor if m.moe_capacity_factor is not None else imbalance


def rank_tokens(s: Scenario) -> int:
    """Tokens one rank routes per micro-batch: b * s / cp, split over the tp / etp expert-tensor-parallel
    subgroups of its tensor-parallel group when the expert grid is folded (Megatron-Core runs MoE with
    sequence parallel, each rank dispatching its own tokens)."""
    tokens = s.training.micro_batch_size * s.training.seq_len // s.cp
    return tokens // (s.tp // s.etp) if s.parallelism.expert_tensor_parallel_degree is not None else tokens


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


def _grouped(name: str, rows: float, groups: int, k: float, n: float, x: Shape, padded: float) -> list[Op]:
    """One grouped GEMM: `groups` experts of `rows` tokens each, [rows, k] @ [k, n] per expert, in one
    kernel; FLOPs of the `padded` rows per expert, bytes of the real rows and every expert's weight, at
    x.grouped_gemm_rate of a large GEMM's rate (costs/moe_gemm.py: whose kernel runs it), times the
    multi-stream path's own rate at each expert's output (`rows` x n) where one cuBLAS GEMM runs per
    expert. Under
    training.fp8 the inputs are quantized first and the GEMM reads them narrow, as ops.linear prices a
    dense layer under training.fp8_recipe (costs/fp8.py), in one call or one per expert
    (x.per_expert_quantize, training.moe_fp8_quantize)."""
    d, total = x.dtype_bytes, rows * groups
    flops = 2.0 * padded * groups * k * n
    rate = x.grouped_gemm_rate * (multi_stream_relative(rows * n) if x.multi_stream_experts else 1.0)
    if not x.fp8:  # at the measured grouped-kernel rate (costs/moe_gemm.py)
        io_bytes = d * (total * k + groups * k * n) + d * total * n
        return [Op(name, "matmul", flops, io_bytes, True, relative_rate=rate)]
    narrow = recipe(x.fp8_recipe)
    operands = (narrow.element_bytes + narrow.scale_bytes) * (total * k + groups * k * n)
    io_bytes = operands + d * total * n
    gemm = Op(name, "matmul", flops, io_bytes, True, True, narrow.peak, relative_rate=rate)
    calls = groups if x.per_expert_quantize else 1  # one quantize call per expert (costs/moe_gemm.py)
    return [Op(f"{name}_fp8_cast", "memory", 0.0, narrow.cast_bytes(d) * total * k, calls=calls), gemm]


def _experts(rows: float, groups: int, h: int, ffn_local: float, x: Shape, pad: bool) -> list[Op]:
    """The rank's routed experts as grouped GEMMs (module docstring); `pad`: rows rounded up to the tile."""
    padded = math.ceil(rows / GROUPED_GEMM_M_TILE) * GROUPED_GEMM_M_TILE if pad else rows
    width = (2 if x.swiglu else 1) * ffn_local
    act = (
        swiglu("expert_swiglu", rows * groups * ffn_local, x)
        if x.swiglu
        else _elementwise("expert_gelu", rows * groups * ffn_local, x.dtype_bytes)
    )
    first = "expert_gate_up" if x.swiglu else "expert_fc1"
    second = "expert_down" if x.swiglu else "expert_fc2"
    bias = expert_bias_ops(x.expert_bias, rows * groups, groups, h, width, x.dtype_bytes, x.probs_bytes)
    return [
        *_grouped(first, rows, groups, h, width, x, padded),
        act,
        *_grouped(second, rows, groups, ffn_local, h, x, padded),
        *bias,
    ]


def sorts_by_expert(dispatcher: str) -> bool:
    """Whether the dispatcher copies received tokens into local-expert order and back (_expert_order)."""
    return dispatcher == "alltoall"


def _expert_order(dispatcher: Dispatcher, ep: int, groups: int, elements: float, d: int) -> tuple[Op, ...]:
    """The all-to-all dispatcher's second permutation and its inverse, around the experts: a rank receives
    its tokens grouped by source rank, so with more than one local expert it copies them into expert
    order after the dispatch and back before the combine (Megatron-Core token_dispatcher.py,
    MoEAlltoAllTokenDispatcher.dispatch_postprocess / combine_preprocess, "Permutation 2"
    sort_chunks_by_idxs; torchtitan expert_parallel.py, ExpertParallel._token_dispatch / _token_combine
    with _permute / _unpermute). DeepEP and HybridEP hand over unpermuted tokens that one local
    permutation orders (Megatron-Core _DeepepManager.get_permuted_hidden_states_by_experts, priced as
    `permute`); the allgather dispatcher permutes once after its all-gather. `elements`: the received
    slots x hidden size."""
    if not sorts_by_expert(dispatcher) or ep == 1 or groups == 1:
        return ()
    return _elementwise("expert_sort_chunks", elements, d), _elementwise("expert_unsort_chunks", elements, d)


def moe_block_forward(
    x: Shape,
    m: Model,
    ep: int,
    factor: float | None = None,
    *,
    etp: int | None = None,
    imbalance: float = DROPLESS_IMBALANCE,
    dispatcher: Dispatcher = "alltoall",
) -> tuple[Op, ...]:
    """Router, permutation, the rank's E / ep experts, shared experts, unpermutation (forward).
    `factor` overrides the load factor (1.0: the mean load, for model FLOPs, without tile padding);
    `etp` set: the folded expert grid, experts split over etp and 1/(tp/etp) of the tokens each;
    `dispatcher`: parallelism.moe_token_dispatcher (the all-to-all one sorts by local expert)."""
    tokens = x.b * x.s
    d, h, experts = x.dtype_bytes, x.h, m.num_experts
    ffn_local = m.expert_ffn_size / (etp or x.tp)
    routed = tokens // (x.tp // etp) if etp else tokens
    slots = dispatch_tokens(m, routed)
    # router: a [h, E] GEMM on every token (replicated over tp), softmax + top-k over E scores
    ops = [_gemm("router", tokens, h, experts, d), _elementwise("router_topk", tokens * experts, 4)]
    ops.append(_elementwise("permute", slots * h, d))  # gather tokens into per-expert order
    rows = ep * routed * m.num_experts_per_tok / experts * (factor or load_factor(m, imbalance))
    if m.moe_capacity_factor is not None and factor is None:
        rows = ep * slots / experts  # every padded slot is computed
    groups = experts // ep
    order = _expert_order(dispatcher, ep, groups, rows * groups * h, d)
    ops += [*order[:1], *_experts(rows, groups, h, ffn_local, x, pad=factor is None), *order[1:]]
    shared_ffn = m.expert_ffn_size / x.tp  # shared experts are split like the dense MLP
    for _ in range(m.n_shared_experts):  # DeepSeek-MoE shared experts see every token (Dai et al. 2024)
        ops += _mlp("shared", tokens, h, shared_ffn, x)
    ops.append(
        _elementwise("unpermute", slots * h, d, extra_bytes=slots * h * d)
    )  # weighted sum of k outputs
    return tuple(ops)


def moe_layer_forward(
    x: Shape,
    m: Model,
    ep: int,
    factor: float | None = None,
    *,
    etp: int | None = None,
    imbalance: float = DROPLESS_IMBALANCE,
    dispatcher: Dispatcher = "alltoall",
) -> tuple[Op, ...]:
    """A transformer block whose MLP is an MoE block: attention as ops.layer_forward, then the MoE."""
    dense = layer_forward(x)
    head = [op for op in dense if not _is_dense_mlp(op) and op.name != "dropout_residual2"]
    tail = [op for op in dense if op.name == "dropout_residual2"]
    moe = moe_block_forward(x, m, ep, factor, etp=etp, imbalance=imbalance, dispatcher=dispatcher)
    return (*head, *moe, *tail)


def scenario_moe_layer(x: Shape, s: Scenario, etp: int | None) -> tuple[Op, ...]:
    """moe_layer_forward with the scenario's routing imbalance and dispatcher (`etp`: folded, or None)."""
    load, dispatcher = s.training.moe_routing_imbalance, s.parallelism.moe_token_dispatcher
    return moe_layer_forward(x, s.model, s.ep, etp=etp, imbalance=load, dispatcher=dispatcher)


def all_to_all_bytes(s: Scenario) -> int:
    """Payload one rank sends in one dispatch or combine all-to-all: its token slots x hidden size in the
    compute dtype (each tp rank exchanges its tokens over its own ep group)."""
    return int(dispatch_tokens(s.model, rank_tokens(s)) * s.model.hidden_size * DTYPE_BYTES[s.training.dtype])


def moe_activation_bytes(
    x: Shape, m: Model, imbalance: float = DROPLESS_IMBALANCE, etp: int | None = None
) -> float:
    """Bytes an MoE block keeps for backward per micro-batch, replacing the dense MLP's
    (3 or 2) * d * s * b * ffn / t of Korthikanti et al. 2022 sec. 4.1: router logits (fp32), the
    dispatched token slots (expert inputs), the experts' intermediate activations, the shared experts'.
    `etp` set (folded expert grid): the rank routes 1/(tp/etp) of the tokens, experts split over etp.
    Less what x.recompute_modules discard (costs/recompute.py moe_kept_bytes)."""
    tokens, d = x.b * x.s, x.dtype_bytes
    g = gemm_input_bytes(x.fp8, x.fp8_recipe, d)  # FC1's and FC2's inputs: narrow under FP8 (costs/fp8.py)
    routed_tokens = tokens // (x.tp // etp) if etp else tokens
    slots = dispatch_tokens(m, routed_tokens) * (1.0 if m.moe_capacity_factor is not None else imbalance)
    act_in = (2 if x.swiglu else 1) * x.act_input_bytes  # FC1's output (Shape.act_input_bytes)
    per_slot = (act_in + g) * m.expert_ffn_size / (etp or x.tp)
    shared_per_token = (act_in + g) * m.expert_ffn_size / x.tp
    router = 4 * tokens * m.num_experts
    routed = slots * (g * x.h + per_slot)
    shared = tokens * shared_per_token * m.n_shared_experts
    activation_out = slots * g * m.expert_ffn_size / (etp or x.tp)  # FC2's input, which "moe_act" rebuilds
    return moe_kept_bytes(x.recompute_modules, router + routed, activation_out, shared)
