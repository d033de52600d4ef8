"""What the microbenchmarks' samples stand for: a stretch of back-to-back calls as long as a run's
step work (preemption on a shared core included, as a run's steps pay it), ranks agreeing on the
count; and the capture a run with library collectives runs under."""

from __future__ import annotations

import pytest
import torch
from torch.utils._python_dispatch import _get_current_dispatch_mode

from plancast.runtime import timing
from plancast.runtime.microbench_host import _paired, instrumented


class FakeClock:
    """perf_counter of a shared core: each call costs 1 ms, one call in ten is preempted for 40 ms."""

    def __init__(self) -> None:
        self.now_s, self.calls = 0.0, 0

    def perf_counter(self) -> float:
        return self.now_s

    def work(self) -> None:
        self.calls += 1
        self.now_s += 0.001 + (0.040 if self.calls % 10 == 0 else 0.0)


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> FakeClock:
    fake = FakeClock()
    monkeypatch.setattr(timing.time, "perf_counter", fake.perf_counter)
    return fake


def test_a_sample_pays_the_average_preemption_a_single_call_does_not(clock: FakeClock) -> None:
    assert timing.calls_per_sample(0.001) == 50  # 50 ms of back-to-back calls
    assert timing.peak_seconds(clock.work, repeat=9) == pytest.approx(0.001)  # an idle core
    clock.calls = 0
    # every sample of 50 calls holds 5 preemptions: 1 ms + 5 x 40 ms / 50 per call, as a long step sees
    assert timing.median_seconds(clock.work, repeat=5) == pytest.approx(0.005)
    clock.calls = 0
    means = timing.interleaved_medians({"a": clock.work}, repeat=3)
    assert means["a"] == pytest.approx(0.005)


def test_ranks_use_the_agreed_number_of_calls(clock: FakeClock) -> None:
    timing.interleaved_medians({"a": clock.work, "b": clock.work}, repeat=3, agree=lambda c: [2, 4])
    assert clock.calls == 2 + 3 * (2 + 4)  # one warm-up call each, then 3 samples of 2 and of 4 calls
    assert _paired([3, 1, 5, 7]) == [3, 3, 7, 7]  # a forward's sample holds as many as its backward


def test_library_collective_blocks_are_measured_under_the_runs_dispatch_capture() -> None:
    seen = []

    def fn() -> None:
        seen.append(type(_get_current_dispatch_mode()).__name__)
        torch.ones(2).sum()

    assert _get_current_dispatch_mode() is None
    instrumented(fn)()
    assert seen == ["CollectiveSpy"]
    assert _get_current_dispatch_mode() is None  # left again after the sample
