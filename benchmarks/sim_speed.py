"""How fast the simulator is on large plans (issue targets in brackets).

- the 1T-parameter plan of Korthikanti et al. Table 3: 512 GPUs, TP 8, PP 64, 512 micro-batches [< 1 s]
- a 4096-GPU plan: GPT-3 175B, TP 8, PP 32, DP 16, 128 micro-batches, interleaved x2 [< 2 s]
- full fidelity (every rank simulated) on 1024 GPUs: 175B, TP 8, PP 8, DP 16 [< 60 s]
- `plancast sweep` for GPT-3 175B, global batch 1536, on 1536 A100s [< 60 s]

Medians of repeated runs; wall time and this process's CPU time (the CPU time is what a quiet machine
would show when others share it). Run: `python -m benchmarks.sim_speed`.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any

from benchmarks.published_runs import korthikanti
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


def main() -> None:
    one_t = korthikanti("1T", sp=True, recompute="selective")
    big = gpt3_4096()
    full = gpt3_1024()
    base = load_scenario("examples/gpt3-175b-dgx-a100.toml").scenario
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
        ("sweep 175B on 1536 GPUs", lambda: sweep(base, 1536), 1, 60.0),
    ]
    print(f"{'case':45} {'wall s':>8} {'cpu s':>8} {'target s':>9}  result")
    for name, fn, repeat, target in cases:
        wall, cpu, result = timed(fn, repeat)
        if hasattr(result, "summary"):
            summary = result.summary
            info = f"step {summary['step_time_s']:.3f} s, {summary['simulated_ranks']} ranks simulated"
        else:
            info = (
                f"{result.enumerated:,} plans, {result.fits:,} fit, best {result.finalists[0].plan.label()}"
            )
        print(f"{name:45} {wall:8.3f} {cpu:8.3f} {target:9.1f}  {info}", flush=True)


if __name__ == "__main__":
    main()
