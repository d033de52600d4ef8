"""One breakdown: `simulate`'s compute and exposed communication per stream are what the event
breakdown (traces/breakdown.py: `compare`, the dashboard's Breakdown page) reads off the same
prediction's events, for tensor-, expert- and context-parallel plans and with tp_comm_overlap; and on a
measured trace a blocking collective inside a pass is communication, a data-parallel one hidden."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from plancast.simulator.loader import load_scenario
from plancast.simulator.predict import simulate
from plancast.traces import schema
from plancast.traces.breakdown import rank_breakdown_us
from plancast.traces.reconcile import overlapped_streams

REPO = Path(__file__).resolve().parents[2]


def _with_tp_overlap(path: Path, tmp_path: Path) -> Path:
    text = path.read_text().replace("[parallelism]", "[parallelism]\ntp_comm_overlap = true", 1)
    out = tmp_path / "overlap.toml"
    out.write_text(text)
    return out


@pytest.mark.parametrize(
    "example", ["gpt3-175b-dgx-a100.toml", "tiny-moe-cpu.toml", "llama3-8b-cp4-128k.toml", "overlap"]
)
def test_events_break_down_as_the_summary(example: str, tmp_path: Path) -> None:
    path = (
        _with_tp_overlap(REPO / "examples" / "gpt3-175b-dgx-a100.toml", tmp_path)
        if example == "overlap"
        else REPO / "examples" / example
    )
    prediction = simulate(load_scenario(path).scenario)
    summary, events = prediction.summary, prediction.events
    step = events[events["step"] == events["step"].min()]
    step_us = float((step["start_us"] + step["dur_us"]).max())
    per_rank = rank_breakdown_us(step, step_us, overlapped_streams(summary)).set_index("rank")
    row = per_rank.loc[summary["critical_rank"]]
    compute_s = summary["compute_time_s"] + summary["optimizer_time_s"]
    assert row["compute"] / 1e6 == pytest.approx(compute_s, rel=1e-6)
    for stream, seconds in summary["exposed_comm_s"].items():
        found = row.get(f"exposed_comm:{stream}", 0.0) / 1e6
        assert found == pytest.approx(seconds, rel=1e-6, abs=1e-9), stream
    assert row["bubble"] / 1e6 == pytest.approx(summary["bubble_time_s"], rel=1e-6, abs=1e-9)
    if example == "overlap":
        assert summary["overlapped_streams"] == ["tp"] and summary["exposed_comm_s"]["tp"] < 1e-3


def _span(stream: str, kind: str, start: float, dur: float) -> dict[str, object]:
    return {"source": "measured", "rank": 0, "step": 1, "stream": stream, "kind": kind, "stage": 0,
            "chunk": 0, "microbatch": 0, "index": 0, "peer": -1, "start_us": start, "dur_us": dur,
            "bytes": 0, "flops": 0.0}


def test_a_blocking_collective_inside_a_pass_is_communication_a_data_parallel_one_is_hidden() -> None:
    frame = pd.DataFrame(
        [
            _span("compute", "forward", 0.0, 100.0),
            _span("tp", "all_reduce", 40.0, 10.0),  # the forward waits for it
            _span("dp", "all_reduce", 60.0, 30.0),  # a bucket beside the pass
            _span("dp", "all_reduce", 100.0, 5.0),  # ... and after it
        ]
    ).astype(schema.COLUMNS)
    row = rank_breakdown_us(frame, 110.0).iloc[0]
    assert row["compute"] == 90.0 and row["exposed_comm:tp"] == 10.0
    assert row["exposed_comm:dp"] == 5.0 and row["bubble"] == 5.0
    hidden = rank_breakdown_us(frame, 110.0, overlapped=("tp",)).iloc[0]
    assert hidden["compute"] == 100.0 and hidden["exposed_comm:tp"] == 0.0


def test_float_rounding_is_no_bubble() -> None:
    """A pp = 1 plan's step less its parts is 1e-14 of rounding, shown as 0 in every report."""
    from plancast.traces.breakdown import pipeline_bubble

    assert pipeline_bubble(245.25, 233.3248849494570, 11.925115050542991) == (0.0, 0.0)
    assert pipeline_bubble(1.0, 0.5, 0.25) == (0.25, 0.25)
    scenario = load_scenario(REPO / "examples" / "llama3-8b-cp4-128k.toml").scenario
    summary = simulate(scenario, events=False).summary
    assert summary["bubble_time_s"] == 0.0 and summary["bubble_fraction"] == 0.0
