"""The What-if page opens on a run of any schedule plancast runs, the V schedules included (its
schedule list is simulator/schedules.py's, not the sweep's shorter one), and switches between them."""

from __future__ import annotations

from pathlib import Path

from plancast.simulator.loader import load_scenario, parse_scenario, to_toml_dict
from plancast.simulator.predict import simulate
from plancast.traces.store import RunDir
from tests.dashboard.conftest import OpenPage
from tests.dashboard.dashboard_runs import TINY_SCENARIO, write_predicted
from tests.dashboard.test_dashboard_pages import metrics, no_exception, widget


def test_what_if_opens_on_a_dual_pipe_v_run_and_switches_to_zb_v(open_page: OpenPage, tmp_path: Path) -> None:
    data = to_toml_dict(load_scenario(TINY_SCENARIO).scenario)
    data["parallelism"].update(pipeline_parallel_schedule="DualPipeV", virtual_stages_per_rank=2)
    data["parallelism"].pop("pipeline_layer_split", None)
    prediction = simulate(parse_scenario(data).scenario)
    run = tmp_path / "dualpipev"
    write_predicted(RunDir(run), prediction)
    at = open_page(run, "what_if")
    no_exception(at)
    assert metrics(at)["What-if step time"] == metrics(at)["Original prediction"]
    widget(at.selectbox, "Pipeline schedule").set_value("ZBV").run()
    no_exception(at)
    assert metrics(at)["What-if step time"].endswith(" ms")
