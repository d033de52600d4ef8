"""Wall-time sampling for the microbenchmarks: robust central values of single calls after a warm-up,
sampled in turns so a drifting shared machine hits every variant alike. Torch-free (callers pass their
own sync).

Single calls, not the mean nor samples of >= 50 ms of back-to-back calls: both were tried on a loaded
2-core machine (load 11-18) and predicted the same five plans' step times 40-70% too slow, where
single-call medians were within 18-26% on average (benchmarks/cpu_out_of_box.py, the same measured
runs re-predicted from each record); what a run loses to the load is left to calibration.

The central value is the interquartile mean (the mean of the middle half: a 25% trimmed mean;
Wilcox, "Introduction to Robust Estimation and Hypothesis Testing", ch. 3): as robust as the median
to the heavy tail a shared machine adds (a scheduler slice lost now and then), with a smaller sampling
spread for the same samples, which is what two fresh measurements of one machine disagreed by (issue
36).
REPEAT went from 7 to 11 for the same reason."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any

REPEAT = 11


def robust_seconds(times: list[float]) -> float:
    """The interquartile mean of `times`: the mean after dropping the fastest and the slowest quarter
    (none of them under four samples)."""
    ordered = sorted(times)
    cut = len(ordered) // 4
    middle = ordered[cut : len(ordered) - cut] if cut else ordered
    return statistics.fmean(middle)


def sample_seconds(
    fn: Callable[[], Any], repeat: int = REPEAT, sync: Callable[[], None] = lambda: None
) -> float:
    """Robust wall time of `fn` after one warm-up call; `sync` runs before each sample (e.g. a barrier)."""
    fn()
    times = []
    for _ in range(repeat):
        sync()
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return robust_seconds(times)


def interleaved_seconds(
    fns: dict[str, Callable[[], Any]], repeat: int = REPEAT, sync: Callable[[], None] = lambda: None
) -> dict[str, float]:
    """Robust wall time of each of `fns`, sampled in turns so that a drifting machine load (a shared
    machine's changes by tens of percent over seconds) falls on all of them alike."""
    samples: dict[str, list[float]] = {name: [] for name in fns}
    for i in range(repeat + 1):
        for name, fn in fns.items():
            sync()
            start = time.perf_counter()
            fn()
            if i:  # the first round warms up
                samples[name].append(time.perf_counter() - start)
    return {name: robust_seconds(times) for name, times in samples.items()}
