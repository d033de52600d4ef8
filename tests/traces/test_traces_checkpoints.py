"""traces/checkpoints.py: predicted vs measured checkpoint rows for `plancast compare`."""

from __future__ import annotations

from typing import Any

import pytest

from plancast.traces.checkpoints import GiB, checkpoint_components

PREDICTED = {"bytes": 2.0 * GiB, "bytes_per_rank": 1.0 * GiB, "write_s": 2.0, "read_s": 1.0}
SAVE = {"step": 2, "bytes": 2.5 * GiB, "tensor_bytes": 2.0 * GiB, "save_s": 4.0}


@pytest.mark.parametrize(
    ("predicted", "measured", "components"),
    [
        (None, {"saves": [SAVE]}, []),  # a prediction from before checkpoints were predicted
        (PREDICTED, None, []),  # a run without --checkpoint-every
        (PREDICTED, {"saves": [], "loads": []}, []),
        (PREDICTED, {"saves": [SAVE]}, ["checkpoint_size", "checkpoint_save"]),
        (
            PREDICTED,
            {"saves": [SAVE], "loads": [{"step": 2, "load_s": 0.5}]},
            ["checkpoint_size", "checkpoint_save", "checkpoint_load"],
        ),
    ],
)
def test_rows_for_what_both_sides_have(
    predicted: dict[str, Any] | None, measured: dict[str, Any] | None, components: list[str]
) -> None:
    assert [r["component"] for r in checkpoint_components(predicted, measured)] == components


def test_errors_are_relative_to_the_measurement_and_saves_take_the_median() -> None:
    saves = [{**SAVE, "save_s": s} for s in (4.0, 1.0, 8.0)]
    rows = {
        r["component"]: r
        for r in checkpoint_components(PREDICTED, {"saves": saves, "loads": [{"step": 2, "load_s": 0.5}]})
    }
    assert rows["checkpoint_size"] == {
        "component": "checkpoint_size",
        "predicted_gib": 2.0,
        "measured_gib": 2.5,
        "error": (2.0 - 2.5) / 2.5,
    }
    assert rows["checkpoint_save"]["measured_s"] == 4.0
    assert rows["checkpoint_save"]["error"] == (2.0 - 4.0) / 4.0
    assert rows["checkpoint_load"]["error"] == (1.0 - 0.5) / 0.5


def test_a_zero_measurement_has_no_error() -> None:
    rows = checkpoint_components(PREDICTED, {"saves": [{**SAVE, "save_s": 0.0}]})
    assert rows[1]["error"] is None
