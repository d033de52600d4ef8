"""Issue 9 acceptance through the CLI's own launcher: `plancast run` (torchrun, gloo) then `plancast
compare` on a 2-rank DDP run and a tp2 run with the vocab-parallel embedding, output layer and loss
(torchtitan's default, and now plancast's): every predicted event has its measured twin, and the
measured losses are those of the single-process reference."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import tomli_w

from plancast.runtime.reference import ReferenceRun
from plancast.simulator.loader import load_scenario
from tests.cli_runner import run_and_compare
from tests.distributed.checks import TOLERANCE, tiny_scenario

pytestmark = pytest.mark.distributed

STEPS = 2
PLANS: dict[str, dict[str, Any]] = {
    "ddp": {"data_parallel_degree": 2},
    "tp2-vocab-parallel": {"tensor_parallel_degree": 2},  # vocab_parallel from the torchtitan default
}


@pytest.mark.parametrize("plan", PLANS)
def test_run_and_compare_twin_every_event(tmp_path: Path, plan: str) -> None:
    data = tiny_scenario(2, training={"steps": STEPS}, **PLANS[plan])
    scenario_path = tmp_path / "scenario.toml"
    scenario_path.write_text(tomli_w.dumps(data))
    scenario = load_scenario(scenario_path).scenario
    assert scenario.vocab_tp == scenario.tp, "the torchtitan default splits the vocabulary"
    run_dir = tmp_path / "run"
    run_and_compare(scenario_path, run_dir)
    losses = json.loads((run_dir / "measured" / "summary.json").read_text())["losses"]
    reference = ReferenceRun(scenario)
    expected = [sum(reference.step(step)) / scenario.dp for step in range(STEPS)]
    assert losses == pytest.approx(expected, abs=TOLERANCE), (losses, expected)
