"""Chrome-trace export: valid JSON, one X event per row, and loadable by HolisticTraceAnalysis."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from plancast.traces import chrome, schema


def data_parallel_steps(source: str = "predicted", ranks: int = 2, steps: int = 3) -> pd.DataFrame:
    """Per rank and step: forward [0,10], backward [10,30], all-reduce [20,35], optimizer [35,40] us."""
    events = []
    for rank in range(ranks):
        for step in range(steps):
            events += [
                schema.Event(
                    source, rank, step, "compute", "forward", 0.0, 10.0, stage=0, chunk=0, microbatch=0
                ),
                schema.Event(
                    source, rank, step, "compute", "backward", 10.0, 20.0, stage=0, chunk=0, microbatch=0
                ),
                schema.Event(
                    source, rank, step, "dp", "all_reduce", 20.0, 15.0, stage=0, chunk=0, bytes=4096
                ),
                schema.Event(source, rank, step, "compute", "optimizer", 35.0, 5.0),
            ]
    return schema.to_frame(events)


def test_one_file_per_rank_with_kineto_header(tmp_path: Path) -> None:
    paths = chrome.export_chrome(data_parallel_steps(), tmp_path, world_size=2)
    assert paths == [tmp_path / "rank-0.json", tmp_path / "rank-1.json"]
    trace = json.loads(paths[1].read_text())
    assert trace["schemaVersion"] == 1
    assert trace["distributedInfo"] == {"rank": 1, "world_size": 2, "backend": "nccl"}
    assert trace["deviceProperties"] == []


def test_one_complete_event_per_row(tmp_path: Path) -> None:
    frame = data_parallel_steps()
    for path in chrome.export_chrome(frame, tmp_path, world_size=2):
        trace = json.loads(path.read_text())
        rank = trace["distributedInfo"]["rank"]
        complete = [e for e in trace["traceEvents"] if e["ph"] == "X"]
        assert all({"name", "cat", "pid", "tid", "ts", "dur", "args"} <= set(e) for e in complete)
        assert all(isinstance(e["ts"], float) and e["dur"] >= 0 for e in complete)
        kernels = [e for e in complete if e["cat"] == "kernel"]
        assert len(kernels) == int((frame["rank"] == rank).sum())
        assert {e["pid"] for e in kernels} == {rank}
        comm = [e for e in kernels if e["args"]["kind"] == "all_reduce"]
        assert all(e["name"].startswith("ncclDevKernel_AllReduce") for e in comm)
        assert [e["args"]["bytes"] for e in comm] == [4096, 4096, 4096]


def test_one_ranks_trace_is_what_the_export_writes_for_it(tmp_path: Path) -> None:
    """`chrome_trace` prepares the rank's rows alone, with the whole table's stream ids and step origins:
    the same object as the export's file of that rank (a later rank's streams and steps included)."""
    frame = data_parallel_steps(ranks=3)
    late = schema.to_frame([schema.Event("predicted", 2, 3, "tp", "all_gather", 50.0, 4.0, stage=0, bytes=8)])
    frame = pd.concat([frame, late], ignore_index=True)
    paths = chrome.export_chrome(frame, tmp_path, world_size=3)
    for rank, path in enumerate(paths):
        assert chrome.chrome_trace(frame, rank, world_size=3) == json.loads(path.read_text())


def test_steps_are_laid_end_to_end(tmp_path: Path) -> None:
    trace = chrome.chrome_trace(data_parallel_steps(), rank=0, world_size=2)
    steps = [
        (e["name"], e["ts"], e["dur"]) for e in trace["traceEvents"] if e.get("cat") == "user_annotation"
    ]
    assert steps == [
        ("ProfilerStep#0", 0.0, 40.0),
        ("ProfilerStep#1", 40.0, 40.0),
        ("ProfilerStep#2", 80.0, 40.0),
    ]
    optimizer = [
        e for e in trace["traceEvents"] if e.get("cat") == "kernel" and e["args"]["kind"] == "optimizer"
    ]
    assert [(e["ts"], e["dur"]) for e in optimizer] == [(35.0, 5.0), (75.0, 5.0), (115.0, 5.0)]


def test_streams_get_separate_named_threads() -> None:
    trace = chrome.chrome_trace(data_parallel_steps(), rank=0, world_size=2)
    names = {e["tid"]: e["args"]["name"] for e in trace["traceEvents"] if e["name"] == "thread_name"}
    assert names == {0: "steps", 1: "stream compute", 2: "stream dp"}


@pytest.mark.parametrize(
    ("frame", "world_size", "message"),
    [
        (pd.concat([data_parallel_steps("predicted"), data_parallel_steps("measured")]), 2, "mixes sources"),
        (data_parallel_steps(ranks=3), 2, r"rank\(s\) \[2\] are outside world size 2"),
    ],
)
def test_refuses_ambiguous_input(tmp_path: Path, frame: pd.DataFrame, world_size: int, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        chrome.export_chrome(frame, tmp_path, world_size)


def test_holistic_trace_analysis_reads_the_export(tmp_path: Path) -> None:
    trace_analysis = pytest.importorskip("hta.trace_analysis")
    chrome.export_chrome(data_parallel_steps(), tmp_path, world_size=2)
    analysis = trace_analysis.TraceAnalysis(trace_dir=str(tmp_path))
    breakdown = analysis.get_temporal_breakdown(visualize=False)
    assert breakdown["rank"].tolist() == [0, 1]
    # HTA drops the last profiler step; in each of the two left: compute 35 us, exposed all-reduce 5 us
    assert breakdown["compute_time(us)"].tolist() == [70.0, 70.0]
    assert breakdown["non_compute_time(us)"].tolist() == [10.0, 10.0]
    assert breakdown["idle_time(us)"].tolist() == [0.0, 0.0]
