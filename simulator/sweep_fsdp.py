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

from dataclasses import dataclass
from itertools import pairwise

from plancast.simulator.costs.collectives import Algorithm, CollectiveKind, Level, collective_seconds
from plancast.simulator.costs.host import HostCosts
from plancast.simulator.costs.ops import DTYPE_BYTES
from plancast.simulator.costs.params import chunk_tensor_bytes
from plancast.simulator.engine import Topology
from plancast.simulator.scenario import Scenario
from plancast.simulator.schedules import Action
from plancast.simulator.sweep_axes import Plan
from plancast.simulator.sweep_chain import FsdpUnits, StageUnits
from plancast.simulator.sweep_segments import SegmentTimes, StageTimes
from plancast.simulator.units import block_bytes, unit_bytes


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
    at least `gather_s` (the least block unit's gather, `block_gather_s`). A stage without blocks
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
    """The least block unit's all-gather over the dp group `levels` (its routed experts' over edp after
    it), with their host costs: the least any replayed unit waits for (sweep_bound.Bound._fsdp_units prices
    each unit so; units.py dp_plan sizes it). Blocks differ only as dense or MoE blocks (params.py)."""
    s = plan.apply(base)
    m = s.model
    kinds = {0, min(m.first_k_dense_replace, m.num_hidden_layers - 1)} if m.is_moe else {0}
    price, dtype = UnitPrice.of(s, levels), DTYPE_BYTES[base.training.dtype]
    return min(price("all_gather", *block_bytes(s, layer, dtype)) for layer in kinds)


@dataclass(frozen=True)
class UnitPrice:
    """An FSDP unit's collective as the engine queues it (engine/plan.py, unit_collective_s): its own
    bytes over the dp group, then its routed experts' over edp, each with the dp host cost."""

    levels: tuple[Level, ...]
    edp: tuple[Level, ...]
    host: float
    algorithm: Algorithm
    scale: float  # reduce-scatter bytes per gathered byte (parallelism.fsdp_reduce_dtype)

    @classmethod
    def of(cls, s: Scenario, levels: tuple[Level, ...]) -> UnitPrice:
        edp = Topology.of(s).levels("edp") if s.edp > 1 else ()
        algorithm = s.parallelism.zero_collective_algorithm or "hierarchical"
        scale = DTYPE_BYTES[s.fsdp_reduce_dtype] / DTYPE_BYTES[s.training.dtype]
        return cls(levels, edp, HostCosts.of(s).dp_collective_s, algorithm, scale)

    def __call__(self, kind: CollectiveKind, own: float, experts: float) -> float:
        """Seconds of one unit's gather or reduce-scatter; none for a unit without parameters."""
        if own <= 0.0:
            return 0.0
        scale = self.scale if kind == "reduce_scatter" else 1.0
        seconds = collective_seconds(kind, self.levels, own * scale, self.algorithm) + self.host
        if experts:
            seconds += collective_seconds(kind, self.edp, experts * scale, self.algorithm) + self.host
        return seconds


def fsdp_units(
    base: Scenario, plan: Plan, split: tuple[int, ...], levels: tuple[Level, ...], seg: SegmentTimes
) -> FsdpUnits | None:
    """The plan's FSDP units per stage (simulator/units.py, dp_plan; its pass shares from the stage's
    own segment times `seg`), each unit's collectives over the dp group `levels` (`UnitPrice`), or None
    for DeepSpeed, whose blocks split into more units."""
    if base.parallelism.framework == "deepspeed":
        return None
    s = plan.apply(base)
    par = s.parallelism  # the plan's own defaults (Plan.apply)
    unit_price = UnitPrice.of(s, levels)
    priced: dict[tuple[CollectiveKind, float, float], float] = {}

    def price(kind: CollectiveKind, own: float, experts: float) -> float:  # a model has few unit sizes
        key = (kind, own, experts)
        if (seconds := priced.get(key)) is None:
            seconds = priced[key] = unit_price(kind, own, experts)
        return seconds

    dtype = DTYPE_BYTES[base.training.dtype]
    stages, start, blocks = [], 0, len(seg.compute_forward_s) - 1
    kinds: dict[bool, tuple[float, float]] = {}  # one scenario: each kind of block sized once
    for v, n in enumerate(split):
        first, last = v == 0, v == len(split) - 1
        # the last stage's multi-token-prediction blocks are blocks of its own (costs/stage.py)
        held = blocks - start if last else n
        root = first or last
        sizes = unit_bytes(s, start, held, first, last, dtype, kinds)
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
                tuple(price("all_gather", *b) for b in sizes),
                tuple(price("reduce_scatter", *b) for b in sizes),
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
