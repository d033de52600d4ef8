"""The new schedules on the CPU runtime (gloo, 2 ranks, pp 2). Through the CLI, `plancast run` then
`plancast compare` on ZB-V and DualPipeV (rank 0 holds the first and last stage, rank 1 the V's turn):
every predicted event has its measured twin, and the losses are the single-process reference's. In
process, ZB-H2, ZB-V and DualPipeV: losses, first-step gradients and parameters equal the reference's
(the tied embedding's two copies on rank 0 included)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import tomli_w

from plancast.runtime.reference import ReferenceRun
from plancast.simulator.loader import load_scenario
from tests.cli_runner import run_and_compare
from tests.distributed.checks import TOLERANCE, tiny_scenario, train_matches_reference
from tests.distributed.spawn import run_ranks

pytestmark = pytest.mark.distributed

STEPS = 2


@pytest.mark.parametrize("schedule", ["ZBV", "DualPipeV"])
def test_v_schedule_twins_every_event_and_keeps_the_losses(tmp_path: Path, schedule: str) -> None:
    data = tiny_scenario(
        2,
        training={"steps": STEPS},  # 8 / 2 = 4 micro-batches: DualPipeV's least at pp 2 (2 x pp)
        pipeline_parallel_degree=2,
        pipeline_parallel_schedule=schedule,
        virtual_stages_per_rank=2,
    )
    scenario_path = tmp_path / "scenario.toml"
    scenario_path.write_text(tomli_w.dumps(data))
    scenario = load_scenario(scenario_path).scenario
    run_dir = tmp_path / "run"
    run_and_compare(scenario_path, run_dir)  # asserts 0 missing, 0 extra
    losses = json.loads((run_dir / "measured" / "summary.json").read_text())["losses"]
    reference = ReferenceRun(scenario)
    expected = [sum(reference.step(step)) for step in range(STEPS)]
    assert losses == pytest.approx(expected, abs=TOLERANCE), (losses, expected)


@pytest.mark.parametrize(("schedule", "chunks"), [("ZBH2", 1), ("ZBV", 2), ("DualPipeV", 2)])
def test_schedule_trains_as_the_reference(schedule: str, chunks: int) -> None:
    data = tiny_scenario(
        2,
        pipeline_parallel_degree=2,
        pipeline_parallel_schedule=schedule,
        virtual_stages_per_rank=chunks,
    )
    run_ranks(2, train_matches_reference, data, 3, True)
