"""The pipeline layer balancer: uneven splits the sweep searches beside the even one (Megatron-LM's
--decoder-first/last-pipeline-num-layers), for models whose embedding or output layer unbalance the
stages."""

from __future__ import annotations

from dataclasses import fields, replace
from functools import partial

import pytest

from plancast.simulator.costs.memory import GiB
from plancast.simulator.loader import parse_scenario
from plancast.simulator.scenario import Scenario
from plancast.simulator.sweep import _base_for, _rank, _simulated, best_first
from plancast.simulator.sweep_axes import Plan, balanced_layers
from plancast.simulator.sweep_bound import Bound
from plancast.simulator.sweep_estimate import Estimator
from plancast.simulator.sweep_space import enumerate_plans

FIRST = [f.name for f in fields(Plan)].index("first_layers")
"""Where a candidate's plan fields hold its first stage's blocks (0: the even split)."""


@pytest.mark.parametrize(
    ("layers", "stages", "first_extra", "last_extra", "expected"),
    [
        (32, 4, 0.1, 1.4, (7, 7)),  # the output layer outweighs a block: the end stages shed one each
        (32, 4, 0.0, 0.2, None),  # the even split is as good as it gets
        (4, 2, 0.0, 3.0, (3, 1)),  # a big vocabulary on a tiny model: the last stage keeps one block
        (32, 1, 0.0, 9.0, None),  # nothing to balance
        (96, 96, 0.0, 0.4, None),  # one block per stage: nothing to move
    ],
)
def test_balanced_layers(
    layers: int, stages: int, first_extra: float, last_extra: float, expected: tuple[int, int] | None
) -> None:
    assert balanced_layers(layers, stages, first_extra, last_extra) == expected


def _every_split_tried(
    layers: int, stages: int, first_extra: float, last_extra: float
) -> tuple[int, int] | None:
    """The balancer's rule by brute force: every (first, last), the least (load, |first - last|, first)."""
    from plancast.simulator.layer_split import even_layer_split

    if stages < 2 or layers < stages:
        return None
    tried = []
    for first in range(1, layers - stages + 3):
        for last in range(1, layers - first - (stages - 2) + 1):
            rest = layers - first - last
            if stages == 2 and rest:
                continue
            middle = -(-rest // (stages - 2)) if stages > 2 else 0
            load = max(first + first_extra, last + last_extra, middle)
            tried.append((load, abs(first - last), first, last))
    if not tried:
        return None
    load, _, first, last = min(tried)
    even = even_layer_split(layers, stages)
    between = even_layer_split(layers - first - last, stages - 2) if stages > 2 else ()
    even_load = max(even[0] + first_extra, even[-1] + last_extra, *even[1:-1])
    return None if (first, *between, last) == even or load >= even_load else (first, last)


@pytest.mark.parametrize("layers", [4, 7, 24, 61, 96])
def test_the_balancers_early_stops_change_no_answer(layers: int) -> None:
    for stages in (2, 3, 4, 5, 8, 16):
        for first_extra in (0.0, 0.3, 1.0, 2.7):
            for last_extra in (0.0, 0.5, 1.4, 3.1, 7.9):
                case = (layers, stages, first_extra, last_extra)
                assert balanced_layers(*case) == _every_split_tried(*case), case


def test_a_plans_split_puts_the_rest_evenly_between_its_end_stages() -> None:
    plan = Plan(1, 4, 1, 1, "1F1B", 1, "none", False, 0, first_layers=7, last_layers=6)
    assert plan.layer_split(32) == (7, 9, 10, 6)  # the middle as scenario.even_layer_split spreads 19
    assert Plan(1, 4, 1, 1, "1F1B", 1, "none", False, 0).layer_split(32) == (8, 8, 8, 8)
    assert "layers 7..6" in plan.label()


def llama3_8b(gpus: int) -> Scenario:
    """Llama 3 8B (128,256-token vocabulary) at 4,096 tokens on H100s."""
    data = {
        "model": {"preset": "llama3-8b"},
        "training": {"seq_len": 4096, "global_batch_size": 64, "dtype": "bf16"},
        "cluster": {"preset": "dgx-h100-80gb", "num_nodes": 1},
    }
    return _base_for(parse_scenario(data).scenario, gpus)


def test_the_balancer_beats_the_best_even_split_of_llama3_8b_on_pp4() -> None:
    """Its output layer is about 1.4 blocks of work: on 4 stages of 8 blocks the last one is the
    bottleneck. Over every pp-4 plan of the schedules the balancer splits (one stage per rank: 1F1B,
    GPipe, ZB-H1), the exact best with the balancer's splits is a balanced plan, faster than the best
    plan with the even split."""
    base = llama3_8b(8)
    limit = base.cluster.gpu.usable_memory_GiB * GiB
    ranked = _rank(base, 8, limit, map)
    candidates = sorted(c for part, _, _ in ranked for c in part if c[1][1] == 4 and c[1][5] == 1)
    assert any(c[1][FIRST] for c in candidates) and any(not c[1][FIRST] for c in candidates)
    run = partial(_simulated, base, limit)
    bound = Bound(Estimator(base, 8))

    def best(pool: list[tuple[float, tuple[object, ...], float]]) -> tuple[float, Plan]:
        found, *_ = best_first(pool, run, 1, refine=lambda c: bound.replayed(Plan(*c[1])))  # type: ignore[arg-type]
        return found[0].step_time_s or 0.0, found[0].plan

    balanced_s, balanced = best(candidates)
    even_s, even = best([c for c in candidates if not c[1][FIRST]])
    assert balanced.first_layers and balanced.layer_split(32) != (8, 8, 8, 8), balanced
    assert balanced_s < 0.99 * even_s, (balanced.label(), balanced_s, even.label(), even_s)


def test_every_balanced_plan_is_its_even_twin_with_another_split() -> None:
    base = llama3_8b(8)
    plans = set(enumerate_plans(base, 8))
    balanced = [p for p in plans if p.first_layers]
    assert balanced and all(p.pp > 1 and p.virtual_stages == 1 for p in balanced)
    assert all(replace(p, first_layers=0, last_layers=0) in plans for p in balanced)

