"""FSDP2's transient buffers (torchtitan's ZeRO-2/3): what it holds beside the model states in backward.

Read in torch/distributed/fsdp/_fully_shard (the same from torch 2.5 on, so in torchtitan's published runs):
- `FSDPParamGroup.post_backward` hands a unit's unsharded gradients to `foreach_reduce`, which copies
  them into a fresh `reduce_scatter_input` in the reduce dtype (`_fsdp_collectives.py`,
  `foreach_reduce_scatter_copy_in`) and keeps it as `comm_ctx.reduce_scatter_state` until the *next*
  unit's post-backward waits for the collective and drops it. So while a block's backward runs, the
  previous block's gradient is alive in the reduce dtype and this block's is being written in the
  parameters' dtype (autograd's `.grad` of the unsharded parameters).
- The root unit (`fully_shard(model)` over the embedding, the final norm and the output layer, torchtitan
  parallelize_llama.py `apply_fsdp`) is gathered by its pre-backward hook when the loss's gradient reaches
  the logits and resharded by its post-backward, which fires after the embedding's backward: its
  parameters stay gathered for the whole backward. Under pipeline parallel the whole stage is kept
  gathered anyway (memory.py `fsdp_holds_stage_unsharded`).
Under pipeline parallel torch.distributed.pipelining runs every backward but a stage's last without
gradient sync (pipelining/stage.py `backward_maybe_with_nosync`), so the reduce-scatter buffers exist
only in the last backward of each chunk.
"""

from __future__ import annotations

from plancast.simulator.costs.ops import DTYPE_BYTES
from plancast.simulator.costs.params import layer_params, rank_parameters
from plancast.simulator.scenario import Scenario
from plancast.simulator.schedule_action import Action


def fsdp_holds_stage_unsharded(s: Scenario) -> bool:
    """FSDP2 under pipeline parallel (torchtitan) keeps the whole stage gathered and its gradients unsharded
    from the first micro-batch to the last: torchtitan's apply_fsdp defaults `reshard_after_forward = not
    pp_enabled` (torchtitan/models/llama3/infra/parallelize.py), and torch.distributed.pipelining runs every
    backward but the last with `set_requires_gradient_sync(False)` (pipelining/stage.py
    `backward_maybe_with_nosync`), so FSDP2 accumulates the unsharded gradient in its reduce dtype
    (fsdp/_fully_shard/_fsdp_param.py `to_accumulated_grad_if_needed`) until the last micro-batch's
    reduce-scatter."""
    par = s.parallelism
    return par.framework == "torchtitan" and s.pp > 1 and par.zero_stage >= 2 and s.dp * s.cp > 1


def reduce_scatter_bytes(s: Scenario) -> float:
    """Bytes of gradient buffers FSDP2 holds while a block's backward runs (module docstring): one block's
    gradient in the reduce dtype (the previous block's reduce-scatter input) and one in the parameters'
    dtype (the block being differentiated). Zero outside torchtitan's ZeRO-2/3 over more than one rank."""
    par = s.parallelism
    if par.framework != "torchtitan" or par.zero_stage < 2 or s.dp * s.cp <= 1:
        return 0.0
    block = layer_params(s.model).per_rank(s.tp)
    return block * (DTYPE_BYTES[s.training.dtype] + DTYPE_BYTES[s.fsdp_reduce_dtype])


def root_unit_bytes(s: Scenario, owned: tuple[int, ...] | list[int]) -> float:
    """Bytes of the root unit's parameters (embedding, final norm, output layer on this rank), gathered in
    the training dtype for the whole backward under ZeRO-3 (module docstring). Zero where the stage is
    held gathered already (under pipeline parallel) and outside torchtitan's ZeRO-3."""
    par = s.parallelism
    if par.framework != "torchtitan" or par.zero_stage < 3 or s.dp * s.cp <= 1 or s.pp > 1:
        return 0.0
    no_blocks = [0] * (s.pp * s.vpp)
    outer = rank_parameters(s.model, no_blocks, owned, tp=s.tp, vocab_tp=s.vocab_tp, ep=s.ep, etp=s.etp)[0]
    return outer * DTYPE_BYTES[s.training.dtype]


def live_at_last_backwards(
    actions: tuple[Action, ...], chunk_bytes: dict[int, float], kept: dict[int, float]
) -> float:
    """Most activation bytes alive (as memory.py `peak_inflight_bytes` counts them) when a chunk runs its
    last backward of the step, the one that reduce-scatters under pipeline parallel: the chunk's last
    B, or its last W where the schedule splits the weight gradient off."""
    last = {a.chunk: i for i, a in enumerate(actions) if a.kind in ("B", "W")}
    live = most = 0.0
    for i, a in enumerate(actions):
        if a.kind == "F":
            live += chunk_bytes[a.chunk] + kept[a.chunk]
        if last.get(a.chunk) == i:
            most = max(most, live)
        if a.kind == "B":
            live -= chunk_bytes[a.chunk]
    return most


def fsdp_transient_bytes(
    s: Scenario,
    owned: tuple[int, ...] | list[int],
    actions: tuple[Action, ...],
    chunk_bytes: dict[int, float],
    kept: dict[int, float],
    inflight_peak: float,
) -> float:
    """What FSDP2's transient buffers add to a rank's peak, on top of the in-flight activations'
    `inflight_peak`: the root unit for the whole backward, and the reduce-scatter buffers during every
    backward, or under pipeline parallel during each chunk's last one only (where fewer micro-batches may
    be in flight than at the peak)."""
    rs = reduce_scatter_bytes(s)
    if rs and fsdp_holds_stage_unsharded(s):
        rs = max(0.0, live_at_last_backwards(actions, chunk_bytes, kept) + rs - inflight_peak)
    return rs + root_unit_bytes(s, owned)


def backward_buffer_bytes(
    s: Scenario, owned: tuple[int, ...] | list[int], actions: tuple[Action, ...]
) -> list[float]:
    """Per action of a rank's step, the FSDP2 buffers alive while it runs (costs/memory_timeline.py): none
    in a forward; in a backward (B or W) the root unit, and the reduce-scatter buffers where that
    backward reduce-scatters: every one, or under pipeline parallel each chunk's last."""
    rs, root = reduce_scatter_bytes(s), root_unit_bytes(s, owned)
    every = not fsdp_holds_stage_unsharded(s)
    last = {a.chunk: i for i, a in enumerate(actions) if a.kind in ("B", "W")}
    reduces = [every or last.get(a.chunk) == i for i, a in enumerate(actions)]
    return [root + rs * r if a.kind != "F" else 0.0 for a, r in zip(actions, reduces, strict=True)]
