"""traces/contention.py: the measured core share applied to the prediction, the busy flag and the
few-steps and unsteady-steps warnings, as exact cases."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from plancast.traces.contention import (
    BUSY_LABEL,
    MIN_SCORED_STEPS,
    SPEED_CHANGED_LABEL,
    STEADY_SPREAD,
    contention,
    few_steps,
    machine_speed,
    speed_verdict,
    step_spread,
    unsteady_steps,
    verdict,
)

DATA = Path(__file__).resolve().parents[1] / "data" / "cpu_out_of_box"


@pytest.mark.parametrize(
    ("share", "reference", "adjusted_s", "error", "busy"),
    [
        (1.0, 1.0, 1.0, -1 / 11, False),  # a quiet machine: the adjustment changes nothing
        (0.5, 1.0, 2.0, 0.9 / 1.1, True),  # half a core: the prediction doubles
        (0.5, 0.5, 1.0, -1 / 11, True),  # measured at half a core too: adjusted, and still busy
        (0.79, 0.9, 0.9 / 0.79, (0.9 / 0.79 - 1.1) / 1.1, True),  # below 0.8 of a core
        (0.85, 0.9, 0.9 / 0.85, (0.9 / 0.85 - 1.1) / 1.1, False),
    ],
)
def test_the_measured_share_scales_the_prediction(
    share: float, reference: float, adjusted_s: float, error: float, busy: bool
) -> None:
    keys = contention(1.0, 1.1, share, reference)
    assert keys["step_time_predicted_adjusted_s"] == pytest.approx(adjusted_s)
    assert keys["step_time_error_adjusted"] == pytest.approx(error)
    assert keys["machine_busy"] is busy


def test_a_run_without_a_share_says_nothing() -> None:
    keys = contention(1.0, 1.1, None)
    assert keys["machine_busy"] is None and keys["step_time_error_adjusted"] is None
    assert verdict(keys) is None


def test_a_reference_out_of_range_is_read_as_a_core_of_ones_own() -> None:
    assert contention(1.0, 1.0, 0.5, reference_share=7.0)["core_share_reference"] == 1.0


def test_the_verdict_says_busy_and_both_figures() -> None:
    line = verdict(contention(1.0, 1.1, 0.5))
    assert line is not None and line.startswith(BUSY_LABEL) and "+81.8%" in line
    quiet = verdict(contention(1.0, 1.1, 0.95))
    assert quiet is not None and BUSY_LABEL not in quiet


def test_too_few_steps_after_warm_up_is_a_warning() -> None:
    assert few_steps(MIN_SCORED_STEPS) is None
    warning = few_steps(2)
    assert warning is not None and "only 2 measured step(s)" in warning


@pytest.mark.parametrize(
    ("share", "own", "adjusted_s", "busy"),
    [
        (0.53, 0.5, 1.0, False),  # four ranks on two cores, nothing else running: the plan's own sharing
        (0.3, 0.5, 1.0 / 0.6, True),  # the same plan given 0.6 of what it leaves itself: the machine's load
        (0.9, 1.0, 1.0 / 0.9, False),  # a plan within the cores: as before
    ],
)
def test_a_plan_sharing_cores_with_itself_is_not_the_machines_load(
    share: float, own: float, adjusted_s: float, busy: bool
) -> None:
    keys = contention(1.0, 1.1, share, 1.0, own_share=own)
    assert keys["machine_busy"] is busy
    assert keys["step_time_predicted_adjusted_s"] == pytest.approx(adjusted_s)
    assert keys["core_share_busy_below"] == pytest.approx(0.8 * own)
    line = verdict(keys)
    assert line is not None and (f"leave each other {own:.2f}" in line) is (own < 1)


WORKLOAD = "cpu: the probe's workload"


def probed(before_s: float, after_s: float, workload: str = WORKLOAD) -> dict[str, object]:
    """A measured summary's speed-probe keys, as runtime/worker.py writes them."""
    return {
        "speed_probe_s": (before_s + after_s) / 2,
        "speed_probe_before_s": before_s,
        "speed_probe_after_s": after_s,
        "speed_probe_workload": workload,
    }


@pytest.mark.parametrize(
    ("before_s", "after_s", "reference_s", "factor", "changed"),
    [
        (1.0, 1.0, 1.0, 1.0, False),  # the machine as fast as when its profile was measured
        (1.6, 1.6, 1.0, 1.6, False),  # 1.6x slower throughout (docs/accuracy.md): the prediction x 1.6
        (0.9, 1.1, 2.0, 0.5, True),  # twice as fast as the profile, but 22% apart before and after
        (1.0, 1.09, 1.0, 1.045, False),  # 9% apart: within SPEED_CHANGE
    ],
)
def test_the_speed_factor_and_the_changed_flag(
    before_s: float, after_s: float, reference_s: float, factor: float, changed: bool
) -> None:
    keys = machine_speed(probed(before_s, after_s), {"probe_s": reference_s, "workload": WORKLOAD})
    assert keys["speed_factor"] == pytest.approx(factor)
    assert keys["machine_speed_changed"] is changed
    assert keys["speed_change"] == pytest.approx(after_s / before_s - 1)


def test_a_reference_of_another_workload_or_none_applies_nothing() -> None:
    other = machine_speed(probed(1.0, 1.0), {"probe_s": 2.0, "workload": "cpu: another"})
    assert other["speed_factor"] is None and other["speed_probe_reference_s"] is None
    assert machine_speed(probed(1.0, 1.0), None)["speed_factor"] is None
    old_run = machine_speed({"step_time_s": 1.0}, {"probe_s": 2.0, "workload": WORKLOAD})
    assert old_run == {
        "speed_probe_s": None,
        "speed_probe_reference_s": None,
        "speed_factor": None,
        "speed_change": None,
        "machine_speed_changed": None,
    }
    assert speed_verdict(old_run) is None


@pytest.mark.parametrize(
    ("share", "speed", "adjusted_s"),
    [
        (0.5, 2.0, 4.0),  # half a core and half the speed: four times the prediction
        (None, 1.5, 1.5),  # no share recorded (a GPU run): the speed alone
        (1.0, None, 1.0),  # no probe (a run from before it): the share alone, as before
    ],
)
def test_the_speed_factor_multiplies_the_share_adjusted_prediction(
    share: float | None, speed: float | None, adjusted_s: float
) -> None:
    keys = contention(1.0, 1.1, share, 1.0, None, speed)
    assert keys["step_time_predicted_adjusted_s"] == pytest.approx(adjusted_s)
    assert keys["step_time_error_adjusted"] == pytest.approx((adjusted_s - 1.1) / 1.1)


def test_the_speed_verdict_flags_a_run_whose_speed_moved() -> None:
    summary = machine_speed(probed(0.9, 1.1), {"probe_s": 2.0, "workload": WORKLOAD})
    summary |= contention(1.0, 1.1, None, 1.0, None, summary["speed_factor"])
    line = speed_verdict(summary)
    assert line is not None and line.startswith(SPEED_CHANGED_LABEL)
    assert "+22%" in line and "0.50x" in line and f"{(0.5 - 1.1) / 1.1:+.1%}" in line
    steady = speed_verdict(machine_speed(probed(1.0, 1.0), None))
    assert steady is not None and SPEED_CHANGED_LABEL not in steady and "not applied" in steady


def test_the_share_verdict_names_the_speed_when_it_was_applied() -> None:
    summary = machine_speed(probed(1.2, 1.2), {"probe_s": 1.0, "workload": WORKLOAD})
    line = verdict(summary | contention(1.0, 1.1, 0.95, 1.0, None, summary["speed_factor"]))
    assert line is not None and "at the measured share and speed" in line


WAVES = [0.05, 0.05, 0.06, 0.075, 0.08, 0.075, 0.06, 0.05, 0.05, 0.06, 0.075, 0.08]  # +-25% around 0.06


@pytest.mark.parametrize(
    ("step_times_s", "warmup", "spread", "warned"),
    [
        ([9.0] + [0.05] * 12, 1, 0.0, False),  # a slow warm-up step is not scored
        ([0.05, *WAVES], 1, (0.08 - 0.05) / 0.06, True),  # waves of machine speed: p10 0.05, p90 0.08
        ([0.05, *WAVES[:9]], 1, None, False),  # nine scored steps: no decile
        ([0.05, *WAVES[:6], "x", *WAVES[6:]], 1, (0.08 - 0.05) / 0.06, True),  # a damaged entry left out
        ([0.05, *[0.05, 0.0505, 0.0495] * 4], 1, None, False),  # +-1%: steady
    ],
)
def test_a_run_whose_own_steps_spread_wide_is_said_to_be_unsteady(
    step_times_s: list[object], warmup: int, spread: float | None, warned: bool
) -> None:
    summary = {"step_times_s": step_times_s, "warmup_steps": warmup}
    found = step_spread(summary)
    if spread is not None:
        assert found is not None and found["spread"] == pytest.approx(spread)
    warning = unsteady_steps(summary)
    assert (warning is not None) is warned
    if warned:
        assert warning is not None and f"{STEADY_SPREAD:.0%}" in warning and "0.05 to 0.08 s" in warning


def test_a_recorded_quiet_run_is_steady_enough() -> None:
    """dp 2 on this project's VM with nothing else running (benchmarks/cpu_out_of_box.py, 21:05 UTC):
    its steps spread 11% (45.2 to 50.4 ms), inside STEADY_SPREAD."""
    summary = json.loads((DATA / "dp_2_summary.json").read_text(encoding="utf-8"))
    found = step_spread(summary)
    assert found is not None and found["spread"] == pytest.approx(0.108, abs=0.001)
    assert unsteady_steps(summary) is None
