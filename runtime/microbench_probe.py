"""The machine-speed probe: a short fixed workload whose time says how fast this core computes right now.

This project's 2-core VM shares its physical cores with its host's other guests: the same plan at the
same core share ran its forward passes 1.6x faster in one run than in another, minutes apart
(docs/accuracy.md, "the machine's speed"), and neither schedstat nor /proc/stat's steal time saw it.
A prediction whose constants were measured at one speed then scores a run made at another as the
model's error. The probe measures that speed directly, as an input (never a fit):

- the workload: three kernels, the same every time, so their time depends on the machine alone: an fp32
  GEMM (512^3 on CPU: 268 MFLOP, ~3 ms on one core of this project's EPYC VM), an elementwise add over
  4 Mi floats (48 MiB of traffic, past the caches: the memory side, ~2 ms) and 2,000 adds of 64 floats
  (PyTorch's per-op dispatch, ~1 us each: the small plans' steps are mostly that, ~2 ms);
- CPU time, not wall time: the compute thread's own CPU seconds (CLOCK_THREAD_CPUTIME_ID), which a
  wait for a free core does not count, so the probe reads the core's speed and the core share
  (traces/contention.py) the load; on CUDA the device time (wall, synchronized: the host thread only
  waits);
- robust: PROBE_REPEAT samples after a warm-up, the three kernels sampled in turns, each the
  interquartile mean (runtime/timing.py).

Each rank runs it right before its first step and right after its last (runtime/worker.py), and a
shorter reading of the same kernels between steps every PROBE_EVERY_STEPS steps (``between_probe``:
the speed moves in waves of ~10 steps inside one run, docs/accuracy.md), always outside a step's
events and step time, so it costs the measured steps nothing; the microbenchmarks run it too
(runtime/microbench.py), so a machine profile records the speed its constants were measured at.
traces/contention.py turns the readings into the speed factor, per step where the run read between
steps (traces/speed_readings.py), and the "machine speed changed during the run" flag.
"""

from __future__ import annotations

import os
import statistics
import time
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import torch

from plancast.runtime.timing import robust_seconds

PROBE_REPEAT = 15
"""Samples per kernel: 15 rounds of ~7 ms is ~0.1 s a probe; the interquartile mean of 15 keeps the 7
middle ones. Measured on this project's 2-core VM at load 3: three kernels slower together by 10-20%
in one probe of eight, seconds apart, as the host's other guests came and went."""


PROBE_REPEAT_BETWEEN = 3
"""Samples per kernel of a reading between steps: the median of 3 rounds of ~7 ms (~21 ms of the
thread's CPU on this project's 2-core VM), the kernels' inputs made once per run so no warm-up round
is needed. Noisier than the 15 of the pair around the steps; the same kernels, so the same workload."""
PROBE_EVERY_STEPS = 3
"""Read the probe between steps after every third step: at ~21 ms a reading against the 50-90 ms steps
of the small CPU plans (benchmarks/cpu_fidelity.py) that adds ~10% to the run's wall time, never to a
measured step, and gives 3-4 readings in each ~10-step wave (docs/accuracy.md). The run records the
cost it paid (``speed_probe_between_cost``: readings' wall over the steps' time)."""


class ProbeSize(NamedTuple):
    """One device's probe: GEMM edge, elementwise floats, tiny ops, calls of each a sample."""

    gemm_edge: int
    elementwise: int
    tiny_ops: int
    calls: int


PROBE_SIZES = {
    # one core: 2 x 512^3 = 268 MFLOP at ~90 GFLOP/s (measured, one EPYC thread, torch 2.x) = ~3 ms
    "cpu": ProbeSize(gemm_edge=512, elementwise=4 * 1024 * 1024, tiny_ops=2000, calls=1),
    # a GPU: 10 x 2.1 GFLOP at 67 TFLOP/s fp32 (NVIDIA H100 SXM datasheet) = ~0.3 ms; six 4 MiB
    # tensors (24 MiB), far below any run's own, so the run's memory peak is its own
    "cuda": ProbeSize(gemm_edge=1024, elementwise=1024 * 1024, tiny_ops=200, calls=10),
}
TINY = 64
"""Floats of each tiny op: its time is the dispatch, not the arithmetic."""


def workload(device: torch.device) -> str:
    """The probe's workload in words: two readings compare only when their workloads are equal."""
    kind = "cuda" if device.type == "cuda" else "cpu"
    size = PROBE_SIZES[kind]
    return (
        f"{kind}: fp32 mm {size.gemm_edge}^3, add of {size.elementwise} floats, {size.tiny_ops} adds of "
        f"{TINY}, x{size.calls}, interquartile mean of {PROBE_REPEAT}"
    )


def _cpu_clock() -> float:
    """This thread's CPU seconds: what it ran, whatever it waited for a core."""
    return time.thread_time()


def probe_kernels(device: torch.device) -> dict[str, Callable[[], Any]]:
    """The probe's three kernels on `device`, their inputs made once (fixed seed: the same numbers)."""
    size = PROBE_SIZES["cuda" if device.type == "cuda" else "cpu"]
    gen = torch.Generator().manual_seed(0)
    a, b = (torch.randn(size.gemm_edge, size.gemm_edge, generator=gen).to(device) for _ in range(2))
    x, y = (torch.randn(size.elementwise, generator=gen).to(device) for _ in range(2))
    s, t = (torch.randn(TINY, generator=gen).to(device) for _ in range(2))
    out_mm, out_add, out_tiny = torch.empty_like(a), torch.empty_like(x), torch.empty_like(s)

    def gemm() -> None:
        for _ in range(size.calls):
            torch.mm(a, b, out=out_mm)

    def add() -> None:
        for _ in range(size.calls):
            torch.add(x, y, out=out_add)

    def dispatch() -> None:
        for _ in range(size.tiny_ops):
            torch.add(s, t, out=out_tiny)

    return {"gemm": gemm, "elementwise": add, "dispatch": dispatch}


def probe(device: torch.device | None = None, repeat: int = PROBE_REPEAT) -> dict[str, Any]:
    """One reading of this core's (or GPU's) speed: ``probe_s`` (the three kernels' robust seconds in
    this thread's CPU time, summed: the smaller, the faster), each kernel's (``kernel_s``), the same
    samples' wall time (``probe_wall_s``: what the load also stretched, as it stretches the
    microbenchmarks' own single-call samples), the wall time the probe took, the share of it this
    thread ran (``cpu_share``) and the 1-minute load it ran under. On CUDA both are the device's time."""
    device = device or torch.device("cpu")
    cuda = device.type == "cuda"
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    clock = time.perf_counter if cuda else _cpu_clock
    kernels = probe_kernels(device)
    samples: dict[str, list[float]] = {name: [] for name in kernels}
    walls: dict[str, list[float]] = {name: [] for name in kernels}
    wall_s, cpu_s = time.perf_counter(), time.thread_time()
    for i in range(repeat + 1):
        for name, kernel in kernels.items():
            sync()
            start, wall_start = clock(), time.perf_counter()
            kernel()
            sync()
            if i:  # the first round warms up (allocation, caches, CUDA kernels' first launch)
                samples[name].append(clock() - start)
                walls[name].append(time.perf_counter() - wall_start)
    wall_s, cpu_s = time.perf_counter() - wall_s, time.thread_time() - cpu_s
    seconds = {name: robust_seconds(times) for name, times in samples.items()}
    return {
        "probe_s": sum(seconds.values()),
        "probe_wall_s": sum(robust_seconds(times) for times in walls.values()),
        "kernel_s": seconds,
        "workload": workload(device),
        "clock": "cuda (synchronized wall)" if cuda else "thread cpu",
        "wall_s": wall_s,
        "cpu_share": min(1.0, cpu_s / wall_s) if wall_s > 0 and not cuda else None,
        "load": _load(),
    }


def between_probe(device: torch.device) -> Callable[[], float]:
    """A reader of the probe between steps: the same three kernels (inputs made once, here), each the
    median of PROBE_REPEAT_BETWEEN samples in this thread's CPU time (on CUDA the synchronized wall),
    summed; returns ``probe_s`` as ``probe`` does."""
    cuda = device.type == "cuda"
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    clock = time.perf_counter if cuda else _cpu_clock
    kernels = probe_kernels(device)
    for kernel in kernels.values():  # the one warm-up: allocation and first-call costs
        kernel()

    def read() -> float:
        samples: dict[str, list[float]] = {name: [] for name in kernels}
        for _ in range(PROBE_REPEAT_BETWEEN):
            for name, kernel in kernels.items():
                sync()
                start = clock()
                kernel()
                sync()
                samples[name].append(clock() - start)
        return sum(statistics.median(times) for times in samples.values())

    return read


def _load() -> float | None:
    """The 1-minute load average (runnable threads, /proc/loadavg), None where there is none."""
    try:
        return os.getloadavg()[0]
    except (AttributeError, OSError):
        return None


def probe_pair_summary(
    pairs: Sequence[tuple[dict[str, Any] | None, dict[str, Any] | None]],
) -> dict[str, Any]:
    """The measured/summary.json keys from each rank's (before, after) probes: ``speed_probe_s`` the
    slowest rank's mean of its two (the slowest sets the step, as the core share takes the smallest),
    ``speed_probe_before_s`` / ``speed_probe_after_s`` that rank's two, ``speed_probe_workload`` what
    was run, ``rank_speed_probe_s`` every rank's readings. Nothing where a rank has no pair (a run
    from before the probe)."""
    readings = {str(r): (b, a) for r, (b, a) in enumerate(pairs) if b is not None and a is not None}
    if not readings or len(readings) != len(pairs):
        return {}
    means = {r: statistics.fmean((b["probe_s"], a["probe_s"])) for r, (b, a) in readings.items()}
    slowest = max(means, key=lambda r: means[r])
    before, after = readings[slowest]
    return {
        "speed_probe_s": means[slowest],
        "speed_probe_before_s": before["probe_s"],
        "speed_probe_after_s": after["probe_s"],
        "speed_probe_workload": before["workload"],
        "rank_speed_probe_s": {r: [b["probe_s"], a["probe_s"]] for r, (b, a) in readings.items()},
    }


def profile_probe(readings: Sequence[dict[str, Any]], during_wall_s: float) -> dict[str, Any]:
    """A machine profile's probe (runtime/microbench.py): ``probe_s`` the mean of its readings' CPU time,
    taken before, between and after its phases, with every reading and the load and core share each
    ran under; ``probe_wall_s`` the probe's kernels in wall time sampled in turns with the compute
    microbenchmark (``during_wall_s``, microbench_host.measure_compute), the load and speed its samples
    saw. (The readings' wall times moved from 31 to 43 ms between three measurements at load 5-7 on this
    project's 2-core VM, and from the compute samples' load within one: a reading before and after
    describes the middle poorly.)"""
    return {
        "probe_s": statistics.fmean(r["probe_s"] for r in readings),
        "probe_wall_s": during_wall_s,
        "probe_wall_readings_s": statistics.fmean(r["probe_wall_s"] for r in readings),
        "workload": readings[0]["workload"],
        "readings": list(readings),
    }


def probe_readings_summary(
    pairs: Sequence[tuple[dict[str, Any] | None, dict[str, Any] | None]],
    readings: Sequence[Sequence[tuple[int, float]]],
    steps: int,
) -> dict[str, Any]:
    """The measured/summary.json keys of the readings between steps, with the pair around them:
    ``speed_probe_readings`` (``after_step``: the step each reading follows, -1 for the one before the
    first step, the last step for the one after it; ``probe_s``: the slowest rank's reading there, as
    the slowest rank sets the step), ``rank_speed_probe_readings_s`` (each rank's ``[after_step,
    probe_s]``) and ``speed_probe_every_steps``. Nothing where no rank read between steps (a short or
    resumed run: the pair's keys stand), a rank lacks its pair or the ranks read after different steps."""
    if not pairs or any(b is None or a is None for b, a in pairs) or len(readings) != len(pairs):
        return {}
    if not any(readings):
        return {}
    per_rank = [
        [(-1, float(b["probe_s"])), *readings[r], (steps - 1, float(a["probe_s"]))]  # type: ignore[index]
        for r, (b, a) in enumerate(pairs)
    ]
    after_steps = [[s for s, _ in rank] for rank in per_rank]
    if any(steps_read != after_steps[0] for steps_read in after_steps):
        return {}
    return {
        "speed_probe_readings": {
            "after_step": after_steps[0],
            "probe_s": [max(rank[i][1] for rank in per_rank) for i in range(len(after_steps[0]))],
        },
        "rank_speed_probe_readings_s": {str(r): [list(x) for x in rank] for r, rank in enumerate(per_rank)},
        "speed_probe_every_steps": PROBE_EVERY_STEPS,
    }
