"""Predicted vs measured step time on this machine's CPU straight after install: no calibrate step.

A fresh PLANCAST_CACHE_DIR (a temporary folder unless `--cache`), then for each of five small plans
(issue 10: dp 2, ZeRO-3 dp 2, tp 2, pp 2 1F1B with 4 micro-batches, pp 2 GPipe) the real CLI:
`plancast simulate --json` (the first one measures this machine for local-cpu, once) and `plancast run`
(`--steps`, the median step after warm-up). Target: each within 35%, mean within 25%.

`python -m benchmarks.cpu_out_of_box [--steps 20] [--out runs/out-of-box] [--rounds 1]`
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import tomli_w

BASE: dict[str, Any] = {
    "model": {"preset": "tiny-gpt"},
    "training": {"seq_len": 128, "micro_batch_size": 2, "global_batch_size": 16, "dtype": "fp32"},
    "cluster": {"preset": "local-cpu"},
}
PLANS: dict[str, dict[str, Any]] = {
    "dp 2": {"data_parallel_degree": 2},
    "ZeRO-3 dp 2": {"data_parallel_degree": 2, "zero_stage": 3},
    "tp 2": {"tensor_parallel_degree": 2},
    "pp 2 1F1B, 4 mb": {"pipeline_parallel_degree": 2, "_batch": 8},
    "pp 2 GPipe, 4 mb": {"pipeline_parallel_degree": 2, "pipeline_parallel_schedule": "GPipe", "_batch": 8},
}


def _plancast(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "plancast", *args]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900, check=False)
    if done.stderr.strip():
        print("\n".join(f"  | {line}" for line in done.stderr.strip().splitlines()[-3:]), file=sys.stderr)
    if done.returncode:
        raise SystemExit(f"{' '.join(args)} failed (exit {done.returncode}):\n{done.stderr[-2000:]}")
    return done


def _scenario(folder: Path, name: str, plan: dict[str, Any]) -> Path:
    data = copy.deepcopy(BASE)
    data["parallelism"] = {k: v for k, v in plan.items() if not k.startswith("_")}
    data["training"]["global_batch_size"] = plan.get("_batch", 16)
    path = folder / ("".join(c if c.isalnum() else "_" for c in name) + ".toml")
    path.write_text(tomli_w.dumps(data), encoding="utf-8")
    return path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=1, help="repeat every run, interleaved")
    parser.add_argument("--out", type=Path, default=Path("runs/out-of-box"))
    parser.add_argument("--cache", type=Path, default=None, help="PLANCAST_CACHE_DIR (default: a fresh one)")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    cache = args.cache or Path(tempfile.mkdtemp(prefix="plancast-cache-"))
    env = {**os.environ, "PLANCAST_CACHE_DIR": str(cache)}
    print(f"PLANCAST_CACHE_DIR={cache} (fresh: {not cache.exists() or not any(cache.iterdir())})")
    predicted, measured = {}, {name: [] for name in PLANS}
    loads: dict[str, list[float]] = {name: [] for name in PLANS}  # 1-min load average at each run's start
    bench_load = os.getloadavg()[0]  # the first simulate measures this machine
    for name, plan in PLANS.items():
        path = _scenario(args.out, name, plan)
        summary = json.loads(_plancast("simulate", str(path), "--json", env=env).stdout)
        predicted[name] = float(summary["step_time_s"])
    for r in range(args.rounds):
        for name, plan in PLANS.items():
            path = _scenario(args.out, name, plan)
            run = args.out / f"round-{r}" / path.stem
            loads[name].append(os.getloadavg()[0])
            _plancast("run", str(path), "--out", str(run), "--steps", str(args.steps), env=env)
            result = json.loads((run / "measured" / "summary.json").read_text(encoding="utf-8"))
            measured[name].append(float(result["step_time_s"]))
    print(f"machine load (1-min average) when this machine was measured: {bench_load:.1f}")
    print(
        f"\n{'plan':18} {'measured s (rounds)':>22} {'median':>8} {'predicted s':>12} {'error':>8} "
        f"{'load at run':>12}"
    )
    errors = []
    for name in PLANS:
        m = statistics.median(measured[name])
        error = predicted[name] / m - 1
        errors.append(error)
        rounds = " ".join(f"{t:.3f}" for t in measured[name])
        load = " ".join(f"{x:.1f}" for x in loads[name])
        print(f"{name:18} {rounds:>22} {m:8.4f} {predicted[name]:12.4f} {error:+8.1%} {load:>12}")
    mean = statistics.fmean(abs(e) for e in errors)
    worst = max(abs(e) for e in errors)
    ok = worst <= 0.35 and mean <= 0.25
    print(
        f"mean |error| {mean:.1%} (target <= 25%), worst {worst:.1%} (target <= 35%): "
        + ('ok' if ok else 'MISSED')
    )
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
