"""Run a function on N real gloo ranks (spawned processes); any rank's failure fails the caller."""

from __future__ import annotations

import os
import socket
from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _entry(rank: int, world_size: int, port: int, fn: Callable[..., Any], args: tuple[Any, ...]) -> None:
    torch.set_num_threads(1)
    os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = "127.0.0.1", str(port)
    dist.init_process_group("gloo", rank=rank, world_size=world_size)
    try:
        fn(rank, world_size, *args)
        dist.barrier()
    finally:
        dist.destroy_process_group()


def run_ranks(world_size: int, fn: Callable[..., Any], *args: Any) -> None:
    """Call ``fn(rank, world_size, *args)`` on each of ``world_size`` gloo ranks.

    Raises ``torch.multiprocessing.ProcessRaisedException`` (with the rank's traceback) if a rank
    raises, or ``ProcessExitedException`` if one dies; the other ranks are terminated.
    """
    mp.start_processes(
        _entry, args=(world_size, free_port(), fn, args), nprocs=world_size, join=True, start_method="spawn"
    )
