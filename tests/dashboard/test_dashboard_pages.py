"""Every page through Streamlit's AppTest on real fixture runs: it renders, with the right numbers."""

from __future__ import annotations

import io
import shutil
import tempfile
import zipfile
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pytest
from conftest import OpenPage, chart_rows, charts, metrics, no_exception, widget
from dashboard_runs import DAMAGES, MEASURED_PEAK_GIB

from plancast.dashboard import frames
from plancast.dashboard.data import compare_run, load_run
from plancast.traces.store import read_json, write_json

REPO = Path(__file__).resolve().parents[2]
GPU_RUNS = REPO / "tests" / "data" / "gpu_runs"
PAGES = ["overview", "timeline", "breakdown", "memory", "telemetry", "sweep", "what_if", "decision"]


def texts(elements: Iterable[Any]) -> str:
    """The text of alerts or captions, one per line."""
    return "\n".join(str(e.value) for e in elements)


def test_overview_compares_predicted_and_measured(open_page: OpenPage, healthy_run: Path) -> None:
    at = open_page(healthy_run, "overview")
    no_exception(at)
    summary = read_json(healthy_run / "predicted" / "summary.json")
    rec = compare_run(load_run(healthy_run))
    shown = metrics(at)
    assert shown["Predicted step time"] == frames.format_seconds(summary["step_time_s"])
    assert shown["Measured step time"] == frames.format_seconds(rec.step_time_measured_s)
    assert shown["Step-time error"] == frames.format_error(rec.step_time_error)
    assert rec.step_time_error < 0  # the fixture's measured steps are slower than predicted
    predicted_events = len(load_run(healthy_run).predicted)
    assert (shown["Events matched"], shown["Events missing"], shown["Events extra"]) == (
        str(predicted_events),
        "0",
        "0",
    )
    assert [spec["mark"]["type"] for spec in charts(at)] == ["bar"]
    components = at.dataframe[0].value
    assert {"step_time", "forward", "backward", "bubble", "peak_memory"} <= set(components["component"])
    assert len(at.dataframe) == 3  # components, largest mismatches, critical path


def test_overview_shows_what_the_measured_gpu_ran_at(open_page: OpenPage, tmp_path: Path) -> None:
    """A kept H100 run: the GPU's clock over its busy samples, as `plancast compare` prints it; a CPU
    run (the healthy fixture, empty telemetry) shows no such metric."""
    run = tmp_path / "h100"
    shutil.copytree(GPU_RUNS / "llama3-4layer-one-h100", run)
    shutil.copy(REPO / "benchmarks" / "gpu_scenarios" / "llama3-4layer-one-h100.toml", run / "scenario.toml")
    at = open_page(run, "overview")
    no_exception(at)
    shown = metrics(at)
    assert shown["GPU SM clock while busy"] == "1680 MHz"
    assert shown["GPU power while busy"] == "666 W"


def test_overview_shows_the_measured_core_wait(
    open_page: OpenPage, healthy_run: Path, tmp_path: Path
) -> None:
    run = tmp_path / "waited"
    shutil.copytree(healthy_run, run)
    summary = read_json(run / "measured" / "summary.json")
    write_json(run / "measured" / "summary.json", {**summary, "core_wait_s": 0.004})
    at = open_page(run, "overview")
    no_exception(at)
    assert metrics(at)["Measured core wait"] == "4 ms a step"


def test_overview_of_a_cpu_run_has_no_gpu_clock(open_page: OpenPage, healthy_run: Path) -> None:
    at = open_page(healthy_run, "overview")
    no_exception(at)
    assert "GPU SM clock while busy" not in metrics(at)
    assert "Measured core wait" not in metrics(at)  # the fixture's runtime recorded none


def test_overview_of_a_prediction_says_there_is_no_measurement(
    open_page: OpenPage, prediction_only_run: Path
) -> None:
    at = open_page(prediction_only_run, "overview")
    no_exception(at)
    assert "Only a prediction" in texts(at.info)
    summary = read_json(prediction_only_run / "predicted" / "summary.json")
    assert metrics(at)["Predicted step time"] == frames.format_seconds(summary["step_time_s"])
    assert "pipeline bubble" in set(at.dataframe[0].value["part"])


@pytest.mark.parametrize("page", PAGES)
def test_damaged_runs_warn_and_still_render(
    open_page: OpenPage, damaged_run: tuple[str, Path], page: str
) -> None:
    damage, run = damaged_run
    at = open_page(run, page)
    no_exception(at)
    file, text = DAMAGES[damage]
    warnings = texts(at.warning)
    assert file in warnings and text in warnings
    assert not at.error
    assert at.title, "the page stopped before its title"


def test_overview_of_a_damaged_run_still_compares_what_was_read(
    open_page: OpenPage, damaged_run: tuple[str, Path]
) -> None:
    damage, run = damaged_run
    at = open_page(run, "overview")
    shown = metrics(at)
    assert "Measured step time" in shown
    lost_rank = DAMAGES[damage][0].startswith("measured/")
    assert shown["Events missing"] == (str(len(load_run(run).predicted) // 2) if lost_rank else "0")


def test_timeline_draws_one_step_for_the_chosen_ranks(open_page: OpenPage, healthy_run: Path) -> None:
    at = open_page(healthy_run, "timeline")
    no_exception(at)
    run = load_run(healthy_run)
    step = widget(at.selectbox, "Measured step")
    assert step.value == compare_run(run).step
    (spec,) = charts(at)
    assert spec["mark"]["type"] == "bar" and spec["params"][0]["bind"] == "scales"
    measured_step = run.measured[run.measured["step"] == step.value]
    assert chart_rows(at) == [len(run.predicted) + len(measured_step)]
    widget(at.multiselect, "Ranks").set_value([1]).run()
    assert chart_rows(at) == [int((run.predicted["rank"] == 1).sum() + (measured_step["rank"] == 1).sum())]
    widget(at.multiselect, "Ranks").set_value([]).run()
    assert "Pick at least one rank" in texts(at.info)


def test_breakdown_stacks_components_per_rank_and_source(open_page: OpenPage, healthy_run: Path) -> None:
    at = open_page(healthy_run, "breakdown")
    no_exception(at)
    (spec,) = charts(at)
    assert spec["encoding"]["xOffset"]["field"] == "source"
    table = at.dataframe[0].value
    assert len(table) == 4  # 2 ranks x (predicted, measured)
    assert {"compute", "optimizer", "bubble"} <= set(table.columns)
    shown = metrics(at)
    assert set(shown) == {"Bubble fraction (predicted)", "Bubble fraction (measured)"}


def test_memory_shows_predicted_and_measured_peaks_against_the_gpu(
    open_page: OpenPage, healthy_run: Path
) -> None:
    at = open_page(healthy_run, "memory")
    no_exception(at)
    shown = metrics(at)
    assert shown["Measured peak"] == f"{max(MEASURED_PEAK_GIB):.3g} GiB"
    summary = read_json(healthy_run / "predicted" / "summary.json")
    assert shown["Predicted peak"] == f"{summary['peak_memory_gib']:.3g} GiB"
    assert shown["GPU memory"] == f"{summary['gpu_memory_gib']:g} GiB"
    spec, timeline = charts(at)
    assert [layer["mark"]["type"] for layer in spec["layer"]] == ["bar", "rule"]
    assert timeline["spec"]["mark"]["type"] == "line" and timeline["facet"]["row"]["field"] == "rank"
    # the tiny run's peak is far below 8 GiB: the rule is off until asked for, so the bars stay visible
    limit = widget(at.toggle, "Draw the GPU's memory")
    # 2 ranks x 5 predicted categories (parameters, gradients, optimizer, activations, gathered) + 2 measured
    assert limit.value is False and chart_rows(at) == [2 * 5 + 2, 0]
    limit.set_value(True).run()
    assert chart_rows(at) == [2 * 5 + 2, 1]


def test_memory_page_draws_the_predicted_timeline_and_says_measured_is_not_recorded(
    open_page: OpenPage, healthy_run: Path
) -> None:
    """The CPU fixture run records peaks only: the timeline is the prediction, and the page says so."""
    at = open_page(healthy_run, "memory")
    no_exception(at)
    run = load_run(healthy_run)
    expected = frames.memory_timeline(run.scenario, run.measured_summary)
    assert set(expected["source"]) == {"predicted"}
    assert chart_rows(at, 1) == [len(expected)]
    assert "Measured: not recorded for this run" in texts(at.caption)


def test_telemetry_without_gpu_says_so(open_page: OpenPage, healthy_run: Path) -> None:
    at = open_page(healthy_run, "telemetry")
    no_exception(at)
    assert "had no GPU" in texts(at.info)
    assert charts(at) == []


def test_telemetry_with_gpus_draws_each_metric(open_page: OpenPage, gpu_run: Path) -> None:
    at = open_page(gpu_run, "telemetry")
    no_exception(at)
    fields = [spec["encoding"]["y"]["field"] for spec in charts(at)]
    assert sorted(fields) == sorted(frames.TELEMETRY_METRICS)  # two columns: order is per column


def test_sweep_runs_from_the_scenario_and_selects_a_plan(open_page: OpenPage, healthy_run: Path) -> None:
    at = open_page(healthy_run, "sweep")
    no_exception(at)
    assert charts(at) == []
    widget(at.number_input, "Plans simulated in full").set_value(6).run()
    at.button[0].click().run()
    no_exception(at)
    (spec,) = charts(at)
    assert [layer["mark"]["type"] for layer in spec["layer"]] == ["line", "circle", "point"]
    plans = widget(at.selectbox, "Plan").options
    assert len(plans) == 6
    widget(at.selectbox, "Plan").set_value(plans[-1]).run()
    assert at.dataframe[0].value.loc["plan"].iloc[0] == plans[-1]
    assert metrics(at)["Peak memory"].endswith("GiB")


def test_sweep_loads_a_csv_and_refuses_a_bad_one(
    open_page: OpenPage, healthy_run: Path, tmp_path: Path
) -> None:
    from plancast.dashboard.data import sweep_table

    scenario = load_run(healthy_run).scenario
    assert scenario is not None
    (tmp_path / "runs").mkdir()  # the runs folder of the dashboard started in tmp_path
    csv = tmp_path / "runs" / "sweep.csv"
    sweep_table(scenario, 2, 5).drop(columns="plan").to_csv(csv, index=False)
    at = open_page(healthy_run, "sweep")
    widget(at.radio, "Plans").set_value("Load a sweep CSV").run()
    widget(at.text_input, "CSV path").set_value(str(csv)).run()
    no_exception(at)
    assert len(widget(at.selectbox, "Plan").options) == 5 and len(charts(at)) == 1
    bad = tmp_path / "runs" / "bad.csv"
    bad.write_text("a,b\n1,2\n")
    widget(at.text_input, "CSV path").set_value(str(bad)).run()
    assert "lacks column(s)" in texts(at.error)
    for outside in ("/dev/zero", "../sweep-elsewhere.csv", "/etc/passwd"):
        widget(at.text_input, "CSV path").set_value(outside).run()
        no_exception(at)
        assert "is outside" in texts(at.error), outside


def test_the_runs_folder_is_confined_to_the_one_given_at_start(
    open_page: OpenPage, healthy_run: Path
) -> None:
    at = open_page(healthy_run, "overview")
    widget(at.sidebar.text_input, "Runs folder").set_value("/").run()
    no_exception(at)
    assert "is outside" in texts(at.sidebar.error)
    assert at.title[0].value == f"Run {healthy_run.name}"  # the run given at start is still shown


def test_overview_shows_a_failed_measured_run(open_page: OpenPage, healthy_run: Path, tmp_path: Path) -> None:
    failed = Path(shutil.copytree(healthy_run, tmp_path / "failed-run"))
    summary = read_json(failed / "measured" / "summary.json")
    write_json(
        failed / "measured" / "summary.json", {**summary, "status": "failed", "reason": "rank 1 failed first"}
    )
    at = open_page(failed, "overview")
    no_exception(at)
    assert "measured run failed: rank 1 failed first" in texts(at.error)


def test_what_if_resimulates_and_reports_invalid_plans(open_page: OpenPage, healthy_run: Path) -> None:
    at = open_page(healthy_run, "what_if")
    no_exception(at)
    summary = read_json(healthy_run / "predicted" / "summary.json")
    original = frames.format_seconds(summary["step_time_s"])
    shown = metrics(at)
    assert shown["Original prediction"] == original
    assert shown["What-if step time"] == original  # the knobs start at the run's plan
    assert at.metric[0].delta is None or at.metric[0].delta == ""  # no change, no delta
    table = at.dataframe[0].value.set_index("figure")
    assert table.loc["step time", "original"] == table.loc["step time", "what-if"] == original
    assert shown["Measured"] == frames.format_seconds(compare_run(load_run(healthy_run)).step_time_measured_s)
    widget(at.selectbox, "Pipeline parallel (pp)").set_value(1).run()
    no_exception(at)
    assert metrics(at)["What-if step time"] != original
    assert at.metric[0].delta.endswith("vs original")
    assert len(charts(at)) == 1
    widget(at.number_input, "Virtual stages per rank").set_value(2).run()
    assert "parallelism.virtual_stages_per_rank" in texts(at.error)


def test_uploaded_zip_becomes_the_shown_run(
    open_page: OpenPage, healthy_run: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # dashboard.data.upload_root() lands here
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for path in healthy_run.rglob("*"):
            if path.is_file():
                archive.write(path, f"uploaded-run/{path.relative_to(healthy_run).as_posix()}")
    at = open_page(None, "overview")
    assert "Choose a run" in texts(at.info)
    at.sidebar.file_uploader[0].upload("uploaded-run.zip", buffer.getvalue(), "application/zip").run()
    no_exception(at)
    assert at.title[0].value == "Run uploaded-run"
    assert (
        len(list(tmp_path.glob("plancast-dashboard-*/upload-*/uploaded-run/predicted/events.parquet"))) == 1
    )
    assert "Measured step time" in metrics(at)
