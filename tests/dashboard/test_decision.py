"""The Decision page (AppTest on a real fixture run) and its pure chart builders."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
from conftest import OpenPage, chart_rows, charts, metrics, no_exception, widget
from dashboard_runs import TINY_SCENARIO

from plancast.dashboard import decision_charts
from plancast.dashboard.data import load_run
from plancast.simulator.goodput import goodput_curve, plan_run
from plancast.simulator.loader import load_scenario

DEFAULT_TOKENS = 300e9  # the page's default when the scenario sets no training.total_tokens
SCALE_GPUS = 13  # the goodput curve's points: 8 .. 32,768 GPUs


def test_goodput_scale_chart_plots_the_curve() -> None:
    curve = pd.DataFrame(goodput_curve(load_scenario(TINY_SCENARIO).scenario, [8, 64, 512]))
    spec = decision_charts.goodput_scale_chart(curve).to_dict()
    assert spec["mark"]["type"] == "line"
    assert spec["encoding"]["x"]["scale"]["type"] == "log"
    (values,) = spec["datasets"].values()
    assert [v["gpus"] for v in values] == [8, 64, 512]
    fractions = [v["goodput_fraction"] for v in values]
    assert fractions == sorted(fractions, reverse=True)


def test_decision_chart_draws_plans_with_a_cost_and_the_front() -> None:
    plans = pd.DataFrame(
        {
            "cluster": ["a", "a", "b"],
            "gpus": [8, 16, 8],
            "plan": ["p1", "p2", "p3"],
            "time_to_train_days": [10.0, 5.0, 7.0],
            "cost_usd": [100.0, 150.0, None],
            "energy_MWh": [1.0, 1.5, 1.2],
            "goodput_fraction": [0.99, 0.98, 0.99],
            "pareto": [True, True, False],
        }
    )
    spec = decision_charts.decision_chart(plans).to_dict()
    assert [layer["mark"]["type"] for layer in spec["layer"]] == ["line", "circle"]
    (values,) = spec["datasets"].values()
    assert len(values) == 2  # the plan without a cost is left out


def test_decision_page_plans_the_run_and_searches_clusters(open_page: OpenPage, healthy_run: Path) -> None:
    at = open_page(healthy_run, "decision")
    no_exception(at)
    run = load_run(healthy_run)
    assert run.scenario is not None and run.predicted_summary is not None
    s = run.scenario.model_copy(
        update={"training": run.scenario.training.model_copy(update={"total_tokens": DEFAULT_TOKENS})}
    )
    g = plan_run(s, run.predicted_summary["step_time_s"])
    assert g is not None
    shown = metrics(at)
    assert shown["Goodput"] == f"{g['goodput_fraction']:.1%}"
    assert shown["Time to train"] == f"{g['time_to_train_days']:.3g} days"
    assert shown["Cost"] == "-"  # a CPU core has no rental price
    assert chart_rows(at, 0) == [SCALE_GPUS]

    widget(at.text_input, "GPU counts").set_value("8,16")
    at.button[0].click().run()
    no_exception(at)
    table = at.dataframe[0].value
    assert set(table["cluster"]) == {"dgx-a100-80gb", "dgx-h100-80gb"}
    assert set(table["gpus"]) == {8, 16}
    assert list(table["cost_usd"]) == sorted(table["cost_usd"])
    assert [c["layer"][1]["mark"]["type"] for c in charts(at) if "layer" in c] == ["circle"]


def test_mean_power_of_the_telemetry() -> None:
    samples = pd.DataFrame({"gpu": [0, 1, 0, 1], "power_W": [300.0, 310.0, float("nan"), 290.0]})
    assert decision_charts.mean_power_W(samples) == 300.0
    assert decision_charts.mean_power_W(samples.iloc[2:3]) is None
    assert decision_charts.mean_power_W(None) is None


def test_decision_page_plans_energy_with_the_measured_power(open_page: OpenPage, gpu_run: Path) -> None:
    at = open_page(gpu_run, "decision")
    no_exception(at)
    run = load_run(gpu_run)
    assert run.scenario is not None and run.predicted_summary is not None
    power = decision_charts.mean_power_W(run.telemetry)
    assert power is not None
    s = run.scenario.model_copy(
        update={"training": run.scenario.training.model_copy(update={"total_tokens": DEFAULT_TOKENS})}
    )
    g = plan_run(s, run.predicted_summary["step_time_s"], power_W=power)
    assert g is not None
    assert metrics(at)["Energy"] == f"{g['energy_MWh']:.3g} MWh"
    assert "(telemetry)" in "\n".join(str(c.value) for c in at.caption)


def test_decision_page_ranks_blackwell_nvl72_and_amd_clusters_by_cost(
    open_page: OpenPage, healthy_run: Path
) -> None:
    """The question of issue 32 on the page: H100, B200, a GB200 NVL72 rack and MI300X, ranked by cost."""
    clusters = ["dgx-h100-80gb", "dgx-b200", "gb200-nvl72", "mi300x"]
    at = open_page(healthy_run, "decision")
    widget(at.multiselect, "Clusters").set_value(clusters)
    widget(at.text_input, "GPU counts").set_value("8,16")
    at.button[0].click().run()
    no_exception(at)
    table = at.dataframe[0].value
    assert set(table["cluster"]) == set(clusters)
    assert table["cost_usd"].notna().all()  # every preset has a cited price per GPU-hour
    assert list(table["cost_usd"]) == sorted(table["cost_usd"])
