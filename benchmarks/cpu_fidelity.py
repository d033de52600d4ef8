"""Predicted vs measured step time on this machine's CPU, after calibration (issue target: MAPE <= 15%).

1. calibrate: microbenchmarks of this machine + six calibration runs (tiny-gpt: DP 2 at micro-batch 4,
   PP 2 at micro-batch 1, TP 2 and TP 2 + SP at micro-batch 4, ZeRO-3 at micro-batch 4 and 1) that are
   NOT among the scored runs (those use micro-batch 2);
2. for each plan of the matrix {DP 2, ZeRO-1/2/3 at 2, TP 2, TP 2 + SP, PP 2 GPipe and 1F1B at 4 and 8
   micro-batches, PP 4 interleaved}: run it with the runtime (torchrun, gloo) for 24 steps, simulate it
   on the calibrated profile, and compare the median measured step time (steps 1..23, >= 20 after the
   warm-up step) with the prediction.

Run on a quiet machine: `python -m benchmarks.cpu_fidelity [--steps 24] [--out runs/fidelity]`.
`--reuse` keeps the runs already finished in `--out` (calibration and scoring are redone on them): a
change to the simulator or the calibration is re-scored on the same measurements.
"""

from __future__ import annotations

import argparse
import copy
import statistics
import sys
from pathlib import Path
from typing import Any

import tomli_w

from runtime.calibrate import calibrate, write_profile
from runtime.launch import launch
from simulator.predict import simulate
from simulator.scenario import load_scenario
from traces.store import RunDir, read_json

BASE: dict[str, Any] = {
    "model": {"preset": "tiny-gpt"},
    "training": {"seq_len": 128, "micro_batch_size": 2, "global_batch_size": 16, "dtype": "fp32"},
    "parallelism": {},
    "cluster": {"preset": "local-cpu"},
}
MATRIX: dict[str, dict[str, Any]] = {
    "DP 2": {"data_parallel_degree": 2},
    "ZeRO-1 at 2": {"zero_stage": 1},
    "ZeRO-2 at 2": {"zero_stage": 2},
    "ZeRO-3 at 2": {"zero_stage": 3},
    "TP 2": {"tensor_parallel_degree": 2},
    "TP 2 + SP": {"tensor_parallel_degree": 2, "sequence_parallel": True},
    "PP 2 GPipe, 4 mb": {"pipeline_parallel_degree": 2, "pipeline_parallel_schedule": "GPipe", "_batch": 8},
    "PP 2 GPipe, 8 mb": {"pipeline_parallel_degree": 2, "pipeline_parallel_schedule": "GPipe"},
    "PP 2 1F1B, 4 mb": {"pipeline_parallel_degree": 2, "_batch": 8},
    "PP 2 1F1B, 8 mb": {"pipeline_parallel_degree": 2},
    "PP 4 interleaved": {
        "pipeline_parallel_degree": 4,
        "pipeline_parallel_schedule": "Interleaved1F1B",
        "virtual_stages_per_rank": 2,
        "_world": 4,
        "_model": {"preset": "tiny-gpt", "num_hidden_layers": 8},
    },
}
CALIBRATION: dict[str, dict[str, Any]] = {  # other micro-batch sizes than every scored run (those use 2):
    # 1 and 4 bracket it, so the per-op overhead and the efficiency scale separate in the compute fit
    "calibration DP 2, mb 4": {"_micro": 4},
    "calibration PP 2, mb 1": {"pipeline_parallel_degree": 2, "_micro": 1},
    "calibration TP 2, mb 4": {"tensor_parallel_degree": 2, "_micro": 4},
    "calibration TP 2 + SP, mb 4": {"tensor_parallel_degree": 2, "sequence_parallel": True, "_micro": 4},
    # two micro-batch counts (2 and 8 per rank) separate FSDP2's per-collective and per-step host times
    "calibration ZeRO-3 at 2, mb 4": {"zero_stage": 3, "_micro": 4},
    "calibration ZeRO-3 at 2, mb 1": {"zero_stage": 3, "_micro": 1},
}


def scenario_file(path: Path, plan: dict[str, Any], profile: str | None) -> Path:
    data = copy.deepcopy(BASE)
    par = {k: v for k, v in plan.items() if not k.startswith("_")}
    data["parallelism"] = par
    data["training"]["global_batch_size"] = plan.get("_batch", 16)
    data["training"]["micro_batch_size"] = plan.get("_micro", 2)
    data["model"] = plan.get("_model", data["model"])
    data["cluster"] = {"preset": profile or "local-cpu", "gpus_per_node": plan.get("_world", 2)}
    path.write_text(tomli_w.dumps(data))
    return path


def measured_step_s(run: Path) -> float:
    """Median measured step time over the steps after warm-up (runtime/worker.py's summary)."""
    return float(read_json(RunDir(run).measured_summary)["step_time_s"])


def _finished(run: Path) -> bool:
    summary = RunDir(run).measured_summary
    return summary.is_file() and read_json(summary).get("status") == "ok"


def _slug(name: str) -> str:
    return "".join(c if c.isalnum() else "_" for c in name).strip("_")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--steps", type=int, default=24)
    parser.add_argument("--out", type=Path, default=Path("runs/fidelity"))
    parser.add_argument("--reuse", action="store_true", help="keep the runs already finished in --out")
    args = parser.parse_args(argv)
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)

    # 1. calibration runs, then the profile fitted on them and on microbenchmarks
    calibration_runs = []
    for name, plan in CALIBRATION.items():
        run = out / _slug(name)
        path = scenario_file(out / f"{run.name}.toml", plan, None)
        code = 0 if args.reuse and _finished(run) else launch(path, run, steps=args.steps)
        if code:
            print(f"calibration run {name} failed (exit {code})", file=sys.stderr)
            return code
        calibration_runs.append(run)
    cluster, notes = calibrate(calibration_runs, microbench=True)
    profile = out / "local-cpu-calibrated.toml"
    write_profile(cluster, profile, notes)
    print("\n".join(notes))

    # 2. the scored matrix
    rows = []
    for name, plan in MATRIX.items():
        run = out / _slug(name)
        scenario_path = scenario_file(out / f"{run.name}.toml", plan, str(profile))
        code = 0 if args.reuse and _finished(run) else launch(scenario_path, run, steps=args.steps)
        if code:
            print(f"{name}: run failed (exit {code})", file=sys.stderr)
            continue
        predicted = simulate(load_scenario(scenario_path).scenario, events=False).summary["step_time_s"]
        measured = measured_step_s(run)
        rows.append((name, measured, predicted, predicted / measured - 1))
    print(f"\n{'plan':22} {'measured s':>11} {'predicted s':>12} {'error':>8}")
    for name, measured, predicted, error in rows:
        print(f"{name:22} {measured:11.4f} {predicted:12.4f} {error:+8.1%}")
    mape = statistics.fmean(abs(r[3]) for r in rows) if rows else float("nan")
    print(f"MAPE {mape:.1%} over {len(rows)} plans (target <= 15%)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
