"""Build real run directories for the dashboard tests, healthy and damaged.

The predicted side is the simulator's output for examples/tiny-local-cpu.toml, written with
traces.store exactly as ``plancast simulate --out`` does. The measured side perturbs those events
(durations and starts scaled per step and rank) and writes them rank by rank, step by step, with
``RankEventWriter``, plus measured/summary.json, env.json and a telemetry table.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import tomli_w

from plancast.simulator.loader import load_scenario, to_toml_dict
from plancast.simulator.predict import Prediction, simulate
from plancast.traces import store
from plancast.traces.rank_stream import RankEventWriter
from plancast.traces.store import RunDir
from plancast.traces.telemetry import TELEMETRY_COLUMNS

REPO = Path(__file__).resolve().parents[2]
TINY_SCENARIO = REPO / "examples" / "tiny-local-cpu.toml"
MEASURED_STEPS = 4
# Step s runs STEP_SCALE[s] times slower than predicted (step 0 is the warm-up); rank r a further 1 + 0.02 r.
STEP_SCALE = (1.50, 1.10, 1.06, 1.08)
MEASURED_PEAK_GIB = (0.0125, 0.0110)  # per rank, as a runtime's summary would report them


def predict_tiny() -> Prediction:
    return simulate(load_scenario(TINY_SCENARIO).scenario)


def write_predicted(run: RunDir, prediction: Prediction) -> None:
    run.path.mkdir(parents=True, exist_ok=True)
    run.scenario_toml.write_bytes(tomli_w.dumps(to_toml_dict(prediction.scenario)).encode())
    store.write_events(run.predicted_events, prediction.events)
    store.write_json(run.predicted_summary, prediction.summary)


def measured_step(predicted: pd.DataFrame, step: int, rank: int) -> pd.DataFrame:
    """Rank ``rank``'s predicted events as a measured step: scaled in time, relabelled."""
    scale = STEP_SCALE[step] * (1 + 0.02 * rank)
    frame = predicted[predicted["rank"] == rank].copy()
    frame["source"] = "measured"
    frame["step"] = step
    frame["start_us"] = frame["start_us"] * scale
    frame["dur_us"] = frame["dur_us"] * scale
    return frame


def telemetry_frame(gpus: int, samples: int) -> pd.DataFrame:
    """``samples`` pynvml-like readings per GPU, 10 ms apart (empty for ``gpus=0``)."""
    time_us = np.arange(samples) * 10_000.0
    rows = [
        {
            "node": "node0",
            "gpu": gpu,
            "time_us": t,
            "util_pct": 50.0 + 40 * np.sin(t / 50_000 + gpu),
            "memory_used_MiB": 1024.0 + gpu * 10,
            "power_W": 250.0 + gpu,
            "sm_clock_MHz": 1410.0,
            "temperature_C": 60.0,
        }
        for gpu in range(gpus)
        for t in time_us
    ]
    return pd.DataFrame(rows, columns=list(TELEMETRY_COLUMNS)).astype(TELEMETRY_COLUMNS)


def write_measured(run: RunDir, prediction: Prediction, *, gpus: int = 0) -> None:
    """Measured rank files (MEASURED_STEPS steps), summary, env and telemetry (``gpus`` GPUs sampled)."""
    world = prediction.scenario.world_size
    for rank in range(world):
        writer = RankEventWriter(run, rank)
        for step in range(MEASURED_STEPS):
            writer.append_step(measured_step(prediction.events, step, rank))
        writer.close()
    store.write_json(
        run.measured_summary,
        {
            "peak_memory_gib": max(MEASURED_PEAK_GIB[:world]),
            "rank_memory_gib": {str(r): {"peak": MEASURED_PEAK_GIB[r]} for r in range(world)},
        },
    )
    store.write_json(run.env_json, {"world_size": world, "hostnames": ["localhost"]})
    table = pa.Table.from_pandas(telemetry_frame(gpus, samples=20), preserve_index=False)
    pq.write_table(table, run.telemetry)


def build_run(path: Path, *, measured: bool = True, gpus: int = 0) -> Path:
    """A complete run directory at ``path``."""
    run = RunDir(path)
    prediction = predict_tiny()
    write_predicted(run, prediction)
    if measured:
        write_measured(run, prediction, gpus=gpus)
    return path


def degrade(healthy: Path, path: Path, damage: str) -> Path:
    """A copy of ``healthy`` with one kind of damage (see DAMAGES)."""
    shutil.copytree(healthy, path)
    run = RunDir(path)
    rank1 = run.rank_events(1)
    if damage == "truncated_rank":
        data = rank1.read_bytes()
        rank1.write_bytes(data[: len(data) // 2])
    elif damage == "missing_rank":
        rank1.unlink()
    elif damage == "cut_json":
        text = run.predicted_summary.read_text()
        run.predicted_summary.write_text(text[: len(text) // 2])
    elif damage == "schema_version":
        table = pq.read_table(rank1)
        table = table.replace_schema_metadata({**table.schema.metadata, store.SCHEMA_VERSION_KEY: b"99"})
        pq.write_table(table, rank1)
    else:
        raise ValueError(f"unknown damage {damage!r}; expected one of {DAMAGES}")
    return path


# damage -> (file named in the warning, text of the warning)
DAMAGES: dict[str, tuple[str, str]] = {
    "truncated_rank": ("measured/rank-00001.parquet", "truncated"),
    "missing_rank": ("measured/rank-00001.parquet", "missing"),
    "cut_json": ("predicted/summary.json", "not valid JSON"),
    "schema_version": ("measured/rank-00001.parquet", "schema v99"),
}
