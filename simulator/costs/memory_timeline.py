"""A rank's predicted memory over one step: allocated bytes after each of its schedule's actions.

The same account as costs/memory.py `rank_memory`, walked in time: model states and gathered units for
the whole step, each forward of (chunk, micro-batch) adding what the chunk keeps for backward, each
backward holding that plus the block it rebuilds (and, on the last stage, the loss's buffers) until it
releases the chunk's activations. Each point carries the key of the compute event it follows
(traces/schema.py), so a measured timeline taken at the same events joins it. The step's peak is the
highest point; `rank_memory` adds the rebuilt block and the loss at the peak of what is kept, so it is
never below the timeline's peak, and equal to it whenever a backward follows the fullest forward
(1F1B and GPipe).
"""

from __future__ import annotations

from typing import NamedTuple

from plancast.simulator.costs.memory import (
    chunk_activation_bytes,
    inflight_peak_bytes,
    kept_output_bytes,
    loss_bytes_per_logit,
    offload_split,
    pipelining_buffer_bytes,
    rank_memory,
)
from plancast.simulator.costs.memory_dualpipe import extra_inflight_bytes
from plancast.simulator.costs.memory_fsdp import backward_buffer_bytes, fsdp_transient_bytes
from plancast.simulator.costs.moe import moe_activation_bytes
from plancast.simulator.costs.ops import Shape
from plancast.simulator.costs.params import moe_layer_count
from plancast.simulator.scenario import Scenario
from plancast.simulator.schedules import Schedule, build_schedule, owned_stages

KINDS = {"F": "forward", "B": "backward", "W": "backward_weight"}


class MemoryPoint(NamedTuple):
    """Allocated bytes on one rank right after a compute event (at the end of a backward: its working
    peak, before it releases the chunk's activations)."""

    order: int  # the event's position in the rank's step
    kind: str
    stage: int
    chunk: int
    microbatch: int
    allocated_bytes: float


def memory_timeline(s: Scenario, pp_rank: int, schedule: Schedule | None = None) -> list[MemoryPoint]:
    """The predicted memory of pipeline rank `pp_rank` after each compute event of one step, then after
    the optimizer."""
    if schedule is None:
        schedule = build_schedule(s.parallelism.pipeline_parallel_schedule, s.pp, s.num_microbatches, s.vpp)
    mem = rank_memory(s, pp_rank, schedule)
    states = mem.parameters + mem.gradients + mem.optimizer + mem.gathered
    x, split, stages = Shape.of(s), s.layer_split, s.pp * s.vpp
    starts = [sum(split[:v]) for v in range(stages)]
    # this rank's stages by chunk: loop placement, or the V of ZB-V / DualPipeV (r and 2 pp - 1 - r)
    owned = list(owned_stages(s.parallelism.pipeline_parallel_schedule, s.pp, pp_rank, s.vpp))
    states += pipelining_buffer_bytes(s, x, owned, schedule[pp_rank])  # allocated once, kept over the step
    moe = any(moe_layer_count(s.model, starts[v], split[v]) for v in owned)
    mlp = moe_activation_bytes(x, s.model) if moe else None
    layers = {c: split[v] for c, v in enumerate(owned)}
    kept = {c: chunk_activation_bytes(s, x, n, mlp) for c, n in layers.items()}
    # offloaded blocks: at most two on the GPU at once (costs/memory.py offload_split)
    resident, offloaded, cap = offload_split(s, x, mlp, {c: k[0] for c, k in kept.items()}, layers)
    loss = loss_bytes_per_logit(s) * x.s * x.b * x.vocab / s.vocab_tp
    actions = schedule[pp_rank]
    outputs = kept_output_bytes(s, x, owned)  # each forward's output, kept to the step's end
    # FSDP2's buffers live in backwards only: rank_memory counts what they add to its peak with the states
    inflight = inflight_peak_bytes(actions, resident, offloaded, cap, outputs)[0]
    states -= fsdp_transient_bytes(s, owned, actions, resident, outputs, inflight)
    fsdp = backward_buffer_bytes(s, owned, actions)
    split_backward = any(a.kind == "W" for a in actions)  # a split backward: B is the input-gradient part
    dualpipe = extra_inflight_bytes(s, resident)  # DualPipe's one chunk more in flight, over the passes
    live, off, points = 0.0, 0.0, []
    for order, a in enumerate(actions):
        on_gpu = max(live, min(off, cap))
        if a.kind == "F":
            states += outputs[a.chunk]
            live, off = live + resident[a.chunk], off + offloaded[a.chunk]
            value = states + max(live, min(off, cap))
        elif a.kind == "B":
            value = states + on_gpu + kept[a.chunk][1] + (loss if a.stage == stages - 1 else 0.0)
            value += fsdp[order]
            live, off = live - resident[a.chunk], off - offloaded[a.chunk]
        else:
            value = states + on_gpu + fsdp[order]
        value += dualpipe
        kind = "backward_input" if a.kind == "B" and split_backward else KINDS[a.kind]
        points.append(MemoryPoint(order, kind, a.stage, a.chunk, a.microbatch, value))
    states -= sum(outputs[a.chunk] for a in actions if a.kind == "F")  # merged and freed with the step
    points.append(MemoryPoint(len(points), "optimizer", -1, -1, -1, states))
    return points


def timeline_by_rank(s: Scenario) -> dict[str, list[list[object]]]:
    """The predicted timeline of the first rank of each pipeline position, as the run directory keeps it
    beside the measured one (summary.json ``rank_memory_timeline``): rank -> [[order, kind, stage, chunk,
    microbatch, allocated GiB], ...]."""
    schedule = build_schedule(s.parallelism.pipeline_parallel_schedule, s.pp, s.num_microbatches, s.vpp)
    first_rank = s.world_size // s.pp  # ranks per pipeline position (simulator/mesh.py: pp outermost)
    return {
        str(pp * first_rank): [[*p[:5], p.allocated_bytes / 2**30] for p in memory_timeline(s, pp, schedule)]
        for pp in range(s.pp)
    }
