"""Predicted against measured checkpoints: size, save time and load time as compare's component rows.

The prediction is the ``checkpoint`` object of ``predicted/summary.json`` (simulator/goodput.py:
bytes, write_s, read_s); the measurement is ``measured/checkpoints.json``, written by a run with
``--checkpoint-every K`` (runtime/checkpoint.py): the bytes of each save's files and the seconds each
save and load took (median over the saves; loads happen when a run is resumed).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping
from typing import Any

from plancast.traces.reconcile import relative_error

GiB = 1024**3


def _row(component: str, unit: str, predicted: float, measured: float) -> dict[str, Any]:
    error = relative_error(predicted, measured)
    return {
        "component": component,
        f"predicted_{unit}": predicted,
        f"measured_{unit}": measured,
        "error": None if math.isnan(error) else error,  # nothing measured -> null in JSON
    }


def checkpoint_components(
    predicted: Mapping[str, Any] | None, measured: Mapping[str, Any] | None
) -> list[dict[str, Any]]:
    """Rows checkpoint_size (GiB), checkpoint_save and checkpoint_load (s) for what both sides have."""
    if not predicted or not measured:
        return []
    saves, loads = measured.get("saves") or [], measured.get("loads") or []
    rows = []
    if saves:
        size = statistics.median(float(s["bytes"]) for s in saves)
        rows.append(_row("checkpoint_size", "gib", float(predicted["bytes"]) / GiB, size / GiB))
        save_s = statistics.median(float(s["save_s"]) for s in saves)
        rows.append(_row("checkpoint_save", "s", float(predicted["write_s"]), save_s))
    if loads:
        load_s = statistics.median(float(x["load_s"]) for x in loads)
        rows.append(_row("checkpoint_load", "s", float(predicted["read_s"]), load_s))
    return rows
