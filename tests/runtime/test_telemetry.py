"""``runtime.telemetry``: the null sampler without GPUs, and the NVML sampling loop on a fake ``pynvml``."""

from __future__ import annotations

import math
import sys
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import Any

import pandas as pd
import pyarrow.parquet as pq
import pytest

from plancast.runtime.telemetry import (
    COLUMNS,
    NullSampler,
    NvmlSampler,
    make_sampler,
    to_table,
    write_telemetry,
)

MiB = 1024**2


class FakeNvmlError(Exception):
    """Stands in for ``pynvml.NVMLError``."""


def fake_pynvml(devices: int = 2, *, init_fails: bool = False) -> ModuleType:
    """A ``pynvml`` look-alike: device i reports util 10*i+5 %, (i+1) GiB used, 250 W, 1410 MHz, 60+i C.

    Device 1 cannot report power (NVML raises for it, as on boards without a power sensor).
    """
    nvml = ModuleType("pynvml")
    calls: list[str] = []

    def init() -> None:
        calls.append("init")
        if init_fails:
            raise FakeNvmlError("NVML Shared Library Not Found")

    def power(handle: int) -> int:
        if handle == 1:
            raise FakeNvmlError("Not Supported")
        return 250_000  # milliwatts

    attrs: dict[str, Any] = {
        "NVMLError": FakeNvmlError,
        "NVML_CLOCK_SM": "sm",
        "NVML_TEMPERATURE_GPU": "gpu",
        "calls": calls,
        "nvmlInit": init,
        "nvmlShutdown": lambda: calls.append("shutdown"),
        "nvmlDeviceGetCount": lambda: devices,
        "nvmlDeviceGetHandleByIndex": lambda i: i,
        "nvmlDeviceGetUtilizationRates": lambda h: SimpleNamespace(gpu=10 * h + 5, memory=0),
        "nvmlDeviceGetMemoryInfo": lambda h: SimpleNamespace(used=(h + 1) * 1024 * MiB, total=0, free=0),
        "nvmlDeviceGetPowerUsage": power,
        "nvmlDeviceGetClockInfo": lambda h, kind: 1410 if kind == "sm" else 0,
        "nvmlDeviceGetTemperature": lambda h, sensor: 60 + h if sensor == "gpu" else 0,
    }
    for name, value in attrs.items():
        setattr(nvml, name, value)
    return nvml


def assert_empty_with_columns(table: pd.DataFrame) -> None:
    assert list(table.columns) == list(COLUMNS)
    assert table.empty
    assert {c: str(t) for c, t in table.dtypes.items()} == COLUMNS


# ------------------------------------------------------------------------------ without a GPU
NO_GPU_CASES: dict[str, tuple[ModuleType | None, str]] = {
    "pynvml not installed": (None, "pynvml is not installed"),
    "NVML cannot start": (fake_pynvml(init_fails=True), "NVML could not start: NVML Shared Library"),
    "NVML sees no device": (fake_pynvml(devices=0), "NVML sees no GPU"),
}


@pytest.mark.parametrize("name", list(NO_GPU_CASES))
def test_without_gpus_the_null_sampler_says_why_once(
    name: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    module, reason = NO_GPU_CASES[name]
    monkeypatch.setitem(sys.modules, "pynvml", module)  # None makes ``import pynvml`` fail
    sampler = make_sampler(node=0)
    assert isinstance(sampler, NullSampler)
    sampler.start()
    assert_empty_with_columns(sampler.stop())
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 1
    assert reason in lines[0]


def test_on_this_machine_without_gpu_the_sampler_is_the_null_one(capsys: pytest.CaptureFixture[str]) -> None:
    sampler = make_sampler(node=0)
    if isinstance(sampler, NvmlSampler):
        sampler.stop()
        pytest.skip("NVML sees a GPU here; tests/runtime/test_gpu.py covers the real sampler")
    sampler.start()
    assert_empty_with_columns(sampler.stop())
    assert len(capsys.readouterr().err.splitlines()) == 1


def test_no_device_shuts_nvml_down(monkeypatch: pytest.MonkeyPatch) -> None:
    nvml = fake_pynvml(devices=0)
    monkeypatch.setitem(sys.modules, "pynvml", nvml)
    make_sampler(node=0)
    assert nvml.calls == ["init", "shutdown"]


# --------------------------------------------------------------------------- NVML, faked
def test_a_sample_is_one_row_per_gpu_in_the_columns_units(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", fake_pynvml(devices=2))
    sampler = make_sampler(node=3)
    assert isinstance(sampler, NvmlSampler)
    sampler.sample()
    table = to_table(sampler.rows)
    assert list(table.columns) == list(COLUMNS)
    rows = table.drop(columns="time_us").to_dict("records")
    assert rows[0] == {
        "node": 3,
        "gpu": 0,
        "util_pct": 5.0,
        "memory_used_MiB": 1024.0,
        "power_W": 250.0,
        "sm_clock_MHz": 1410.0,
        "temperature_C": 60.0,
    }
    assert rows[1]["memory_used_MiB"] == 2048.0 and rows[1]["temperature_C"] == 61.0
    assert math.isnan(rows[1]["power_W"])  # unsupported query -> NaN, not an error
    assert table["time_us"].nunique() == 1  # one timestamp per sample


def test_the_thread_samples_until_stopped_and_shuts_nvml_down(monkeypatch: pytest.MonkeyPatch) -> None:
    nvml = fake_pynvml(devices=2)
    monkeypatch.setitem(sys.modules, "pynvml", nvml)
    sampler = make_sampler(node=0, interval_s=0.001)
    sampler.start()
    table = sampler.stop()
    assert len(table) >= 2 and len(table) % 2 == 0  # at least one sample, each of both GPUs
    assert set(table["gpu"]) == {0, 1}
    assert table["time_us"].is_monotonic_increasing
    assert {c: str(t) for c, t in table.dtypes.items()} == COLUMNS
    assert nvml.calls[-1] == "shutdown"


# ------------------------------------------------------------------------------------- file
def test_tables_round_trip_through_parquet(tmp_path: Path) -> None:
    path = tmp_path / "measured" / "telemetry.parquet"
    write_telemetry(path, to_table([]))
    assert_empty_with_columns(pq.read_table(path).to_pandas())
    rows = [dict.fromkeys(COLUMNS, 1)]
    write_telemetry(path, to_table(rows))
    assert pq.read_table(path).to_pandas().to_dict("records") == [
        {c: 1 if t.startswith("int") else 1.0 for c, t in COLUMNS.items()}
    ]
    assert [p.name for p in path.parent.iterdir()] == ["telemetry.parquet"]  # no temporary file left
