"""A run measured on a busy machine says so on every page, and the overview shows the error as measured
and at the measured core share (traces/contention.py)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from conftest import OpenPage, metrics, no_exception

from plancast.dashboard import frames
from plancast.dashboard.data import compare_run, load_run
from plancast.traces.contention import BUSY_LABEL, SPEED_CHANGED_LABEL
from plancast.traces.store import read_json, write_json

RUN_PAGES = ["overview", "timeline", "breakdown", "memory", "telemetry"]


def recorded_share(healthy_run: Path, tmp_path: Path, share: float) -> Path:
    """The healthy fixture run with the core share the runtime records (measured/summary.json)."""
    run = tmp_path / f"share-{share}"
    shutil.copytree(healthy_run, run)
    summary = read_json(run / "measured" / "summary.json")
    write_json(run / "measured" / "summary.json", {**summary, "core_share": share})
    return run


@pytest.mark.parametrize("page", RUN_PAGES)
def test_every_page_of_a_busy_run_says_the_machine_was_busy(
    open_page: OpenPage, healthy_run: Path, tmp_path: Path, page: str
) -> None:
    at = open_page(recorded_share(healthy_run, tmp_path, 0.5), page)
    no_exception(at)
    assert any(str(w.value).startswith(BUSY_LABEL) for w in at.warning)


def test_the_overview_shows_both_errors(open_page: OpenPage, healthy_run: Path, tmp_path: Path) -> None:
    run = recorded_share(healthy_run, tmp_path, 0.5)
    at = open_page(run, "overview")
    no_exception(at)
    rec = compare_run(load_run(run))
    adjusted = (2 * rec.step_time_predicted_s - rec.step_time_measured_s) / rec.step_time_measured_s
    shown = metrics(at)
    assert shown["Step-time error"] == frames.format_error(rec.step_time_error)
    assert shown["Error at the measured core share"] == frames.format_error(adjusted)


def test_a_quiet_run_is_not_called_busy(open_page: OpenPage, healthy_run: Path, tmp_path: Path) -> None:
    at = open_page(recorded_share(healthy_run, tmp_path, 0.95), "overview")
    no_exception(at)
    assert not any(BUSY_LABEL in str(w.value) for w in at.warning)
    assert any("core share 0.95" in str(c.value) for c in at.caption)


def recorded_probe(healthy_run: Path, tmp_path: Path, before_s: float, after_s: float) -> Path:
    """The healthy fixture run with the speed probe the runtime records, at a core share of 0.95, and
    the compare summary naming the reference probe (half the run's time: the profile's machine ran the
    probe twice as fast) and the reference share (the run's own)."""
    run = recorded_share(healthy_run, tmp_path, 0.95)
    summary = read_json(run / "measured" / "summary.json")
    probe = {
        "speed_probe_s": (before_s + after_s) / 2,
        "speed_probe_before_s": before_s,
        "speed_probe_after_s": after_s,
        "speed_probe_workload": "cpu: w",
    }
    write_json(run / "measured" / "summary.json", {**summary, **probe})
    (run / "compare").mkdir(exist_ok=True)
    reference = {"core_share_reference": 0.95, "speed_probe_reference_s": (before_s + after_s) / 4}
    write_json(run / "compare" / "summary.json", reference)
    return run


def test_the_overview_applies_the_speed_probe(open_page: OpenPage, healthy_run: Path, tmp_path: Path) -> None:
    run = recorded_probe(healthy_run, tmp_path, 0.010, 0.010)
    at = open_page(run, "overview")
    no_exception(at)
    rec = compare_run(load_run(run))
    adjusted = (2 * rec.step_time_predicted_s - rec.step_time_measured_s) / rec.step_time_measured_s
    assert metrics(at)["Error at the measured core share and speed"] == frames.format_error(adjusted)
    assert any("speed probe 10.00 ms" in str(c.value) and "2.00x" in str(c.value) for c in at.caption)
    assert not any(SPEED_CHANGED_LABEL in str(w.value) for w in at.warning)


@pytest.mark.parametrize("page", ["overview", "timeline"])
def test_a_run_whose_speed_moved_says_so(
    open_page: OpenPage, healthy_run: Path, tmp_path: Path, page: str
) -> None:
    at = open_page(recorded_probe(healthy_run, tmp_path, 0.008, 0.012), page)
    no_exception(at)
    assert any(str(w.value).startswith(SPEED_CHANGED_LABEL) for w in at.warning)
