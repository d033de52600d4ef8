"""Reconciliation on hand-built traces: exact counts, components, exposed communication, critical path."""

from __future__ import annotations

import json
from collections.abc import Mapping

import pandas as pd
import pytest

from plancast.traces import breakdown, reconcile, schema
from plancast.traces.schema import Event


def spans(kind: str, intervals: list[tuple[float, float]], stream: str = "compute") -> list[Event]:
    return [
        Event("measured", 0, 0, stream, kind, start, end - start, stage=0, chunk=0)
        for start, end in intervals
    ]


@pytest.mark.parametrize(
    ("compute", "comm", "exposed_us"),
    [
        ([(0, 10)], [(5, 15)], 5.0),
        ([(0, 10)], [(2, 8)], 0.0),
        ([(0, 4), (6, 10)], [(2, 8)], 2.0),
        ([], [(0, 3), (2, 5)], 5.0),
        ([(0, 10)], [(10, 12)], 2.0),
        ([(0, 2), (1, 5)], [(3, 9), (8, 12)], 7.0),
        ([(0, 10)], [], 0.0),
    ],
)
def test_exposed_comm(
    compute: list[tuple[float, float]], comm: list[tuple[float, float]], exposed_us: float
) -> None:
    compute_frame = schema.to_frame(spans("forward", compute))
    comm_frame = schema.to_frame(spans("all_reduce", comm, "dp"))
    assert breakdown.exposed_us(comm_frame, compute_frame) == exposed_us


def data_parallel(source: str, step: int, layout_us: Mapping[str, tuple[float, float]]) -> list[Event]:
    """Two ranks running the same (start, end) per kind."""
    events = []
    for rank in (0, 1):
        for kind, (start, end) in layout_us.items():
            stream = "dp" if kind in schema.COMM_KINDS else "compute"
            where = {"stage": -1, "chunk": -1} if kind == "optimizer" else {"stage": 0, "chunk": 0}
            microbatch = 0 if kind in {"forward", "backward", "recompute"} else -1
            events.append(
                Event(source, rank, step, stream, kind, start, end - start, microbatch=microbatch, **where)
            )
    return events


PREDICTED_US = {"forward": (0, 10), "backward": (10, 30), "all_reduce": (20, 35), "optimizer": (36, 40)}
OPTIMIZER_END_US = {0: 148.0, 1: 50.0, 2: 70.0, 3: 60.0}  # step times; step 0 is warm-up


def predicted_frame() -> pd.DataFrame:
    recompute = Event("predicted", 0, 0, "compute", "recompute", 5.0, 1.0, stage=0, chunk=0, microbatch=0)
    return schema.to_frame([*data_parallel("predicted", 0, PREDICTED_US), recompute])


def measured_frame() -> pd.DataFrame:
    events = []
    for step, end_us in OPTIMIZER_END_US.items():
        layout = {"forward": (0, 12), "backward": (12, 36), "all_reduce": (30, 48), "optimizer": (48, end_us)}
        events += data_parallel("measured", step, layout)
    broadcast = Event("measured", 1, 3, "dp", "broadcast", 0.0, 1.0, stage=0, chunk=0)
    return schema.to_frame([*events, broadcast])


def test_counts_and_step_choice() -> None:
    rec = reconcile.reconcile(predicted_frame(), measured_frame())
    assert (rec.step, rec.scored_steps) == (3, (1, 2, 3))  # step times 50, 70, 60 us: median is step 3
    assert (len(rec.matched), len(rec.missing), len(rec.extra)) == (8, 1, 1)
    assert rec.missing[["rank", "kind"]].values.tolist() == [[0, "recompute"]]
    assert rec.extra[["rank", "kind", "step"]].values.tolist() == [[1, "broadcast", 3]]
    assert rec.step_time_predicted_s == pytest.approx(40e-6)
    assert rec.step_time_measured_s == pytest.approx(60e-6)
    assert rec.step_time_error == pytest.approx((40 - 60) / 60)


def test_components() -> None:
    rec = reconcile.reconcile(predicted_frame(), measured_frame())
    got = {
        row.component: (row.predicted_s * 1e6, row.measured_s * 1e6) for row in rec.components.itertuples()
    }
    expected_us = {
        "step_time": (40, 60),
        "forward": (10, 12),
        "backward": (20, 24),
        "recompute": (0.5, 0),  # rank 0 only, mean over two ranks
        "all_reduce": (15, 18),
        "broadcast": (0, 0.5),
        "optimizer": (4, 12),
        "compute": (34, 48),  # union of compute spans
        "exposed_comm": (5, 12),
        "exposed_comm:dp": (5, 12),
        "bubble": (1, 0),
    }
    assert sorted(got) == sorted(expected_us)
    assert {k: p for k, (p, _) in got.items()} == pytest.approx({k: p for k, (p, _) in expected_us.items()})
    assert {k: m for k, (_, m) in got.items()} == pytest.approx({k: m for k, (_, m) in expected_us.items()})
    errors = dict(zip(rec.components["component"], rec.components["error"], strict=True))
    assert errors["forward"] == pytest.approx((10 - 12) / 12)
    assert pd.isna(errors["bubble"])  # measured 0: no relative error


def test_largest_mismatches_and_matched_errors() -> None:
    rec = reconcile.reconcile(predicted_frame(), measured_frame())
    assert rec.largest_mismatches["kind"].tolist()[:4] == ["optimizer", "optimizer", "backward", "backward"]
    assert rec.largest_mismatches["dur_error_us"].tolist()[:2] == [-8.0, -8.0]
    forward = rec.matched[(rec.matched["kind"] == "forward") & (rec.matched["rank"] == 0)].iloc[0]
    assert (forward["dur_us_predicted"], forward["dur_us_measured"]) == (10.0, 12.0)
    assert forward["dur_error"] == pytest.approx(-2 / 12)


def test_explicit_step_and_memory_component() -> None:
    rec = reconcile.reconcile(
        predicted_frame(),
        measured_frame(),
        step=1,
        predicted_summary={"peak_memory_gib": 30.0},
        measured_summary={"peak_memory_gib": 40.0},
    )
    assert (rec.step, rec.scored_steps, rec.step_time_measured_s) == (1, (1,), pytest.approx(50e-6))
    memory = rec.components[rec.components["component"] == "peak_memory"].iloc[0]
    assert (memory["predicted_gib"], memory["measured_gib"], memory["error"]) == (30.0, 40.0, -0.25)


@pytest.mark.parametrize(
    ("step_times_us", "chosen", "measured_us"),
    [
        ({0: 10.0}, 0, 10.0),
        ({0: 5.0, 1: 7.0}, 1, 7.0),
        ({0: 999.0, 1: 50.0, 2: 70.0, 3: 60.0}, 3, 60.0),
        # even: the lower middle step, and its time (the header and the components are one step's)
        ({0: 1.0, 1: 30.0, 2: 10.0, 3: 20.0, 4: 40.0}, 3, 20.0),
    ],
)
def test_median_step(step_times_us: dict[int, float], chosen: int, measured_us: float) -> None:
    measured = schema.to_frame(
        Event("measured", 0, step, "compute", "forward", 0.0, t, stage=0, chunk=0, microbatch=0)
        for step, t in step_times_us.items()
    )
    predicted = schema.to_frame(
        [Event("predicted", 0, 0, "compute", "forward", 0.0, 8.0, stage=0, chunk=0, microbatch=0)]
    )
    rec = reconcile.reconcile(predicted, measured)
    assert (rec.step, rec.step_time_measured_s * 1e6) == (chosen, pytest.approx(measured_us))
    assert (len(rec.matched), len(rec.missing), len(rec.extra)) == (1, 0, 0)
    step_row = rec.components[rec.components["component"] == "step_time"].iloc[0]
    assert step_row["measured_s"] == rec.step_time_measured_s


def test_summary_is_strict_json() -> None:
    rec = reconcile.reconcile(
        predicted_frame(),
        measured_frame(),
        predicted_summary={"peak_memory_gib": 1},
        measured_summary={"peak_memory_gib": 2},
    )
    summary = json.loads(json.dumps(reconcile.to_summary(rec), allow_nan=False))
    assert {k: summary[k] for k in ("events_matched", "events_missing", "events_extra", "step")} == {
        "events_matched": 8,
        "events_missing": 1,
        "events_extra": 1,
        "step": 3,
    }
    assert summary["step_time_error"] == pytest.approx(-1 / 3)
    components = {c["component"]: c for c in summary["components"]}
    assert components["bubble"]["error"] is None
    assert components["peak_memory"] == {
        "component": "peak_memory",
        "predicted_gib": 1.0,
        "measured_gib": 2.0,
        "error": -0.5,
    }
    assert len(summary["largest_mismatches"]) == 8


@pytest.mark.parametrize(
    ("predicted", "measured", "message"),
    [
        (predicted_frame(), schema.empty_frame(), "no measured events"),
        (
            pd.concat([predicted_frame(), predicted_frame()]),
            measured_frame(),
            "predicted events have 18 rows sharing",
        ),
    ],
)
def test_bad_input(predicted: pd.DataFrame, measured: pd.DataFrame, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        reconcile.reconcile(predicted, measured)


def pipeline_two_ranks() -> pd.DataFrame:
    """One microbatch through two stages; rank 0 waits for the gradient in a long recv."""

    def ev(
        rank: int, kind: str, start: float, end: float, *, stream: str = "compute", peer: int = -1
    ) -> Event:
        return Event(
            "measured",
            rank,
            0,
            stream,
            kind,
            start,
            end - start,
            stage=rank,
            chunk=0,
            microbatch=0,
            peer=peer,
        )

    return schema.to_frame(
        [
            ev(0, "forward", 0, 10),
            ev(0, "send", 10, 12, stream="pp", peer=1),
            ev(0, "recv", 12, 40, stream="pp", peer=1),
            ev(0, "backward", 40, 60),
            ev(1, "recv", 0, 12, stream="pp", peer=0),
            ev(1, "forward", 12, 22),
            ev(1, "backward", 22, 38),
            ev(1, "send", 38, 40, stream="pp", peer=0),
        ]
    )


def test_critical_path_crosses_ranks_through_send_recv() -> None:
    path = reconcile.critical_path(pipeline_two_ranks())
    assert list(zip(path["rank"], path["kind"], strict=True)) == [
        (0, "forward"),
        (0, "send"),
        (1, "recv"),
        (1, "forward"),
        (1, "backward"),
        (1, "send"),
        (0, "recv"),
        (0, "backward"),
    ]


def test_critical_path_of_one_rank_skips_overlapped_work() -> None:
    frame = schema.to_frame(
        [
            *spans("forward", [(0, 10)]),
            *spans("all_reduce", [(2, 6)], "dp"),  # hidden under the forward: not on the path
            *spans("backward", [(10, 30)]),
        ]
    )
    assert reconcile.critical_path(frame)["kind"].tolist() == ["forward", "backward"]


def test_reconciliation_carries_measured_critical_path() -> None:
    rec = reconcile.reconcile(predicted_frame(), measured_frame())
    # the backward [12, 36] overlaps the all-reduce [30, 48], so the chain steps from it to the forward
    assert rec.critical_path["kind"].tolist() == ["forward", "all_reduce", "optimizer"]
    assert set(rec.critical_path["step"]) == {3}


def test_bubble_is_the_critical_ranks_and_pipeline_waits_count_in_it() -> None:
    """traces/breakdown.py: rank 1 (the busiest pipeline passes) gives the step's figures; its receive
    outside compute is bubble, not exposed communication; its dp all-reduce outside compute is exposed."""
    events = [
        Event("predicted", 0, 0, "compute", "forward", 0.0, 10.0, stage=0, chunk=0, microbatch=0),
        Event("predicted", 1, 0, "pp", "recv", 0.0, 10.0, stage=1, chunk=0, microbatch=0, peer=0),
        Event("predicted", 1, 0, "compute", "forward", 10.0, 20.0, stage=1, chunk=0, microbatch=0),
        Event("predicted", 1, 0, "dp", "all_reduce", 30.0, 5.0, stage=1, chunk=0),
        Event("predicted", 0, 0, "compute", "optimizer", 35.0, 5.0),
        Event("predicted", 1, 0, "compute", "optimizer", 35.0, 5.0),
    ]
    frame = schema.to_frame(events)
    per_rank = breakdown.rank_breakdown_us(frame, 40.0).set_index("rank")
    assert per_rank.loc[1, ["compute", "exposed_comm", "bubble"]].tolist() == [25.0, 5.0, 10.0]
    assert "exposed_comm:pp" not in per_rank.columns
    assert breakdown.step_bubble(frame) == (10.0, 0.25)
    rec = reconcile.reconcile(frame, frame.assign(source="measured"))
    assert (rec.bubble_fraction_predicted, rec.bubble_fraction_measured) == (0.25, 0.25)
    components = dict(zip(rec.components["component"], rec.components["predicted_s"], strict=True))
    assert components["bubble"] == pytest.approx(10e-6)
