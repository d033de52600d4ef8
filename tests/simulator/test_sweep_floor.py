"""simulator/sweep_floor.py: a tp degree's floor is at most the engine's step time of every plan of that
degree, under the settings that move its terms; it rises with tp and loses its tp term under
tp_comm_overlap; and a sweep that groups a degree only once its floor is reached finds the same top k."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from plancast.simulator.costs.memory import GiB
from plancast.simulator.loader import load_scenario
from plancast.simulator.scenario import Scenario
from plancast.simulator.sweep import _base_for, _degrees, _plan_fields, _simulated, sweep
from plancast.simulator.sweep_floor import compute_floor_s, tp_floor_s
from plancast.simulator.sweep_space import NO_PINS, enumerate_plans
from scripts.sweep_exhaustive import base_of
from tests.cli_runner import REPO
from tests.simulator.test_sweep import small

SETTINGS: list[tuple[str, dict[str, dict[str, Any]], dict[str, Any]]] = [
    ("plain", {}, {}),
    ("flash attention, longer sequences", {"training": {"flash_attention": True, "seq_len": 256}}, {}),
    ("fused attention", {"training": {"flash_attention": True, "attention_backend": "te"}}, {}),
    ("bf16", {"training": {"dtype": "bf16"}}, {}),
    ("no tp collectives on the critical path", {"parallelism": {"tp_comm_overlap": True}}, {}),
    ("grouped GEMMs at 1/4 the rate", {"compute": {"matmul_half_gflop": 0.0}}, {}),
    ("capacity factor 0.5: half the expert slots", {}, {"moe_capacity_factor": 0.5}),
]


def _base(preset: str, tables: dict[str, dict[str, Any]], model: dict[str, Any]) -> Scenario:
    base = small(8, 1.0, 16, layers=None, preset=preset, **tables)
    if model:
        base = base.model_copy(update={"model": base.model.model_copy(update=model)})
    return _base_for(base, 8)


@pytest.mark.parametrize("preset", ["tiny-gpt", "tiny-moe"])
@pytest.mark.parametrize(("name", "tables", "model"), SETTINGS, ids=[s[0] for s in SETTINGS])
def test_no_plan_of_a_degree_is_faster_than_its_floor(
    preset: str, name: str, tables: dict[str, dict[str, Any]], model: dict[str, Any]
) -> None:
    base = _base(preset, tables, model)
    floors = {d.tp: d.floor_s for d in _degrees(base, 8, NO_PINS)}
    assert floors[1] > 0.0 and len(floors) > 1
    plans = list(enumerate_plans(base, 8))
    checked = 0
    for plan in plans[:: max(len(plans) // 60, 1)]:
        ranked = _simulated(base, 1.0 * GiB, (0.0, _plan_fields(plan), 0.0))
        if ranked is None or ranked.step_time_s is None:
            continue
        checked += 1
        assert floors[plan.tp] <= ranked.step_time_s, (name, plan.label())
    assert checked >= 20


def test_the_floor_rises_with_tp_and_tp_comm_overlap_removes_its_tp_term() -> None:
    base = _base("tiny-gpt", {}, {})
    tp_terms = [tp_floor_s(base, 8, tp) for tp in (1, 2, 4, 8)]
    assert tp_terms[0] == 0.0 and tp_terms == sorted(tp_terms) and tp_terms[1] > 0.0
    assert tp_terms[2] > 2 * tp_terms[1]  # tp 4 leaves the 2-GPU fast tier for the slow one
    hidden = _base("tiny-gpt", {"parallelism": {"tp_comm_overlap": True}}, {})
    assert [tp_floor_s(hidden, 8, tp) for tp in (1, 2, 4, 8)] == [0.0] * 4
    assert compute_floor_s(hidden, 8) == compute_floor_s(base, 8) > 0.0


def _slow_outer_tier(base: Scenario, gbps: float) -> Scenario:
    tiers = list(base.cluster.tiers)
    tiers[-1] = tiers[-1].model_copy(update={"bandwidth_GBps": gbps})
    return base.model_copy(update={"cluster": base.cluster.model_copy(update={"tiers": tiers})})


def test_a_sweep_that_skips_degrees_by_their_floor_finds_the_same_top_k(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A slow outer tier (1 MB/s) puts tp 4's floor above the best plans: it is never grouped, and the
    top k is the one grouping every degree finds."""
    base = _slow_outer_tier(
        small(8, 1.0, 64, preset="tiny-gpt", parallelism={"sequence_parallel": False}), 0.001
    )
    found = sweep(base, 8, finalists=2)
    slowest = found.finalists[-1].step_time_s or 0.0
    assert [d.tp for d in found.ungrouped] == [4] and found.ungrouped[0].floor_s > slowest
    monkeypatch.setattr("plancast.simulator.sweep.degree_floor_s", lambda *_, **__: 0.0)
    every = sweep(base, 8, finalists=2)
    assert not every.ungrouped and every.finalists == found.finalists
    assert every.enumerated == found.enumerated and every.fits > found.fits


SPACES = sorted((REPO / "tests" / "data" / "sweep").glob("*.json"))


@pytest.mark.parametrize("path", SPACES, ids=[p.stem for p in SPACES])
def test_every_real_top_plan_is_above_its_degrees_floor(path: Path) -> None:
    """The exhaustive top 10 of each real space (tests/data/sweep/, the engine's step times): each at
    least its tp degree's floor, and the floor not idle (within 3x of the best)."""
    data = json.loads(path.read_text())
    base = _base_for(base_of(data["space"])[0], data["gpus"])
    compute_s = compute_floor_s(base, data["gpus"])
    ratios = []
    for row in data["top"]:
        tp = int(re.match(r"tp(\d+)", row["plan"]).group(1))  # type: ignore[union-attr]
        floor = compute_s + tp_floor_s(base, data["gpus"], tp)
        assert floor <= row["step_time_s"], row["plan"]
        ratios.append(row["step_time_s"] / floor)
    assert min(ratios) < 3.0


@pytest.mark.parametrize(
    ("source", "gpus"), [("gpt3-175b-dgx-a100.toml", 1536), ("mixtral-8x7b-dgx-h100.toml", 64)]
)
def test_sampled_real_plans_are_above_their_degrees_floor(source: str, gpus: int) -> None:
    base = _base_for(load_scenario(REPO / "examples" / source).scenario, gpus)
    floors = {d.tp: d.floor_s for d in _degrees(base, gpus, NO_PINS)}
    plans = list(enumerate_plans(base, gpus))
    limit = base.cluster.gpu.usable_memory_GiB * GiB
    checked = 0
    for plan in plans[:: len(plans) // 40]:
        ranked = _simulated(base, limit, (0.0, _plan_fields(plan), 0.0))
        if ranked is not None and ranked.step_time_s is not None:
            checked += 1
            assert floors[plan.tp] <= ranked.step_time_s, plan.label()
    assert checked >= 10
