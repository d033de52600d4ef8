"""What recompute re-runs in backward: selective recompute per policy (`training.selective_recompute`),
and which blocks partial recompute checkpoints (`training.recompute_num_layers`, `recomputed_layers`).

- attention: the attention core, QK^T, softmax, dropout and attention-over-values (Korthikanti et al.
  2022 sec. 4.2; Megatron-LM's `--recompute-granularity selective`, plancast's runtime).
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

from plancast.simulator.costs.mla import MLA_PROJECTIONS, mla_projection_features
from plancast.simulator.costs.ops import Op, Shape, attention_core
from plancast.simulator.scenario import Scenario

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
    """The ops of one block that recompute = "selective" re-runs under `policy`."""
    return op_sac_recompute(ops, x) if policy == "op" else attention_core(ops)


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
