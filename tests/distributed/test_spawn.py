"""tests/distributed/spawn.run_ranks itself: ranks forked from the forkserver see the caller's environment
of the moment (not the server's), form one gloo group, and a rank's failure fails the caller."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from tests.distributed.spawn import run_ranks

pytestmark = pytest.mark.distributed


def _sums_ranks_and_reads_env(rank: int, world_size: int, expected: str) -> None:
    assert os.environ.get("PLANCAST_SPAWN_TEST") == expected, os.environ.get("PLANCAST_SPAWN_TEST")
    total = torch.tensor([float(rank)])
    dist.all_reduce(total)
    assert total.item() == sum(range(world_size))


def _rank_one_fails(rank: int, world_size: int) -> None:
    if rank == 1:
        raise ValueError("rank 1 was told to fail")


def test_ranks_see_the_callers_environment_and_a_failure_fails_the_caller(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("PLANCAST_SPAWN_TEST", "first")
    run_ranks(2, _sums_ranks_and_reads_env, "first")
    monkeypatch.setenv("PLANCAST_SPAWN_TEST", "second")  # set after the forkserver started
    run_ranks(2, _sums_ranks_and_reads_env, "second")
    # the first rank to die is reported: rank 1's error, or rank 0's gloo error on losing its peer
    stray = set(Path(tempfile.gettempdir()).glob("pytorch-errorfile-*"))
    with pytest.raises(mp.ProcessRaisedException, match="terminated with the following error") as caught:
        run_ranks(2, _rank_one_fails)
    # whichever torch reports, the rank that failed first is named with its own traceback
    notes = "\n".join(getattr(caught.value, "__notes__", []))
    assert "rank 1 raised:" in notes and "ValueError: rank 1 was told to fail" in notes, notes
    # the failed rank's error file went with the call's own folder, not left in the temporary directory
    assert set(Path(tempfile.gettempdir()).glob("pytorch-errorfile-*")) == stray
