"""The hardware and precision groups of issue 32, scored as `python -m benchmarks.published_runs` prints them:
the Blackwell + AMD rows, the FP8 rows (every narrow-precision row) and the five Megatron-Bridge FP8 H100 rows
one by one. No constant of the model was fitted on any of these sources, so the default constants score
them held out (leave-one-source-out leaves the constants as they are)."""

from __future__ import annotations

import statistics
from typing import Any

from benchmarks.published_data import (
    AMD_RUNS,
    BLACKWELL_RUNS,
    FP8_RUNS,
    MLPERF_RUNS,
    TORCHTITAN_FP8_RUNS,
    PublishedRun,
)
from plancast.simulator.predict import simulate

NEW_HARDWARE = ("B200", "B300", "GB200", "GB300", "MI300X", "MI325X", "MI355X")
"""GPU name prefixes of the Blackwell + AMD group."""


def _row(run: PublishedRun) -> dict[str, Any]:
    from benchmarks.fit_published import run_scenario  # scipy: dev extra

    s = run_scenario(run)
    summary = simulate(s, events=False).summary
    return {
        "source": run.source,
        "run": run.name,
        "gpu": s.cluster.gpu.name,
        "recipe": s.training.fp8_recipe if s.training.fp8 else s.training.dtype,
        "fp8": s.training.fp8,
        "gpus": run.num_gpus,
        "measured_s": run.measured_step_time_s,
        "predicted_s": summary["step_time_s"],
        "error": summary["step_time_s"] / run.measured_step_time_s - 1,
        "fits_in_memory": summary["fits_in_memory"],
        "peak_memory_gib": summary["peak_memory_gib"],
    }


def score_groups() -> dict[str, list[dict[str, Any]]]:
    """{"blackwell_amd": rows, "fp8": rows, "bridge_h100_fp8": rows}, each row as `_row`."""
    runs = (*FP8_RUNS, *TORCHTITAN_FP8_RUNS, *BLACKWELL_RUNS, *MLPERF_RUNS, *AMD_RUNS)
    rows = {run.name: _row(run) for run in runs}
    return {
        "blackwell_amd": [r for r in rows.values() if r["gpu"].startswith(NEW_HARDWARE)],
        "fp8": [r for r in rows.values() if r["fp8"]],
        "bridge_h100_fp8": [rows[run.name] for run in FP8_RUNS],
    }


def _summary(rows: list[dict[str, Any]]) -> str:
    errors = [abs(r["error"]) for r in rows]
    sources = len({r["source"] for r in rows})
    mape = statistics.fmean(errors)
    return f"{len(rows)} rows, {sources} sources: MAPE {mape:.1%} (worst {max(errors):.1%})"


def print_groups(groups: dict[str, list[dict[str, Any]]]) -> None:
    titles = {
        "blackwell_amd": "Blackwell + AMD rows (held out: never fitted on)",
        "fp8": "FP8 rows: per-tensor, MXFP8 and NVFP4 (held out)",
        "bridge_h100_fp8": "The five Megatron-Bridge FP8 H100 rows, each (target: within 15%)",
    }
    for key, rows in groups.items():
        print(titles[key])
        print(f"{'run':44} {'gpu':15} {'recipe':18} {'meas s':>8} {'pred s':>8} {'error':>8}  fits")
        for r in rows:
            print(
                f"{r['run'][:44]:44} {r['gpu'][:15]:15} {r['recipe'][:18]:18} {r['measured_s']:8.2f} "
                f"{r['predicted_s']:8.2f} {r['error']:+8.1%}  {'yes' if r['fits_in_memory'] else 'NO'}"
            )
        print(_summary(rows) + "\n")
