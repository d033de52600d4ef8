"""The chart builders and the frames they draw, without a browser: ``chart.to_dict()`` is the spec."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from dashboard_runs import MEASURED_PEAK_GIB, STEP_SCALE

from plancast.dashboard import charts, frames
from plancast.dashboard.data import RunData, load_run
from plancast.simulator.costs.memory import GiB, peak_memory


@pytest.fixture(scope="module")
def run(healthy_run: Path) -> RunData:
    return load_run(healthy_run)


def rows(spec: dict[str, Any]) -> int:
    """Rows of the (single) inline dataset of a spec."""
    (values,) = spec["datasets"].values()
    return len(values)


def test_component_error_chart_drops_components_without_an_error() -> None:
    components = pd.DataFrame(
        {"component": ["step_time", "forward", "peak_memory"], "error_pct": [10.0, -5.0, float("nan")]}
    )
    spec = charts.component_error_chart(components).to_dict()
    assert spec["mark"]["type"] == "bar"
    assert spec["encoding"]["x"]["field"] == "error_pct"
    assert spec["encoding"]["y"]["field"] == "component"
    assert rows(spec) == 2


def test_gantt_chart_orders_lanes_predicted_above_measured_and_zooms(run: RunData) -> None:
    events = frames.step_events(run.predicted, run.measured, measured_step=2)
    gantt = frames.timeline(events, ranks=[0, 1])
    spec = charts.gantt_chart(gantt.frame).to_dict()
    assert spec["mark"]["type"] == "bar"
    enc = spec["encoding"]
    assert (enc["x"]["field"], enc["x2"]["field"], enc["color"]["field"]) == ("start_ms", "end_ms", "kind")
    assert enc["y"]["sort"] == [
        "rank 0 · predicted",
        "rank 0 · measured",
        "rank 1 · predicted",
        "rank 1 · measured",
    ]
    assert enc["yOffset"]["field"] == "stream"
    assert spec["height"] == {"step": charts.STREAM_ROW_PX}
    assert spec["params"][0]["bind"] == "scales"
    assert rows(spec) == len(run.predicted) + len(run.measured[run.measured["step"] == 2])


def test_timeline_keeps_the_longest_events_under_the_cap(run: RunData) -> None:
    events = frames.step_events(run.predicted, run.measured, measured_step=1)
    capped = frames.timeline(events, ranks=None, max_marks=10)
    assert len(capped.frame) == 10
    assert capped.total_events == len(events)
    assert capped.note is not None and f"10 longest of {len(events)}" in capped.note
    assert capped.frame["dur_ms"].min() >= events["dur_us"].nlargest(10).min() / 1e3
    assert frames.timeline(events, ranks=None).note is None


def test_timeline_filters_ranks(run: RunData) -> None:
    events = frames.step_events(run.predicted, run.measured, measured_step=1)
    assert set(frames.timeline(events, ranks=[1]).frame["lane"]) == {
        "rank 1 · predicted",
        "rank 1 · measured",
    }


def test_breakdown_adds_up_to_each_ranks_step_time(run: RunData) -> None:
    events = frames.step_events(run.predicted, run.measured, measured_step=1)
    parts = frames.breakdown(events)
    # pipeline send/recv time counts in the bubble (traces/breakdown.py): no "exposed pp comm"
    assert set(parts["component"]) == {"compute", "optimizer", "bubble"}
    totals = parts.groupby("source")["ms"].sum() / 2  # two ranks, each adds up to its source's step time
    predicted_ms = run.predicted_summary["step_time_s"] * 1e3 if run.predicted_summary else 0.0
    assert totals["predicted"] == pytest.approx(predicted_ms, rel=1e-6)
    # measured step 1 is every predicted span scaled by STEP_SCALE[1] x (1 + 0.02 rank)
    ends_ms = (run.predicted["start_us"] + run.predicted["dur_us"]).groupby(run.predicted["rank"]).max() / 1e3
    measured_ms = max(end * STEP_SCALE[1] * (1 + 0.02 * rank) for rank, end in ends_ms.items())
    assert totals["measured"] == pytest.approx(measured_ms, rel=1e-6)
    spec = charts.breakdown_chart(parts).to_dict()
    assert spec["encoding"]["xOffset"]["field"] == "source"
    assert spec["encoding"]["y"]["stack"] == "zero"
    assert rows(spec) == len(parts) == 2 * 2 * 3


def test_memory_matches_the_simulators_peak_and_the_measured_summary(run: RunData) -> None:
    assert run.scenario is not None
    table = frames.memory(run.scenario, run.predicted_summary, run.measured_summary)
    predicted = table[table["source"] == "predicted"].groupby("rank")["gib"].sum()
    pp_rank, peak = peak_memory(run.scenario)
    assert predicted.max() == pytest.approx(peak.total / GiB)
    assert predicted.idxmax() == pp_rank  # tp = dp = 1: rank = pipeline rank
    measured = table[table["source"] == "measured"].set_index("rank")["gib"]
    assert measured.tolist() == list(MEASURED_PEAK_GIB)
    limit = frames.memory_limit_gib(run.scenario, run.predicted_summary)
    spec = charts.memory_chart(table, limit).to_dict()
    bars, rule = spec["layer"]
    assert bars["mark"]["type"] == "bar" and rule["mark"]["type"] == "rule"
    assert rule["encoding"]["y"]["field"] == "limit_gib"
    assert limit == run.scenario.cluster.gpu.memory_GiB


def test_memory_without_scenario_places_the_summary_breakdown_on_the_peak_stage(run: RunData) -> None:
    assert run.predicted_summary is not None
    table = frames.predicted_memory(None, run.predicted_summary)
    assert set(table["rank"]) == {run.predicted_summary["peak_memory_pp_rank"]}
    assert table["gib"].sum() == pytest.approx(run.predicted_summary["peak_memory_gib"])


@pytest.mark.parametrize(
    ("summary", "expected"),
    [
        (
            {"rank_memory_gib": {"1": {"peak": 2.0, "parameters": 0.5}, "0": {"peak": 1.0}}},
            {0: 1.0, 1: 2.0},
        ),
        ({"rank_memory_gib": {"3": {"parameters": 4.0}}}, {}),
        ({"peak_memory_gib": 3.0}, {}),
        (None, {}),
    ],
)
def test_measured_peaks_reads_the_runtimes_per_rank_memory(
    summary: dict[str, Any] | None, expected: dict[int, float]
) -> None:
    assert frames.measured_peaks(summary) == expected


def test_telemetry_chart_draws_one_line_per_gpu(gpu_run: Path) -> None:
    samples = load_run(gpu_run).telemetry
    assert samples is not None
    shaped = frames.telemetry(samples)
    assert sorted(shaped["device"].unique()) == ["node0/gpu0", "node0/gpu1"]
    assert shaped["time_s"].min() == 0.0
    spec = charts.telemetry_chart(shaped, "power_W", "Power (W)").to_dict()
    assert spec["mark"]["type"] == "line"
    assert (spec["encoding"]["y"]["field"], spec["encoding"]["color"]["field"]) == ("power_W", "device")
    assert rows(spec) == len(samples) == 40


def test_pareto_front_keeps_only_undominated_plans() -> None:
    plans = pd.DataFrame(
        {
            "plan": ["a", "b", "c", "d", "e"],
            "peak_memory_gib": [10.0, 20.0, 15.0, 30.0, 20.0],
            "step_time_s": [5.0, 3.0, 6.0, 1.0, 4.0],
        }
    )
    assert frames.pareto_front(plans).tolist() == [True, True, False, True, False]


def test_sweep_chart_rings_the_selected_plan() -> None:
    plans = pd.DataFrame(
        {"plan": ["a", "b", "c"], "peak_memory_gib": [1.0, 2.0, 3.0], "step_time_s": [3.0, 1.0, 2.0]}
    )
    plans["pareto"] = frames.pareto_front(plans)
    spec = charts.sweep_chart(plans, "c").to_dict()
    front, points, ring = spec["layer"]
    assert front["mark"]["type"] == "line" and points["mark"]["type"] == "circle"
    assert points["encoding"]["color"]["field"] == "pareto"
    assert len(spec["datasets"][ring["data"]["name"]]) == 1
    assert spec["datasets"][ring["data"]["name"]][0]["plan"] == "c"


def test_step_time_chart_skips_a_missing_measurement() -> None:
    table = frames.step_time_rows(0.5, 0.4, None)
    assert table.to_dict("list") == {
        "label": ["original prediction", "what-if prediction"],
        "step_time_ms": [500.0, 400.0],
    }
    spec = charts.step_time_chart(table).to_dict()
    assert spec["encoding"]["x"]["field"] == "step_time_ms"
    assert rows(spec) == 2


@pytest.mark.parametrize(
    ("seconds", "text"), [(0.6461736, "646.2 ms"), (12.345, "12.35 s"), (float("nan"), "n/a")]
)
def test_format_seconds(seconds: float, text: str) -> None:
    assert frames.format_seconds(seconds) == text


def test_component_rows_put_memory_in_gib_and_time_in_ms(run: RunData) -> None:
    from plancast.dashboard.data import compare_run

    rec = compare_run(run)
    table = frames.component_rows(rec.components).set_index("component")
    assert table.loc["peak_memory", "unit"] == "GiB"
    assert table.loc["peak_memory", "measured"] == max(MEASURED_PEAK_GIB)
    assert table.loc["step_time", "unit"] == "ms"
    assert table.loc["step_time", "predicted"] == pytest.approx(rec.step_time_predicted_s * 1e3)


def test_summary_comparison_formats_each_figure() -> None:
    original = {"step_time_s": 0.5, "bubble_fraction": 0.25, "mfu": 0.4, "fits_in_memory": True}
    changed = {"step_time_s": 2.0, "bubble_fraction": 0.0, "fits_in_memory": False}
    table = frames.summary_comparison(original, changed).set_index("figure")
    assert table.loc["step time"].tolist() == ["500.0 ms", "2.00 s"]
    assert table.loc["bubble fraction"].tolist() == ["25.0%", "0.0%"]
    assert table.loc["MFU"].tolist() == ["40.00%", "n/a"]
    assert table.loc["fits in memory"].tolist() == ["yes", "no"]


def test_memory_timeline_joins_measured_points_of_the_first_rank_of_each_stage(run: RunData) -> None:
    assert run.scenario is not None
    predicted = frames.memory_timeline(run.scenario, None)
    first = predicted[predicted["rank"] == 0]
    measured = {
        "rank_memory_timeline": {
            "0": [[p.order, p.kind, p.stage, p.chunk, p.microbatch, p.gib * 1.1] for p in first.itertuples()],
            "7": [[0, "forward", 0, 0, 0, 1.0]],  # not a first rank of a stage: dropped
            "1": [[0, "forward"]],  # malformed: dropped
        }
    }
    table = frames.memory_timeline(run.scenario, measured)
    got = table[table["source"] == "measured"]
    assert set(got["rank"]) == {0}
    assert got["gib"].tolist() == pytest.approx((first["gib"] * 1.1).tolist())
    assert peak_memory(run.scenario)[1].total / GiB == pytest.approx(predicted["gib"].max())
    spec = charts.memory_timeline_chart(table).to_dict()
    assert spec["spec"]["mark"]["type"] == "line"
    assert spec["spec"]["encoding"]["color"]["field"] == "source"
