"""GPU telemetry: a background thread samples every GPU of this node through NVML (``pynvml``).

One sampler per node (the runtime runs it on local rank 0). Each sample is one row per GPU:
utilization, memory used, power, SM clock and temperature, stamped with wall-clock microseconds
since the Unix epoch so the samples of several nodes share one time axis. Without NVIDIA GPUs
(``pynvml`` missing, NVML init failing, or no devices) ``make_sampler`` returns a ``NullSampler``
with the same interface: it records nothing, its table is empty with the same columns, and it says
so once on stderr.
"""

from __future__ import annotations

import math
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any, Protocol

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from plancast.traces.store import atomic_open

COLUMNS: dict[str, str] = {
    "node": "int32",  # node rank (torchrun --node-rank)
    "gpu": "int32",  # NVML device index on that node
    "time_us": "int64",  # wall clock, microseconds since the Unix epoch
    "util_pct": "float64",  # percent of the sample period a kernel was running (NVML utilization.gpu)
    "memory_used_MiB": "float64",
    "power_W": "float64",
    "sm_clock_MHz": "float64",
    "temperature_C": "float64",
}
"""Telemetry table columns -> pandas dtype, in on-disk order. A field NVML cannot read is NaN."""

DEFAULT_INTERVAL_S = 0.5
MiB = 1024**2


class TelemetrySampler(Protocol):
    """Samples this node's GPUs in the background between ``start`` and ``stop``."""

    def start(self) -> None:
        """Begin sampling (returns at once)."""

    def stop(self) -> pd.DataFrame:
        """Stop sampling and return every sample taken, as a table with ``COLUMNS``."""


def empty_table() -> pd.DataFrame:
    """A telemetry table with every column and no rows."""
    return pd.DataFrame({name: pd.Series(dtype=dtype) for name, dtype in COLUMNS.items()})


def to_table(rows: list[dict[str, Any]]) -> pd.DataFrame:
    """Sample rows -> a table with ``COLUMNS`` in order and their dtypes."""
    if not rows:
        return empty_table()
    return pd.DataFrame.from_records(rows, columns=list(COLUMNS)).astype(COLUMNS)


def write_telemetry(path: Path, table: pd.DataFrame) -> None:
    """Write ``table`` atomically as parquet (an empty table keeps its columns and types)."""
    arrow = pa.Table.from_pandas(table[list(COLUMNS)].astype(COLUMNS), preserve_index=False)
    with atomic_open(Path(path), "wb") as handle:
        pq.write_table(arrow, handle)


class NullSampler:
    """The sampler on a node without NVIDIA GPUs: records nothing, says why once."""

    def __init__(self, reason: str) -> None:
        self.reason = reason

    def start(self) -> None:
        print(f"plancast: no GPU telemetry ({self.reason}); telemetry.parquet will be empty", file=sys.stderr)

    def stop(self) -> pd.DataFrame:
        return empty_table()


def nvml_queries(nvml: ModuleType) -> dict[str, Callable[[Any], float]]:
    """Telemetry column -> NVML query of one device handle, converted to the column's unit."""
    return {
        "util_pct": lambda h: nvml.nvmlDeviceGetUtilizationRates(h).gpu,
        "memory_used_MiB": lambda h: nvml.nvmlDeviceGetMemoryInfo(h).used / MiB,  # NVML: bytes
        "power_W": lambda h: nvml.nvmlDeviceGetPowerUsage(h) / 1e3,  # NVML: milliwatts
        "sm_clock_MHz": lambda h: nvml.nvmlDeviceGetClockInfo(h, nvml.NVML_CLOCK_SM),
        "temperature_C": lambda h: nvml.nvmlDeviceGetTemperature(h, nvml.NVML_TEMPERATURE_GPU),
    }


class NvmlSampler:
    """Samples every NVML device of this node every ``interval_s`` seconds on a daemon thread.

    ``nvml`` is the ``pynvml`` module (already initialised); ``stop`` shuts NVML down.
    """

    def __init__(self, nvml: ModuleType, node: int, interval_s: float = DEFAULT_INTERVAL_S) -> None:
        self.nvml, self.node, self.interval_s = nvml, node, interval_s
        self.handles = [nvml.nvmlDeviceGetHandleByIndex(i) for i in range(nvml.nvmlDeviceGetCount())]
        self.rows: list[dict[str, Any]] = []
        self._queries = nvml_queries(nvml)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="plancast-telemetry", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> pd.DataFrame:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()
        self.nvml.nvmlShutdown()
        return to_table(self.rows)

    def _loop(self) -> None:
        while True:
            self.sample()
            if self._stop.wait(self.interval_s):
                return

    def sample(self) -> None:
        """Append one row per GPU, all stamped with the same wall-clock time."""
        time_us = time.time_ns() // 1000
        for gpu, handle in enumerate(self.handles):
            row: dict[str, Any] = {"node": self.node, "gpu": gpu, "time_us": time_us}
            for column, query in self._queries.items():
                row[column] = self._read(query, handle)
            self.rows.append(row)

    def _read(self, query: Callable[[Any], float], handle: Any) -> float:
        """One NVML query; NaN when this GPU does not support it (e.g. power on some boards)."""
        try:
            return float(query(handle))
        except self.nvml.NVMLError:
            return math.nan


def _init_nvml() -> tuple[ModuleType | None, str]:
    """The initialised ``pynvml`` module with at least one device, or None and the reason."""
    try:
        import pynvml
    except ImportError:
        return None, "pynvml is not installed (pip install nvidia-ml-py)"
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as err:
        return None, f"NVML could not start: {err}"
    if pynvml.nvmlDeviceGetCount() == 0:
        pynvml.nvmlShutdown()
        return None, "NVML sees no GPU"
    return pynvml, ""


def make_sampler(node: int, interval_s: float = DEFAULT_INTERVAL_S) -> TelemetrySampler:
    """An ``NvmlSampler`` when NVML sees GPUs on this node, else a ``NullSampler`` saying why."""
    nvml, reason = _init_nvml()
    if nvml is None:
        return NullSampler(reason)
    return NvmlSampler(nvml, node, interval_s)
