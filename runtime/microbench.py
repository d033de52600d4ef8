"""Short microbenchmarks of this machine for `plancast calibrate --microbench`.

- device: fp32 matmul FLOP/s at a few sizes (peak = the best of them) and memory bandwidth from a
  large tensor copy (read + write);
- links: gloo all-reduce, all-gather and send/recv between `world` local processes at sizes from 1 KiB
  to 4 MiB, timed after a barrier so the samples carry as little waiting as possible.

Every result is a plain dict; traces.calibrate.fit_link and simulator.calibration turn them into a
cluster profile. On a GPU the device part times CUDA matmuls with CUDA events.
"""

from __future__ import annotations

import functools
import os
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

MATMUL_SIZES = (128, 256, 512, 1024)
MESSAGE_BYTES = (1024, 16 * 1024, 256 * 1024, 1024 * 1024, 4 * 1024 * 1024)


def _median_seconds(fn: Callable[[], Any], repeat: int, sync: Callable[[], None]) -> float:
    fn()  # warm-up
    sync()
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        sync()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def measure_device(threads: int = 1, repeat: int = 5) -> dict[str, Any]:
    """fp32 matmul FLOP/s per size, the best of them as the peak, and memory bandwidth (B/s)."""
    torch.set_num_threads(threads)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    flops = {}
    for n in MATMUL_SIZES:
        a = torch.randn(n, n, device=device)
        b = torch.randn(n, n, device=device)
        flops[n] = 2.0 * n**3 / _median_seconds(functools.partial(torch.matmul, a, b), repeat, sync)
    src = torch.empty(16 * 1024 * 1024, device=device)  # 64 MiB of fp32
    dst = torch.empty_like(src)
    copy_s = _median_seconds(lambda: dst.copy_(src), repeat, sync)
    return {
        "device": device,
        "matmul_flops": flops,
        "peak_flops": max(flops.values()),
        "memory_Bps": 2 * src.numel() * 4 / copy_s,
        "threads": threads,
    }


def _link_worker(rank: int, world: int, init_file: str, repeat: int, results: Any) -> None:
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world)
    try:
        samples = []
        for nbytes in MESSAGE_BYTES:
            x = torch.zeros(nbytes // 4)
            gathered = [torch.zeros_like(x) for _ in range(world)]
            ops: dict[str, Callable[[], Any]] = {
                "all_reduce": functools.partial(dist.all_reduce, x),
                "all_gather": functools.partial(dist.all_gather, gathered, x),
                "send": functools.partial(dist.send, x, 1)
                if rank == 0
                else functools.partial(dist.recv, x, 0),
            }
            for kind, op in ops.items():
                if kind == "send" and rank > 1:
                    continue
                seconds = _median_seconds(op, repeat, dist.barrier if kind != "send" else (lambda: None))
                size = nbytes * world if kind == "all_gather" else nbytes  # the gathered tensor
                samples.append(
                    {"kind": kind, "ranks": world if kind != "send" else 2, "bytes": size, "seconds": seconds}
                )
        if rank == 0:
            results.put(samples)
    finally:
        dist.destroy_process_group()


def measure_links(world: int = 2, repeat: int = 9) -> list[dict[str, Any]]:
    """Collective timings between `world` gloo processes on this machine (rows for fit_link)."""
    ctx = mp.get_context("spawn")
    results = ctx.SimpleQueue()
    with tempfile.TemporaryDirectory() as tmp:
        init_file = str(Path(tmp) / "init")
        procs = [
            ctx.Process(target=_link_worker, args=(r, world, init_file, repeat, results))
            for r in range(world)
        ]
        for p in procs:
            p.start()
        for p in procs:
            p.join(timeout=300)
        failed = [r for r, p in enumerate(procs) if p.exitcode != 0]
        if failed:
            raise RuntimeError(
                f"link microbenchmark rank(s) {failed} failed (exit codes "
                f"{[procs[r].exitcode for r in failed]})"
            )
        samples: list[dict[str, Any]] = results.get()
    return samples


def cores() -> int:
    """Compute units ranks on this node share: CPU cores available to this process (1 per GPU on GPUs)."""
    if torch.cuda.is_available():
        return torch.cuda.device_count()
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
