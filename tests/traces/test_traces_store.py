"""The run directory: atomic writes, and readers that survive partial or damaged runs."""

from __future__ import annotations

import os
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from plancast.traces import schema, store
from plancast.traces.store import MeasuredRead, RunDir, TraceReadError


def step_events(rank: int, step: int) -> pd.DataFrame:
    """A forward and a backward of one rank and step."""
    return schema.to_frame(
        [
            schema.Event(
                "measured", rank, step, "compute", "forward", 0.0, 10.0, stage=0, chunk=0, microbatch=0
            ),
            schema.Event(
                "measured", rank, step, "compute", "backward", 10.0, 20.0, stage=0, chunk=0, microbatch=0
            ),
        ]
    )


def test_run_dir_layout_matches_design() -> None:
    run = RunDir(Path("/runs/a"))
    assert [
        run.scenario_toml,
        run.predicted_events,
        run.predicted_summary,
        run.rank_events(3),
        run.telemetry,
        run.measured_summary,
        run.env_json,
        run.compare_summary,
    ] == [
        Path("/runs/a/scenario.toml"),
        Path("/runs/a/predicted/events.parquet"),
        Path("/runs/a/predicted/summary.json"),
        Path("/runs/a/measured/rank-00003.parquet"),
        Path("/runs/a/measured/telemetry.parquet"),
        Path("/runs/a/measured/summary.json"),
        Path("/runs/a/measured/env.json"),
        Path("/runs/a/compare/summary.json"),
    ]


def test_events_round_trip_with_schema_version(tmp_path: Path) -> None:
    path = tmp_path / "events.parquet"
    frame = step_events(0, 0)
    store.write_events(path, frame)
    pd.testing.assert_frame_equal(store.read_events(path), frame)
    assert pq.read_schema(path).metadata[store.SCHEMA_VERSION_KEY] == str(schema.SCHEMA_VERSION).encode()
    assert list(tmp_path.iterdir()) == [path]  # no temporary file left behind


def test_crash_before_rename_keeps_previous_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "events.parquet"
    store.write_events(path, step_events(0, 0))

    def die(*_: object) -> None:
        raise KeyboardInterrupt("killed")

    monkeypatch.setattr(os, "replace", die)
    with pytest.raises(KeyboardInterrupt):
        store.write_events(path, pd.concat([step_events(0, 0), step_events(0, 1)]))
    monkeypatch.undo()
    assert store.read_events(path)["step"].tolist() == [0, 0]
    assert list(tmp_path.iterdir()) == [path]


def test_tmp_file_left_by_killed_writer_is_ignored(tmp_path: Path) -> None:
    run = RunDir(tmp_path)
    store.write_events(run.rank_events(0), step_events(0, 0))
    # a SIGKILL between write and rename leaves the hidden temporary file, half written
    (run.measured_dir / ".rank-00001.parquet.abc123.tmp").write_bytes(b"PAR1 half a file")
    read = store.read_measured(run)
    assert read.problems == []
    assert read.events["rank"].tolist() == [0, 0]


def test_truncated_parquet_names_the_file(tmp_path: Path) -> None:
    path = tmp_path / "events.parquet"
    store.write_events(path, step_events(0, 0))
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(TraceReadError, match=r"events\.parquet is truncated or not a parquet file"):
        store.read_events(path)


def test_missing_file_names_the_file(tmp_path: Path) -> None:
    with pytest.raises(TraceReadError, match=r"nothing\.parquet is missing"):
        store.read_events(tmp_path / "nothing.parquet")


def _write_raw(path: Path, frame: pd.DataFrame, version: str | None) -> None:
    table = pa.Table.from_pandas(frame, preserve_index=False)
    if version is not None:
        table = table.replace_schema_metadata({store.SCHEMA_VERSION_KEY: version.encode()})
    pq.write_table(table, path)


@pytest.mark.parametrize(
    ("frame", "version", "message"),
    [
        (step_events(0, 0), "999", r"written with trace schema v999, but this plancast reads v1"),
        (step_events(0, 0), None, r"has no 'plancast.schema_version' metadata"),
        (step_events(0, 0).drop(columns=["flops"]), "1", r"does not follow the trace schema: .*\['flops'\]"),
    ],
)
def test_unreadable_tables_say_why(
    tmp_path: Path, frame: pd.DataFrame, version: str | None, message: str
) -> None:
    path = tmp_path / "events.parquet"
    _write_raw(path, frame, version)
    with pytest.raises(TraceReadError, match=message):
        store.read_events(path)


def test_missing_and_corrupt_ranks_are_reported_and_the_rest_read(tmp_path: Path) -> None:
    run = RunDir(tmp_path)
    for rank in (0, 2):
        store.write_events(run.rank_events(rank), step_events(rank, 0))
    run.rank_events(1).write_bytes(b"not parquet")
    store.write_json(run.env_json, {"world_size": 4})
    read = store.read_measured(run)
    assert sorted(set(read.events["rank"].tolist())) == [0, 2]
    assert read.problems[0].startswith("measured/rank-00001.parquet could not be read (")
    assert read.problems[0].endswith("): rank 1 is left out")
    assert read.problems[1] == "measured/rank-00003.parquet is missing (world size 4): rank 3 is left out"
    assert len(read.problems) == 2


@pytest.mark.parametrize(
    ("world_size", "expected_problems"),
    [
        (None, []),  # no env.json: the world is what is on disk
        (1, ["measured/rank-00001.parquet is beyond the world size 1: rank 1 is left out"]),
        (3, ["measured/rank-00002.parquet is missing (world size 3): rank 2 is left out"]),
    ],
)
def test_world_size_argument(tmp_path: Path, world_size: int | None, expected_problems: list[str]) -> None:
    run = RunDir(tmp_path)
    for rank in (0, 1):
        store.write_events(run.rank_events(rank), step_events(rank, 0))
    assert store.read_measured(run, world_size).problems == expected_problems


def test_empty_run_reads_as_empty(tmp_path: Path) -> None:
    read = store.read_measured(RunDir(tmp_path))
    assert isinstance(read, MeasuredRead)
    assert read.problems == []
    assert len(read.events) == 0
    assert list(read.events.columns) == list(schema.COLUMNS)


def test_json_round_trip_and_cut_json(tmp_path: Path) -> None:
    path = tmp_path / "summary.json"
    store.write_json(path, {"step_time_s": 1.5, "memory_gib": {"parameters": 2.0}})
    assert store.read_json(path) == {"step_time_s": 1.5, "memory_gib": {"parameters": 2.0}}
    text = path.read_text()
    path.write_text(text[: len(text) // 2])
    with pytest.raises(
        TraceReadError, match=r"summary\.json is not valid JSON \(.* at line \d+, column \d+\)"
    ):
        store.read_json(path)


def test_write_json_refuses_nan(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="Out of range float"):
        store.write_json(tmp_path / "x.json", {"error": float("nan")})
    assert list(tmp_path.iterdir()) == []


def test_read_json_missing(tmp_path: Path) -> None:
    with pytest.raises(TraceReadError, match=r"env\.json is missing"):
        store.read_json(tmp_path / "env.json")


def test_read_predicted(tmp_path: Path) -> None:
    run = RunDir(tmp_path)
    frame = step_events(0, 0).assign(source="predicted")
    store.write_events(run.predicted_events, frame)
    pd.testing.assert_frame_equal(store.read_predicted(run), schema.validate(frame))


def test_files_follow_the_umask_not_mkstemps_0600(tmp_path: Path) -> None:
    """A run directory shared on a cluster file system is readable by the group and others when the
    umask allows it, as any file the user writes (atomic_open's temporary file starts at 0600)."""
    from plancast.traces.store import UMASK, write_json

    path = tmp_path / "summary.json"
    write_json(path, {"a": 1})
    assert path.stat().st_mode & 0o777 == 0o666 & ~UMASK
