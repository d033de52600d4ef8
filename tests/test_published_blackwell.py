"""The Blackwell rows of issue 32 (benchmarks/published_blackwell.py) parse as the table prints them, and the
five Megatron-Bridge FP8 H100 rows stay within 15% (benchmarks/published_groups.py)."""

from __future__ import annotations

import pytest

from benchmarks.published_blackwell import SYSTEMS
from benchmarks.published_data import (
    BLACKWELL_RUNS,
    FP8_RUNS,
    TORCHTITAN_FP8_RUNS,
    PublishedRun,
    scenario_dict,
)
from plancast.simulator.loader import parse_scenario

NAME_RECIPE = {"nvfp4": "nvfp4", "mxfp8": "mxfp8", "fp8mx": "mxfp8", "fp8cs": "tensorwise_current",
               "-fp8-": "tensorwise_current"}
"""What a row's name says of its precision -> the recipe it must run."""


@pytest.mark.parametrize("run", BLACKWELL_RUNS, ids=lambda r: r.name)
def test_every_blackwell_row_parses_on_its_system_and_recipe(run: PublishedRun) -> None:
    s = parse_scenario(scenario_dict(run), run.name).scenario
    assert s.world_size == run.num_gpus
    assert run.cluster["preset"] in {preset for preset, _ in SYSTEMS.values()}
    (recipe,) = {r for key, r in NAME_RECIPE.items() if key in run.name}
    assert s.training.fp8 and s.training.fp8_recipe == recipe
    tokens_per_s = run.tokens_per_step / run.measured_step_time_s / run.num_gpus
    assert tokens_per_s == pytest.approx(run.reported.value)
    nvl72 = run.cluster["preset"].endswith("nvl72")  # one NVLink domain of up to 72: 64 GPUs of a rack
    assert s.cluster.tier_sizes[0] == (min(64, run.num_gpus) if nvl72 else 8)
    assert s.cluster.tiers[0].name == "nvlink"


@pytest.mark.parametrize("run", TORCHTITAN_FP8_RUNS, ids=lambda r: r.name)
def test_torchtitan_float8_rows_parse_as_torchao_runs_them(run: PublishedRun) -> None:
    s = parse_scenario(scenario_dict(run), run.name).scenario
    assert s.world_size == run.num_gpus and s.training.fp8
    assert s.training.fp8_recipe == "tensorwise_current" and s.training.elementwise == "fused"
    assert s.training.global_batch_size * s.training.seq_len == run.tokens_per_step
    assert run.framework == "torchtitan"


def test_the_new_groups_are_wide_enough() -> None:
    """>= 15 Blackwell rows and >= 10 FP8 rows beyond the five H100 ones, over the three narrow recipes."""
    assert len(BLACKWELL_RUNS) >= 15
    assert len(BLACKWELL_RUNS) + len(TORCHTITAN_FP8_RUNS) >= 10 and len(FP8_RUNS) == 5
    assert len({r.source for r in (*FP8_RUNS, *BLACKWELL_RUNS, *TORCHTITAN_FP8_RUNS)}) >= 3
    recipes = {parse_scenario(scenario_dict(r)).scenario.training.fp8_recipe for r in BLACKWELL_RUNS}
    assert recipes == {"tensorwise_current", "mxfp8", "nvfp4"}


def test_the_bridge_h100_fp8_rows_are_each_within_15_percent() -> None:
    from benchmarks.published_groups import score_groups

    rows = score_groups()["bridge_h100_fp8"]
    assert len(rows) == 5
    for r in rows:
        assert abs(r["error"]) <= 0.15, r
