"""A rank's events while its run goes on (traces/rank_stream.py): appended a step at a time, every
finished step readable at any moment, a parquet file at the end; a killed rank's stream is kept whole
up to its last complete step and made parquet by finalize_streams."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from test_traces_store import step_events

from plancast.traces import schema, store
from plancast.traces.rank_stream import RankEventWriter, finalize_streams
from plancast.traces.store import RunDir, TraceReadError


def steps_on_disk(run: RunDir, rank: int) -> list[int]:
    return store.read_events(run.rank_files()[rank])["step"].tolist()


def test_every_finished_step_is_readable_while_the_run_goes_on(tmp_path: Path) -> None:
    run = RunDir(tmp_path)
    writer = RankEventWriter(run, 1)
    for step in range(3):
        writer.append_step(step_events(1, step))
        assert run.rank_files() == {1: run.rank_stream(1)}  # the stream, not yet a parquet file
        assert steps_on_disk(run, 1) == sorted([*range(step + 1)] * 2)
    assert json.loads(json.dumps(store.read_measured(run, 2).problems)) == [
        "measured/rank-00000.parquet is missing (world size 2): rank 0 is left out"
    ]
    writer.close()
    assert run.rank_files() == {1: run.rank_events(1)}
    assert not run.rank_stream(1).exists()
    assert steps_on_disk(run, 1) == [0, 0, 1, 1, 2, 2]


def test_the_writer_refuses_other_ranks_and_other_types(tmp_path: Path) -> None:
    writer = RankEventWriter(RunDir(tmp_path), 0)
    with pytest.raises(ValueError, match=r"rank 0 got events of rank\(s\) \[1\]"):
        writer.append_step(step_events(1, 0))
    bad = step_events(0, 0).assign(start_us="late")
    with pytest.raises(schema.SchemaError, match="do not fit the trace schema"):
        writer.append_step(bad)


def test_a_stream_cut_short_keeps_its_whole_steps_and_finalize_makes_it_parquet(tmp_path: Path) -> None:
    run = RunDir(tmp_path)
    writer = RankEventWriter(run, 0)
    for step in range(3):
        writer.append_step(step_events(0, step))
    # killed while writing a fourth step: a partial message at the end of the stream
    whole = run.rank_stream(0).read_bytes()
    writer.append_step(step_events(0, 3))
    cut = run.rank_stream(0).read_bytes()
    run.rank_stream(0).write_bytes(cut[: len(whole) + (len(cut) - len(whole)) // 2])
    assert steps_on_disk(run, 0) == [0, 0, 1, 1, 2, 2]
    assert finalize_streams(run) == []
    assert run.rank_files() == {0: run.rank_events(0)}
    assert steps_on_disk(run, 0) == [0, 0, 1, 1, 2, 2]


def test_a_stream_that_is_not_one_is_reported_and_kept(tmp_path: Path) -> None:
    run = RunDir(tmp_path)
    run.measured_dir.mkdir(parents=True)
    run.rank_stream(2).write_bytes(b"not a stream")
    with pytest.raises(TraceReadError, match="not a rank stream"):
        store.read_events(run.rank_stream(2))
    problems = finalize_streams(run)
    assert len(problems) == 1 and problems[0].startswith("measured/rank-00002.arrows kept")
    assert run.rank_stream(2).exists()


def test_a_resumed_rank_rewrites_its_stream_from_its_first_step(tmp_path: Path) -> None:
    run = RunDir(tmp_path)
    old = RankEventWriter(run, 0)
    for step in range(2):
        old.append_step(step_events(0, step))
    old.close()
    resumed = RankEventWriter(run, 0)  # a resumed run puts back the steps its checkpoint covers
    resumed.append_step(store.read_events(run.rank_files()[0]).query("step < 1").reset_index(drop=True))
    resumed.append_step(step_events(0, 1))
    assert steps_on_disk(run, 0) == [0, 0, 1, 1]  # the stream, newer than the old parquet file
    resumed.close()
    assert steps_on_disk(run, 0) == [0, 0, 1, 1]


def test_a_broken_stream_beside_its_parquet_file_falls_back_to_the_parquet(tmp_path: Path) -> None:
    run = RunDir(tmp_path)
    writer = RankEventWriter(run, 0)
    writer.append_step(step_events(0, 0))
    writer.close()
    run.rank_stream(0).write_bytes(b"not a stream")  # e.g. a resumed rank killed at once
    read = store.read_measured(run, 1)
    assert read.events["step"].tolist() == [0, 0]
    assert len(read.problems) == 1 and read.problems[0].endswith("measured/rank-00000.parquet is used")
