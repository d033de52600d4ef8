"""How fast the simulator is on large plans (issue targets in brackets).

- the 1T-parameter plan of Korthikanti et al. Table 3: 512 GPUs, TP 8, PP 64, 512 micro-batches [< 1 s]
- a 4096-GPU plan: GPT-3 175B, TP 8, PP 32, DP 16, 128 micro-batches, interleaved x2 [< 2 s]
- full fidelity (every rank simulated) on 1024 GPUs: 175B, TP 8, PP 8, DP 16 [< 60 s]
- `plancast sweep` (exact top 10, docs/sweep.md) for GPT-3 175B, global batch 1536, on 1536 A100s
  [whole process < 3 s on a quiet 2-core machine], and for DeepSeek-V3 on 2,048 H800s [< 10 s]

Medians of repeated runs; wall time and this process's CPU time (the CPU time is what a quiet machine
would show when others share it).

Then what a user waits for, whole processes side by side (issue 16), each a median of alternating runs:
start-up (`plancast --help`), one prediction of examples/gpt3-175b-dgx-a100.toml whole-process
(`plancast simulate X --json`) and in-process (after import), and `plancast sweep X --gpus 1536 --json`
with one worker against every core (`--workers`), with the median per-pair speed-up.

Run: `python -m benchmarks.sim_speed [--pairs N] [--sweep-pairs N] [--skip-large]`.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

from benchmarks.peer_speed import EXAMPLE, paired, plancast_command, run_once
from benchmarks.published_runs import korthikanti
from plancast.pool import available_cores
from plancast.simulator.loader import load_scenario, parse_scenario
from plancast.simulator.predict import simulate
from plancast.simulator.scenario import Scenario
from plancast.simulator.sweep import sweep


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


def gpt3_1024() -> Scenario:
    data: dict[str, Any] = {
        "model": {"preset": "gpt3-175b"},
        "training": {
            "seq_len": 2048,
            "micro_batch_size": 1,
            "global_batch_size": 1024,
            "dtype": "bf16",
            "recompute": "selective",
        },
        "parallelism": {
            "tensor_parallel_degree": 8,
            "pipeline_parallel_degree": 8,
            "sequence_parallel": True,
            "zero_stage": 1,
        },
        "cluster": {"preset": "dgx-a100-80gb", "num_nodes": 128},
    }
    return parse_scenario(data).scenario


def timed(fn: Callable[[], Any], repeat: int) -> tuple[float, float, Any]:
    """Median wall and CPU seconds of `repeat` calls, and the last result."""
    walls, cpus, result = [], [], None
    for _ in range(repeat):
        wall, cpu = time.perf_counter(), time.process_time()
        result = fn()
        walls.append(time.perf_counter() - wall)
        cpus.append(time.process_time() - cpu)
    return statistics.median(walls), statistics.median(cpus), result


def large_plans() -> None:
    """The issue-target cases: large plans in-process, one sweep."""
    one_t = korthikanti("1T", sp=True, recompute="selective")
    big = gpt3_4096()
    full = gpt3_1024()
    base = load_scenario("examples/gpt3-175b-dgx-a100.toml").scenario
    deepseek = load_scenario("examples/deepseek-v3-h800.toml").scenario
    cases: list[tuple[str, Callable[[], Any], int, float]] = [
        ("1T, 512 GPUs (TP8 PP64, m=512)", lambda: simulate(one_t, events=False), 5, 1.0),
        ("1T, 512 GPUs, with all events", lambda: simulate(one_t, events=True), 3, 1.0),
        ("175B, 4096 GPUs (TP8 PP32 DP16 m=128 v=2)", lambda: simulate(big, events=False), 5, 2.0),
        (
            "175B, 1024 GPUs, --full-fidelity",
            lambda: simulate(full, full_fidelity=True, events=False),
            1,
            60.0,
        ),
        ("sweep 175B on 1536 GPUs, exact top 10", lambda: sweep(base, 1536), 1, 3.0),
        ("sweep DeepSeek-V3 on 2048 GPUs, exact top 10", lambda: sweep(deepseek, 2048), 1, 10.0),
    ]
    print(f"{'case':45} {'wall s':>8} {'cpu s':>8} {'target s':>9}  {'load avg':>8}  result")
    for name, fn, repeat, target in cases:
        wall, cpu, result = timed(fn, repeat)
        if hasattr(result, "summary"):
            summary = result.summary
            info = f"step {summary['step_time_s']:.3f} s, {summary['simulated_ranks']} ranks simulated"
        else:
            info = (
                f"{result.enumerated:,} plans, {result.fits:,} fit, {result.simulated:,} simulated, "
                f"best {result.finalists[0].plan.label()}"
            )
        load = os.getloadavg()[0]
        print(f"{name:45} {wall:8.3f} {cpu:8.3f} {target:9.1f}  {load:8.1f}  {info}", flush=True)


def alternating(commands: dict[str, list[str]], rounds: int) -> dict[str, float]:
    """Median wall seconds of each whole-process command, run in turn `rounds` times (the order
    rotates every round so that a shared machine's drift hits all alike)."""
    times: dict[str, list[float]] = {name: [] for name in commands}
    names = list(commands)
    for i in range(rounds):
        for name in names[i % len(names) :] + names[: i % len(names)]:
            times[name].append(run_once(commands[name]))
    return {name: statistics.median(t) for name, t in times.items()}


def what_users_wait_for(pairs: int, sweep_pairs: int) -> None:
    """Start-up, one prediction (whole process and in-process), sweep with 1 and all workers."""
    cmd, x, cores = plancast_command(), str(EXAMPLE), available_cores()
    whole = alternating({"help": [*cmd, "--help"], "simulate": [*cmd, "simulate", x, "--json"]}, pairs)
    base = load_scenario(EXAMPLE).scenario
    simulate(base, events=False)  # first-call caches, as in a dashboard session
    in_process, _, _ = timed(lambda: simulate(base, events=False), 20)
    sweep_cmd = [*cmd, "sweep", x, "--gpus", "1536", "--json", "--workers"]
    spread = paired(
        lambda: run_once([*sweep_cmd, "1"]), lambda: run_once([*sweep_cmd, str(cores)]), sweep_pairs
    )
    print(f"\n{'what (median of alternating runs)':48} {'seconds':>9}")
    print(f"{'start-up: plancast --help':48} {whole['help']:9.3f}")
    print(f"{'one prediction, whole process: simulate --json':48} {whole['simulate']:9.3f}")
    print(f"{'one prediction, in-process (20 calls)':48} {in_process:9.4f}")
    print(f"{'sweep 175B on 1536 GPUs, --workers 1':48} {spread['a_s']:9.2f}")
    print(f"{f'sweep 175B on 1536 GPUs, --workers {cores} (all cores)':48} {spread['b_s']:9.2f}")
    print(f"{'sweep speed-up, median of per-pair ratios':48} {spread['ratio']:8.2f}x")
    print("load average now:", " ".join(f"{v:.1f}" for v in os.getloadavg()), f"({cores} cores available)")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.sim_speed", description=__doc__.splitlines()[0])
    p.add_argument("--pairs", type=int, default=7, help="rounds of --help and simulate --json")
    p.add_argument("--sweep-pairs", type=int, default=3, help="alternating 1-worker / all-worker sweeps")
    p.add_argument("--skip-large", action="store_true", help="only the whole-process comparisons")
    args = p.parse_args(argv)
    if not args.skip_large:
        large_plans()
    what_users_wait_for(args.pairs, args.sweep_pairs)
    return 0


if __name__ == "__main__":
    sys.exit(main())
