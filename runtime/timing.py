"""Wall-time sampling for the microbenchmarks, torch-free (callers pass their own sync).

What a sample stands for: a run's step time (the median over steps, runtime/worker.py) is hundreds
of ms, many scheduler time slices (Linux CFS: a few ms each, kernel/sched/fair.c sysctl_sched_latency),
so on a shared machine every step pays the average share of preemption. A single call of a few ms
either runs whole or is preempted, and the median of such calls drops the preempted ones: it measured
an idle core (a tiny ZeRO-3 run at load ~10 on 2 cores: all_gather median 5.4 ms, min 0.6 ms; the
microbenchmarks predicted half of its step), while the mean of a few calls is at the mercy of one
preemption of a second. So a sample here is as long as a step's stretch of work: `calls_per_sample`
back-to-back calls of at least SAMPLE_S in all, each paying the average preemption; the median over
samples then drops a sample hit by a rare long stall. `peak_seconds` keeps single calls for a peak
(the device's best GEMM rate).
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable
from typing import Any

REPEAT = 7
SAMPLE_S = 0.05  # >= several CFS time slices (sched_latency 6 ms x (1 + log2 cores) by default)
MAX_CALLS = 64  # per sample: bounds the time of a very short operation's microbenchmark


def calls_per_sample(call_s: float) -> int:
    """Back-to-back calls that make one sample of >= SAMPLE_S (1 for a call that long already)."""
    return min(MAX_CALLS, max(1, math.ceil(SAMPLE_S / max(call_s, 1e-9) - 1e-6)))  # 50.000001 is 50


def _timed(fn: Callable[[], Any], calls: int) -> float:
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    return (time.perf_counter() - start) / calls


def peak_seconds(fn: Callable[[], Any], repeat: int = REPEAT) -> float:
    """Median wall time of single calls of `fn` after one warm-up call: a peak rate, not a run's view."""
    fn()
    return statistics.median(_timed(fn, 1) for _ in range(repeat))


Agree = Callable[[list[int]], list[int]]
"""The calls per sample of each variant, agreed: every rank of a job must use the same numbers (a
collective called a different number of times on two ranks would hang), paired calls the same."""


def _own(calls: list[int]) -> list[int]:
    return calls


def median_seconds(
    fn: Callable[[], Any],
    repeat: int = REPEAT,
    sync: Callable[[], None] = lambda: None,
    agree: Agree = _own,
) -> float:
    """Seconds per call of `fn` as a run sees it: the median over `repeat` samples of calls_per_sample
    calls each (module docstring); `sync` runs before each sample (e.g. a barrier)."""
    sync()
    start = time.perf_counter()
    fn()  # warm-up, and how long one call takes
    (calls,) = agree([calls_per_sample(time.perf_counter() - start)])
    times = []
    for _ in range(repeat):
        sync()
        times.append(_timed(fn, calls))
    return statistics.median(times)


def interleaved_medians(
    fns: dict[str, Callable[[], Any]],
    repeat: int = REPEAT,
    sync: Callable[[], None] = lambda: None,
    agree: Agree = _own,
) -> dict[str, float]:
    """median_seconds of each of `fns`, their samples taken in turns so that a drifting load falls on
    all of them alike; the first round warms up and sizes the samples."""
    wanted = []
    for fn in fns.values():
        sync()
        start = time.perf_counter()
        fn()
        wanted.append(calls_per_sample(time.perf_counter() - start))
    calls = dict(zip(fns, agree(wanted), strict=True))
    samples: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(repeat):
        for name, fn in fns.items():
            sync()
            samples[name].append(_timed(fn, calls[name]))
    return {name: statistics.median(times) for name, times in samples.items()}
