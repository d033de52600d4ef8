"""A shared link's FIFO timing (simulator/engine/link.py): pure arithmetic, no SimPy."""

from __future__ import annotations

import pytest

from plancast.simulator.engine.link import Link


def test_sends_go_through_one_after_another() -> None:
    link = Link()
    assert link.post(1.0, 2.0) == (1.0, None)
    assert link.post(1.5, 1.0) == (3.0, None)  # queued behind the first
    assert link.post(10.0, 1.0) == (10.0, None)  # the link is free again


def test_a_send_cuts_a_collectives_run_at_the_end_of_the_current_slice() -> None:
    link = Link()
    slot = link.queue_slice(0.0, 0.5)
    assert slot == 0.0
    assert link.hold("dp", slot, 0.5, 8)  # nothing waits: 8 slices in one run, to 4.0
    start, cut = link.post(1.2, 0.3)  # during the third slice (1.0-1.5)
    assert start == pytest.approx(1.5)
    assert cut == ("dp", 3)
    # the collective queues its next slice at 1.5, behind the send
    assert link.queue_slice(1.5, 0.5) == pytest.approx(1.8)


def test_a_collective_slice_with_a_send_queued_behind_it_goes_alone() -> None:
    link = Link()
    link.post(0.0, 1.0)
    slot = link.queue_slice(0.5, 0.25)  # behind the send: 1.0-1.25
    assert slot == 1.0
    link.post(0.7, 1.0)  # posted while the slice waited: after it, 1.25-2.25
    assert not link.hold("dp", slot, 0.25, 4)
    assert link.queue_slice(1.25, 0.25) == pytest.approx(2.25)


def test_a_send_at_the_very_end_of_a_run_takes_all_its_slices_as_done() -> None:
    link = Link()
    link.hold("dp", link.queue_slice(0.0, 1.0), 1.0, 3)
    assert link.post(3.0, 1.0) == (3.0, ("dp", 3))
