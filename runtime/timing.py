"""Wall-time sampling for the microbenchmarks, torch-free (callers pass their own sync).

Which statistic: a run's step time (the median over steps, runtime/worker.py) is hundreds of ms, many
scheduler time slices (Linux CFS: a few ms each, kernel/sched/fair.c sysctl_sched_latency), so on a
shared machine every step pays the average share of preemption. A microbenchmark sample is a few ms:
it either runs whole or is preempted, and the median drops the preempted ones, measuring an idle core
(a tiny ZeRO-3 run at load ~10 on 2 cores: all_gather median 5.4 ms, min 0.6 ms; the median of the
isolated microbenchmark predicted half of the measured step). So what a rank sees during a run is
the MEAN of the samples (`sample_mean`); the median (`median_seconds`) is kept for a peak, the
device's best GEMM rate. `interleaved_means` samples variants in turns, so a drifting load falls on
all of them alike.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any

REPEAT = 7


def _samples(fn: Callable[[], Any], repeat: int, sync: Callable[[], None]) -> list[float]:
    fn()  # warm-up
    times = []
    for _ in range(repeat):
        sync()
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return times


def median_seconds(
    fn: Callable[[], Any], repeat: int = REPEAT, sync: Callable[[], None] = lambda: None
) -> float:
    """Median wall time of `fn` after one warm-up call; `sync` runs before each sample (e.g. a barrier)."""
    return statistics.median(_samples(fn, repeat, sync))


def sample_mean(
    fn: Callable[[], Any], repeat: int = REPEAT, sync: Callable[[], None] = lambda: None
) -> float:
    """Mean wall time of `fn` after one warm-up call (the time a run's rank sees; module docstring)."""
    return statistics.fmean(_samples(fn, repeat, sync))


def interleaved_means(
    fns: dict[str, Callable[[], Any]], repeat: int = REPEAT, sync: Callable[[], None] = lambda: None
) -> dict[str, float]:
    """Mean wall time of each of `fns`, sampled in turns after one warm-up round (module docstring)."""
    samples: dict[str, list[float]] = {name: [] for name in fns}
    for i in range(repeat + 1):
        for name, fn in fns.items():
            sync()
            start = time.perf_counter()
            fn()
            if i:  # the first round warms up
                samples[name].append(time.perf_counter() - start)
    return {name: statistics.fmean(times) for name, times in samples.items()}
