"""Reliability, round three: the write guard's last gaps (`compare` simulating a missing prediction into a
run, `demo` moving a previous demo's runs) and the size caps of a run's tables (rank files, rank streams,
GPU telemetry: traces/bounded_tables.py). The caps are lowered so small files exercise them."""

from __future__ import annotations

import shutil
from pathlib import Path

import pandas as pd
import pytest

from plancast.commands.demo import set_aside_previous
from plancast.simulator.loader import load_scenario
from plancast.simulator.predict import simulate
from plancast.traces import bounded_tables
from plancast.traces.lock import RunLock, RunLockedError
from plancast.traces.rank_stream import RankEventWriter
from plancast.traces.store import RunDir, TraceReadError, read_events, read_measured, write_events, write_json
from plancast.traces.telemetry import TELEMETRY_COLUMNS, read_telemetry
from tests.cli_runner import REPO, cli_main

SCENARIO = REPO / "examples" / "tiny-local-cpu.toml"


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A run of the tiny example: scenario.toml and two measured rank files (the prediction's events as
    measured), compared once, then without predicted/ (as `plancast run` leaves it)."""
    path = tmp_path_factory.mktemp("template") / "run"
    code, _, err = cli_main("simulate", str(SCENARIO), "--out", str(path))
    assert code == 0, err
    rd = RunDir(path)
    events = simulate(load_scenario(SCENARIO).scenario).events.assign(source="measured")
    for rank, rows in events.groupby("rank"):
        write_events(rd.rank_events(int(rank)), rows.reset_index(drop=True))
    write_json(rd.env_json, {"world_size": 2})
    write_json(rd.measured_summary, {"status": "ok", "step_time_s": 0.1, "peak_memory_gib": 0.01})
    shutil.rmtree(rd.predicted_dir)
    return path


@pytest.fixture
def run(template: Path, tmp_path: Path) -> Path:
    return Path(shutil.copytree(template, tmp_path / "run"))


# --------------------------------------------------------------------------------- the write guard
def test_compare_does_not_write_a_prediction_into_a_run_another_process_writes(run: Path) -> None:
    with RunLock(run, "plancast run"):
        code, _, stderr = cli_main("compare", str(run))
    assert code == 2, stderr
    assert "is being written by" in stderr and "plancast run" in stderr and "Traceback" not in stderr
    assert not RunDir(run).predicted_dir.exists() and not RunDir(run).compare_dir.exists()


def test_compare_still_simulates_a_missing_prediction_when_no_one_else_writes(run: Path) -> None:
    code, _, stderr = cli_main("compare", str(run), "--json")
    assert code == 0, stderr
    assert RunDir(run).predicted_events.exists() and "predicted/ is missing: simulating" in stderr


def test_compare_of_a_missing_folder_creates_nothing(tmp_path: Path) -> None:
    code, _, stderr = cli_main("compare", str(tmp_path / "nowhere"))
    assert code == 2 and "run directory not found" in stderr
    assert not (tmp_path / "nowhere").exists()


def test_demo_does_not_move_a_previous_demo_whose_run_is_being_written(run: Path, tmp_path: Path) -> None:
    demo = tmp_path / "demo"
    demo.mkdir()
    held = run.rename(demo / "run")
    with RunLock(held, "plancast run"), pytest.raises(RunLockedError, match="plancast run"):
        set_aside_previous(demo)
    assert (demo / "run" / "measured").is_dir()  # nothing moved
    moved = set_aside_previous(demo)  # once the writer is gone, the previous demo moves as before
    assert moved is not None and (moved / "run" / "measured").is_dir() and not demo.exists()


# ---------------------------------------------------------------------------------- the table caps
def test_a_rank_file_over_the_row_cap_is_refused_naming_the_cap(
    run: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    rd = RunDir(run)
    rank0, rank1 = rd.rank_events(0), rd.rank_events(1)
    write_events(rank1, read_events(rank1).head(10))  # under the cap: rank 1 stays
    rows = len(read_events(rank0))
    monkeypatch.setattr(bounded_tables, "MAX_TABLE_ROWS", rows - 1)
    with pytest.raises(TraceReadError, match=rf"holds {rows} rows, more than the {rows - 1} rows"):
        read_events(rank0)
    measured = read_measured(RunDir(run))  # compare leaves the rank out and says why
    assert set(measured.events["rank"]) == {1}
    assert any("rows" in p for p in measured.problems), measured.problems


def test_a_rank_file_over_the_byte_cap_is_refused_before_it_is_read(
    run: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    rank0 = RunDir(run).rank_events(0)
    monkeypatch.setattr(bounded_tables, "MAX_TABLE_BYTES", rank0.stat().st_size - 1)
    with pytest.raises(TraceReadError, match=r"more than the .* MiB plancast reads from a rank's event file"):
        read_events(rank0)


def test_a_rank_stream_over_the_row_cap_is_refused(run: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    rd = RunDir(run)
    rows = read_events(rd.rank_events(0))
    rd.rank_events(0).unlink()
    writer = RankEventWriter(rd, 0)  # never closed: a rank killed mid-run leaves its stream
    for step in range(3):
        writer.append_step(rows.assign(step=step))
    stream = rd.rank_files()[0]
    assert stream.suffix == ".arrows"
    assert len(read_events(stream)) == 3 * len(rows)
    monkeypatch.setattr(bounded_tables, "MAX_TABLE_ROWS", 2 * len(rows))
    with pytest.raises(TraceReadError, match=f"more than {2 * len(rows)} rows"):
        read_events(stream)


def test_telemetry_over_the_row_cap_is_left_out_naming_the_cap(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "telemetry.parquet"
    frame = pd.DataFrame({c: pd.Series([1, 2, 3]).astype(t) for c, t in TELEMETRY_COLUMNS.items()})
    frame.to_parquet(path)
    assert len(read_telemetry(path)) == 3
    monkeypatch.setattr(bounded_tables, "MAX_TABLE_ROWS", 2)
    message = "3 rows, more than the 2 rows plancast reads from GPU telemetry"
    with pytest.raises(TraceReadError, match=message):
        read_telemetry(path)
