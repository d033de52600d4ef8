"""`plancast demo` through the CLI: the whole loop on this machine, run again into a used folder."""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import pytest

from plancast.runtime.schedstat import thread_times
from tests.cli_runner import cli_main, cli_subprocess

pytest.importorskip("torch")


def test_demo_runs_again_into_the_folder_of_a_previous_demo(tmp_path: Path) -> None:
    """The second `make demo` used to stop with a traceback (its calibration run folder already held a
    measured run): the previous demo now moves to a dated sibling, and the new one runs to its
    held-out error."""
    out = tmp_path / "demo"
    (out / "run" / "measured").mkdir(parents=True)
    (out / "run" / "measured" / "rank0.parquet").write_bytes(b"an earlier demo's measurement")
    (out / "scenario.toml").write_text("# an earlier demo's scenario\n")

    done = cli_subprocess("demo", "--no-dashboard", "--out", str(out), "--steps", "3", timeout_s=600)

    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert "moved to" in done.stdout and "held-out error:" in done.stdout
    if thread_times() is not None:  # Linux: the ranks' wait for a core and their core share beside the error
        assert "measured core wait:" in done.stdout and "core share" in done.stdout
        compared = json.loads((out / "run" / "compare" / "summary.json").read_text())
        calibrated = [
            json.loads((out / f"calibration-mb{m}" / "measured" / "summary.json").read_text())["core_share"]
            for m in (1, 4)
        ]  # the profile was measured at its calibration runs' share, and the scored run is held to it
        assert compared["core_share_reference"] == pytest.approx(statistics.median(calibrated))
    assert "only 2 measured step(s) after warm-up" in done.stderr  # --steps 3: too few to judge
    (previous,) = [p for p in tmp_path.iterdir() if p.name.startswith("demo-")]
    assert (previous / "run" / "measured" / "rank0.parquet").read_bytes() == b"an earlier demo's measurement"
    assert (out / "run" / "measured").is_dir() and (out / "calibration-mb1" / "measured").is_dir()


def test_demo_refuses_a_folder_with_files_it_did_not_write(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("mine\n")
    (tmp_path / "run").mkdir()

    code, _stdout, stderr = cli_main("demo", "--no-dashboard", "--out", str(tmp_path))

    assert code == 2
    assert "notes.txt" in stderr and "--out" in stderr
    assert (tmp_path / "notes.txt").read_text() == "mine\n" and (tmp_path / "run").is_dir()
