"""Which plan should I buy? Enumerate every valid plan for a model on N GPUs; return the best k, exactly.

The space is tp x pp x dp (x ep for MoE models, x cp on long sequences) x micro-batch x schedule (with
virtual stages) x recompute x sequence parallel x ZeRO stage: hundreds of thousands of plans for GPT-3
on 1,536 GPUs, millions for DeepSeek-V3. Three steps keep it fast and exact (docs/sweep.md):

1. enumerate with pruning: a (tp, pp) pair whose smallest possible footprint (ZeRO-3, full recompute,
   micro-batch 1) does not fit is skipped whole; memory is a closed form per plan (a lower bound of
   the exact peak, so no plan that fits is dropped);
2. bound groups of plans that fit (one batch shape, schedule, SP choice and layer split; recompute, ZeRO
   and the MoE dispatcher and overlap inside) with one lower bound each (simulator/sweep_groups.py);
3. best first: open the group, bound the plan (simulator/sweep_bound.py: a closed form, then the
   replayed schedule) or check and simulate the plan with the smallest bound left, and stop once it
   cannot beat the k-th best simulated step time. Every plan left unsimulated is then slower than the
   k-th best, so the top k is exactly the engine's top k over the whole space.

Steps 1 and 2 run one (tp, pp) subtree per task over `map_fn` (every core at the CLI), the largest
first; the per-layer costs, the one expensive cache, are worked out once per tp degree (for the plans
that fit) in a round before (simulator/sweep_space.py cuts the space). Step 3 refines bounds in rounds
of `REFINE_ROUND` and simulates rounds of `ROUND` plans over `map_fn`.
"""

from __future__ import annotations

import heapq
import math
import operator
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, fields
from functools import partial
from typing import Any

from plancast.simulator.cluster import Tier, fit_tiers
from plancast.simulator.costs.memory import GiB, peak_memory
from plancast.simulator.predict import simulate
from plancast.simulator.scenario import Scenario
from plancast.simulator.sweep_axes import Pins, Plan
from plancast.simulator.sweep_bound import TOLERANCE, Bound, built_schedule
from plancast.simulator.sweep_estimate import Estimator, Layer
from plancast.simulator.sweep_groups import Group, Grouper
from plancast.simulator.sweep_keys import LayerKey
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
    """Plans run through the engine: every plan whose bound could beat the k-th best."""


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


MapFn = Callable[[Callable[[Any], Any], Sequence[Any]], Iterable[Any]]
"""`map`'s contract: fn over the items, results in the items' order (a process pool's map at the CLI)."""


Estimate = tuple[float, tuple[Any, ...], float]
"""(bound_s, the plan's fields, memory_GiB): plain tuples cost a tenth of dataclasses to send back from
a worker process, and sort as (bound_s, Plan) does."""
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


def _group_tp_degree(
    base: Scenario, gpus: int, limit_bytes: float, subtrees: list[Root], pins: Pins = NO_PINS
) -> tuple[dict[LayerKey, Layer], list[Group], int, int, int]:
    """One tp degree's subtrees in one task: the per-layer costs of its plans that fit (worked out as
    its groups' bounds need them, once for all its subtrees), its groups with plans that fit
    (simulator/sweep_groups.py), and its plans enumerated, fitting and pruned."""
    grouper = Grouper(base, gpus, limit_bytes, Estimator(base, gpus), pins)
    for branch in branches(base, gpus, subtrees, pins):
        grouper.add(branch)
    return grouper.est.layers, grouper.groups, grouper.enumerated, grouper.fits, grouper.pruned


def _per_tp(base: Scenario, gpus: int, pins: Pins) -> list[list[Root]]:
    """The (tp, pp) subtrees of each tp degree, the degree with the most plans first (a task costs about
    its plan count), subtrees in `roots` order."""
    sizes = subtree_sizes(base, gpus, pins)
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
    per_tp = _per_tp(base, gpus, pins)
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


def _simulated(base: Scenario, limit_bytes: float, candidate: Estimate) -> Ranked | None:
    """A candidate run through the engine, if it passes the exact checks (the plan's rules, peak memory
    over every pipeline rank): its simulated step time, peak memory and summary; else None."""
    bound_s, plan_fields, _ = candidate
    s = Plan(*plan_fields).apply(base)
    if check_plan(s)[0]:
        return None
    # the schedule peak_memory would build, from the cache its replay filled (pure in these arguments)
    schedule = built_schedule(s.parallelism.pipeline_parallel_schedule, s.pp, s.num_microbatches, s.vpp)
    if peak_memory(s, schedule)[1].total > limit_bytes:
        return None
    summary = simulate(s, events=False).summary
    return Ranked(Plan(*plan_fields), bound_s, summary["peak_memory_gib"], summary["step_time_s"], summary)


def _replayed(base: Scenario, gpus: int, task: tuple[tuple[Any, ...], Layer]) -> float:
    """`Bound.replayed` of a plan in a worker, from its per-layer costs alone (the bound's other caches
    are its own; a fresh bound gives what a shared one does, tests/simulator/test_sweep.py)."""
    fields, layer = task
    plan, est = Plan(*fields), Estimator(base, gpus)
    est.layers[est.key(plan)] = layer
    return Bound(est).replayed(plan)


def _passes(batch_size: int, candidate: Estimate) -> int:
    """About how many pipeline passes the engine simulates for a plan (pipeline ranks x chunks x
    micro-batches): what its simulation costs, from 7 to 90 ms among GPT-3's best plans."""
    plan = Plan(*candidate[1])
    return plan.pp * plan.virtual_stages * (batch_size // (plan.dp * plan.micro_batch_size))


class _Frontier:
    """Candidates in the order of their tighter bound, worked out lazily: one heap of groups (opened into
    their plans' first bounds once no other entry is smaller), first bounds (refined once no other
    entry is smaller) and tighter bounds (returned once no other entry is smaller). Each entry's key is
    at most every bound below it (a group's is at most its members', a first bound at most its tighter
    one), so the candidate returned has the smallest tighter bound of all."""

    def __init__(
        self,
        candidates: list[Estimate],
        refine: Callable[[Estimate], float] | None,
        groups: Sequence[Group] = (),
        expand: Callable[[Group], list[Estimate]] | None = None,
        refine_many: Callable[[list[Estimate]], list[float]] | None = None,
        classes: Callable[[Group], list[Group]] | None = None,
    ) -> None:
        self.expand, self.classes = expand, classes
        self.refine_many = refine_many or (lambda batch: [refine(c) if refine else c[0] for c in batch])
        self.batch = REFINE_ROUND if refine_many is not None else 1
        self.heap: list[tuple[float, int, Any]] = [(c[0], _FIRST, c) for c in candidates]
        self.heap += [(g.bound_s, _GROUP, g) for g in groups]
        heapq.heapify(self.heap)

    def pop(self) -> Estimate | None:
        """The candidate with the smallest tighter bound (its bound in place of the first), or None."""
        while self.heap:
            _, kind, item = heapq.heappop(self.heap)
            if kind == _TIGHT:
                return item
            if kind == _GROUP:
                self._open(item)
                continue
            batch = [item, *self._firsts()]
            for candidate, refined in zip(batch, self.refine_many(batch), strict=True):
                tighter = max(candidate[0], refined)
                heapq.heappush(self.heap, (tighter, _TIGHT, (tighter, *candidate[1:])))
        return None

    def _firsts(self) -> list[Estimate]:
        """The first bounds next in line after one just taken, to refine with it (up to `batch` in all):
        taken while the smallest entry is a first bound or a group (opened on the way), so that each
        would be refined next anyway unless the search stops first."""
        out: list[Estimate] = []
        while self.heap and len(out) + 1 < self.batch and self.heap[0][1] != _TIGHT:
            _, kind, item = heapq.heappop(self.heap)
            if kind == _GROUP:
                self._open(item)
            else:
                out.append(item)
        return out

    def _open(self, group: Group) -> None:
        """A mixed group into its classes (each bound at least the group's), any other into its plans."""
        if group.mixed and self.classes is not None:
            for part in self.classes(group):
                heapq.heappush(self.heap, (part.bound_s, _GROUP, part))
            return
        assert self.expand is not None
        for candidate in self.expand(group):
            heapq.heappush(self.heap, (candidate[0], _FIRST, candidate))

    def below(self, threshold_s: float) -> int:
        """About how many candidates left could still beat `threshold_s` (for progress)."""
        return sum(
            len(item.members) * len(item.variants) if kind == _GROUP else 1
            for key, kind, item in self.heap
            if key <= threshold_s
        )


REFINE_ROUND = 32
"""First bounds refined together over a worker pool (`refine_many`): enough to keep its workers busy;
a few may be refined that the search would have stopped before (never a different top k)."""

_TIGHT, _FIRST, _GROUP = 0, 1, 2
"""Kinds of frontier entries; on equal keys the tighter bound comes out first, as before a refinement."""


ROUND = 16
"""Plans simulated per round of the best-first search: enough to keep a pool's workers busy. The top k
does not depend on it (only how many plans beyond the stopping point get simulated too)."""


def best_first(
    candidates: list[Estimate],
    run: Callable[[Estimate], Ranked | None],
    k: int,
    map_fn: MapFn = map,
    progress: Callable[[int, int], None] | None = None,
    cost: Callable[[Estimate], int] | None = None,
    refine: Callable[[Estimate], float] | None = None,
    groups: Sequence[Group] = (),
    expand: Callable[[Group], list[Estimate]] | None = None,
    refine_many: Callable[[list[Estimate]], list[float]] | None = None,
    classes: Callable[[Group], list[Group]] | None = None,
) -> tuple[list[Ranked], int]:
    """The k fastest of `candidates` by `run`'s step time, sorted (ties by plan), and how many were run.

    `candidates` are sorted by a lower bound of that time; `refine` gives a tighter one (never below
    it), worked out lazily (`_Frontier`). Rounds of the next `ROUND` candidates by tighter bound run over
    `map_fn`; the search stops at the first whose bound, less the bound's rounding slack, exceeds the
    k-th best: it and every one after it are slower, so the result is what running every candidate
    would give. `cost` orders each round, the costliest first, so that a pool ends on short runs.
    `groups` join the candidates, each opened into its members' candidates by `expand` only once its
    bound is the smallest left (simulator/sweep_groups.py). `refine_many` refines several at once
    (`REFINE_ROUND`, over a pool) in place of `refine`; `classes` splits a mixed group before it is
    opened (sweep_groups.Grouper.classes)."""
    best: list[Ranked] = []
    frontier = _Frontier(candidates, refine, groups, expand, refine_many, classes)
    simulated = 0
    stopped = False
    while not stopped:
        threshold = (best[k - 1].step_time_s or math.inf) if len(best) >= k else math.inf
        batch: list[Estimate] = []
        while len(batch) < ROUND:
            candidate = frontier.pop()
            stopped = candidate is None or candidate[0] * (1 - TOLERANCE) > threshold
            if stopped or candidate is None:
                break
            batch.append(candidate)
        if cost is not None:
            batch.sort(key=cost, reverse=True)
        for done in map_fn(run, batch):
            simulated += 1
            if done is not None:
                best.append(done)
        best.sort(key=lambda r: (r.step_time_s or math.inf, r.plan))
        del best[k:]
        if progress is not None:
            progress(simulated, simulated + frontier.below(threshold))
    return best, simulated


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
    framework, or a smaller card of the same kind). `pins` fix axes to given values (sweep --pin).
    `map_fn` runs the subtrees of the space, then the
    simulations (a process pool's map spreads them over cores); the result does not depend on it."""
    if not 0 < gpus <= MAX_WORLD_SIZE:  # ValueError: the CLI and the dashboard show it as bad input
        raise ValueError(f"--gpus must be between 1 and {MAX_WORLD_SIZE:,}, got {gpus:,}")
    base = _base_for(base, gpus)
    # headroom for context, NCCL, fragmentation; --max-memory-gib caps it further
    limit = min(base.cluster.gpu.usable_memory_GiB, max_memory_gib or math.inf) * GiB
    layers: dict[LayerKey, Layer] = {}
    grouped = list(map_fn(partial(_group_tp_degree, base, gpus, limit, pins=pins), _per_tp(base, gpus, pins)))
    for part in grouped:
        layers.update(part[0])
    run, cost = partial(_simulated, base, limit), partial(_passes, base.training.global_batch_size)
    bound = Bound(Estimator(base, gpus, layers))

    def expand(group: Group) -> list[Estimate]:
        return [(bound.seconds(plan), _plan_fields(plan), memory) for plan, memory in group.plans()]

    def refine_many(batch: list[Estimate]) -> list[float]:  # each task carries its plan's layer costs
        tasks = [(c[1], layers[bound.est.key(Plan(*c[1]))]) for c in batch]
        return list(map_fn(partial(_replayed, base, gpus), tasks))

    best, simulated = best_first(
        [], run, finalists, map_fn, progress, cost, lambda c: bound.replayed(Plan(*c[1])),
        [g for part in grouped for g in part[1]], expand,
        None if map_fn is map else refine_many,  # one process: the shared bound's caches serve it better
        Grouper(base, gpus, limit, bound.est, pins, bound=bound).classes,
    )  # fmt: skip
    return SweepResult(
        best,
        sum(part[2] for part in grouped),
        sum(part[3] for part in grouped),
        sum(part[4] for part in grouped),
        simulated,
    )
