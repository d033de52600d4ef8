"""Checkpointing a measured run and resuming it after a kill, through the real CLI and torchrun (gloo).

A 2-rank pipeline is run twice: with checkpoints every 2 steps and rank 0 killed by SIGKILL at the
start of step 5, then `plancast run --resume` on that run. The resumed run must finish, its loss curve
must be the reference one (steps 0-3 carried over from the killed run, steps 4-5 run again from the
checkpoint after step 4), and the checkpoint the runtime wrote must be the size simulator/goodput.py
predicts. The reference curve is the single-process one (runtime/reference.py), which every parallel
plan reproduces to 1e-5 (tests/distributed/test_correctness.py), rather than a third, uninterrupted run.
"""

from __future__ import annotations

import json
import shutil
import tomllib
from pathlib import Path
from typing import Any

import pytest
import tomli_w

from plancast.runtime.checkpoint import checkpoints_json, latest_complete, step_dir
from plancast.simulator.goodput import checkpoint
from plancast.simulator.loader import load_scenario
from plancast.traces.store import RunDir, read_events
from tests.cli_runner import REPO, cli_main, cli_subprocess

STEPS = 6


def scenario_file(tmp_path: Path, **parallelism: Any) -> Path:
    """examples/tiny-local-cpu.toml (pp = 2, fp32) at width 128, so DCP's per-tensor framing is small
    next to the tensors."""
    data = tomllib.loads((REPO / "examples" / "tiny-local-cpu.toml").read_text())
    data["model"]["hidden_size"] = 128
    data["training"].update(seq_len=32, steps=STEPS)
    data["parallelism"].update(parallelism)
    path = tmp_path / "scenario.toml"
    path.write_text(tomli_w.dumps(data))
    return path


def reference_losses(scenario: Path) -> list[float]:
    """The loss curve of the scenario trained in this process, without parallelism or interruption."""
    from plancast.runtime.reference import ReferenceRun

    reference = ReferenceRun(load_scenario(scenario).scenario)
    return [reference.step(step)[0] for step in range(STEPS)]  # data parallel 1: one rank's mean


def losses(run: Path) -> list[float]:
    summary = json.loads((run / "measured" / "summary.json").read_text())
    assert summary["status"] == "ok", summary
    assert summary["steps"] == STEPS
    return [float(x) for x in summary["losses"]]


@pytest.mark.distributed
def test_killed_run_resumes_from_its_checkpoint(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    scenario = scenario_file(tmp_path)
    killed = tmp_path / "killed"
    monkeypatch.setenv("PLANCAST_FAULT_RANK", "0")
    monkeypatch.setenv("PLANCAST_FAULT_STEP", "5")
    crash = cli_subprocess(
        "run", str(scenario), "--out", str(killed), "--checkpoint-every", "2", timeout_s=300
    )
    assert crash.returncode != 0
    run = RunDir(killed)
    assert latest_complete(run) == 4
    assert json.loads(run.measured_summary.read_text())["status"] == "failed"

    monkeypatch.delenv("PLANCAST_FAULT_RANK")
    monkeypatch.delenv("PLANCAST_FAULT_STEP")
    damaged = shutil.copytree(step_dir(run, 4), step_dir(run, 6))  # a newer save cut short by a full disk
    (damaged / "__1_0.distcp").write_bytes((damaged / "__1_0.distcp").read_bytes()[:64])
    resumed = cli_subprocess("run", "--resume", str(killed), timeout_s=300)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "step-000006 is damaged" in resumed.stderr
    assert "resuming from the previous complete checkpoint, step-000004" in resumed.stderr
    assert "step 5/6" in resumed.stderr and "step 1/6" not in resumed.stderr  # steps 4-5 only

    assert losses(killed) == pytest.approx(reference_losses(scenario), abs=1e-5)
    for rank in (0, 1):  # every step's events once: 0-3 from the killed run, 4-5 from the resumed one
        steps = read_events(run.rank_events(rank))["step"]
        assert sorted(set(steps)) == list(range(STEPS))

    log = json.loads(checkpoints_json(run).read_text())
    assert [s["step"] for s in log["saves"]] == [2, 4, 6]
    assert [x["step"] for x in log["loads"]] == [4]
    predicted = checkpoint(load_scenario(killed / "scenario.toml").scenario).total_bytes
    for save in log["saves"]:
        assert save["bytes"] == pytest.approx(predicted, rel=0.10)  # the files on disk
        assert save["tensor_bytes"] == pytest.approx(predicted, rel=0.02)  # the tensors in them
    assert step_dir(run, 6).is_dir()

    code, stdout, stderr = cli_main("compare", str(killed), "--json")
    assert code == 0, stderr
    rows = {c["component"]: c for c in json.loads(stdout)["components"]}
    assert abs(rows["checkpoint_size"]["error"]) < 0.10
    assert rows["checkpoint_save"]["measured_s"] > 0 and rows["checkpoint_load"]["measured_s"] > 0


# ------------------------------------------------------------------------------- refused up front
def test_resume_needs_a_checkpoint(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    (run / "scenario.toml").write_text(scenario_file(tmp_path).read_text())
    code, _, stderr = cli_main("run", "--resume", str(run))
    assert code == 2
    assert "no complete checkpoint" in stderr and "--checkpoint-every" in stderr


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--checkpoint-every", "0"], "--checkpoint-every must be at least 1"),
        (["--resume", "RUN"], "drop SCENARIO and --out"),
    ],
)
def test_bad_checkpoint_options(tmp_path: Path, args: list[str], message: str) -> None:
    args = [str(tmp_path) if a == "RUN" else a for a in args]
    code, _, stderr = cli_main("run", str(scenario_file(tmp_path)), "--out", str(tmp_path / "x"), *args)
    assert code == 2
    assert message in stderr
    assert not (tmp_path / "x" / "measured").exists()


def test_zero1_plans_are_refused_before_starting(tmp_path: Path) -> None:
    data = tomllib.loads(scenario_file(tmp_path).read_text())
    data["parallelism"].update(pipeline_parallel_degree=1, zero_stage=1)
    path = tmp_path / "zero1.toml"
    path.write_text(tomli_w.dumps(data))
    code, _, stderr = cli_main("run", str(path), "--out", str(tmp_path / "z"), "--checkpoint-every", "2")
    assert code == 2
    assert "ZeRO-1" in stderr and "zero_stage = 0, 2 or 3" in stderr
    assert not (tmp_path / "z" / "measured").exists()


@pytest.mark.distributed
def test_an_expert_parallel_checkpoint_holds_every_ranks_experts(tmp_path: Path) -> None:
    """Both ep ranks hold the stacked experts under the same parameter names; the checkpoint keys them by
    global expert (runtime/moe.py ``by_global_expert``), so DCP, which writes one tensor per key, keeps
    all four experts' weights and AdamW moments, not one rank's two."""
    from plancast.runtime.checkpoint_safety import read_metadata

    data = tomllib.loads((REPO / "examples" / "tiny-moe-cpu.toml").read_text())
    data["training"].update(steps=2)
    path = tmp_path / "scenario.toml"
    path.write_text(tomli_w.dumps(data))
    out = tmp_path / "run"
    done = cli_subprocess("run", str(path), "--out", str(out), "--checkpoint-every", "2", timeout_s=300)
    assert done.returncode == 0, done.stderr[-3000:]
    m = load_scenario(path).scenario.model
    keys = read_metadata(step_dir(RunDir(out), 2)).state_dict_metadata
    for layer in range(m.num_hidden_layers):
        for e in range(m.num_local_experts):
            name = f"layers.{layer}.mlp.experts.w2.{e}"
            assert list(keys[f"stage0.model.{name}"].size) == [m.hidden_size, m.moe_intermediate_size]
            assert f"stage0.optim.state.{name}.exp_avg" in keys, sorted(keys)[:20]
    assert not any(k.endswith("experts.w2") for k in keys)
