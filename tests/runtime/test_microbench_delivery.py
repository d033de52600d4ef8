"""The microbenchmarks keep rank 0's record when a rank dies after handing it over (gloo's teardown has
aborted on CI after every measurement was done), and fail with the ranks' exit codes when it never came."""

from __future__ import annotations

import multiprocessing as mp

import pytest

from plancast.runtime.microbench import delivered_record


def test_a_rank_that_dies_after_rank_0_delivered_costs_no_measurement() -> None:
    results = mp.get_context("spawn").SimpleQueue()
    results.put({"compute": {"matmul": 1.0}})
    assert delivered_record([-6, 0], results) == {"compute": {"matmul": 1.0}}


def test_without_a_record_the_failed_ranks_and_their_exit_codes_are_named() -> None:
    results = mp.get_context("spawn").SimpleQueue()
    with pytest.raises(RuntimeError, match=r"rank\(s\) \[0, 1\] failed \(exit codes \[-6, None\]\)"):
        delivered_record([-6, None], results)
