"""The sweep's space cut into (tp, pp) subtrees: the subtrees cover every plan once, their closed-form
sizes are exact, the largest go to the workers first, and bounding them one task each finds exactly
what one estimator over the whole space finds."""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import pytest

from plancast.simulator.costs.memory import GiB
from plancast.simulator.scenario import Scenario
from plancast.simulator.sweep import (
    _base_for,
    _degrees,
    _layer_costs,
    _parts,
    _plan_fields,
    _rank,
    _smallest_fits,
    sweep,
)
from plancast.simulator.sweep_axes import Plan
from plancast.simulator.sweep_bound import Bound
from plancast.simulator.sweep_estimate import Estimator
from plancast.simulator.sweep_space import (
    NO_PINS,
    LayerBalancer,
    by_size,
    enumerate_plans,
    roots,
    subtree_sizes,
)
from tests.simulator.test_sweep import small


def scenario(preset: str, gpus: int, memory_gib: float, batch: int) -> Scenario:
    return _base_for(small(gpus, memory_gib, batch, layers=None, preset=preset), gpus)


# (preset, GPUs, GiB per GPU, global batch): dense and MoE (expert-parallel degrees below each subtree),
# each roomy and tight (1 MiB: the smallest-footprint check prunes some subtrees, a few plans still fit)
CASES = [(preset, 8, memory_gib, 16) for preset in ("tiny-gpt", "tiny-moe") for memory_gib in (1.0, 0.001)]


def one_estimator(base: Scenario, gpus: int, limit_bytes: float) -> tuple[list[Any], int, int, Estimator]:
    """The plain search: one estimator over every plan, pruning a (tp, pp, ep, cp, etp) subtree whose
    smallest footprint does not fit; candidates (lower bound, plan, memory) sorted, counts enumerated and
    pruned, the estimator."""
    est, splits = Estimator(base, gpus), LayerBalancer(base, gpus)
    bound = Bound(est)
    candidates, enumerated, pruned, fits = [], 0, 0, {}
    for plan in enumerate_plans(base, gpus):
        enumerated += 1
        key = (plan.tp, plan.pp, plan.ep, plan.cp, plan.etp)
        if key not in fits:
            fits[key] = _smallest_fits(est, splits, limit_bytes, plan)
        if not fits[key]:
            pruned += 1
            continue
        memory = est.memory_bytes(plan)
        if memory <= limit_bytes:
            candidates.append((bound.seconds(plan), _plan_fields(plan), memory / GiB))
    return sorted(candidates), enumerated, pruned, est


@pytest.mark.parametrize(("preset", "gpus", "memory_gib", "batch"), CASES)
def test_subtree_sizes_count_the_plans_under_each_root(
    preset: str, gpus: int, memory_gib: float, batch: int
) -> None:
    base = scenario(preset, gpus, memory_gib, batch)
    counted = Counter((plan.tp, plan.pp) for plan in enumerate_plans(base, gpus))
    sizes = subtree_sizes(base, gpus)
    assert list(sizes) == roots(base, gpus)
    assert {root: n for root, n in sizes.items() if n} == dict(counted)
    every = list(enumerate_plans(base, gpus))
    one_by_one = list(
        itertools.chain.from_iterable(enumerate_plans(base, gpus, (root,)) for root in roots(base, gpus))
    )
    assert sorted(one_by_one) == sorted(every) and len(set(every)) == len(every)


def test_by_size_puts_the_largest_first_and_leaves_out_empty_parts() -> None:
    assert by_size({(1, 1): 5, (1, 2): 0, (2, 1): 9, (4, 1): 5}) == [(2, 1), (1, 1), (4, 1)]
    assert by_size({1: 3, 2: 7, 4: 0}) == [2, 1]


@pytest.mark.parametrize(("preset", "gpus", "memory_gib", "batch"), CASES)
def test_ranking_by_subtrees_finds_what_one_estimator_finds(
    preset: str, gpus: int, memory_gib: float, batch: int
) -> None:
    base = scenario(preset, gpus, memory_gib, batch)
    limit = base.cluster.gpu.usable_memory_GiB * GiB
    candidates, enumerated, pruned, _ = one_estimator(base, gpus, limit)
    ranked = _rank(base, gpus, limit, map)
    assert sorted(c for part, _, _ in ranked for c in part) == candidates
    assert (sum(n for _, n, _ in ranked), sum(n for _, _, n in ranked)) == (enumerated, pruned)
    assert candidates and (pruned > 0) == (memory_gib < 0.01)  # the tight cases prune, the others not


@pytest.mark.parametrize(("preset", "gpus", "memory_gib", "batch"), CASES)
def test_each_tp_degrees_layer_costs_are_those_ranking_plan_by_plan_works_out(
    preset: str, gpus: int, memory_gib: float, batch: int
) -> None:
    base = scenario(preset, gpus, memory_gib, batch)
    limit = base.cluster.gpu.usable_memory_GiB * GiB
    lazy = one_estimator(base, gpus, limit)[3].layers
    tables: dict[Any, Any] = {}
    for tp in dict.fromkeys(tp for tp, _ in roots(base, gpus)):
        tables.update(_layer_costs(base, gpus, limit, [root for root in roots(base, gpus) if root[0] == tp]))
    # none missing and exactly the same numbers; the only extras are dispatcher/overlap variants of a
    # priced layer (cheap: the all-to-alls priced again), worked out for every branch the memory check keeps
    assert {key: tables[key] for key in lazy} == lazy
    assert all(key[7:9] != ("alltoall", False) for key in tables.keys() - lazy.keys())


@pytest.mark.parametrize("preset", ["tiny-moe", "tiny-gpt"])
def test_the_largest_parts_go_to_the_pool_first(preset: str) -> None:
    """sweep() hands the pool tp degrees in rounds as the search reaches their floors, the least floor's
    alone first, each degree at most once, split into its (cp, ep) parts (each part's subtrees together,
    so that their per-layer costs are worked out once), or a degree of one part alone in its round into
    two halves of its subtrees; a round's task with the most branches first. `_rank`, the plan-by-plan
    ranking: one task per subtree, the largest first."""
    base = scenario(preset, 8, 1.0, 16)
    sizes = subtree_sizes(base, 8)
    calls: list[list[Any]] = []

    def recording_map(fn: Callable[[Any], Any], items: Sequence[Any]) -> Iterable[Any]:
        calls.append(list(items))
        return map(fn, items)

    sweep(base, 8, finalists=2, map_fn=recording_map)
    rounds = [items for items in calls if items and isinstance(items[0][0], list)]  # (subtrees, part)
    tasks = [(tuple(subtrees), part) for items in rounds for subtrees, part in items]
    degrees = {d.tp: d for d in _degrees(base, 8, NO_PINS)}
    assert len(tasks) == len(set(tasks)) and {s[0][0] for s, _ in tasks[: len(rounds[0])]} == {min(degrees)}
    for items in rounds:
        tps = {subtrees[0][0] for subtrees, _ in items}
        assert all(root[0] == subtrees[0][0] for subtrees, _ in items for root in subtrees)
        expected = [
            (roots, part, n)
            for tp in tps
            for roots, part, n in _parts(base, 8, degrees[tp], NO_PINS, len(tps) == 1)
        ]
        assert sorted((tuple(r), p) for r, p, _ in expected) == sorted((tuple(r), p) for r, p in items)
        counts = {(tuple(r), p): n for r, p, n in expected}
        found = [counts[tuple(r), p] for r, p in items]
        assert found == sorted(found, reverse=True)
    if preset == "tiny-moe":
        assert len({part for _, part in tasks}) > 1  # the MoE model's degrees split by ep
    else:
        assert any(len(items) == 2 and len({s[0][0] for s, _ in items}) == 1 for items in rounds)  # halves
    calls.clear()
    _rank(base, 8, base.cluster.gpu.usable_memory_GiB * GiB, recording_map)
    order = [root for root, _ in calls[1]]
    assert [sizes[root] for root in order] == sorted((n for n in sizes.values() if n), reverse=True)
    assert len(order) > 4 and sorted(order) == sorted(root for root, n in sizes.items() if n)


def test_each_round_simulates_the_longest_first_and_the_ranking_does_not_change() -> None:
    base = scenario("tiny-gpt", 8, 0.002, 16)  # tight: plans with 1 to 8 pipeline passes
    rounds: list[list[Any]] = []

    def recording_map(fn: Callable[[Any], Any], items: Sequence[Any]) -> Iterable[Any]:
        rounds.append(list(items))
        return map(fn, items)

    result = sweep(base, 8, finalists=16, map_fn=recording_map)
    # not the tp degrees' rounds (lists of subtrees) nor the refinements' (plan fields and layer costs)
    simulated = [r for r in rounds if r and isinstance(r[0], tuple) and len(r[0]) == 3]
    for batch in simulated:
        plans = [Plan(*fields) for _, fields, _ in batch]
        passes = [p.pp * p.virtual_stages * 16 // (p.dp * p.micro_batch_size) for p in plans]
        assert passes == sorted(passes, reverse=True)
    assert any(len({p[0] for p in batch}) > 1 for batch in simulated)
    steps = [r.step_time_s or 0.0 for r in result.finalists]
    assert steps == sorted(steps) and len(steps) == 16
    assert result.finalists == sweep(base, 8, finalists=16).finalists  # the same with plain map
