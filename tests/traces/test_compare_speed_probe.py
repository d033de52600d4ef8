"""`plancast compare` on a real run that recorded the machine-speed probe (tests/data/cpu_runs/
probed-tiny-pp2/README.md), against the machine profile it was predicted from: the speed factor, the
error as measured and adjusted, and the "machine speed changed during the run" flag, each what the
recorded files give (traces/contention.py)."""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from plancast.traces.contention import SPEED_CHANGE, SPEED_CHANGED_LABEL
from tests.cli_runner import cli_subprocess
from tests.traces.recorded_runs import CPU_RUNS, recorded_run

RECORDED = CPU_RUNS / "probed-tiny-pp2"


def plancast(*args: str) -> subprocess.CompletedProcess[str]:
    return cli_subprocess(*args, timeout_s=120)


@pytest.fixture
def run(tmp_path: Path) -> Iterator[Path]:
    """The recorded run, its machine profile the cache's latest record (tests/traces/recorded_runs.py)."""
    yield from recorded_run(RECORDED, tmp_path)


def read(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text(encoding="utf-8"))


def test_compare_applies_the_runs_speed_against_its_profiles(run: Path) -> None:
    result = plancast("compare", str(run), "--json")
    assert result.returncode == 0, result.stderr
    summary = json.loads(result.stdout)
    measured, predicted = read(run / "measured" / "summary.json"), read(run / "predicted" / "summary.json")
    profile = read(RECORDED / "machine-profile.json")["speed_probe"]
    factor = measured["speed_probe_s"] / profile["probe_wall_s"]
    assert summary["speed_probe_s"] == pytest.approx(measured["speed_probe_s"], rel=1e-12)
    assert summary["speed_probe_reference_s"] == pytest.approx(profile["probe_wall_s"], rel=1e-12)
    assert summary["speed_factor"] == pytest.approx(factor, rel=1e-12)
    # a profile with a probe is read at its probe's wall time and a share of 1 (local_profile.py)
    assert summary["core_share_reference"] == 1.0
    share = measured["core_share"] / measured["core_share_own"]
    as_measured = predicted["step_time_s"] / summary["step_time_measured_s"] - 1
    adjusted = predicted["step_time_s"] / share * factor / summary["step_time_measured_s"] - 1
    assert summary["step_time_error"] == pytest.approx(as_measured, rel=1e-9)
    assert summary["step_time_error_adjusted"] == pytest.approx(adjusted, rel=1e-9)
    change = measured["speed_probe_after_s"] / measured["speed_probe_before_s"] - 1
    assert summary["speed_change"] == pytest.approx(change, rel=1e-12)
    assert summary["machine_speed_changed"] is (abs(change) > SPEED_CHANGE)
    text = plancast("compare", str(run)).stdout
    assert f"{as_measured:+.1%}" in text and f"{adjusted:+.1%}" in text
    assert f"speed probe {measured['speed_probe_s'] * 1e3:.2f} ms" in text and f"{factor:.2f}x" in text


def test_a_run_whose_probe_moved_is_flagged(run: Path) -> None:
    """The same run with its slowest rank's after-probe read 30% slower (edited: the recorded one moved
    by 1%): beyond SPEED_CHANGE, so compare says the machine's speed changed during the run."""
    path = run / "measured" / "summary.json"
    measured = read(path)
    measured["speed_probe_after_s"] = 1.3 * measured["speed_probe_before_s"]
    path.write_text(json.dumps(measured), encoding="utf-8")
    summary = json.loads(plancast("compare", str(run), "--json").stdout)
    assert summary["machine_speed_changed"] is True and summary["speed_change"] == pytest.approx(0.3)
    text = plancast("compare", str(run)).stdout
    assert SPEED_CHANGED_LABEL in text and "+30% from before the steps to after" in text


def test_a_run_from_before_the_probe_is_compared_as_before(run: Path, tmp_path: Path) -> None:
    """The contended fixture recorded no probe: no speed keys, the share alone adjusts it."""
    old = Path(shutil.copytree(RECORDED.parent / "contended-tiny-pp2", tmp_path / "old"))
    summary = json.loads(plancast("compare", str(old), "--json").stdout)
    assert summary["speed_probe_s"] is None and summary["speed_factor"] is None
    assert summary["machine_speed_changed"] is None
    measured, predicted = read(old / "measured" / "summary.json"), read(old / "predicted" / "summary.json")
    at_share = predicted["step_time_s"] / measured["core_share"] / summary["step_time_measured_s"] - 1
    assert summary["step_time_error_adjusted"] == pytest.approx(at_share, rel=1e-9)
    assert "speed probe" not in plancast("compare", str(old)).stdout


def test_a_demo_run_is_held_to_its_calibration_runs_speed(run: Path, tmp_path: Path) -> None:
    """`plancast compare runs/demo/run`: the reference is the demo's calibration runs' median probe and
    share, the speed a profile fitted on them was normalised to (runtime/calibrate.py)."""
    demo = tmp_path / "demo"
    demo.mkdir()
    scored = run.rename(demo / "run")
    measured = read(scored / "measured" / "summary.json")
    workload = measured["speed_probe_workload"]
    for micro_batch, probe_s in ((1, 0.004), (4, 0.006)):
        summary = demo / f"calibration-mb{micro_batch}" / "measured" / "summary.json"
        summary.parent.mkdir(parents=True)
        recorded = {"core_share": 0.9, "speed_probe_s": probe_s, "speed_probe_workload": workload}
        summary.write_text(json.dumps(recorded), encoding="utf-8")
    summary = json.loads(plancast("compare", str(scored), "--json").stdout)
    assert summary["speed_probe_reference_s"] == pytest.approx(0.005)  # the median of 0.004 and 0.006
    assert summary["speed_factor"] == pytest.approx(measured["speed_probe_s"] / 0.005)
    assert summary["core_share_reference"] == pytest.approx(0.9)
