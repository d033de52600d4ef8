"""Which plan should I buy? Enumerate every valid plan for a model on N GPUs; return the best k, exactly.

The space is tp x pp x dp (x ep for MoE models, x cp on long sequences) x micro-batch x schedule (with
virtual stages) x recompute x sequence parallel x ZeRO stage: hundreds of thousands of plans for GPT-3
on 1,536 GPUs, millions for DeepSeek-V3. Three steps keep it fast and exact (docs/sweep.md), each tp
degree taken only once the search reaches its floor (simulator/sweep_floor.py: a degree whose floor is
above the k-th best is never enumerated past its count):

1. enumerate with pruning: a (tp, pp) pair whose smallest possible footprint (ZeRO-3, full recompute,
   micro-batch 1) does not fit is skipped whole; memory is a closed form per plan (a lower bound of
   the exact peak, so no plan that fits is dropped);
2. bound groups of plans that fit (one batch shape, schedule, SP choice and layer split; recompute, ZeRO
   and the MoE dispatcher and overlap inside) with one lower bound each (simulator/sweep_groups.py),
   once the search reaches their family (one floor for a part's groups of one micro-batch size, SP
   choice and etp, from their per-layer costs alone);
3. best first: open the group, bound the plan (simulator/sweep_bound.py: a closed form, then the
   replayed schedule) or check and simulate the plan with the smallest bound left, and stop once it
   cannot beat the k-th best simulated step time. Every plan left unsimulated is then slower than the
   k-th best, so the top k is exactly the engine's top k over the whole space.

Steps 1 and 2 run one (cp, ep) part of a tp degree per task over `map_fn` (every core at the CLI), in
rounds of the degrees the search reaches (simulator/sweep_frontier.py), the largest part first; the
per-layer costs, the one expensive cache, are worked out there for the plans that fit. Step 3 refines
bounds in rounds of `REFINE_ROUND` and simulates rounds of `ROUND` plans over `map_fn`.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, fields
from functools import partial
from typing import Any

from plancast.simulator.cluster import Tier, fit_tiers
from plancast.simulator.costs.memory import GiB, fits_in_memory
from plancast.simulator.predict import simulate
from plancast.simulator.scenario import Scenario
from plancast.simulator.sweep_axes import Pins, Plan
from plancast.simulator.sweep_bound import Bound, built_schedule
from plancast.simulator.sweep_estimate import Estimator, Layer
from plancast.simulator.sweep_floor import compute_floor_s, degree_floor_s
from plancast.simulator.sweep_frontier import Degree, Estimate, Levels, MapFn, best_first
from plancast.simulator.sweep_groups import Family, Group, Grouper
from plancast.simulator.sweep_keys import LayerKey
from plancast.simulator.sweep_layer import pack
from plancast.simulator.sweep_space import (
    NO_PINS,
    LayerBalancer,
    MoeVariants,
    Root,
    branches,
    by_size,
    enumerate_plans,
    smallest_footprints,
    subtree_sizes,
)
from plancast.simulator.validation import MAX_WORLD_SIZE, check_plan
from plancast.simulator.validation_moe import framework_refusals


@dataclass(frozen=True, slots=True)
class Ranked:
    """A plan with its lower bound and, once simulated, the engine's prediction."""

    plan: Plan
    bound_s: float
    memory_gib: float
    step_time_s: float | None = None
    summary: dict[str, Any] | None = None

    def row(self) -> dict[str, Any]:
        """One table row: the plan's fields and label, its times, memory and throughput."""
        summary = self.summary or {}
        return {
            **asdict(self.plan),
            "plan": self.plan.label(),
            "step_time_s": self.step_time_s,
            "bound_s": self.bound_s,
            "peak_memory_gib": self.memory_gib,
            "mfu": summary.get("mfu"),
            "tokens_per_s": summary.get("tokens_per_s"),
        }


@dataclass(frozen=True)
class SweepResult:
    """The exact best plans (the engine's top k of every plan that fits) plus the search's bookkeeping."""

    finalists: list[Ranked]
    enumerated: int
    fits: int
    pruned_subtrees: int
    simulated: int = 0
    """Plans run through the engine: every plan whose bound could beat the k-th best and that passed the
    exact checks."""
    refused: int = 0
    """Plans whose first bound could beat the k-th best (a few past the stopping point: refinements go to a
    pool in batches) that the exact checks refused before their replayed bound and any simulation (the
    plan's rules, every pipeline rank's peak memory: the search's own memory check is the first rank's)."""
    ungrouped: tuple[Degree, ...] = ()
    """The tp degrees whose floor (simulator/sweep_floor.py) is above the k-th best: never grouped, so
    their plans are counted in `enumerated` but not checked for memory (`fits`, `pruned_subtrees`)."""


def _base_for(base: Scenario, gpus: int) -> Scenario:
    """The base scenario resized to `gpus` GPUs (node count from the cluster's node size)."""
    per_node = base.cluster.gpus_per_node
    nodes = max(gpus // per_node, 1)
    per_node = min(per_node, gpus)
    if nodes * per_node != gpus:
        raise ValueError(
            f"--gpus {gpus} is not a multiple of cluster.gpus_per_node ({base.cluster.gpus_per_node})"
        )
    # The innermost tier, not the node, bounds the fast links (an NVL72 rack: nodes of 4 on one NVLink
    # domain of 72): fit_tiers keeps each domain a divisor of the GPUs searched (simulator/cluster.py).
    fitted = fit_tiers([t.model_dump() for t in base.cluster.tiers], gpus, per_node)
    tiers = [Tier.model_validate(t) for t in fitted]
    cluster = base.cluster.model_copy(update={"num_nodes": nodes, "gpus_per_node": per_node, "tiers": tiers})
    return base.model_copy(update={"cluster": cluster})


def planned_scenario(base: Scenario, gpus: int, plan: Plan) -> Scenario:
    """The scenario a sweep of `base` on `gpus` GPUs simulates for `plan` (sweep --save-best writes it)."""
    return plan.apply(_base_for(base, gpus))


_plan_fields = operator.attrgetter(*(f.name for f in fields(Plan)))


# ------------------------------------------------------------------------------------------ estimates


SubtreeRanking = tuple[list[Estimate], int, int]
"""A subtree's plans that fit, estimated; how many plans it has; how many the memory check pruned."""


def _smallest_fits(est: Estimator, splits: LayerBalancer, limit_bytes: float, plan: Plan) -> bool:
    """Whether the smallest footprint of `plan`'s (tp, pp, ep, cp, etp) subtree (ZeRO-3, full recompute,
    micro-batch 1, SP where it applies, under each layer split and placement searched:
    sweep_space.smallest_footprints) fits in `limit_bytes`: if it does not, no plan of the subtree does."""
    return any(est.memory_bytes(p) <= limit_bytes for p in smallest_footprints(est.base, splits, plan))


def _layer_costs(
    base: Scenario, gpus: int, limit_bytes: float, subtrees: list[Root], pins: Pins = NO_PINS
) -> dict[LayerKey, Layer]:
    """The per-layer costs that the plans of `subtrees` (one tp degree) need: those of every plan that
    fits, as ranking them one by one would work out (the memory check needs none). Worked out once here,
    not again by each (tp, pp) task: the subtrees of a tp degree share most of them (their micro-batch
    sizes overlap), and a task re-deriving its own would cost 60% more work in all."""
    grouper = Grouper(base, gpus, limit_bytes, Estimator(base, gpus), pins, bounds=False)
    for branch in branches(base, gpus, subtrees, pins):
        grouper.add(branch)
    return grouper.est.layers


def _rank_subtree(
    base: Scenario,
    gpus: int,
    limit_bytes: float,
    task: tuple[Root, dict[LayerKey, Layer]],
    pins: Pins = NO_PINS,
) -> SubtreeRanking:
    """The plans of one (tp, pp) subtree that fit in `limit_bytes`, bounded (from the tp degree's
    per-layer costs); with counts enumerated, pruned."""
    root, layers = task
    est, splits = Estimator(base, gpus, dict(layers)), LayerBalancer(base, gpus)
    bound = Bound(est)
    candidates: list[Estimate] = []
    enumerated = pruned = 0
    smallest_fits: dict[tuple[int, ...], bool] = {}
    variants = MoeVariants(base, pins)
    for plan in enumerate_plans(base, gpus, (root,), pins, variants=False):
        plans = variants.of(plan)  # dispatcher/overlap variants: the same memory, each its own bound
        enumerated += len(plans)
        key = (plan.tp, plan.pp, plan.ep, plan.cp, plan.etp)
        if key not in smallest_fits:  # smallest footprint of the whole (tp, pp, ep, cp, etp) subtree
            smallest_fits[key] = _smallest_fits(est, splits, limit_bytes, plan)
        if not smallest_fits[key]:
            pruned += len(plans)
            continue
        memory = est.memory_bytes(plan)
        if memory > limit_bytes:
            continue
        candidates += [(bound.seconds(p), _plan_fields(p), memory / GiB) for p in plans]
    return candidates, enumerated, pruned


Part = tuple[int, int]
"""(cp, ep): the branches of a tp degree that one grouping task takes. Every layer key names both, so
two parts share no per-layer costs: a degree split into them does no work twice, and a pool ends its
round on even tasks (DeepSeek-V3's tp 2, 4 and 8 are 7,464 to 8,944 layer keys each, over 9 ep)."""


def _group_tp_degree(
    base: Scenario,
    gpus: int,
    limit_bytes: float,
    task: tuple[list[Root], Part | None],
    pins: Pins = NO_PINS,
) -> tuple[dict[LayerKey, bytes], list[Family], int, int, int]:
    """One tp degree's subtrees (with a `Part`: only its branches) in one task: the per-layer costs of
    its plans that fit (worked out for its families' floors, once for all its subtrees; packed,
    simulator/sweep_layer.py: the search reads a few of them), its groups with
    plans that fit in their families, unbounded (simulator/sweep_groups.py), and its plans enumerated,
    fitting and pruned."""
    subtrees, part = task
    grouper = Grouper(base, gpus, limit_bytes, Estimator(base, gpus), pins, defer=True)
    for branch in branches(base, gpus, subtrees, pins):
        if part is None or (branch[2], branch[4]) == part:
            grouper.add(branch)
    families = grouper.families()
    packed = {key: pack(layer) for key, layer in grouper.est.layers.items()}
    return packed, families, grouper.enumerated, grouper.fits, grouper.pruned


def _parts(
    base: Scenario, gpus: int, degree: Degree, pins: Pins, alone: bool = False
) -> list[tuple[list[Root], Part, int]]:
    """The degree's grouping tasks, each (subtrees, `Part`, its branch count: about what it costs): one
    per part over every subtree; a degree of one part (a dense model below 8k tokens) grouped `alone` in
    its round as two halves of its subtrees instead, so that two workers share it (the halves share only
    the per-layer costs, a tenth of GPT-3's grouping work; in a round of several degrees the pool is
    busy without them)."""
    sizes: dict[Part, int] = {}
    roots: dict[Root, int] = {}
    for branch in branches(base, gpus, degree.subtrees, pins):
        sizes[branch[2], branch[4]] = sizes.get((branch[2], branch[4]), 0) + 1
        roots[branch[0], branch[1]] = roots.get((branch[0], branch[1]), 0) + 1
    if not alone or len(sizes) != 1 or len(roots) < 2:
        return [(degree.subtrees, part, n) for part, n in sizes.items()]
    halves: tuple[list[Root], list[Root]] = ([], [])
    for root in sorted(roots, key=lambda r: -roots[r]):  # each to the lighter half, the largest first
        min(halves, key=lambda half: sum(roots[r] for r in half)).append(root)
    (part,) = sizes
    return [(sorted(half), part, sum(roots[r] for r in half)) for half in halves]


Grouped = dict[Degree, tuple[list[Family], list[int]]]
"""Each tp degree grouped so far: its families, and its plans enumerated, fitting and pruned."""


def _group_round(
    base: Scenario,
    gpus: int,
    limit_bytes: float,
    pins: Pins,
    map_fn: MapFn,
    grouped: Grouped,
    packed: dict[LayerKey, bytes],
    batch: list[Degree],
) -> list[Family]:
    """The families of `batch`'s degrees, their parts over `map_fn` (the most branches first: a pool ends
    on the shortest tasks), recorded in `grouped`; their per-layer costs join `packed` (a search's
    shared bound's, simulator/sweep_layer.py)."""
    alone = len(batch) == 1
    parts = [(d, roots, part, n) for d in batch for roots, part, n in _parts(base, gpus, d, pins, alone)]
    parts.sort(key=lambda t: (-t[3], t[0].tp, t[2], t[1]))
    task = partial(_group_tp_degree, base, gpus, limit_bytes, pins=pins)
    for (degree, *_), done in zip(parts, map_fn(task, [(roots, p) for _, roots, p, _ in parts]), strict=True):
        table, families, *counts = done
        packed.update(table)
        found = grouped.setdefault(degree, ([], [0, 0, 0]))
        found[0].extend(families)
        found[1][:] = [a + b for a, b in zip(found[1], counts, strict=True)]
    return [g for degree in batch for g in grouped[degree][0]]


def _degrees(base: Scenario, gpus: int, pins: Pins) -> list[Degree]:
    """Each tp degree of the space with its floor (simulator/sweep_floor.py) and its subtrees."""
    sizes, compute_s = subtree_sizes(base, gpus, pins), compute_floor_s(base, gpus)
    return [
        Degree(degree_floor_s(base, gpus, subtrees[0][0], compute_s), subtrees[0][0], subtrees,
               sum(sizes[root] for root in subtrees))
        for subtrees in _per_tp(base, gpus, pins, sizes)
    ]  # fmt: skip


def _per_tp(base: Scenario, gpus: int, pins: Pins, sizes: dict[Root, int] | None = None) -> list[list[Root]]:
    """The (tp, pp) subtrees of each tp degree, the degree with the most plans first (a task costs about
    its plan count), subtrees in `roots` order. `sizes`: subtree_sizes, if the caller has them."""
    sizes = subtree_sizes(base, gpus, pins) if sizes is None else sizes
    tp_sizes: dict[int, int] = {}
    for (tp, _), n in sizes.items():
        tp_sizes[tp] = tp_sizes.get(tp, 0) + n
    return [[root for root in sizes if root[0] == tp and sizes[root]] for tp in by_size(tp_sizes)]


def _tasks(
    base: Scenario,
    gpus: int,
    limit_bytes: float,
    map_fn: MapFn,
    layer_costs: dict[LayerKey, Layer],
    pins: Pins,
) -> list[tuple[Root, dict[LayerKey, Layer]]]:
    """The (tp, pp) subtrees, largest first (a subtree costs about its plan count), each with its tp
    degree's per-layer costs, worked out in a round over `map_fn` before (and added to `layer_costs`)."""
    sizes = subtree_sizes(base, gpus, pins)
    per_tp = _per_tp(base, gpus, pins, sizes)
    costs = partial(_layer_costs, base, gpus, limit_bytes, pins=pins)
    layers = dict(zip((subtrees[0][0] for subtrees in per_tp), map_fn(costs, per_tp), strict=True))
    for table in layers.values():
        layer_costs.update(table)
    return [(root, layers[root[0]]) for root in by_size(sizes)]


def _rank(
    base: Scenario,
    gpus: int,
    limit_bytes: float,
    map_fn: MapFn,
    layer_costs: dict[LayerKey, Layer] | None = None,
    pins: Pins = NO_PINS,
) -> list[SubtreeRanking]:
    """Every (tp, pp) subtree ranked by `_rank_subtree`, in two rounds over `map_fn`: the per-layer costs
    of each tp degree (also added to `layer_costs`), then the subtrees, largest first (a subtree costs
    about its plan count). The search itself bounds groups first (`_group_tp_degree`); this ranks every
    plan that fits, for the exhaustive checks (scripts/sweep_exhaustive.py, tests)."""
    tasks = _tasks(base, gpus, limit_bytes, map_fn, {} if layer_costs is None else layer_costs, pins)
    return list(map_fn(partial(_rank_subtree, base, gpus, limit_bytes, pins=pins), tasks))


def _passes_exact_checks(base: Scenario, limit_bytes: float, plan: Plan, runnable: bool = False) -> bool:
    """Whether `plan` passes the exact checks: the plan's rules (validation.check_plan), under `runnable`
    what its framework runs (validation_moe.framework_refusals), and its peak memory over every pipeline
    rank (costs/memory.py fits_in_memory), where the search's own memory check is the first rank's alone
    (a lower bound of the peak)."""
    s = plan.apply(base)
    if check_plan(s)[0] or (runnable and framework_refusals(s)):
        return False
    # the schedule peak_memory would build, shared with the bound's replays (pure in these arguments)
    schedule = built_schedule(s.parallelism.pipeline_parallel_schedule, s.pp, s.num_microbatches, s.vpp)
    return fits_in_memory(s, limit_bytes, schedule)


def _simulated(
    base: Scenario, limit_bytes: float, candidate: Estimate, runnable: bool = False
) -> Ranked | None:
    """A candidate run through the engine, if it passes the exact checks: its simulated step time, peak
    memory and summary; else None. (Its refinement checked them already: `_replayed`.)"""
    bound_s, plan_fields, _ = candidate
    plan = Plan(*plan_fields)
    if not _passes_exact_checks(base, limit_bytes, plan, runnable):
        return None
    summary = simulate(plan.apply(base), events=False).summary
    return Ranked(plan, bound_s, summary["peak_memory_gib"], summary["step_time_s"], summary)


def _replayed(
    base: Scenario, gpus: int, limit_bytes: float, task: tuple[tuple[Any, ...], Layer], runnable: bool = False
) -> float | None:
    """`Bound.replayed` of a plan in a worker, from its per-layer costs alone (the bound's other caches
    are its own; a fresh bound gives what a shared one does, tests/simulator/test_sweep.py); None if the
    plan fails the exact checks, made first: on DeepSeek-V3 on 2,048 H800, 140 of the 154 plans the search
    refined did not fit, and a check costs a fraction of a replay."""
    fields, layer = task
    plan, est = Plan(*fields), Estimator(base, gpus)
    if not _passes_exact_checks(base, limit_bytes, plan, runnable):
        return None
    est.layers[est.key(plan)] = layer
    return Bound(est).replayed(plan)


def _passes(batch_size: int, candidate: Estimate) -> int:
    """About how many pipeline passes the engine simulates for a plan (pipeline ranks x chunks x
    micro-batches): what its simulation costs, from 7 to 90 ms among GPT-3's best plans."""
    plan = Plan(*candidate[1])
    return plan.pp * plan.virtual_stages * (batch_size // (plan.dp * plan.micro_batch_size))


def sweep(
    base: Scenario,
    gpus: int,
    *,
    finalists: int = 10,
    progress: Callable[[int, int], None] | None = None,
    max_memory_gib: float | None = None,
    map_fn: MapFn = map,
    pins: Pins = NO_PINS,
) -> SweepResult:
    """The exact `finalists` fastest plans of `base`'s model and training on `gpus` GPUs, simulated.

    `max_memory_gib` caps the memory a plan may use per GPU below the GPU's own (headroom for the
    framework, or a smaller card of the same kind). `pins` fix axes to given values (sweep --pin), and
    under `pins.runnable` keep to the plans the scenario's framework runs (sweep --runnable).
    `map_fn` runs the subtrees of the space, then the
    simulations (a process pool's map spreads them over cores); the result does not depend on it."""
    if not 0 < gpus <= MAX_WORLD_SIZE:  # ValueError: the CLI and the dashboard show it as bad input
        raise ValueError(f"--gpus must be between 1 and {MAX_WORLD_SIZE:,}, got {gpus:,}")
    base = _base_for(base, gpus)
    pins, runnable = pins.for_framework(base.parallelism.framework), pins.runnable
    # headroom for context, NCCL, fragmentation; --max-memory-gib caps it further
    limit = min(base.cluster.gpu.usable_memory_GiB, max_memory_gib or math.inf) * GiB
    packed: dict[LayerKey, bytes] = {}
    grouped: Grouped = {}

    group = partial(_group_round, base, gpus, limit, pins, map_fn, grouped, packed)
    run = partial(_simulated, base, limit, runnable=runnable)
    cost = partial(_passes, base.training.global_batch_size)
    bound = Bound(Estimator(base, gpus, packed=packed))

    def expand(group: Group) -> list[Estimate]:
        return [(bound.seconds(plan), _plan_fields(plan), memory) for plan, memory in group.plans()]

    def refine(candidate: Estimate) -> float | None:  # `_replayed` in this process, on the shared bound
        plan = Plan(*candidate[1])
        return bound.replayed(plan) if _passes_exact_checks(base, limit, plan, runnable) else None

    def refine_many(batch: list[Estimate]) -> Iterable[float | None]:  # each task carries its layer costs
        tasks = [(c[1], bound.est.layer(Plan(*c[1]))) for c in batch]  # a pool's map: worked out meanwhile
        return map_fn(partial(_replayed, base, gpus, limit, runnable=runnable), tasks)

    degrees = _degrees(base, gpus, pins)
    opener = Grouper(base, gpus, limit, bound.est, pins, bound=bound)
    best, simulated, refused = best_first(
        [], run, finalists, map_fn, progress, cost, refine,
        None if map_fn is map else refine_many,  # one process: the shared bound's caches serve it better
        Levels(expand=expand, classes=opener.classes, degrees=degrees, group=group, open=opener.open,
               walk=lambda c: bound.walked(Plan(*c[1]))),
    )  # fmt: skip
    left, parts = [d for d in degrees if d not in grouped], grouped.values()
    return SweepResult(
        best,
        sum(part[1][0] for part in parts) + sum(d.plans for d in left),
        sum(part[1][1] for part in parts),
        sum(part[1][2] for part in parts),
        simulated,
        refused,
        tuple(left),
    )
