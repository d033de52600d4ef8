"""The probe's readings between steps (traces/speed_readings.py) and the per-step speed they give
(traces/contention.step_speed), on synthetic readings: a wave in the middle of a run moves the median
at speed; a flat run gives the pair's factor."""

from __future__ import annotations

import statistics
from typing import Any

import pytest

from plancast.traces.contention import machine_speed
from plancast.traces.speed_readings import MAX_READINGS, probe_at_steps, readings

WORKLOAD = "cpu: the probe"
REFERENCE = {"probe_s": 0.010, "workload": WORKLOAD}


def run(step_times_s: list[float], after_step: list[int], probe_s: list[float]) -> dict[str, Any]:
    return {
        "step_times_s": step_times_s,
        "warmup_steps": 1,
        "step_time_s": statistics.median(step_times_s[1:]),
        "speed_probe_s": statistics.fmean((probe_s[0], probe_s[-1])),
        "speed_probe_before_s": probe_s[0],
        "speed_probe_after_s": probe_s[-1],
        "speed_probe_workload": WORKLOAD,
        "speed_probe_readings": {"after_step": after_step, "probe_s": probe_s},
    }


@pytest.mark.parametrize(
    ("points", "expected"),
    [
        # step i at i - 0.5: between the readings after -1 and 1 for steps 0 and 1, then 1 and 3
        ([(-1, 1.0), (1, 3.0), (3, 3.0)], [1.5, 2.5, 3.0, 3.0]),
        ([(-1, 2.0), (3, 2.0)], [2.0, 2.0, 2.0, 2.0]),
        ([(-1, 1.0), (0, 2.0), (1, 3.0), (2, 4.0), (3, 5.0)], [1.5, 2.5, 3.5, 4.5]),
    ],
)
def test_each_step_takes_the_readings_line_at_its_middle(
    points: list[tuple[float, float]], expected: list[float]
) -> None:
    assert probe_at_steps(points, 4) == pytest.approx(expected)


def test_a_flat_run_gives_the_pairs_factor() -> None:
    times = [0.2, 0.05, 0.06, 0.07, 0.05, 0.06, 0.07, 0.05]
    keys = machine_speed(run(times, [-1, 2, 5, 7], [0.012] * 4), REFERENCE)
    assert keys["speed_factor"] == pytest.approx(1.2)  # 12 ms against 10, the pair's alone
    assert keys["step_time_at_speed_s"] == pytest.approx(statistics.median(times[1:]) / 1.2)
    assert (keys["speed_readings"], keys["speed_readings_spread"]) == (4, 0.0)
    assert keys["machine_speed_changed"] is False


def test_a_wave_in_the_middle_moves_the_median_at_speed() -> None:
    """Steps 3-8 ran at half speed: twice as long, and the probe read after each of steps 2-8 twice as
    long too; the pair before and after read the same, so the pair's factor sees no wave. Each step at
    its own probe (steps 2 and 9 straddle the wave's edges: 15 ms) is 50 ms or less: median 50 ms."""
    times = [0.2, 0.05, 0.05, 0.10, 0.10, 0.10, 0.10, 0.10, 0.10, 0.05, 0.05]
    probes = [0.010, 0.010, 0.010, *[0.020] * 7, 0.010, 0.010]  # after steps -1, 0, ..., 10
    keys = machine_speed(run(times, list(range(-1, 11)), probes), REFERENCE)
    pair = machine_speed(run(times, [-1, 10], [0.010, 0.010]), REFERENCE)
    assert pair["speed_factor"] == pytest.approx(1.0)
    assert pair["step_time_at_speed_s"] == pytest.approx(0.10)  # 6 slow of 10 scored: the wave's time
    assert keys["step_time_at_speed_s"] == pytest.approx(0.05)
    assert keys["speed_factor"] == pytest.approx(2.0)  # the measured 0.10 s over 0.05 at speed
    assert keys["speed_readings_spread"] == pytest.approx(1.0) and keys["machine_speed_changed"] is True
    assert keys["speed_change"] == pytest.approx(0.0)  # the pair alone: no change


@pytest.mark.parametrize(
    "block",
    [
        None,
        "readings",
        {"after_step": [-1, 2], "probe_s": [0.01]},  # lengths differ
        {"after_step": [-1], "probe_s": [0.01]},  # one reading is no line
        {"after_step": [-1, 2.5], "probe_s": [0.01, 0.01]},  # a step that is not a step
        {"after_step": [-1, True], "probe_s": [0.01, 0.01]},
        {"after_step": [-1, 2], "probe_s": [0.01, 0.0]},  # a probe of no time
        {"after_step": [-1, 2], "probe_s": [0.01, float("nan")]},
        {"after_step": [2, -1], "probe_s": [0.01, 0.01]},  # not in step order
        {"after_step": list(range(-1, MAX_READINGS)), "probe_s": [0.01] * (MAX_READINGS + 1)},
    ],
)
def test_malformed_readings_are_none_and_the_pair_stands(block: Any) -> None:
    summary = run([0.2, 0.05, 0.06], [-1, 2], [0.01, 0.01])
    summary["speed_probe_readings"] = block
    assert readings(summary) is None
    keys = machine_speed(summary, REFERENCE)
    assert "step_time_at_speed_s" not in keys and keys["speed_factor"] == pytest.approx(1.0)


def test_a_run_from_before_the_readings_keeps_the_pair() -> None:
    summary = run([0.2, 0.05, 0.06], [-1, 2], [0.01, 0.013])
    del summary["speed_probe_readings"]
    keys = machine_speed(summary, REFERENCE)
    assert keys["speed_factor"] == pytest.approx(1.15) and keys["speed_change"] == pytest.approx(0.3)
    assert "speed_readings" not in keys and keys["machine_speed_changed"] is True
