"""traces/telemetry.py: what the GPUs ran at while busy, from real and synthetic NVML samples."""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd
import pytest

from plancast.traces.store import TraceReadError
from plancast.traces.telemetry import TELEMETRY_COLUMNS, busy_gpu, read_telemetry

GPU_RUNS = Path(__file__).resolve().parents[1] / "data" / "gpu_runs"


def samples(rows: list[tuple[int, float, float]], *, power: float = 600.0) -> pd.DataFrame:
    """(gpu, util_pct, sm_clock_MHz) rows on one node."""
    return pd.DataFrame(
        [
            {"node": "0", "gpu": g, "time_us": float(i), "util_pct": u, "memory_used_MiB": 1.0,
             "power_W": power, "sm_clock_MHz": c, "temperature_C": 40.0 + i}
            for i, (g, u, c) in enumerate(rows)
        ],
        columns=list(TELEMETRY_COLUMNS),
    ).astype(TELEMETRY_COLUMNS)


def test_idle_samples_do_not_count_and_the_slowest_gpu_sets_the_clock() -> None:
    frame = samples(
        [(0, 0.0, 1980.0), (0, 90.0, 1500.0), (0, 95.0, 1600.0), (0, 99.0, 1700.0),
         (1, 5.0, 1980.0), (1, 80.0, 1400.0), (1, 85.0, 1450.0), (1, 49.0, 1980.0)]
    )
    gpu = busy_gpu(frame)
    assert gpu is not None
    assert gpu["gpus"] == 2 and gpu["busy_samples"] == 5
    assert gpu["sm_clock_MHz"] == 1425.0  # GPU 1's median; GPU 0's is 1600
    assert gpu["sm_clock_max_MHz"] == 1700.0  # the idle samples' 1980 MHz boost is not counted
    assert gpu["temperature_max_C"] == 46.0 and gpu["power_W"] == 600.0


def test_a_run_that_never_kept_a_gpu_busy_has_no_clock() -> None:
    assert busy_gpu(samples([(0, 3.0, 1980.0), (0, 12.0, 1980.0)])) is None
    assert busy_gpu(samples([])) is None


def test_a_field_nvml_could_not_read_is_none_not_nan() -> None:
    gpu = busy_gpu(samples([(0, 90.0, 1500.0)], power=math.nan))
    assert gpu is not None and gpu["power_W"] is None and gpu["sm_clock_MHz"] == 1500.0


def test_the_kept_h100_run_was_measured_at_a_burst_clock() -> None:
    """One of the kept GPU runs: the median over its busy samples, computed here without the module."""
    path = GPU_RUNS / "llama3-4layer-one-h100" / "measured" / "telemetry.parquet"
    raw = pd.read_parquet(path)
    busy = raw[raw["util_pct"] >= 50]
    gpu = busy_gpu(read_telemetry(path))
    assert gpu is not None
    assert gpu["sm_clock_MHz"] == float(busy["sm_clock_MHz"].median()) == 1680.0
    assert gpu["busy_samples"] == len(busy) < len(raw)


def test_a_truncated_telemetry_file_is_named(tmp_path: Path) -> None:
    path = tmp_path / "telemetry.parquet"
    kept = GPU_RUNS / "llama3-4layer-one-h100" / "measured" / "telemetry.parquet"
    path.write_bytes(kept.read_bytes()[:300])
    with pytest.raises(TraceReadError, match=r"telemetry\.parquet is truncated or not a parquet file"):
        read_telemetry(path)
