"""runtime/timing.py's robust central value: the interquartile mean, as exact cases."""

from __future__ import annotations

import pytest

from plancast.runtime.timing import interleaved_seconds, robust_seconds, sample_seconds


@pytest.mark.parametrize(
    ("times", "expected"),
    [
        ([1.0], 1.0),
        ([1.0, 3.0, 2.0], 2.0),  # under four samples: the plain mean
        ([1.0, 2.0, 3.0, 100.0], 2.5),  # the slowest and the fastest quarter dropped
        ([1.0] * 9 + [50.0, 60.0], 1.0),  # up to a quarter of lost scheduler slices: ignored
        ([1.0] * 8 + [50.0, 60.0, 71.0], 8.0),  # more than a quarter: one of them counts
        ([0.5, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 9.0], 1.0),
    ],
)
def test_the_interquartile_mean(times: list[float], expected: float) -> None:
    assert robust_seconds(times) == pytest.approx(expected)


def test_sampling_calls_every_function_in_turns_after_a_warm_up() -> None:
    calls: list[str] = []
    seconds = interleaved_seconds({"a": lambda: calls.append("a"), "b": lambda: calls.append("b")}, repeat=3)
    assert calls == ["a", "b"] * 4 and set(seconds) == {"a", "b"}
    synced: list[int] = []
    assert sample_seconds(lambda: None, repeat=5, sync=lambda: synced.append(1)) >= 0 and len(synced) == 5
