"""What the microbenchmarks' samples stand for: the mean of a shared core's samples (preemption
included, as a run's long steps pay it), and the capture a run with library collectives runs under."""

from __future__ import annotations

import statistics

import pytest
import torch
from torch.utils._python_dispatch import _get_current_dispatch_mode

from plancast.runtime import timing
from plancast.runtime.microbench_host import instrumented


class FakeClock:
    """perf_counter of a core that preempts one sample in eight for 40 ms (each sample costs 1 ms)."""

    def __init__(self) -> None:
        self.now_s, self.calls = 0.0, 0

    def perf_counter(self) -> float:
        return self.now_s

    def work(self) -> None:
        self.calls += 1
        self.now_s += 0.001 + (0.040 if self.calls % 8 == 0 else 0.0)


def test_the_mean_keeps_the_preempted_samples_the_median_drops(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = FakeClock()
    monkeypatch.setattr(timing.time, "perf_counter", clock.perf_counter)
    median = timing.median_seconds(clock.work, repeat=16)
    assert median == pytest.approx(0.001)  # an idle core: what the microbenchmarks used to report
    clock.calls = 0
    mean = timing.sample_mean(clock.work, repeat=16)
    assert mean == pytest.approx(0.001 + 0.040 * 2 / 16)  # 16 samples after the warm-up, 2 preempted
    clock.calls = 0
    means = timing.interleaved_means({"a": clock.work, "b": clock.work}, repeat=8)
    assert statistics.fmean(means.values()) == pytest.approx(0.001 + 0.040 * 2 / 16)


def test_library_collective_blocks_are_measured_under_the_runs_dispatch_capture() -> None:
    seen = []

    def fn() -> None:
        seen.append(type(_get_current_dispatch_mode()).__name__)
        torch.ones(2).sum()

    assert _get_current_dispatch_mode() is None
    instrumented(fn)()
    assert seen == ["CollectiveSpy"]
    assert _get_current_dispatch_mode() is None  # left again after the sample
