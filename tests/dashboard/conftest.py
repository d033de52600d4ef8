"""Fixture runs (real files, see dashboard_runs.py) and an AppTest driver for the dashboard pages."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, TypeVar

import pyarrow as pa
import pytest
from dashboard_runs import DAMAGES, build_run, degrade
from streamlit.testing.v1 import AppTest

from plancast.dashboard.data import RUNS_ENV

APP = Path(__file__).resolve().parents[2] / "dashboard" / "app.py"
TIMEOUT_S = 60


@pytest.fixture(scope="session")
def runs_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("runs")


@pytest.fixture(scope="session")
def healthy_run(runs_root: Path) -> Path:
    """Predicted + 4 measured steps on 2 CPU ranks, empty telemetry."""
    return build_run(runs_root / "healthy")


@pytest.fixture(scope="session")
def gpu_run(runs_root: Path) -> Path:
    """Like healthy_run, with telemetry samples from 2 GPUs."""
    return build_run(runs_root / "gpu", gpus=2)


@pytest.fixture(scope="session")
def prediction_only_run(runs_root: Path) -> Path:
    return build_run(runs_root / "prediction-only", measured=False)


@pytest.fixture(scope="session", params=sorted(DAMAGES))
def damaged_run(request: pytest.FixtureRequest, runs_root: Path, healthy_run: Path) -> tuple[str, Path]:
    """(damage, run): the healthy run with one file damaged (dashboard_runs.DAMAGES)."""
    damage = str(request.param)
    return damage, degrade(healthy_run, runs_root / f"damaged-{damage}", damage)


OpenPage = Callable[..., AppTest]


@pytest.fixture
def open_page(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> OpenPage:
    """``open_page(run, "overview")``: the app with ``run`` on the command line, switched to the page.

    The working directory is an empty folder so the picker's default ``runs/`` finds nothing else.
    """

    def open_(run: Path | None, page: str) -> AppTest:
        monkeypatch.chdir(tmp_path)
        if run is None:
            monkeypatch.delenv(RUNS_ENV, raising=False)
        else:
            monkeypatch.setenv(RUNS_ENV, str(run))
        at = AppTest.from_file(str(APP), default_timeout=TIMEOUT_S).run()
        return at.switch_page(f"app_pages/{page}.py").run()

    return open_


def charts(at: AppTest) -> list[dict[str, Any]]:
    """The Vega-Lite specs of the page's Altair charts."""
    return [json.loads(chart.proto.spec) for chart in at.get("vega_lite_chart")]


def chart_rows(at: AppTest, index: int = 0) -> list[int]:
    """Row counts of the datasets of the page's ``index``-th chart."""
    chart = at.get("vega_lite_chart")[index].proto
    return [pa.ipc.open_stream(d.data.data).read_all().num_rows for d in chart.datasets]


def metrics(at: AppTest) -> dict[str, str]:
    """Metric label -> displayed value."""
    return {m.label: m.value for m in at.metric}


def no_exception(at: AppTest) -> None:
    assert not at.exception, [e.message for e in at.exception]


W = TypeVar("W")


def widget(widgets: Iterable[W], label: str) -> W:
    """The widget with ``label`` (AppTest lists widgets by position; labels read better)."""
    found = [w for w in widgets if getattr(w, "label", None) == label]
    assert len(found) == 1, f"expected one widget labelled {label!r}, found {len(found)}"
    return found[0]
