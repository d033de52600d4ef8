"""Run a function on N real gloo ranks (forked from a forkserver); any rank's failure fails the caller."""

from __future__ import annotations

import multiprocessing.forkserver
import multiprocessing.util
import os
import socket
import tempfile
import traceback
from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

PRELOAD = ("torch", "torch.distributed", "plancast.runtime.trainer", "tests.distributed.checks")
"""Imported once, by the forkserver, for every rank it forks. Under the "spawn" start method each rank
imported these afresh: about 4 s of CPU a rank on an idle 2-core machine, 11 s a 2-rank start at load 8,
against 0.3 s forked (measured with a no-op body), over some 60 starts in the suite."""

_CONTEXT = mp.get_context("forkserver")
_CONTEXT.set_forkserver_preload(list(PRELOAD))  # read when the server first starts (the first run_ranks)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _entry(
    rank: int,
    world_size: int,
    port: int,
    env: dict[str, str],
    errors: str,
    fn: Callable[..., Any],
    args: tuple[Any, ...],
) -> None:
    # a forked rank has the forkserver's environment (from its start), not the caller's of today
    os.environ.clear()
    os.environ.update(env)
    torch.set_num_threads(1)
    os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = "127.0.0.1", str(port)
    dist.init_process_group("gloo", rank=rank, world_size=world_size)
    try:
        fn(rank, world_size, *args)
        dist.barrier()
    except BaseException:  # every rank's own, beside the one torch reports (`run_ranks`)
        with open(os.path.join(errors, f"rank-{rank}.txt"), "w", encoding="utf-8") as out:
            out.write(traceback.format_exc())
        raise
    finally:
        dist.destroy_process_group()


def run_ranks(world_size: int, fn: Callable[..., Any], *args: Any) -> None:
    """Call ``fn(rank, world_size, *args)`` on each of ``world_size`` gloo ranks.

    Raises ``torch.multiprocessing.ProcessRaisedException`` (with the rank's traceback) if a rank
    raises, or ``ProcessExitedException`` if one dies; the other ranks are terminated. torch reports the
    first rank it sees fail, often one whose peer failed first ("Connection closed by peer" in a
    collective): every rank that raised is named in a note on the exception, with its traceback.
    """
    # torch's start_processes gives each rank a pytorch-errorfile-*.pickle in the temporary directory,
    # which a rank that raises writes and nothing removes (torch/multiprocessing/spawn.py): a folder of
    # the call's own, removed after it. The forkserver and this process's pymp-* folder (its socket) are
    # made first, in the usual place: they outlive the call.
    multiprocessing.util.get_temp_dir()
    multiprocessing.forkserver.ensure_running()
    before = tempfile.tempdir
    with tempfile.TemporaryDirectory(prefix="plancast-ranks-") as scratch:
        tempfile.tempdir = scratch
        try:
            mp.start_processes(
                _entry,
                args=(world_size, free_port(), dict(os.environ), scratch, fn, args),
                nprocs=world_size,
                join=True,
                start_method="forkserver",
            )
        except (mp.ProcessRaisedException, mp.ProcessExitedException) as e:
            for rank in range(world_size):
                path = os.path.join(scratch, f"rank-{rank}.txt")
                if os.path.exists(path):
                    with open(path, encoding="utf-8") as f:
                        e.add_note(f"rank {rank} raised:\n{f.read()}")
            raise
        finally:
            tempfile.tempdir = before
