"""The real GPU runs kept in tests/data/gpu_runs/ (one H100 80GB, one H200 141GB, torch 2.11, NCCL),
compared again under the current model from each scenario as a user writes it: step time and peak
memory (allocated, and reserved where the run recorded it). Scored held out: the runs that prompted a
cost term are left out of the figure they shaped (IN_SAMPLE_*), and no constant was fitted on any.
Saved to benchmarks/results/gpu_runs.json for the README's table; needs no GPU.

Run: `python -m benchmarks.gpu_runs`.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from benchmarks.results_io import error_figures, write_result

REPO = Path(__file__).resolve().parents[1]
RUNS = REPO / "tests" / "data" / "gpu_runs"
_SCENARIOS = REPO / "benchmarks" / "gpu_scenarios"
SCENARIOS = {
    "gpt3-1.3b-one-h100": REPO / "examples" / "gpt3-1.3b-one-h100.toml",
    **{
        f"{shape}-one-{gpu}": _SCENARIOS / f"{shape}-one-{gpu}.toml"
        for shape in ("gpt3-1.3b-m1", "llama2-8layer-mb1", "llama3-4layer")
        for gpu in ("h100", "h200")
    },
    **{
        f"{shape}-one-h200": _SCENARIOS / f"{shape}-one-h200.toml"
        for shape in (
            "llama3-4layer-partial",
            "llama3-4layer-s8192",
            "deepseek-v2-lite-4layer",
            "qwen3-30b-a3b-4layer",
        )
    },
}
# Runs that measured something other than the model (tests/test_gpu_runs.py keeps them strict); they are
# scored apart from the others. None now: the old-runtime MoE run was measured again (2026-11-28).
KNOWN_MISSES: dict[str, str] = {}
# Runs whose step the model predicts more than 10% fast: a test of the model that it does not pass yet,
# scored with the others and kept strict by tests/test_gpu_runs.py (the test fails once one is fixed).
STEP_MISSES = {
    "deepseek-v2-lite-4layer-one-h200": "MoE on one H200, grouped runtime (2026-11-28): step -13.7%",
    "qwen3-30b-a3b-4layer-one-h200": "MoE on one H200, grouped runtime (2026-11-28): step -20.4%; "
    "the layer's device time (8.5 ms) is within 5% of the model's price (8.1 ms), but the layer takes "
    "11.3 ms: the GPU waits on eager launches a quarter of it (docs/calibration.md, 'Head width 64, and "
    "one MoE layer')",
}


# Runs that shaped the model, so not held out (docs/calibration.md, "The whole loop on one H100"): the
# first two H100 runs prompted the autocast and gradient-accumulation passes (step time), and all four
# H100 runs were used to check the two memory changes they prompted (fp32 gradients, cross-entropy bytes).
IN_SAMPLE_STEP = frozenset({"gpt3-1.3b-one-h100", "llama3-4layer-one-h100"})
IN_SAMPLE_MEMORY = frozenset(n for n in SCENARIOS if n.endswith("h100"))


def compare(name: str, scratch: Path) -> dict[str, Any]:
    """`plancast compare --json` of run `name`, with its scenario as written (re-resolved by this model)."""
    run = scratch / name
    shutil.copytree(RUNS / name, run)
    shutil.copy(SCENARIOS[name], run / "scenario.toml")
    proc = subprocess.run(
        [sys.executable, "-m", "plancast", "compare", str(run), "--json"],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        cwd=REPO,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"compare of {name} failed: {proc.stderr.strip()[-500:]}")
    summary: dict[str, Any] = json.loads(proc.stdout)
    return summary


def score() -> dict[str, Any]:
    """Held-out step and memory errors of the kept runs (known misses and in-sample runs apart)."""
    step, memory = [], []
    with tempfile.TemporaryDirectory() as scratch:
        for name in sorted(SCENARIOS):
            if name in KNOWN_MISSES:
                continue
            summary = compare(name, Path(scratch))
            parts = {c["component"]: c["error"] for c in summary["components"]}
            if name not in IN_SAMPLE_STEP:
                step.append(summary["step_time_error"])
            if name not in IN_SAMPLE_MEMORY:
                memory += [
                    parts[k] for k in ("peak_memory", "peak_memory_reserved") if parts.get(k) is not None
                ]
            shown = "  ".join(
                f"{k} {parts[k]:+.1%}" for k in ("peak_memory", "peak_memory_reserved") if k in parts
            )
            apart = " (in-sample)" if name in IN_SAMPLE_STEP | IN_SAMPLE_MEMORY else ""
            print(f"{name:34} step {summary['step_time_error']:+.1%}  {shown}{apart}")
    return {
        "step": error_figures(step),
        "memory": error_figures(memory),
        "known_misses": sorted(KNOWN_MISSES),
    }


def main() -> int:
    figures = score()
    for key in ("step", "memory"):
        f = figures[key]
        print(f"{key}: {f['rows']} rows, MAPE {f['mape']:.1%}, worst {f['worst']:+.1%}")
    print(f"scored apart (known misses): {', '.join(figures['known_misses'])}")
    write_result("gpu_runs", "python -m benchmarks.gpu_runs", figures)
    return 0


if __name__ == "__main__":
    sys.exit(main())
