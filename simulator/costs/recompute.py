"""What recompute re-runs in backward: selective recompute per policy (`training.selective_recompute`),
and which blocks partial recompute checkpoints (`training.recompute_num_layers`, `recomputed_layers`).

- attention: the attention core, QK^T, softmax, dropout and attention-over-values (Korthikanti et al.
  2022 sec. 4.2; Megatron-LM's `--recompute-granularity selective`, plancast's runtime).
- attention with training.recompute_modules: the submodules Megatron-Core recomputes
  (megatron/core/transformer/transformer_config.py `recompute_modules`; default ["core_attn"], the
  attention core above). "core_attn", "mlp", "moe" and "shared_experts" checkpoint their module (its
  input kept, its insides rebuilt); "layernorm", "moe_act" and "mla_up_proj" discard only their output
  after its consumer ran and rebuild it in backward (tensor_parallel.CheckpointWithoutOutput). Either
  way each module's forward runs again in backward (`selective_recompute`); what it discards is
  `discarded_block_bytes` and `moe_kept_bytes`.
- op: torchtitan's per-op selective activation checkpointing (`selective_ac_option = "op"`,
  torchtitan/distributed/activation_checkpoint.py `_apply_op_sac`): inside each checkpointed block the
  outputs of matmuls, fused attention (SDPA) and reduce-scatters are saved, "except every second mm"
  (a counter over the block's matmuls in forward order, even counts recomputed); every other op is
  recomputed. A fused GEMM of plancast's op list stands for the separate matmuls torchtitan's models
  issue: QKV as wq, wk, wv (sizes h, kv, kv) and SwiGLU's gate_up as w1, w3. What the policy keeps
  from forward to backward is the block's input and those saved outputs (`op_sac_saved_elements`): for
  Llama 3 8B about a third of what the attention policy keeps, which is how torchtitan fits micro-batch
  2 at seq 8192 on 8 GPUs (82.4 GiB reserved, docs/performance.md Table 1).
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from plancast.simulator.costs.dsa import INDEXER_PROJECTIONS
from plancast.simulator.costs.fp8 import gemm_input_bytes
from plancast.simulator.costs.mla import MLA_PROJECTIONS, mla_projection_features
from plancast.simulator.costs.ops import ATTENTION_CORE_OPS, Op, Shape
from plancast.simulator.scenario import Scenario

if TYPE_CHECKING:
    from plancast.simulator.costs.moe_cp_comm import InnerCollective

FUSED_ATTENTION = "attention"  # the SDPA op of ops.layer_forward under flash attention


def _matmul_parts(op: Op, x: Shape) -> tuple[float, ...]:
    """The shares of `op`'s work taken by each separate matmul it stands for, in issue order."""
    if op.name == "qkv":
        total = x.q_dim + 2 * x.kv_dim
        return (x.q_dim / total, x.kv_dim / total, x.kv_dim / total)
    if op.name == "gate_up":
        return (0.5, 0.5)
    return (1.0,)


def _matmul_outputs(op: Op, x: Shape) -> tuple[float, ...]:
    """Output features per token of each separate matmul `op` stands for, on one tp rank (a row-parallel
    GEMM's output is the full h before its reduction)."""
    t = x.tp
    if op.name == "qkv":
        return (x.q_dim / t, x.kv_dim / t, x.kv_dim / t)
    if op.name == "gate_up":
        return (x.ffn / t, x.ffn / t)
    if op.name == "fc1":
        return (x.ffn / t,)
    if x.mla is not None and op.name in MLA_PROJECTIONS:
        return (mla_projection_features(op.name, x, x.mla),)
    if x.dsa is not None and op.name in INDEXER_PROJECTIONS:  # costs/dsa.py, duplicated over tp
        d = x.dsa
        return (float({"index_q": d.n_heads * d.head_dim, "index_k": d.head_dim}.get(op.name, d.n_heads)),)
    return (float(x.h),)  # out_proj, fc2


def op_sac_saved_elements(ops: tuple[Op, ...], x: Shape) -> float:
    """Elements (in training.dtype) one block keeps for backward under the per-op policy, per token: the
    saved matmul outputs (odd counts, as op_sac_recompute) and the fused attention's output. The block's
    input and SDPA's fp32 logsumexp are the caller's (costs/memory.py)."""
    saved, count = 0.0, 0
    for op in ops:
        if op.name == FUSED_ATTENTION:
            saved += x.o_dim / x.tp
        elif op.category == "matmul":
            for features in _matmul_outputs(op, x):
                count += 1
                saved += features if count % 2 == 1 else 0.0
    return saved


def op_sac_recompute(ops: tuple[Op, ...], x: Shape) -> tuple[Op, ...]:
    """The part of one block's forward that torchtitan's per-op policy re-runs in backward (see module)."""
    out: list[Op] = []
    count = 0
    for op in ops:
        if op.category == "memory" or (op.category == "attention" and op.name != FUSED_ATTENTION):
            out.append(op)
        elif op.category == "matmul":
            share = 0.0
            for part in _matmul_parts(op, x):
                count += 1
                share += part if count % 2 == 0 else 0.0
            if share:
                out.append(replace(op, flops=op.flops * share, bytes=op.bytes * share))
    return tuple(out)


def selective_recompute(ops: tuple[Op, ...], x: Shape, policy: str) -> tuple[Op, ...]:
    """The ops of one block that recompute = "selective" re-runs under `policy`: the "attention" policy
    re-runs the forward of x.recompute_modules (training.recompute_modules; an op's module: `_module_of`)."""
    if policy == "op":
        return op_sac_recompute(ops, x)
    moe = _is_moe_block(ops)
    return tuple(op for op in ops if _module_of(op.name, x, moe) & x.recompute_modules)


DENSE_MLP = frozenset({"norm2", "gate_up", "swiglu", "fc1", "gelu", "relu2", "fc2"})
"""A dense block's MLP as Megatron-Core's "mlp" recompute re-runs it: Transformer Engine fuses the pre-MLP
norm into linear_fc1 (TELayerNormColumnParallelLinear, megatron/core/models/gpt/gpt_layer_specs.py)."""
MOE_LAYER = frozenset({"norm2", "router", "router_topk", "permute", "unpermute"})
"""An MoE layer's ops besides its experts (costs/moe.py moe_block_forward); its pre-MLP norm is a module of
its own (TENorm), re-run by "layernorm" and kept as the MoE checkpoint's input."""


def _is_moe_block(ops: tuple[Op, ...]) -> bool:
    return any(op.name == "router" for op in ops)


def _module_of(name: str, x: Shape, moe: bool) -> frozenset[str]:
    """The recompute modules whose forward re-runs op `name` (its FP8 input cast goes with it)."""
    name = name.removesuffix("_fp8_cast")
    if name in ATTENTION_CORE_OPS:
        return frozenset({"core_attn"})
    if (name == "norm1" and x.mla is not None) or (name == "norm2" and moe):
        return frozenset({"layernorm"})  # the norms Transformer Engine does not fuse (DENSE_MLP, MOE_LAYER)
    if x.mla is not None and name in {"q_up", "kv_up", "rope"}:
        return frozenset({"mla_up_proj"})
    if not moe and name in DENSE_MLP:
        return frozenset({"mlp"})
    if name in {"expert_swiglu", "expert_gelu"}:
        return frozenset({"moe", "moe_act"})
    if name.startswith("shared_"):
        return frozenset({"moe", "shared_experts"})
    if moe and (name in MOE_LAYER or name.startswith("expert_")):
        return frozenset({"moe"})
    return frozenset()


def discarded_block_bytes(x: Shape, moe: bool) -> float:
    """Bytes of one block's saved activations that x.recompute_modules discard beyond the MLP's (an MoE
    block's are moe_kept_bytes'): "layernorm" the outputs of the norms that are modules of their own (the
    input of MLA's down-projections, of an MoE block's router and shared experts), "mla_up_proj" the
    per-head Q, K and V it rebuilds from the latents (costs/mla.py; under DeepSeek Sparse Attention the
    per-head Q and its absorbed form, costs/dsa.py), "mlp" a dense block's MLP input (its
    checkpoint keeps the residual stream, already counted). Per micro-batch; x.s tokens."""
    modules, sbh = x.recompute_modules, x.s * x.b * x.h / (x.tp if x.sp else 1)
    g = gemm_input_bytes(x.fp8, x.fp8_recipe, x.dtype_bytes)
    out = 0.0
    if "layernorm" in modules:
        out += g * sbh * ((x.mla is not None) + moe)
    if "mla_up_proj" in modules and x.mla is not None and x.dsa is None:
        gathered = (x.kv_s or x.s) / x.s
        out += x.dtype_bytes * x.s * x.b * (x.q_dim + gathered * (x.q_dim + x.o_dim)) / x.tp
    elif "mla_up_proj" in modules and x.mla is not None:  # absorbed (costs/dsa.py): Q and the absorbed Q
        out += x.dtype_bytes * x.s * x.b * (x.q_dim + x.heads * (x.mla.kv_lora + x.mla.rope)) / x.tp
    if "mlp" in modules and not moe:
        out += g * sbh
    return out


def moe_rerun_s(x: Shape, forward: tuple[InnerCollective, ...]) -> float:
    """Seconds of a block's forward ep all-to-alls (dispatch, combine) that a checkpointed MoE layer
    ("moe" in x.recompute_modules) runs again inside its backward (Megatron-Core's MoELayer checkpoints
    its token dispatcher with its experts)."""
    return sum(c.seconds for c in forward if c.stream == "ep") if "moe" in x.recompute_modules else 0.0


def moe_kept_bytes(modules: frozenset[str], routed: float, activation_out: float, shared: float) -> float:
    """What an MoE block keeps of its `routed` bytes (router, dispatched tokens, experts' activations),
    `shared` experts' bytes, under recompute `modules`: "moe" keeps none (its checkpoint input, the
    pre-MLP norm's output, is counted with the block), "moe_act" drops the experts' activation output
    (FC2's input, `activation_out`), "shared_experts" the shared experts'."""
    if "moe" in modules:
        return 0.0
    kept = routed - (activation_out if "moe_act" in modules else 0.0)
    return kept + (0.0 if "shared_experts" in modules else shared)


def recomputed_layers(s: Scenario, stage_layers: int) -> int:
    """Blocks of a (virtual) stage of `stage_layers` that partial recompute (training.recompute_num_layers)
    checkpoints one by one, re-running each one's forward inside its backward; 0 without it (recompute =
    "full" alone is plancast's stage-level recompute pass). Megatron-LM's `--recompute-method block`
    checkpoints the first n blocks of each model chunk and none of the rest; "uniform" checkpoints every
    block, n at a time (megatron/core/transformer/transformer_block.py `_checkpointed_forward`): each
    block's forward runs again once either way."""
    t = s.training
    if t.recompute != "full" or t.recompute_num_layers is None:
        return 0
    return min(t.recompute_num_layers, stage_layers) if t.recompute_method == "block" else stage_layers
