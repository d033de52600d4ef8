"""ZeRO-2 and ZeRO-3 with FSDP2 ``fully_shard`` (Rajbhandari et al. 2020; torch FSDP2).

Units: every transformer block, then the chunk itself as the root (embedding, final norm, head).
ZeRO-2 keeps parameters gathered from forward to backward (``reshard_after_forward=False``); ZeRO-3
frees them after forward (every unit, the root too) and gathers again in backward.
Gradients are reduce-scattered after every micro-batch's backward (gloo runs the reduce-scatter as
an all-reduce); ``runtime.expected`` replays FSDP2's gather/reshard rules to predict the sequence.
HSDP: on a 2-D (dp_replicate, dp_shard) mesh fully_shard shards over dp_shard and all-reduces each
unit's reduced shard over dp_replicate (torchtitan's HSDP; runtime/trainer.py builds the mesh).
"""

from __future__ import annotations

from torch.distributed.device_mesh import DeviceMesh
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

from plancast.runtime.model import Decoder


def apply_fsdp(
    model: Decoder, dp_mesh: DeviceMesh, *, zero_stage: int, mp_policy: MixedPrecisionPolicy | None = None
) -> Decoder:
    """Shard ``model`` over ``dp_mesh`` (1-D, or 2-D for HSDP) in place (stage 2 or 3) and return it;
    ``mp_policy``: the gather and reduce-scatter dtypes (runtime/precision.py), default fp32."""
    if zero_stage not in (2, 3):
        raise ValueError(f"parallelism.zero_stage must be 2 or 3 for FSDP, got {zero_stage}")
    reshard = zero_stage == 3
    policy = mp_policy or MixedPrecisionPolicy()
    for block in model.layers.values():
        fully_shard(block, mesh=dp_mesh, reshard_after_forward=reshard, mp_policy=policy)
    fully_shard(model, mesh=dp_mesh, reshard_after_forward=reshard, mp_policy=policy)
    return model
