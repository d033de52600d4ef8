"""`plancast compare` on a contended run: a measured run folder synthesized with the runtime's recorded
core-share columns (measured/summary.json ``core_share``, ``rank_core_share``, ``core_wait_s``, as
runtime/worker.py writes them), its events the prediction's at 1.1x. The flag and both figures."""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from plancast.simulator.loader import load_scenario
from plancast.simulator.predict import simulate
from plancast.traces.contention import BUSY_LABEL
from plancast.traces.rank_stream import RankEventWriter
from plancast.traces.store import RunDir, write_json
from tests.cli_runner import cli_subprocess

SCENARIO = Path(__file__).resolve().parent.parent / "examples" / "tiny-local-cpu.toml"


def plancast(*args: str) -> subprocess.CompletedProcess[str]:
    return cli_subprocess(*args, timeout_s=120)


@pytest.fixture(scope="module")
def simulated(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A run with its prediction (simulated once for the module)."""
    path = tmp_path_factory.mktemp("simulated") / "run"
    assert plancast("simulate", str(SCENARIO), "--out", str(path)).returncode == 0
    return path


@pytest.fixture
def measured_run(simulated: Path, tmp_path: Path) -> Callable[[int, float | None], Path]:
    """A copy of the simulated run with `steps` measured steps 1.1x as long, at core share `share`."""
    events = simulate(load_scenario(SCENARIO).scenario).events.assign(source="measured")

    def make(steps: int, share: float | None) -> Path:
        path = tmp_path / f"run-{steps}-{share}"
        shutil.copytree(simulated, path)
        rd = RunDir(path)
        rd.measured_dir.mkdir(parents=True, exist_ok=True)
        for rank, rows in events.groupby("rank"):
            writer = RankEventWriter(rd, int(rank))
            for step in range(steps):
                writer.append_step(
                    rows.assign(step=step, start_us=rows["start_us"] * 1.1, dur_us=rows["dur_us"] * 1.1)
                )
            writer.close()
        write_json(rd.env_json, {"world_size": 2})
        recorded = {} if share is None else {"core_share": share, "rank_core_share": {"0": share, "1": 0.9}}
        write_json(rd.measured_summary, {"status": "ok", "core_wait_s": 0.198, **recorded})
        return path

    return make


MeasuredRun = Callable[[int, float | None], Path]


def test_a_contended_run_is_flagged_busy_with_the_error_as_measured_and_at_its_share(
    measured_run: MeasuredRun,
) -> None:
    run = measured_run(8, 0.5)
    result = plancast("compare", str(run), "--json")
    assert result.returncode == 0, result.stderr
    summary = json.loads(result.stdout)
    assert summary["machine_busy"] is True and summary["core_share"] == 0.5
    assert summary["step_time_error"] == pytest.approx(-1 / 11, rel=1e-6)  # measured = 1.1 x predicted
    # no machine profile in the tests' own cache: the prediction's reference is a core of its own
    assert summary["core_share_reference"] == 1.0
    assert summary["step_time_error_adjusted"] == pytest.approx(0.9 / 1.1, rel=1e-6)  # 2 x predicted
    text = plancast("compare", str(run)).stdout
    assert BUSY_LABEL in text and "-9.1%" in text and "+81.8%" in text
    assert summary["warnings"] == []


def test_a_quiet_run_is_not_flagged_and_a_run_without_a_share_says_nothing(measured_run: MeasuredRun) -> None:
    quiet = json.loads(plancast("compare", str(measured_run(8, 0.95)), "--json").stdout)
    assert quiet["machine_busy"] is False
    text = plancast("compare", str(measured_run(8, None))).stdout
    assert "core share" not in text and BUSY_LABEL not in text


def test_compare_warns_when_too_few_steps_follow_the_warm_up(measured_run: MeasuredRun) -> None:
    result = plancast("compare", str(measured_run(3, 0.95)))
    assert result.returncode == 0
    assert "warning: only 2 measured step(s) after warm-up" in result.stderr


def test_a_demo_run_is_held_to_its_calibration_runs_share(measured_run: MeasuredRun, tmp_path: Path) -> None:
    """`plancast compare runs/demo/run` uses the share the demo's calibration runs got (the profile was
    fitted on them), as the demo itself does."""
    demo = tmp_path / "demo"
    demo.mkdir()
    run = measured_run(8, 0.5).rename(demo / "run")
    for micro_batch, share in ((1, 0.4), (4, 0.6)):
        (demo / f"calibration-mb{micro_batch}" / "measured").mkdir(parents=True)
        write_json(RunDir(demo / f"calibration-mb{micro_batch}").measured_summary, {"core_share": share})
    summary = json.loads(plancast("compare", str(run), "--json").stdout)
    assert summary["core_share_reference"] == pytest.approx(0.5)
    assert summary["step_time_error_adjusted"] == pytest.approx(-1 / 11, rel=1e-6)  # 0.5 / 0.5: as measured
    assert summary["machine_busy"] is True  # half a core is busy, whatever the calibration got


RECORDED = Path(__file__).resolve().parent / "data" / "cpu_runs" / "contended-tiny-pp2"


def test_a_run_recorded_on_a_contended_machine_is_flagged_with_both_figures(tmp_path: Path) -> None:
    """A real run, not a synthesized one: pp 2 on the project's 2-core machine beside a one-core burner
    (tests/data/cpu_runs/contended-tiny-pp2/README.md). compare flags it and prints the error as
    measured and at the measured share, each what the recorded summaries give."""
    run = Path(shutil.copytree(RECORDED, tmp_path / "run"))
    summary = json.loads(plancast("compare", str(run), "--json").stdout)
    measured = json.loads((run / "measured" / "summary.json").read_text())
    predicted = json.loads((run / "predicted" / "summary.json").read_text())
    share = measured["core_share"]
    assert summary["machine_busy"] is True and summary["core_share"] == pytest.approx(share) and share < 0.8
    assert summary["core_share_reference"] == 1.0  # the tests' own cache holds no machine profile
    as_measured = predicted["step_time_s"] / summary["step_time_measured_s"] - 1
    at_share = predicted["step_time_s"] / share / summary["step_time_measured_s"] - 1
    assert summary["step_time_error"] == pytest.approx(as_measured, rel=1e-9)
    assert summary["step_time_error_adjusted"] == pytest.approx(at_share, rel=1e-9)
    assert summary["events_missing"] == 0 and summary["events_extra"] == 0
    text = plancast("compare", str(run)).stdout
    assert BUSY_LABEL in text and f"{as_measured:+.1%}" in text and f"{at_share:+.1%}" in text
