"""traces/contention.py: the measured core share applied to the prediction, the busy flag and the
few-steps warning, as exact cases."""

from __future__ import annotations

import pytest

from plancast.traces.contention import BUSY_LABEL, MIN_SCORED_STEPS, contention, few_steps, verdict


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
