"""The runtime's collector schedule: automatic collection off during the steps, young generations
collected every K steps, the collector restored afterwards."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from typing import Any

import pytest

from plancast.runtime.gc_schedule import GC_EVERY_STEPS, StepGC


@pytest.fixture
def collections() -> Iterator[list[int]]:
    """The generation of every collection that starts while the test runs."""
    seen: list[int] = []

    def note(phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            seen.append(info["generation"])

    gc.callbacks.append(note)
    yield seen
    gc.callbacks.remove(note)


def test_no_automatic_collection_between_the_scheduled_ones(collections: list[int]) -> None:
    assert gc.isenabled()
    with StepGC(every_steps=3) as collector:
        assert not gc.isenabled()
        collections.clear()  # the one on entering
        for steps_done in range(1, 8):
            for _ in range(20_000):  # cyclic garbage: enough to trigger automatic collections
                a: list[Any] = []
                a.append(a)
            collector.between_steps(steps_done)
        assert collections == [1, 1]  # after steps 3 and 6, the young generations only
    assert gc.isenabled()


def test_the_collector_is_restored_as_it_was() -> None:
    gc.disable()
    try:
        with StepGC():
            pass
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_defaults_to_torchtitans_interval_and_refuses_a_bad_one() -> None:
    assert StepGC().every_steps == GC_EVERY_STEPS == 50
    with pytest.raises(ValueError, match="every_steps"):
        StepGC(every_steps=0)
