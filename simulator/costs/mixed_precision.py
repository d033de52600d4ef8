"""The gradient cast FSDP's mixed precision adds to each unit's backward (ZeRO-2/3).

With a reduce dtype wider than the compute dtype (`parallelism.fsdp_reduce_dtype`, e.g. fp32 under
bf16: torchtitan's default, Composer's "DEFAULT" from 0.16.4), FSDP casts a unit's unsharded gradient to it
before the reduce-scatter (FSDP1 `_reduce_grad`, FSDP2 `foreach_reduce`: `.to(reduce_dtype)`): one
memory-bound pass over the unit's parameters, read in the compute dtype and written in the reduce
dtype, each micro-batch.
"""

from __future__ import annotations

from plancast.simulator.costs.efficiency import ops_seconds
from plancast.simulator.costs.ops import DTYPE_BYTES, Op
from plancast.simulator.scenario import Scenario


def fsdp_cast_ops(s: Scenario, params: float) -> tuple[Op, ...]:
    """The backward cast ops for a unit of `params` parameters on one rank; none without FSDP or where
    gradients are reduced in the compute dtype."""
    compute, reduce = DTYPE_BYTES[s.training.dtype], DTYPE_BYTES[s.fsdp_reduce_dtype]
    if not s.fsdp or params <= 0 or reduce == compute:
        return ()
    return (Op("reduce_cast", "memory", 0.0, params * (compute + reduce)),)


def fsdp_cast_seconds(s: Scenario, params: float) -> float:
    """Seconds of `fsdp_cast_ops` on the scenario's GPU (part of the unit's backward)."""
    return ops_seconds(fsdp_cast_ops(s, params), s.cluster.gpu, s.cluster.compute, s.training.dtype)
