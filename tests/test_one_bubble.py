"""One bubble (issue 9, defect 4): `bubble_fraction` is one number in `simulate` (table and JSON),
`compare` (on a real run of tiny-local-cpu) and every dashboard page that shows it, for the GPT-3
example and tiny-local-cpu. Each figure is read where a user reads it: the CLI's output, the
dashboard's rendered metrics and tables (Streamlit AppTest)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from plancast.app import pct
from plancast.commands.calibrate import LOCAL_CPU_ENV
from plancast.dashboard.data import RUNS_ENV
from tests.cli_runner import REPO, cli_subprocess

APP = REPO / "dashboard" / "app.py"
GPT3 = REPO / "examples" / "gpt3-175b-dgx-a100.toml"
TINY = REPO / "examples" / "tiny-local-cpu.toml"


def plancast(*args: str, timeout_s: float = 300) -> str:
    result = cli_subprocess(*args, timeout_s=timeout_s)
    assert result.returncode == 0, result.stderr[-3000:]
    return result.stdout


def simulate_figures(scenario: Path) -> tuple[float, list[str]]:
    """bubble_fraction from `simulate --json`, and the bubble shares the table prints."""
    fraction = float(json.loads(plancast("simulate", str(scenario), "--json"))["bubble_fraction"])
    table = plancast("simulate", str(scenario))
    row = re.search(r"pipeline bubble\s*│\s*\S+\s*│\s*(\S+%)", table)
    last = re.search(r"bubble (\S+%)\s+micro-batches", table)
    assert row and last, table
    return fraction, [row[1], last[1]]


def page(monkeypatch: pytest.MonkeyPatch, run: Path, name: str) -> AppTest:
    monkeypatch.setenv(RUNS_ENV, str(run))
    at = AppTest.from_file(str(APP), default_timeout=120).run()
    at = at.switch_page(f"app_pages/{name}.py").run()
    assert not at.exception, [e.message for e in at.exception]
    return at


def dashboard_figures(monkeypatch: pytest.MonkeyPatch, run: Path, measured: bool) -> list[str]:
    """The predicted bubble fraction as Overview, Breakdown (measured runs) and What-if show it."""
    overview = {m.label: m.value for m in page(monkeypatch, run, "overview").metric}
    shown = [overview["Bubble fraction (predicted)" if measured else "Bubble fraction"]]
    if measured:
        breakdown = {m.label: m.value for m in page(monkeypatch, run, "breakdown").metric}
        shown.append(breakdown["Bubble fraction (predicted)"])
    what_if = page(monkeypatch, run, "what_if").dataframe[0].value.set_index("figure")
    shown.append(str(what_if.loc["bubble fraction", "original"]))
    return shown


@pytest.fixture(autouse=True)
def _shipped_local_cpu(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The same local-cpu profile for every command (no microbenchmarks), in an empty folder."""
    monkeypatch.setenv(LOCAL_CPU_ENV, "shipped")
    monkeypatch.chdir(tmp_path)


def test_gpt3_prediction_has_one_bubble(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    fraction, table = simulate_figures(GPT3)
    assert 0 < fraction < 1
    run = tmp_path / "gpt3"
    plancast("simulate", str(GPT3), "--out", str(run))
    assert table == [pct(fraction)] * 2
    assert dashboard_figures(monkeypatch, run, measured=False) == [f"{fraction:.1%}"] * 2


@pytest.mark.distributed
def test_tiny_local_cpu_run_has_one_bubble(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    fraction, table = simulate_figures(TINY)
    assert table == [pct(fraction)] * 2
    run = tmp_path / "tiny"
    plancast("run", str(TINY), "--out", str(run), "--steps", "3")
    compared = json.loads(plancast("compare", str(run), "--json"))
    assert compared["bubble_fraction_predicted"] == pytest.approx(fraction, rel=1e-9)
    parts = {c["component"]: c for c in compared["components"]}
    bubble_share = parts["bubble"]["predicted_s"] / compared["step_time_predicted_s"]
    assert bubble_share == pytest.approx(fraction, rel=1e-9)
    assert 0 <= compared["bubble_fraction_measured"] < 1
    assert re.search(rf"bubble: predicted {re.escape(pct(fraction))},", plancast("compare", str(run)))
    assert dashboard_figures(monkeypatch, run, measured=True) == [f"{fraction:.1%}"] * 3
