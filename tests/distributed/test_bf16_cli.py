"""`training.dtype = "bf16"` runs as the plan says (runtime/precision.py): through `plancast run` and
`plancast compare`, a pipeline, a ZeRO-3 and a tensor-parallel plan in bf16 twin every predicted event,
send bf16 activations between stages (the bytes the simulator prices), and train to the single-process
reference run under the same autocast. CPU autocast runs bf16 here; a GPU name lets the plan through
(local-cpu has no bf16 peak)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import tomli_w

from plancast.runtime.reference import ReferenceRun
from plancast.simulator.loader import load_scenario
from plancast.traces.store import RunDir, read_measured
from tests.cli_runner import run_and_compare
from tests.distributed.checks import tiny_scenario

pytestmark = pytest.mark.distributed

STEPS = 2
PLANS: dict[str, dict[str, Any]] = {
    "pp2-1f1b": {"pipeline_parallel_degree": 2, "pipeline_parallel_schedule": "1F1B"},
    "zero3-reduce-fp32": {"data_parallel_degree": 2, "zero_stage": 3, "fsdp_reduce_dtype": "fp32"},
    "tp2": {"tensor_parallel_degree": 2},
    "ddp-zero1": {"data_parallel_degree": 2, "zero_stage": 1},
}


def bf16_scenario(plan: str) -> dict[str, Any]:
    data = tiny_scenario(2, training={"steps": STEPS, "dtype": "bf16"}, **PLANS[plan])
    data["cluster"]["gpu"] = "A100-SXM4-80GB"
    return data


@pytest.mark.parametrize("plan", PLANS)
def test_bf16_plan_runs_as_predicted(tmp_path: Path, plan: str) -> None:
    path = tmp_path / "scenario.toml"
    path.write_text(tomli_w.dumps(bf16_scenario(plan)))
    scenario = load_scenario(path).scenario
    run_dir = tmp_path / "run"
    run_and_compare(path, run_dir)
    events = read_measured(RunDir(run_dir)).events
    p2p = events[events["kind"].isin(["send", "recv"])]
    if plan.startswith("pp"):
        t = scenario.training
        assert set(p2p["bytes"]) == {t.micro_batch_size * t.seq_len * scenario.model.hidden_size * 2}
    losses = json.loads((run_dir / "measured" / "summary.json").read_text())["losses"]
    reference = ReferenceRun(scenario)
    expected = [sum(reference.step(step)) / scenario.dp for step in range(STEPS)]
    # bf16 rounding differs between one process and a split plan (stage boundaries, sharded GEMMs)
    assert losses == pytest.approx(expected, rel=2e-2), (losses, expected)


def test_bf16_changes_the_numbers(tmp_path: Path) -> None:
    """The autocast is on: a bf16 reference trains to other losses than fp32 (a flag that changes nothing
    would pass the test above against an fp32 reference too)."""
    data = bf16_scenario("pp2-1f1b")
    bf16 = ReferenceRun(load_scenario_dict(tmp_path, data)).step(0)
    data["training"]["dtype"] = "fp32"
    fp32 = ReferenceRun(load_scenario_dict(tmp_path, data)).step(0)
    assert bf16 != pytest.approx(fp32, abs=1e-6)
    assert bf16 == pytest.approx(fp32, rel=2e-2)


def load_scenario_dict(tmp_path: Path, data: dict[str, Any]) -> Any:
    path = tmp_path / "s.toml"
    path.write_text(tomli_w.dumps(data))
    return load_scenario(path).scenario
