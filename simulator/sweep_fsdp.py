"""What ZeRO-2/3 adds to the sweep's closed-form bound (simulator/sweep_bound.py; docs/sweep.md proves it):
how many passes of a rank gather its units, and the gather every ZeRO-3 pass waits for before its first
unit can run.

Both follow the engine's FSDP rules (simulator/units.py FsdpState, engine/data_parallel.py fsdp_pass):
a pass issues its units' all-gathers on the rank's serial dp stream no earlier than it starts, and each
unit waits for its own gather. So a pass that gathers lasts at least its first unit's gather plus its
compute: the unit runs no earlier than its gather lands, and the pass's compute runs one unit after
another from then on (the units before it hold no parameters only where the unit is a stage's root,
which `gather_waits` leaves out).
"""

from __future__ import annotations

from functools import partial
from itertools import pairwise

from plancast.simulator.costs.collectives import Level, collective_seconds
from plancast.simulator.costs.host import HostCosts
from plancast.simulator.costs.ops import DTYPE_BYTES
from plancast.simulator.costs.params import chunk_tensor_bytes
from plancast.simulator.scenario import Scenario
from plancast.simulator.schedules import Action
from plancast.simulator.sweep_axes import Plan
from plancast.simulator.sweep_chain import FsdpUnits, StageUnits
from plancast.simulator.sweep_segments import SegmentTimes, StageTimes


def gather_passes(actions: tuple[Action, ...], zero3: bool, recompute_full: bool) -> dict[int, int]:
    """Per stage of one rank's schedule, how many of its passes gather the stage's units: ZeRO-3
    reshards after every forward, so each forward, recompute and backward gathers; ZeRO-2 keeps them
    from a forward until the next backward, so a pass gathers after a backward or at the start
    (units.py FsdpState: backward() resets the state)."""
    return {stage: f + b for stage, (f, b) in gather_counts(actions, zero3, recompute_full).items()}


def gather_counts(
    actions: tuple[Action, ...], zero3: bool, recompute_full: bool
) -> dict[int, tuple[int, int]]:
    """`gather_passes` apart per direction: per stage, (forward and recompute passes, backward passes)
    that gather."""
    counts: dict[int, list[int]] = {}
    gathered: dict[int, bool] = {}
    for a in actions:
        if a.kind == "W":
            continue
        passes = ["F"] if a.kind == "F" else (["F", "B"] if recompute_full else ["B"])
        for kind in passes:
            if not gathered.get(a.stage, False):
                counts.setdefault(a.stage, [0, 0])[kind == "B"] += 1
            gathered[a.stage] = False if kind == "B" else not zero3
    return {stage: (f, b) for stage, (f, b) in counts.items()}


def rank_waits(
    counts: tuple[dict[int, tuple[int, int]], ...], split: tuple[int, ...], gather_s: float
) -> tuple[float, ...]:
    """Per pipeline rank, at least how long its passes wait for their first unit's gather in all (ZeRO-2,
    where only some passes gather: `counts` per rank from `gather_counts`): `gather_waits`' rule, each
    wait once per pass that gathers."""
    last = len(split) - 1
    out = []
    for per_stage in counts:
        total = 0.0
        for stage, (forwards, backwards) in per_stage.items():
            if split[stage]:
                total += (0 if stage in (0, last) else forwards) * gather_s + backwards * gather_s
        out.append(total)
    return tuple(out)


def gather_waits(
    times: tuple[StageTimes, ...], split: tuple[int, ...], gather_s: float
) -> tuple[StageTimes, ...]:
    """ZeRO-3 stage times with each pass's wait for its first unit's gather added (the module docstring):
    every forward, recompute and backward pass of ZeRO-3 gathers (`gather_passes`). The first unit in
    forward order is the root on the first and the last stage (embedding, head): those forwards get no
    wait; elsewhere, and in backward order (the last block first), it is a block, whose gather takes
    `gather_s` (every block unit holds the same bytes, units.py dp_plan). A stage without blocks
    gets none. A split backward's B action gathers as well (its W does not): the wait joins B."""
    last = len(times) - 1
    out = []
    for v, (st, n) in enumerate(zip(times, split, strict=True)):
        if not n:
            out.append(st)
            continue
        forward = 0.0 if v in (0, last) else gather_s
        f, r, b, w, alone_f, alone_b = st  # StageTimes(...), not st._replace: 3x cheaper, called 10^4 times
        out.append(StageTimes(f + forward, r + forward if r else 0.0, b + gather_s, w, alone_f, alone_b))
    return tuple(out)


def block_gather_s(base: Scenario, plan: Plan, levels: tuple[Level, ...]) -> float:
    """One block unit's all-gather over the dp group `levels`, with its host cost: what the replay's
    units wait for (sweep_bound.Bound._fsdp_units prices each unit so; units.py dp_plan sizes it)."""
    algorithm = base.parallelism.zero_collective_algorithm or "hierarchical"
    ones = chunk_tensor_bytes(
        base.model, plan.tp, layers=1, has_embedding=False, has_head=False, dtype_bytes=1
    )
    layer_bytes = float(sum(ones)) * DTYPE_BYTES[base.training.dtype]
    host = HostCosts.of(plan.apply(base)).dp_collective_s
    return collective_seconds("all_gather", levels, layer_bytes, algorithm) + host


def fsdp_units(
    base: Scenario, plan: Plan, split: tuple[int, ...], levels: tuple[Level, ...], seg: SegmentTimes
) -> FsdpUnits | None:
    """The plan's FSDP units per stage (simulator/units.py, dp_plan; its pass shares from the stage's
    own segment times `seg`), each unit's collectives over the dp group `levels`, or None for
    DeepSpeed, whose blocks split into more units."""
    par = base.parallelism
    if par.framework == "deepspeed":
        return None
    s = plan.apply(base)
    host = HostCosts.of(s).dp_collective_s
    algorithm = par.zero_collective_algorithm or "hierarchical"
    dtype = DTYPE_BYTES[base.training.dtype]
    scale = DTYPE_BYTES[s.fsdp_reduce_dtype] / dtype
    ones = chunk_tensor_bytes(
        base.model, plan.tp, layers=1, has_embedding=False, has_head=False, dtype_bytes=1
    )
    layer_bytes = float(sum(ones)) * dtype
    gather, scatter = partial(collective_seconds, "all_gather"), partial(collective_seconds, "reduce_scatter")
    stages, start, blocks = [], 0, len(seg.compute_forward_s) - 1
    for v, n in enumerate(split):
        first, last = v == 0, v == len(split) - 1
        # the last stage's multi-token-prediction blocks are blocks of its own (costs/stage.py)
        held = blocks - start if last else n
        tensors = chunk_tensor_bytes(
            base.model, plan.tp, layers=held, has_embedding=first, has_head=last, first_layer=start
        )
        root = first or last
        root_bytes = float(sum(tensors)) / 4 * dtype - held * layer_bytes
        sizes = ([root_bytes] if root else []) + [layer_bytes] * held
        weights = []
        for prefix, index in ((seg.compute_forward_s, 0), (seg.compute_backward_s, 1)):
            own = (seg.embedding_compute[index] if first else 0.0) + (
                seg.head_compute[index] if last else 0.0
            )
            each = [b - a for a, b in pairwise(prefix[start : start + held + 1])]  # each block its own
            total = (own if root else 0.0) + sum(each) or 1.0
            weights.append(tuple(([own / total] if root else []) + [t / total for t in each]))
        stages.append(
            StageUnits(
                tuple(gather(levels, b, algorithm) + host if b > 0 else 0.0 for b in sizes),
                tuple(scatter(levels, b * scale, algorithm) + host for b in sizes),
                weights[0],
                weights[1],
                root,
            )
        )
        start += n
    ahead = 1 if par.overlap_param_gather else 0
    backward_ahead = 0 if par.fsdp_backward_prefetch == "post" else ahead
    return FsdpUnits(
        tuple(stages), plan.zero_stage == 3, ahead, backward_ahead, bool(par.overlap_grad_reduce)
    )


def chunk_bytes(base: Scenario, plan: Plan, split: tuple[int, ...]) -> list[tuple[float, int]]:
    """Per chunk of the first pipeline rank: (its dense fp32 gradient bytes, its FSDP units), as
    simulator/units.py's dp_plan sizes them."""
    stages, out = len(split), []
    for v in plan.first_rank_stages():
        start = sum(split[:v])
        first, last = v == 0, v == stages - 1
        tensors = chunk_tensor_bytes(
            base.model, plan.tp, layers=split[v], has_embedding=first, has_head=last, first_layer=start
        )
        out.append((float(sum(tensors)), split[v] + (1 if first or last else 0)))
    return out
