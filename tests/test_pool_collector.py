"""The sweep's processes run with Python's cyclic garbage collector paused (plancast/pool.py): in each
worker's items, in the verb's own process for the block, and as it was afterwards."""

from __future__ import annotations

import gc

import pytest

from plancast.pool import collector_paused, process_map, worker_pool


def _collector_on(_: int) -> bool:
    return gc.isenabled()


@pytest.mark.parametrize("start_method", ["fork", "spawn"])
def test_a_workers_items_run_with_the_collector_paused(start_method: str) -> None:
    assert gc.isenabled()
    with process_map(2, start_method) as map_fn:
        assert list(map_fn(_collector_on, range(6))) == [False] * 6
    with process_map(2, start_method, pause_collector=False) as map_fn:  # the workers keep theirs
        assert list(map_fn(_collector_on, range(6))) == [True] * 6
    assert gc.isenabled()


def test_a_verbs_pool_pauses_its_own_process_for_the_block_only() -> None:
    for workers in (1, 2):
        with worker_pool(workers) as map_fn:
            assert not gc.isenabled()
            assert list(map_fn(_collector_on, range(4))) == [False] * 4
        assert gc.isenabled()


def test_the_collector_comes_back_as_it_was_even_on_an_error() -> None:
    with pytest.raises(RuntimeError), collector_paused():
        raise RuntimeError("inside")
    assert gc.isenabled()
    gc.disable()
    try:
        with collector_paused():
            pass
        assert not gc.isenabled()  # it was off: left off
    finally:
        gc.enable()
