"""Issue 33 acceptance: a 2-rank CPU run of partial recompute (Megatron-LM's `--recompute-num-layers`,
block method, one checkpointed block per stage of a 2-stage pipeline) through `plancast run` and
`plancast compare`: every predicted event has its measured twin, the memory rows are there, and the
losses are those of the single-process reference (recompute changes no number)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import tomli_w

from plancast.runtime.reference import ReferenceRun
from plancast.simulator.loader import load_scenario
from plancast.traces.store import RunDir, read_measured
from tests.cli_runner import run_and_compare
from tests.distributed.checks import TOLERANCE, tiny_scenario

pytestmark = pytest.mark.distributed

STEPS = 2


def test_partial_recompute_twins_every_event_and_keeps_the_losses(tmp_path: Path) -> None:
    training = {"steps": STEPS, "recompute": "full", "recompute_num_layers": 1, "recompute_method": "block"}
    data = tiny_scenario(2, training=training, pipeline_parallel_degree=2)
    scenario_path = tmp_path / "scenario.toml"
    scenario_path.write_text(tomli_w.dumps(data))
    scenario = load_scenario(scenario_path).scenario
    run_dir = tmp_path / "run"
    summary = run_and_compare(scenario_path, run_dir)
    kinds = set(read_measured(RunDir(run_dir)).events["kind"])
    assert "backward" in kinds and "recompute" not in kinds  # each checkpointed block re-runs in its backward
    assert {"peak_memory", "memory_timeline"} <= {c["component"] for c in summary["components"]}
    losses = json.loads((run_dir / "measured" / "summary.json").read_text())["losses"]
    reference = ReferenceRun(scenario)
    expected = [sum(reference.step(step)) / scenario.dp for step in range(STEPS)]
    assert losses == pytest.approx(expected, abs=TOLERANCE), (losses, expected)
