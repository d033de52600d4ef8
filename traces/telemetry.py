"""Read a run's GPU telemetry (measured/telemetry.parquet, runtime/telemetry.py) and say what the GPUs
ran at while they were busy.

A short check and a long training job run one GPU at different clocks: a few seconds of work on a cool
GPU hold a burst clock, hours with every GPU of the node at its power limit settle lower (a soaked
H200: 698.6 of 823.9 TFLOP/s, docs/calibration.md). `busy_gpu` puts the measured clock beside every
comparison so that a step-time error can be read against the regime the run was measured in.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa

from plancast.traces.bounded import BoundedReadError
from plancast.traces.bounded_tables import read_parquet
from plancast.traces.store import TraceReadError

TELEMETRY_COLUMNS: dict[str, str] = {
    "node": "string",
    "gpu": "int32",
    "time_us": "float64",
    "util_pct": "float64",
    "memory_used_MiB": "float64",
    "power_W": "float64",
    "sm_clock_MHz": "float64",
    "temperature_C": "float64",
}
"""Columns of measured/telemetry.parquet (one row per sample per GPU) as the readers type them."""

BUSY_UTIL_PCT = 50.0
"""A sample counts as busy from this NVML utilization on (the share of the sample period a kernel ran);
the runtime's set-up and teardown idle at 0-12% (tests/data/gpu_runs)."""


def read_telemetry(path: Path) -> pd.DataFrame:
    """measured/telemetry.parquet with the telemetry columns; TraceReadError names what is wrong."""
    try:
        table = read_parquet(path, "GPU telemetry")
    except BoundedReadError as err:
        raise TraceReadError(f"{err}; telemetry is left out") from None
    except (pa.ArrowException, OSError) as err:
        raise TraceReadError(
            f"{path} is truncated or not a parquet file ({err}); telemetry is left out"
        ) from err
    frame = table.to_pandas()
    missing = [c for c in TELEMETRY_COLUMNS if c not in frame.columns]
    if missing:
        raise TraceReadError(f"{path} lacks the telemetry column(s) {missing}; telemetry is left out")
    try:
        return frame[list(TELEMETRY_COLUMNS)].astype(TELEMETRY_COLUMNS)
    except (TypeError, ValueError) as err:
        raise TraceReadError(f"{path} has a telemetry column of the wrong type ({err})") from err


def busy_gpu(samples: pd.DataFrame) -> dict[str, Any] | None:
    """The GPUs over their busy samples: the slowest GPU's median SM clock (a synchronous step runs at
    its pace), the node's median power, the highest temperature, and how many samples that is. None
    when no GPU was ever busy (a CPU run samples nothing)."""
    busy = samples[samples["util_pct"] >= BUSY_UTIL_PCT]
    if busy.empty:
        return None
    per_gpu = busy.groupby(["node", "gpu"], observed=True)
    return {
        "gpus": int(per_gpu.ngroups),
        "busy_samples": len(busy),
        "sm_clock_MHz": _or_none(per_gpu["sm_clock_MHz"].median().min()),
        "sm_clock_max_MHz": _or_none(busy["sm_clock_MHz"].max()),
        "power_W": _or_none(busy["power_W"].median()),
        "temperature_max_C": _or_none(busy["temperature_C"].max()),
    }


def _or_none(value: Any) -> float | None:
    """A number, or None where NVML could not read the field (NaN)."""
    return None if pd.isna(value) else float(value)
