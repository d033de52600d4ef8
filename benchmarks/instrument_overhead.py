"""What instrumentation costs: median step time with and without it, interleaved in one run.

Each rank builds three ``Trainer``s of the same scenario and runs their steps in turn (the order
rotates every round, so drift and ordering cancel):

- ``instrumented``: ``instrument=True``, exactly what ``plancast run`` records (spans, DDP/ZeRO-1
  collectives timed by hooks, plus the capture of the collectives that DTensor (tp > 1) or FSDP2
  (ZeRO-2/3) issue: a dispatch mode on CPU, the profiler on GPU);
- ``spans-only``: ``instrument=False`` (everything but that capture);
- ``off``: no recording at all (a recorder whose methods do nothing, no DDP/ZeRO timing hooks:
  DDP's built-in all-reduce), the baseline.

A step's time is the slowest rank's, from a barrier to the end of the step's work, as ``plancast run``
times it (``StepOutput.work_end_s``). The overhead is the ratio of the ``instrumented`` and ``off``
medians. What the recorder does after the work, before the next step can start (stop and read the
profiler, build the step's event table for the rank writer), is reported on its own.
CPU timings vary by tens of percent between runs (DESIGN.md, "Hardware paths"); the ratio of
interleaved medians in one run is the robust figure.

Run: ``python -m benchmarks.instrument_overhead [--scenario S.toml] [--steps 30]``
(default: examples/tiny-local-cpu.toml, 2 gloo ranks on CPU; NCCL on GPUs when CUDA is available).
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import time
from contextlib import nullcontext
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from plancast.runtime.instrument import SpanKey, StepEvents, StepRecorder, default_timer
from plancast.runtime.trainer import Trainer
from plancast.simulator.loader import load_scenario
from plancast.simulator.scenario import Scenario

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "tiny-local-cpu.toml"
WARMUP_STEPS = 3
"""Steps of each trainer left out (lazy initialisation, allocator growth, first profiler start on GPU)."""
MODES = ("instrumented", "spans-only", "off")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


NULL_SPAN = nullcontext()


class OffRecorder(StepRecorder):
    """A recorder that records nothing: the baseline step without instrumentation."""

    enabled = False

    def begin_step(self) -> None:
        return None

    def span(self, key: SpanKey) -> Any:
        return NULL_SPAN

    def open_async(self, key: SpanKey) -> Any:
        return None

    def watch(self, span: Any, work: Any) -> None:
        return None

    def finish(self, step: int) -> StepEvents:
        self.work_end_s = time.perf_counter()
        return StepEvents(self.rank, step, [], [], [])


def uninstrumented(scenario: Scenario, rank: int, world_size: int, device: torch.device) -> Trainer:
    """A trainer recording nothing: ``OffRecorder``, and so no timing hooks in DDP or ZeRO-1."""
    off = OffRecorder(rank, default_timer(device), profile_collectives=False)
    return Trainer(scenario, rank, world_size, device, instrument=False, recorder=off)


def timed_step(trainer: Trainer, step: int, device: torch.device) -> tuple[float, float]:
    """Seconds the slowest rank spent in ``trainer.step(step)`` up to the end of its work, starting
    together, and then in the recorder's work after it (profiler read-out on GPU, the step's event table)."""
    dist.barrier()
    start = time.perf_counter()
    out = trainer.step(step)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    stop = out.work_end_s
    out.events  # noqa: B018 - the deferred table, timed on its own
    elapsed = torch.tensor([stop - start, time.perf_counter() - stop], device=device)
    dist.all_reduce(elapsed, op=dist.ReduceOp.MAX)
    return float(elapsed[0].item()), float(elapsed[1].item())


def measure(
    scenario: Scenario, rank: int, world_size: int, steps: int
) -> tuple[dict[str, list[float]], list[float]]:
    """Step times of every mode's trainer, in rotating order, warm-up steps dropped; and the
    instrumented steps' table-building times."""
    cuda = torch.cuda.is_available()
    device = torch.device("cuda", rank) if cuda else torch.device("cpu")
    trainers = {
        "instrumented": Trainer(scenario, rank, world_size, device, instrument=True),
        "spans-only": Trainer(scenario, rank, world_size, device, instrument=False),
        "off": uninstrumented(scenario, rank, world_size, device),
    }
    times: dict[str, list[float]] = {m: [] for m in MODES}
    tables: list[float] = []
    for i in range(WARMUP_STEPS + steps):
        shift = i % len(MODES)
        order = MODES[shift:] + MODES[:shift]
        for mode in order:
            t, table = timed_step(trainers[mode], i, device)
            if i >= WARMUP_STEPS:
                times[mode].append(t)
                if mode == "instrumented":
                    tables.append(table)
    return times, tables


def _rank(rank: int, world_size: int, port: int, scenario_path: Path, steps: int) -> None:
    os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = "127.0.0.1", str(port)
    cuda = torch.cuda.is_available()
    if cuda:
        torch.cuda.set_device(rank)
    else:
        torch.set_num_threads(1)
    dist.init_process_group("nccl" if cuda else "gloo", rank=rank, world_size=world_size)
    try:
        times, tables = measure(load_scenario(scenario_path).scenario, rank, world_size, steps)
        if rank == 0:
            report(times, tables)
    finally:
        dist.destroy_process_group()


def report(times: dict[str, list[float]], tables: list[float]) -> None:
    """A table of medians, and the overhead as the median of per-round ratios to ``off``.

    The modes of one round run back to back, so a per-round ratio cancels the slow drift of a
    shared machine that the ratio of two overall medians keeps.
    """
    medians = {m: statistics.median(times[m]) for m in MODES}
    ratios = {m: statistics.median(a / b for a, b in zip(times[m], times["off"], strict=True)) for m in MODES}
    print(f"{'mode':<14}{'steps':>7}{'median ms':>12}{'min ms':>10}{'max ms':>10}{'ratio to off':>14}")
    for m in MODES:
        ts = times[m]
        print(
            f"{m:<14}{len(ts):>7}{medians[m] * 1e3:>12.2f}{min(ts) * 1e3:>10.2f}"
            f"{max(ts) * 1e3:>10.2f}{ratios[m]:>14.4f}"
        )
    print(f"overhead {100 * (ratios['instrumented'] - 1):.1f}%")
    print(
        "after each instrumented step (profiler read-out on GPU, event table): "
        f"median {statistics.median(tables) * 1e3:.2f} ms"
    )


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--scenario", type=Path, default=EXAMPLE, help="scenario TOML (default: %(default)s)")
    p.add_argument("--steps", type=int, default=30, help="measured steps per mode (after warm-up)")
    args = p.parse_args()
    scenario = load_scenario(args.scenario).scenario
    world = scenario.tp * scenario.pp * scenario.dp
    mp.start_processes(
        _rank,
        args=(world, free_port(), args.scenario, args.steps),
        nprocs=world,
        join=True,
        start_method="spawn",
    )


if __name__ == "__main__":
    main()
