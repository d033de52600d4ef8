"""`plancast compare` on a real run that read the speed probe between its steps (tests/data/cpu_runs/
readings-tiny-pp2/README.md): each step brought to the profile's speed by its own interpolated probe,
the median of those the "at speed" step time, and each reading outside the steps around it."""

from __future__ import annotations

import json
import statistics
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from benchmarks.cpu_fidelity import at_speed_s
from plancast.traces.contention import SPEED_CHANGE, SPEED_CHANGED_LABEL
from tests.cli_runner import cli_subprocess
from tests.traces.recorded_runs import CPU_RUNS, recorded_run

RECORDED = CPU_RUNS / "readings-tiny-pp2"


def plancast(*args: str) -> subprocess.CompletedProcess[str]:
    return cli_subprocess(*args, timeout_s=120)


@pytest.fixture
def run(tmp_path: Path) -> Iterator[Path]:
    """The recorded run, its machine profile the cache's latest record (tests/traces/recorded_runs.py)."""
    yield from recorded_run(RECORDED, tmp_path)


def read(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text(encoding="utf-8"))


def test_compare_brings_each_step_to_the_profiles_speed(run: Path) -> None:
    result = plancast("compare", str(run), "--json")
    assert result.returncode == 0, result.stderr
    summary = json.loads(result.stdout)
    measured, predicted = read(run / "measured" / "summary.json"), read(run / "predicted" / "summary.json")
    reference_s = read(RECORDED / "machine-profile.json")["speed_probe"]["probe_wall_s"]
    readings = measured["speed_probe_readings"]
    steps = len(measured["step_times_s"])
    # the rule, written again with numpy: each step at i - 0.5 on the readings' straight line
    probes = np.interp(np.arange(steps) - 0.5, readings["after_step"], readings["probe_s"])
    at_speed = [t * reference_s / p for t, p in zip(measured["step_times_s"], probes, strict=True)]
    median = statistics.median(at_speed[measured["warmup_steps"] :])
    assert summary["step_time_at_speed_s"] == pytest.approx(median, rel=1e-9)
    assert summary["speed_readings"] == len(readings["probe_s"]) > 2
    # the one factor that gives that median: the run's own median over it, applied as the pair's is
    factor = measured["step_time_s"] / median
    assert summary["speed_factor"] == pytest.approx(factor, rel=1e-9)
    share = measured["core_share"] / measured["core_share_own"]
    adjusted = predicted["step_time_s"] / share * factor / summary["step_time_measured_s"] - 1
    assert summary["step_time_error_adjusted"] == pytest.approx(adjusted, rel=1e-9)
    as_measured = predicted["step_time_s"] / summary["step_time_measured_s"] - 1
    assert summary["step_time_error"] == pytest.approx(as_measured, rel=1e-9)  # the headline, unchanged
    # the recorded wave: both ranks read ~9 ms after step 2, ~7 at every other reading; the pair missed it
    spread = max(readings["probe_s"]) / min(readings["probe_s"]) - 1
    assert summary["speed_readings_spread"] == pytest.approx(spread, rel=1e-12)
    assert abs(summary["speed_change"]) < SPEED_CHANGE < spread and summary["machine_speed_changed"] is True
    text = plancast("compare", str(run)).stdout
    assert f"{as_measured:+.1%}" in text and f"{adjusted:+.1%}" in text and SPEED_CHANGED_LABEL in text
    assert f"{summary['speed_readings']} readings around and between the steps" in text


def test_every_reading_sits_outside_the_steps_around_it() -> None:
    """Each rank's readings start after the step they follow ended (its device work done, which the
    recorder marks after its last event) and end before the next began; that step's events all lie
    within its step time."""
    measured = read(RECORDED / "measured" / "summary.json")
    gaps = measured["rank_speed_probe_gaps_s"]
    assert sorted(gaps) == ["0", "1"]
    for rank, rows in gaps.items():
        assert [row[0] for row in rows] == measured["speed_probe_readings"]["after_step"][1:-1]
        assert all(before >= 0 and after >= 0 for _, before, after in rows), rank
        events = pd.read_parquet(RECORDED / "measured" / f"rank-{int(rank):05d}.parquet")
        for step, _, _ in rows:
            of_step = events[events["step"] == step]
            end_us = (of_step["start_us"] + of_step["dur_us"]).max()
            assert 0 < end_us <= measured["step_times_s"][step] * 1e6


def test_the_readings_cost_is_recorded() -> None:
    measured = read(RECORDED / "measured" / "summary.json")
    assert measured["speed_probe_every_steps"] == 3
    assert 0 < measured["speed_probe_between_cost"] < 1


def test_cpu_fidelitys_at_speed_column_takes_each_steps_probe() -> None:
    """benchmarks/cpu_fidelity.at_speed_s on the recorded run: the median of each step at its own probe,
    not the run's median x reference / the pair's mean (which the wave after step 2 does not move)."""
    measured = read(RECORDED / "measured" / "summary.json")
    reference = {"probe_s": 0.010, "workload": measured["speed_probe_workload"]}
    readings = measured["speed_probe_readings"]
    probes = np.interp(
        np.arange(len(measured["step_times_s"])) - 0.5, readings["after_step"], readings["probe_s"]
    )
    at_speed = [t * 0.010 / p for t, p in zip(measured["step_times_s"], probes, strict=True)]
    expected = statistics.median(at_speed[measured["warmup_steps"] :])
    assert at_speed_s(RECORDED, reference) == pytest.approx(expected, rel=1e-9)
    pair = measured["step_time_s"] * 0.010 / measured["speed_probe_s"]
    assert at_speed_s(RECORDED, reference) != pytest.approx(pair, rel=1e-3)
