"""The sweep's groups (simulator/sweep_groups.py): opened, they hold exactly the plans that fit, with the
memory and first bound that ranking plan by plan gives; each group's bound is at most every member's;
the counts are the plan-by-plan search's; and the search over groups returns what the search over
every plan's bound returns."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from plancast.simulator.costs.memory import GiB
from plancast.simulator.scenario import Scenario
from plancast.simulator.sweep import (
    _group_tp_degree,
    _per_tp,
    _plan_fields,
    _rank,
    _simulated,
    best_first,
    sweep,
)
from plancast.simulator.sweep_axes import Plan
from plancast.simulator.sweep_bound import Bound
from plancast.simulator.sweep_estimate import Estimator, Layer
from plancast.simulator.sweep_groups import Grouper, MemberMemo, member_memories
from plancast.simulator.sweep_keys import LayerKey
from plancast.simulator.sweep_layer import unpack
from plancast.simulator.sweep_space import NO_PINS, branches, enumerate_plans
from tests.simulator.test_sweep_space import CASES, scenario


def grouped(base: Scenario, gpus: int, limit: float) -> tuple[list[Any], dict[LayerKey, Layer], list[Any]]:
    """Every subtree's groups, bounded as the search bounds them once it reaches their family, and counts,
    as sweep() makes them, with the layer costs. Each group's bound is at least its family's floor."""
    parts = [
        _group_tp_degree(base, gpus, limit, (subtrees, None)) for subtrees in _per_tp(base, gpus, NO_PINS)
    ]
    layers = {key: unpack(data) for part in parts for key, data in part[0].items()}
    opener = Grouper(base, gpus, limit, Estimator(base, gpus, layers), NO_PINS)
    groups = []
    for family in (f for part in parts for f in part[1]):
        assert family.groups and all(g.bound_s == 0.0 for g in family.groups)
        for group in opener.open(family):
            assert group.bound_s >= family.floor_s > 0.0
            groups.append(group)
    return groups, layers, [part[1:] for part in parts]


@pytest.mark.parametrize(("preset", "gpus", "memory_gib", "batch"), CASES)
def test_groups_hold_exactly_the_plans_that_fit_and_bound_each_below(
    preset: str, gpus: int, memory_gib: float, batch: int
) -> None:
    base = scenario(preset, gpus, memory_gib, batch)
    limit = base.cluster.gpu.usable_memory_GiB * GiB
    groups, layers, parts = grouped(base, gpus, limit)
    bound = Bound(Estimator(base, gpus, layers))
    opened = []
    for group in groups:
        for plan, memory_gib_found in group.plans():
            cheap = bound.seconds(plan)
            assert group.bound_s <= cheap, (plan.label(), group.bound_s, cheap)
            opened.append((cheap, _plan_fields(plan), memory_gib_found))
    ranked = _rank(base, gpus, limit, map)
    assert sorted(opened) == sorted(c for part, _, _ in ranked for c in part)
    assert sum(p[1] for p in parts) == sum(n for _, n, _ in ranked)  # enumerated
    assert sum(p[2] for p in parts) == len(opened)  # fitting
    assert sum(p[3] for p in parts) == sum(n for _, _, n in ranked)  # pruned
    assert opened and len(groups) < len(opened)


@pytest.mark.parametrize("preset", ["tiny-gpt", "tiny-moe"])
def test_member_memories_are_the_estimators_memory(preset: str) -> None:
    base = scenario(preset, 8, 1.0, 16)
    est = Estimator(base, 8)
    below = [(rc, zero) for rc in ("none", "selective", "full") for zero in (0, 1, 2, 3)]
    checked, memo = 0, MemberMemo()  # the Grouper's caches, shared over every pipeline layout
    for plan in enumerate_plans(base, 8):
        if plan.recompute != "none" or plan.zero_stage:
            continue
        found = member_memories(est, plan, below, memo)
        assert found == member_memories(Estimator(base, 8), plan, below)
        for (rc, zero), memory in zip(below, found, strict=True):
            member = replace(plan, recompute=rc, zero_stage=zero)
            assert memory == est.memory_bytes(member), member.label()
            checked += 1
    assert checked > 500 and 1 < len(memo.acts) < checked / len(below)
    assert 1 < len(memo.inflight) < checked / len(below) and 1 < len(memo.states) < checked / len(below)


def test_the_floor_is_at_most_every_members_stage_times_under_fsdp_units_too() -> None:
    """MoE blocks differ (a dense first block), and ZeRO-2/3 members run FSDP units, each its own block's
    share of the pass (simulator/units.py): their stage times are the same sums as the others'. The
    group floor (one floor of the members' segments, summed per stage) is at most every member's stage
    times, field by field, with or without units."""
    from plancast.simulator.sweep_groups import floor_segments
    from plancast.simulator.sweep_segments import stage_times

    base = scenario("tiny-moe", 8, 1.0, 16)
    est = Estimator(base, 8)
    plans = [p for p in enumerate_plans(base, 8) if p.pp == 2 and p.virtual_stages == 1]
    plans = [p for p in plans if not p.first_layers][:60]
    assert any(p.zero_stage >= 2 and p.dp > 1 for p in plans) and any(p.zero_stage < 2 for p in plans)
    split = est.split(plans[0])
    members = [est.stages(p, split) for p in plans]
    low = stage_times(floor_segments([est.layer(p).segments for p in plans]), split)
    for v, stage in enumerate(low):
        for name, least in stage._asdict().items():
            column = [getattr(m[v], name) for m in members]
            assert least <= min(column) * (1 + 1e-12), (v, name)


@pytest.mark.parametrize(("preset", "gpus", "memory_gib", "batch"), CASES)
def test_the_search_over_groups_finds_the_search_over_every_bound(
    preset: str, gpus: int, memory_gib: float, batch: int
) -> None:
    base = scenario(preset, gpus, memory_gib, batch)
    limit = base.cluster.gpu.usable_memory_GiB * GiB
    ranked = _rank(base, gpus, limit, map)
    candidates = sorted(c for part, _, _ in ranked for c in part)
    bound = Bound(Estimator(base, gpus))
    every, *_ = best_first(
        candidates, lambda c: _simulated(base, limit, c), 8, refine=lambda c: bound.replayed(Plan(*c[1]))
    )
    found = sweep(base, gpus, finalists=8)
    assert [r.plan for r in found.finalists] == [r.plan for r in every]
    assert [r.step_time_s for r in found.finalists] == [r.step_time_s for r in every]
    assert found.fits == len(candidates)


def test_each_group_bound_is_below_its_members_on_a_zero_heavy_real_space() -> None:
    """Llama 2 13B on 32 A100s 40GB under torchtitan (tests/data/sweep's FSDP space): a group of several
    classes is split by `Grouper.classes` into full recompute or not, ZeRO 0-1, 2 and 3, whose bounds add
    the gather waits and the ZeRO-2/3 stream; each bound stays below every member's first bound."""
    import json

    from plancast.simulator.loader import parse_scenario
    from plancast.simulator.sweep import _base_for
    from tests.cli_runner import REPO

    data = json.loads((REPO / "tests/data/sweep/llama2-13b-32-a100-40gb-fsdp.json").read_text())
    base = _base_for(parse_scenario(data["scenario"]).scenario, 32)
    limit = base.cluster.gpu.usable_memory_GiB * GiB
    groups, layers, _ = grouped(base, 32, limit)
    bound = Bound(Estimator(base, 32, layers))
    grouper = Grouper(base, 32, limit, bound.est, NO_PINS, bound=bound)
    kinds: set[tuple[bool, int]] = set()
    tighter = 0
    for group in groups:
        parts = grouper.classes(group) if group.mixed else [group]
        assert sorted(m for part in parts for m in part.members) == sorted(group.members)
        for part in parts:
            rcs, zeros = {m[0] == "full" for m in part.members}, {max(m[1], 1) for m in part.members}
            assert len(rcs) == len(zeros) == 1 and not part.mixed, part.members
            kinds.add((rcs.pop(), zeros.pop()))
            assert part.bound_s >= group.bound_s
            tighter += part.bound_s > group.bound_s * 1.01
            for plan, _ in part.plans():
                assert part.bound_s <= bound.seconds(plan), plan.label()
    assert kinds == {(full, zero) for full in (False, True) for zero in (1, 2, 3)}
    assert tighter > len(groups) / 2


def test_a_zero_2_3_class_is_bounded_near_its_fastest_member_when_blocks_differ() -> None:
    """tiny-moe's dense first block makes its blocks' FSDP unit shares differ. A ZeRO-2/3 class's floor
    sums its stages as the engine runs them, each block its own share (simulator/units.py): its bound
    stays within 5% of its fastest member's first bound (scaling the whole model by its smallest block
    over its largest left them 8-27% below; DeepSeek-V3's sweep opened 138,615 groups with it)."""
    from plancast.simulator.sweep_groups import Grouper

    base = scenario("tiny-moe", 8, 1.0, 16)
    limit = base.cluster.gpu.usable_memory_GiB * GiB
    groups, layers, _ = grouped(base, 8, limit)
    bound = Bound(Estimator(base, 8, layers))
    grouper = Grouper(base, 8, limit, bound.est, NO_PINS, bound=bound)
    ratios = []
    for group in groups:
        for part in grouper.classes(group) if group.mixed else [group]:
            if part.members[0][1] >= 2 and part.shape[2] > 1:  # ZeRO-2/3 over dp > 1: FSDP units
                ratios.append(part.bound_s / min(bound.seconds(plan) for plan, _ in part.plans()))
    assert len(ratios) > 500
    assert min(ratios) >= 0.95 and max(ratios) <= 1.0


@pytest.mark.parametrize(("preset", "gpus", "memory_gib", "batch"), CASES)
def test_a_familys_floor_is_below_each_of_its_groups_unbounded_and_tight_on_some(
    preset: str, gpus: int, memory_gib: float, batch: int
) -> None:
    """A family's floor (sweep_groups.Family: m / pp times the model's total over its least segments) is at
    most the bound `Grouper` gives each of its groups computed the way it was before families (in the
    grouping task, `defer` off), and within a few percent of the least of them somewhere (a pipeline
    without bubbles: pp 1)."""
    base = scenario(preset, gpus, memory_gib, batch)
    limit = base.cluster.gpu.usable_memory_GiB * GiB
    closest, found = 0.0, 0
    for subtrees in _per_tp(base, gpus, NO_PINS):
        _, families, *_ = _group_tp_degree(base, gpus, limit, (subtrees, None))
        direct = Grouper(base, gpus, limit, Estimator(base, gpus), NO_PINS)
        for root in subtrees:
            for branch in branches(base, gpus, [root], NO_PINS):
                direct.add(branch)
        bounds = {(g.shape, g.members): g.bound_s for g in direct.groups}
        found += len(families)
        for family in families:
            least = min(bounds[g.shape, g.members] for g in family.groups)
            assert family.floor_s <= least, (family.groups[0].shape, family.floor_s, least)
            closest = max(closest, family.floor_s / least)
    assert found and (closest > 0.9 or memory_gib < 1.0)  # 1 MiB: a few plans fit


def test_the_model_total_is_the_sum_of_every_stage_total_under_any_split() -> None:
    from plancast.simulator.sweep_segments import model_total_s, stage_times

    base = scenario("tiny-moe", 8, 1.0, 16)
    est = Estimator(base, 8)
    plans = [p for p in enumerate_plans(base, 8) if p.pp > 1][:200]
    assert {p.recompute for p in plans} >= {"none", "full"}
    for plan in plans:
        seg = est.layer(plan).segments
        for split in (est.split(plan), (1, base.model.num_hidden_layers - 1)):
            total = sum(st.total_s for st in stage_times(seg, split))
            assert model_total_s(seg) == pytest.approx(total, rel=1e-12)


def test_plans_the_exact_checks_refuse_are_counted_apart_from_those_simulated() -> None:
    """`best_first` counts a candidate `run` turns down (None: the exact rules or every rank's memory)
    as refused, not simulated; the best are those `run` ranked."""
    from plancast.simulator.sweep import Ranked, _plan_fields
    from plancast.simulator.sweep_frontier import best_first

    plans = [Plan(1, 1, 8, b, "1F1B", 1, "none", False, 0) for b in range(1, 9)]
    candidates = [(float(i), _plan_fields(p), 1.0) for i, p in enumerate(plans)]
    calls: list[bool] = []

    def run(candidate: Any) -> Ranked | None:
        bound_s, fields, _ = candidate
        calls.append(int(bound_s) % 2 == 1)  # odd bounds: refused before simulating
        return None if calls[-1] else Ranked(Plan(*fields), bound_s, 1.0, bound_s + 0.5)

    best, simulated, refused = best_first(list(candidates), run, 2)
    assert [r.step_time_s for r in best] == [0.5, 2.5]
    assert refused == sum(calls) >= 1 and simulated == len(calls) - refused >= 2


def test_a_refinement_the_exact_checks_refuse_is_counted_and_never_simulated() -> None:
    """A refinement of None (simulator/sweep.py `_replayed`: the plan fails the exact checks, made before
    its replay) is counted as refused and never reaches `run`; a round counts those refused while it
    was gathered among its ROUND plans, so the first k-th best comes as soon as before."""
    from plancast.simulator.sweep import Ranked, _plan_fields
    from plancast.simulator.sweep_frontier import ROUND, best_first

    plans = [Plan(1, 1, 8, 1, "1F1B", 1, "none", False, 0, first_layers=i) for i in range(40)]
    candidates = [(float(i), _plan_fields(p), 1.0) for i, p in enumerate(plans)]
    rounds: list[int] = []
    turned_down: list[float] = []

    def refine(candidate: Any) -> float | None:  # three in four do not fit
        if int(candidate[0]) % 4:
            turned_down.append(candidate[0])
            return None
        return candidate[0] + 0.25

    def run(candidate: Any) -> Ranked:
        bound_s, fields, _ = candidate
        assert int(bound_s) % 4 == 0, "a refused plan reached the engine"
        return Ranked(Plan(*fields), bound_s, 1.0, bound_s + 0.5)

    def map_fn(fn: Any, batch: list[Any]) -> list[Any]:
        rounds.append(len(batch))
        return [fn(c) for c in batch]

    best, simulated, refused = best_first(list(candidates), run, 2, map_fn, refine=refine)
    assert [r.step_time_s for r in best] == [0.75, 4.75]
    # the first round ends once its plans and the refused reach ROUND: 0, 4, 8, 12 and 16 (the refinements
    # of 13-15 come before 16 is returned), 12 refused; counting only plans that fit, it would be 16 deep
    assert rounds == [5] and 4 * rounds[0] - 4 == ROUND
    assert (simulated, refused) == (5, len(turned_down)) and refused >= 12
