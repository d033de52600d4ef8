"""Loading runs for the dashboard: damaged files become problems, uploads become run directories."""

from __future__ import annotations

import dataclasses
import io
import os
import shutil
import zipfile
from pathlib import Path

import pandas as pd
import pytest
from dashboard_runs import DAMAGES, MEASURED_STEPS, predict_tiny

from plancast.dashboard import data, frames
from plancast.simulator.loader import ScenarioError
from plancast.traces.store import RunDir
from plancast.traces.telemetry import TELEMETRY_COLUMNS


def test_healthy_run_loads_every_part(healthy_run: Path) -> None:
    run = data.load_run(healthy_run)
    assert run.problems == ()
    assert run.scenario is not None and run.scenario.world_size == 2
    assert len(run.predicted) == len(predict_tiny().events)
    assert sorted(run.measured["step"].unique()) == list(range(MEASURED_STEPS))
    assert run.telemetry is not None and len(run.telemetry) == 0
    assert list(run.telemetry.columns) == list(TELEMETRY_COLUMNS)


def test_damaged_run_names_the_file_and_keeps_the_rest(damaged_run: tuple[str, Path]) -> None:
    damage, path = damaged_run
    run = data.load_run(path)
    file, text = DAMAGES[damage]
    assert len(run.problems) == 1
    assert file in run.problems[0] and text in run.problems[0]
    assert run.has_predicted
    assert set(run.measured["rank"]) == ({0} if file.startswith("measured/") else {0, 1})
    assert (run.predicted_summary is None) == (damage == "cut_json")


def test_unreadable_telemetry_is_a_problem(tmp_path: Path, healthy_run: Path) -> None:
    path = tmp_path / "run"
    path.mkdir()
    RunDir(path).measured_dir.mkdir()
    RunDir(path).telemetry.write_bytes(RunDir(healthy_run).telemetry.read_bytes()[:40])
    run = data.load_run(path)
    assert run.telemetry is None
    assert len(run.problems) == 1 and "telemetry.parquet is truncated" in run.problems[0]


def test_run_stamp_changes_when_a_file_changes(tmp_path: Path, healthy_run: Path) -> None:
    before = data.run_stamp(healthy_run)
    assert "predicted/events.parquet" in {name for name, _, _ in before}
    copy = tmp_path / "copy"
    shutil.copytree(healthy_run, copy)
    stamp = data.run_stamp(copy)
    (copy / "measured" / "env.json").write_text('{"world_size": 2, "note": "rewritten"}')
    assert data.run_stamp(copy) != stamp


def test_runs_in_folder_and_command_line(
    tmp_path: Path, healthy_run: Path, prediction_only_run: Path
) -> None:
    runs = healthy_run.parent
    found = data.runs_in_folder(runs)
    assert healthy_run in found and prediction_only_run in found
    assert data.runs_in_folder(healthy_run) == [healthy_run]
    assert data.runs_in_folder(tmp_path / "absent") == []
    script = tmp_path / "app.py"
    script.touch()
    environ = {data.RUNS_ENV: os.pathsep.join([str(prediction_only_run), str(healthy_run)])}
    assert data.command_line_runs([str(script), str(healthy_run)], script, environ) == [
        healthy_run,
        prediction_only_run,
    ]
    # a test runner's arguments are not runs
    assert data.command_line_runs(["pytest", "tests/dashboard"], script, {}) == []


def zip_of(folder: Path, prefix: str) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for path in folder.rglob("*"):
            if path.is_file():
                archive.write(path, f"{prefix}{path.relative_to(folder).as_posix()}")
    return buffer.getvalue()


@pytest.mark.parametrize("prefix", ["", "myrun/"])
def test_zip_upload_becomes_the_run(tmp_path: Path, healthy_run: Path, prefix: str) -> None:
    path = data.materialize_upload([("run.zip", zip_of(healthy_run, prefix))], tmp_path)
    run = data.load_run(path)
    assert run.problems == () and run.has_predicted and run.has_measured
    assert path.name == "myrun" if prefix else path.name.startswith("upload-")


def test_parquet_uploads_are_placed_like_a_run(tmp_path: Path, healthy_run: Path) -> None:
    source = RunDir(healthy_run)
    files = [
        ("events.parquet", source.predicted_events.read_bytes()),
        ("rank-00000.parquet", source.rank_events(0).read_bytes()),
        ("rank-00001.parquet", source.rank_events(1).read_bytes()),
    ]
    run = data.load_run(data.materialize_upload(files, tmp_path))
    assert run.problems == ()
    assert len(run.predicted) == len(data.load_run(healthy_run).predicted)
    assert set(run.measured["rank"]) == {0, 1}


@pytest.mark.parametrize(
    ("files", "message"),
    [
        ([("notes.txt", b"hello")], "notes.txt: upload a .zip"),
        ([("run.zip", b"not a zip")], "run.zip is not a valid zip file"),
        ([], "nothing was uploaded"),
    ],
)
def test_bad_uploads_say_what_is_wrong(tmp_path: Path, files: list[tuple[str, bytes]], message: str) -> None:
    with pytest.raises(data.UploadError, match=message):
        data.materialize_upload(files, tmp_path)


def test_zip_upload_cannot_write_outside_its_folder(tmp_path: Path) -> None:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("../escape.toml", "x = 1")
    with pytest.raises(data.UploadError, match="outside the archive"):
        data.materialize_upload([("evil.zip", buffer.getvalue())], tmp_path / "uploads")
    assert not (tmp_path / "escape.toml").exists()


def test_sweep_csv_round_trip_gets_plan_labels(tmp_path: Path) -> None:
    scenario = predict_tiny().scenario
    table = data.sweep_table(scenario, gpus=2, finalists=4)
    assert len(table) == 4 and table["step_time_s"].is_monotonic_increasing
    csv = tmp_path / "sweep.csv"
    table.drop(columns="plan").to_csv(csv, index=False)  # what `plancast sweep --table` writes
    read = data.read_sweep_csv(csv, "sweep.csv")
    assert read["plan"].tolist() == table["plan"].tolist()


def test_sweep_csv_without_the_columns_is_refused(tmp_path: Path) -> None:
    csv = tmp_path / "other.csv"
    pd.DataFrame({"a": [1]}).to_csv(csv, index=False)
    with pytest.raises(data.UploadError, match=r"lacks column\(s\) \['step_time_s', 'peak_memory_gib'\]"):
        data.read_sweep_csv(csv, "other.csv")


def test_what_if_rederives_data_parallel_and_reports_bad_plans() -> None:
    base = predict_tiny().scenario
    knobs = frames.WhatIf.of(base)
    flat = frames.what_if_scenario(base, dataclasses.replace(knobs, pp=1)).scenario
    assert (flat.pp, flat.dp, flat.parallelism.pipeline_layer_split) == (1, 2, [base.model.num_hidden_layers])
    with pytest.raises(ScenarioError, match=r"parallelism\.virtual_stages_per_rank"):
        frames.what_if_scenario(base, dataclasses.replace(knobs, virtual_stages=2))


def test_a_run_without_a_prediction_is_simulated_from_its_scenario(tmp_path: Path, healthy_run: Path) -> None:
    """As `plancast compare` does: predicted/ absent, scenario.toml readable -> simulated in memory."""
    run = tmp_path / "no-prediction"
    shutil.copytree(healthy_run, run)
    shutil.rmtree(RunDir(run).predicted_dir)
    loaded = data.load_run(run)
    expected = data.load_run(healthy_run)
    assert loaded.has_predicted and loaded.problems == ()
    assert loaded.predicted_summary is not None and expected.predicted_summary is not None
    assert loaded.predicted_summary["step_time_s"] == expected.predicted_summary["step_time_s"]
    assert len(loaded.predicted) == len(expected.predicted)
