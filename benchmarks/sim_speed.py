"""How fast the simulator is, old against new in one run (issue targets in brackets).

Every figure is a median of alternating pairs (who goes first alternates, so that a shared machine's
drift hits both sides alike), with the median of the per-pair ratios old / new, and the 1-minute load
average printed beside it: a figure taken at load 3 on 2 cores is not a quiet machine's.

In-process, one prediction after import, the SimPy engine (old) against the default path (the event-free
engine where it applies, docs/engine.md):
- GPT-3 175B on 1,536 A100s (examples/gpt3-175b-dgx-a100.toml) [<= Calculon's, benchmarks/peer_speed.py]
- the 1T-parameter plan of Korthikanti et al. Table 3: 512 GPUs, TP 8, PP 64, 512 micro-batches [< 1 s]
- GPT-3 175B on 4,096 GPUs: TP 8, PP 32, DP 16, 128 micro-batches, interleaved x2 [< 2 s]
- DeepSeek-V3 on 2,048 H800s (examples/deepseek-v3-h800.toml)

Whole processes, what a user waits for: `plancast --help`, `plancast simulate X --json`, and the exact
sweeps `plancast sweep examples/gpt3-175b-dgx-a100.toml --gpus 1536` [<= 3 s on a quiet 2-core machine]
and `plancast sweep examples/deepseek-v3-h800.toml --gpus 2048` [<= 10 s]. Old is `--baseline PATH`, a
checkout of the code to compare against, run with this interpreter (`git worktree add PATH f5b0c05`);
without it, old is this code with the SimPy engine (PLANCAST_ENGINE=simpy), which times the engine alone.

Run: `python -m benchmarks.sim_speed [--baseline PATH] [--pairs N] [--sweep-pairs N] [--only WHICH]
[--sweeps gpt3,deepseek] [--cpu]`; `--cpu` times whole processes by CPU seconds (with their workers),
which a loaded machine inflates less than wall time.
"""

from __future__ import annotations

import argparse
import os
import resource
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchmarks.peer_speed import EXAMPLE, REPO, paired, plancast_command, run_once
from benchmarks.published_runs import korthikanti
from plancast.simulator.loader import load_scenario, parse_scenario
from plancast.simulator.predict import simulate
from plancast.simulator.scenario import Scenario

DEEPSEEK = REPO / "examples" / "deepseek-v3-h800.toml"


def gpt3_4096() -> Scenario:
    data: dict[str, Any] = {
        "model": {"preset": "gpt3-175b"},
        "training": {
            "seq_len": 2048,
            "micro_batch_size": 1,
            "global_batch_size": 128 * 16,
            "dtype": "bf16",
            "recompute": "selective",
        },
        "parallelism": {
            "tensor_parallel_degree": 8,
            "pipeline_parallel_degree": 32,
            "pipeline_parallel_schedule": "Interleaved1F1B",
            "virtual_stages_per_rank": 2,
            "sequence_parallel": True,
            "zero_stage": 1,
        },
        "cluster": {"preset": "dgx-a100-80gb", "num_nodes": 512},
    }
    return parse_scenario(data).scenario


def load_1min() -> float:
    return os.getloadavg()[0]


def _timed(fn: Callable[[], Any]) -> Callable[[], float]:
    def once() -> float:
        started = time.perf_counter()
        fn()
        return time.perf_counter() - started

    return once


def _row(name: str, r: dict[str, float], target: str) -> None:
    print(
        f"{name:46} {r['a_s']:9.4f} {r['b_s']:9.4f} {r['ratio']:7.2f}x {target:>9}  load {load_1min():4.1f}",
        flush=True,
    )


HEADER = f"{'what (median of alternating pairs)':46} {'old s':>9} {'new s':>9} {'old/new':>8} {'target':>9}"


def in_process(pairs: int) -> None:
    """One prediction after import: SimPy (old) against the default path (new), alternating."""
    cases: list[tuple[str, Scenario, str]] = [
        ("GPT-3 175B, 1536 A100s (the example)", load_scenario(EXAMPLE).scenario, "Calculon"),
        ("1T, 512 GPUs (TP8 PP64, m=512)", korthikanti("1T", sp=True, recompute="selective"), "1 s"),
        ("175B, 4096 GPUs (TP8 PP32 DP16 m=128 v=2)", gpt3_4096(), "2 s"),
        ("DeepSeek-V3, 2048 H800s (the example)", load_scenario(DEEPSEEK).scenario, ""),
    ]
    print("\nIn-process, one prediction (old: the SimPy engine; new: the default path)")
    print(HEADER)
    for name, s, target in cases:
        old, new = (_timed(lambda e=e, s=s: simulate(s, events=False, engine=e)) for e in ("simpy", "auto"))
        old(), new()  # first-call caches, as in a dashboard session
        _row(name, paired(old, new, pairs), target)


def cpu_once(cmd: list[str], env: dict[str, str], cwd: Path | None = None) -> float:
    """CPU seconds (user + system) of one whole process and the workers it waited for: on a shared
    machine the CPU a run needs moves less with the load than its wall time does."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    run_once(cmd, env, cwd=cwd)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime


def whole_processes(
    pairs: int,
    sweep_pairs: int,
    baseline: Path | None,
    sweeps: tuple[str, ...] = ("gpt3", "deepseek"),
    cpu: bool = False,
) -> None:
    """What a user waits for, old against new, each a whole process."""
    new_cmd = plancast_command()
    if baseline is None:
        old_cmd, old_env = new_cmd, {**os.environ, "PLANCAST_ENGINE": "simpy"}
        print("\nWhole processes (old: this code with PLANCAST_ENGINE=simpy; new: this code)")
    else:
        old_cmd, old_env = [sys.executable, "-m", "plancast"], {**os.environ, "PYTHONPATH": str(baseline)}
        print(f"\nWhole processes (old: {baseline}; new: this code)")
    new_env = {k: v for k, v in os.environ.items() if k != "PLANCAST_ENGINE"}
    cases = [
        ("start-up: plancast --help", ["--help"], pairs, ""),
        ("one prediction: simulate X --json", ["simulate", str(EXAMPLE), "--json"], pairs, ""),
    ]
    if "gpt3" in sweeps:
        cases.append(
            (
                "sweep GPT-3 175B --gpus 1536",
                ["sweep", str(EXAMPLE), "--gpus", "1536", "--json"],
                sweep_pairs,
                "3 s",
            )
        )
    if "deepseek" in sweeps:
        cases.append(
            (
                "sweep DeepSeek-V3 --gpus 2048",
                ["sweep", str(DEEPSEEK), "--gpus", "2048", "--json"],
                sweep_pairs,
                "10 s",
            )
        )
    once = cpu_once if cpu else run_once
    if cpu:
        print("CPU seconds of each whole process with its workers (user + system), not wall time")
    print(HEADER)
    for name, args, n, target in cases:
        r = paired(
            lambda a=args: once([*old_cmd, *a], old_env, cwd=baseline),
            lambda a=args: once([*new_cmd, *a], new_env),
            n,
        )
        _row(name, r, target)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.sim_speed", description=__doc__.splitlines()[0])
    p.add_argument("--baseline", type=Path, help="a checkout of the old code (default: this code on SimPy)")
    p.add_argument("--pairs", type=int, default=7, help="alternating pairs of each in-process and short run")
    p.add_argument("--sweep-pairs", type=int, default=3, help="alternating pairs of each sweep")
    p.add_argument("--only", choices=("in-process", "whole"), help="one of the two tables")
    p.add_argument(
        "--sweeps",
        default="gpt3,deepseek",
        help="which whole-process sweeps to time, comma-separated (gpt3, deepseek; '' for none): an old "
        "DeepSeek-V3 sweep can take minutes a run",
    )
    p.add_argument(
        "--cpu",
        action="store_true",
        help="time whole processes by their CPU seconds (with their workers) instead of wall time",
    )
    args = p.parse_args(argv)
    sweeps = tuple(name for name in args.sweeps.split(",") if name)
    if unknown := set(sweeps) - {"gpt3", "deepseek"}:
        print(
            f"error: --sweeps {args.sweeps}: unknown {sorted(unknown)}; use gpt3, deepseek or both",
            file=sys.stderr,
        )
        return 2
    if args.baseline is not None and not (args.baseline / "plancast" / "cli.py").exists():
        print(
            f"error: --baseline {args.baseline} is not a plancast checkout (no plancast/cli.py)",
            file=sys.stderr,
        )
        return 2
    print(f"{os.cpu_count()} cores; load average now {' '.join(f'{v:.1f}' for v in os.getloadavg())}")
    if args.only != "whole":
        in_process(args.pairs)
    if args.only != "in-process":
        whole_processes(args.pairs, args.sweep_pairs, args.baseline, sweeps, args.cpu)
    return 0


if __name__ == "__main__":
    sys.exit(main())
