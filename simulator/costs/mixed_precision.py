"""Passes over the parameters that mixed precision and gradient accumulation add to a step's compute.

FSDP (ZeRO-2/3): the gradient cast to the reduce dtype in each unit's backward.

With a reduce dtype wider than the compute dtype (`parallelism.fsdp_reduce_dtype`, e.g. fp32 under
bf16: torchtitan's default, Composer's "DEFAULT" from 0.16.4), FSDP casts a unit's unsharded gradient to it
before the reduce-scatter (FSDP1 `_reduce_grad`, FSDP2 `foreach_reduce`: `.to(reduce_dtype)`): one
memory-bound pass over the unit's parameters, read in the compute dtype and written in the reduce
dtype, each micro-batch.

torch autocast without FSDP (Scenario.amp_master_params: torchtitan, plancast's runtime): every forward
casts each GEMM weight from its fp32 master to the compute dtype (read 4, write 2 bytes; the cast is
cached only inside one autocast region, which torchtitan and the runtime open per micro-batch, and again
for a full recompute), and backward casts the weight's gradient back to fp32 (read 2, write 4).
Gradient accumulation under torch autograd (torchtitan, the runtime): from the second micro-batch on,
each parameter's new gradient is added into `.grad` (read 4 + 4, write 4), on average 12 (m - 1) / m
bytes per micro-batch; Megatron-LM fuses it into the weight-gradient GEMM
(`--gradient-accumulation-fusion`, on by default) and DeepSpeed into its own buckets. Measured on one H100
(docs/calibration.md): without these passes a 4-layer Llama 3 shape was predicted 13% fast.
"""

from __future__ import annotations

from plancast.simulator.costs.ops import DTYPE_BYTES, Op
from plancast.simulator.scenario import Scenario


def fsdp_cast_ops(s: Scenario, params: float) -> tuple[Op, ...]:
    """The backward cast ops for a unit of `params` parameters on one rank; none without FSDP or where
    gradients are reduced in the compute dtype."""
    compute, reduce = DTYPE_BYTES[s.training.dtype], DTYPE_BYTES[s.fsdp_reduce_dtype]
    if not s.fsdp or params <= 0 or reduce == compute:
        return ()
    return (Op("reduce_cast", "memory", 0.0, params * (compute + reduce)),)


def _amp(s: Scenario) -> bool:
    return s.amp_master_params and not s.fsdp


def autocast_forward_ops(s: Scenario, weights: float) -> tuple[Op, ...]:
    """The weight casts of one forward (or recompute) over `weights` GEMM weights on one rank."""
    if not _amp(s) or weights <= 0:
        return ()
    return (Op("autocast_cast", "memory", 0.0, weights * (4 + DTYPE_BYTES[s.training.dtype])),)


def backward_param_ops(s: Scenario, weights: float, params: float) -> tuple[Op, ...]:
    """One micro-batch's backward passes over the parameters: the weight-gradient casts under autocast,
    the accumulation into `.grad` (torch autograd, without FSDP), both memory-bound."""
    ops = []
    if _amp(s) and weights > 0:
        ops.append(Op("autocast_grad_cast", "memory", 0.0, weights * (4 + DTYPE_BYTES[s.training.dtype])))
    m = s.num_microbatches
    if s.parallelism.framework == "torchtitan" and not s.fsdp and m > 1 and params > 0:
        grad = 4 if s.training.master_weights else DTYPE_BYTES[s.training.dtype]  # the .grad's dtype
        ops.append(Op("grad_accumulate", "memory", 0.0, params * 3.0 * grad * (m - 1) / m))
    return tuple(ops)


def param_pass_ops(s: Scenario, params: float, weights: float) -> tuple[tuple[Op, ...], tuple[Op, ...]]:
    """(forward, weight-gradient) parameter passes of one segment (a block, the embedding or the head)
    holding `params` parameters, `weights` of them GEMM weights, on one rank, one micro-batch; the
    stage costs and the calibration's linear rows both read them."""
    backward = fsdp_cast_ops(s, params) + backward_param_ops(s, weights, params)
    return autocast_forward_ops(s, weights), backward
