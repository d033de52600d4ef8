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
