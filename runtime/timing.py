"""Wall-time sampling for the microbenchmarks: medians after a warm-up, and interleaved medians so a
drifting shared machine hits every variant alike. Torch-free (callers pass their own sync).

Medians of single calls, not the mean nor samples of >= 50 ms of back-to-back calls: both were tried
on a loaded 2-core machine (load 11-18) and predicted the same five plans' step times 40-70% too
slow, where single-call medians were within 18-26% on average (benchmarks/cpu_out_of_box.py, the same
measured runs re-predicted from each record); what a run loses to the load is left to calibration."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any

REPEAT = 7


def median_seconds(
    fn: Callable[[], Any], repeat: int = REPEAT, sync: Callable[[], None] = lambda: None
) -> float:
    """Median wall time of `fn` after one warm-up call; `sync` runs before each sample (e.g. a barrier)."""
    fn()
    times = []
    for _ in range(repeat):
        sync()
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def interleaved_medians(
    fns: dict[str, Callable[[], Any]], repeat: int = REPEAT, sync: Callable[[], None] = lambda: None
) -> dict[str, float]:
    """Median wall time of each of `fns`, sampled in turns so that a drifting machine load (a shared
    machine's changes by tens of percent over seconds) falls on all of them alike."""
    samples: dict[str, list[float]] = {name: [] for name in fns}
    for i in range(repeat + 1):
        for name, fn in fns.items():
            sync()
            start = time.perf_counter()
            fn()
            if i:  # the first round warms up
                samples[name].append(time.perf_counter() - start)
    return {name: statistics.median(times) for name, times in samples.items()}
