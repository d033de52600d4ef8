"""A real 2-rank CPU run records the memory timeline (issue 33): the bytes after each compute span (on CPU
the first step's saved activations plus the model states), and `compare` reconciles it with the predicted
timeline as memory rows."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

import pytest
import tomli_w

from plancast.runtime.launch import launch
from plancast.simulator.costs.memory_timeline import timeline_by_rank
from plancast.simulator.loader import load_scenario
from plancast.traces.store import RunDir
from tests.cli_runner import cli_main

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "tiny-local-cpu.toml"


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> RunDir:
    tmp = tmp_path_factory.mktemp("memory-timeline")
    data = tomllib.loads(EXAMPLE.read_text())
    data["training"].update(seq_len=32, steps=2)
    scenario = tmp / "scenario.toml"
    scenario.write_text(tomli_w.dumps(data))
    out = tmp / "run"
    assert launch(scenario, out, timeout_s=120) == 0
    return RunDir(out)


@pytest.mark.distributed
def test_each_rank_records_a_point_per_predicted_compute_event(run: RunDir) -> None:
    measured = json.loads(run.measured_summary.read_text())["rank_memory_timeline"]
    predicted = timeline_by_rank(load_scenario(run.scenario_toml).scenario)
    assert sorted(measured) == sorted(predicted) == ["0", "1"]
    for rank, points in measured.items():
        assert [p[1:5] for p in points] == [p[1:5] for p in predicted[rank]], rank
        assert all(p[5] > 0 for p in points)
    first_stage = [p[5] for p in measured["0"] if p[1] == "forward"]
    assert first_stage[-1] > first_stage[0]  # 1F1B's first stage holds pp micro-batches' activations


@pytest.mark.distributed
def test_compare_reconciles_the_timeline_as_a_memory_row(run: RunDir) -> None:
    code, out, err = cli_main("compare", str(run.path), "--json")
    assert code == 0, err
    rows = {c["component"]: c for c in json.loads(out)["components"]}
    assert {"peak_memory", "memory_timeline"} <= set(rows)
    timeline = rows["memory_timeline"]
    assert timeline["predicted_gib"] > 0 and timeline["measured_gib"] > 0
    assert abs(timeline["error"]) < 0.3  # CPU: no allocator temporaries, no gathered units
