"""`plancast dashboard runs/demo` (the folder `make demo` names) opens its measured run, one level down,
instead of the demo folder's bare scenario ("only a prediction")."""

from __future__ import annotations

from pathlib import Path

from plancast.dashboard.data import command_line_runs, runs_in_folder
from plancast.dashboard.serve import RUNS_ENV, measured_run_inside


def demo_folder(root: Path) -> Path:
    """What `plancast demo --out root/demo` leaves: a scenario, the scored run and calibration runs."""
    demo = root / "demo"
    for run in ("run", "calibration-mb1", "calibration-mb4"):
        (demo / run / "measured").mkdir(parents=True)
        (demo / run / "predicted").mkdir()
    (demo / "scenario.toml").write_text("# the demo's plan\n")
    return demo


def test_a_demo_folder_opens_its_measured_run(tmp_path: Path) -> None:
    demo = demo_folder(tmp_path)
    assert measured_run_inside(demo) == demo / "run"
    assert runs_in_folder(demo) == [demo / "run"]
    assert command_line_runs([], Path("app.py"), {RUNS_ENV: str(demo)}) == [(demo / "run").resolve()]


def test_a_run_or_a_plain_folder_is_opened_as_it_is(tmp_path: Path) -> None:
    demo = demo_folder(tmp_path)
    assert measured_run_inside(demo / "run") == demo / "run"
    (tmp_path / "predicted-only" / "predicted").mkdir(parents=True)
    assert measured_run_inside(tmp_path / "predicted-only") == tmp_path / "predicted-only"
    assert measured_run_inside(tmp_path / "missing") == tmp_path / "missing"
