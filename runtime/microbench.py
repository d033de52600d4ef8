"""Microbenchmarks of this machine: what the local-cpu profile and `plancast calibrate --microbench` use.

One gloo job of `world` local processes (the rank count the scenario uses), every rank measuring at
once, as ranks of a run share the cores:

- device: fp32 matmul FLOP/s at the GEMM shapes the scenario uses, memory bandwidth from a large copy;
- compute: the scenario's model (embedding, 1 or 3 blocks, head) forward and backward, plain;
- links: gloo all-reduce, all-gather and send/recv at sizes from 1 KiB to 4 MiB;
- host costs, each isolated (runtime/microbench_host.py): posting an empty send, a 1-element
  all-reduce / all-gather plain and through DTensor, one block plain vs tensor-parallel vs FSDP2 (1 and 3
  blocks: the slope is per block), AdamW's step over 8 and 32 tensors plain and as DTensors.

Every result is a plain dict (JSON-able); `plancast.simulator.calibration.microbench` turns it into a
cluster profile. Measurement only: no fitting here.
"""

from __future__ import annotations

import functools
import os
import platform
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from plancast.runtime.timing import REPEAT, interleaved_seconds, sample_seconds
from plancast.simulator.scenario import Scenario

MESSAGE_BYTES = (1024, 16 * 1024, 256 * 1024, 1024 * 1024, 4 * 1024 * 1024)


def gemm_shapes(s: Scenario) -> list[tuple[int, int, int]]:
    """(m, k, n) of the scenario's GEMMs per micro-batch: projections, MLP, head (simulator/costs/ops.py)."""
    rows = s.training.micro_batch_size * s.training.seq_len
    h, f, v = s.model.hidden_size, s.model.ffn_size, s.model.vocab_size
    return sorted({(rows, h, h), (rows, h, f), (rows, f, h), (rows, h, v)})


def measure_device(s: Scenario, repeat: int = 3 * REPEAT) -> dict[str, Any]:
    """fp32 matmul FLOP/s per GEMM shape of `s`, the best of them as the peak, and memory bandwidth.

    The shapes and the copy are sampled in turns (timing.interleaved_seconds): measured one after the
    other, a few ms of load from elsewhere on a shared machine fell on one shape alone and put it at a
    third of its neighbours' rate, which bent the fitted GEMM curve."""
    gemms = {f"{m}x{k}x{n}": (m, k, n) for m, k, n in gemm_shapes(s)}
    fns: dict[str, Any] = {
        name: functools.partial(torch.matmul, torch.randn(m, k), torch.randn(k, n))
        for name, (m, k, n) in gemms.items()
    }
    src = torch.empty(16 * 1024 * 1024)  # 64 MiB of fp32: far beyond the caches
    dst = torch.empty_like(src)
    fns["copy"] = functools.partial(dst.copy_, src)
    seconds = interleaved_seconds(fns, repeat)
    flops = {name: 2.0 * m * k * n / seconds[name] for name, (m, k, n) in gemms.items()}
    copy_s = seconds["copy"]
    return {
        "matmul_flops": flops,
        "peak_flops": max(flops.values()),
        "memory_Bps": 2 * src.numel() * 4 / copy_s,
    }


def measure_links(world: int, repeat: int = REPEAT) -> list[dict[str, Any]]:
    """Rows (kind, ranks, bytes, seconds) of gloo collectives between this job's ranks (rank 0's view)."""
    rank, samples = dist.get_rank(), []
    for nbytes in MESSAGE_BYTES:
        x = torch.zeros(nbytes // 4)
        gathered = [torch.zeros_like(x) for _ in range(world)]
        ops: dict[str, Callable[[], Any]] = {
            "all_reduce": functools.partial(dist.all_reduce, x),
            "all_gather": functools.partial(dist.all_gather, gathered, x),
        }
        for kind, op in ops.items():
            seconds = sample_seconds(op, repeat, dist.barrier)
            size = nbytes * world if kind == "all_gather" else nbytes  # the gathered tensor
            samples.append({"kind": kind, "ranks": world, "bytes": size, "seconds": seconds})
        if rank < 2:
            op = functools.partial(dist.send, x, 1) if rank == 0 else functools.partial(dist.recv, x, 0)
            samples.append(
                {"kind": "send", "ranks": 2, "bytes": nbytes, "seconds": sample_seconds(op, repeat)}
            )
    return samples


LINK_ATTEMPTS = 3
"""Measurements of the links before giving up on a fit: on a busy machine one pass can time larger
collectives no slower than smaller ones, and no bandwidth fits (simulator/calibration/links.fit_link)."""


def measure_fitting_links(world: int) -> list[dict[str, Any]]:
    """measure_links, again (every rank together, on rank 0's word) while rank 0's samples fit no link."""
    import pandas as pd

    from plancast.simulator.calibration.links import fit_link

    for _ in range(LINK_ATTEMPTS):
        samples = measure_links(world)
        try:
            fit_link(pd.DataFrame(samples))
            fits = 1
        except ValueError:
            fits = 0
        verdict = torch.tensor([fits])
        dist.broadcast(verdict, src=0)  # rank 0's view is the one kept (`measure_links`)
        if int(verdict.item()):
            break
    return samples


def cores() -> int:
    """Compute units ranks on this node share: CPU cores available to this process (1 per GPU on GPUs)."""
    if torch.cuda.is_available():
        return torch.cuda.device_count()
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def cpu_model() -> str:
    """The CPU's model name (/proc/cpuinfo on Linux), else the platform's processor string."""
    try:
        for line in Path("/proc/cpuinfo").read_text(encoding="utf-8").splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _worker(rank: int, world: int, init_file: str, s: Scenario, results: Any) -> None:
    from plancast.runtime import microbench_host as host
    from plancast.runtime.microbench_probe import probe, profile_probe

    torch.set_num_threads(1)  # as the runtime's CPU ranks (docs/architecture.md, hardware paths)
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world)
    try:
        readings = [probe()]  # the speed these measurements ran at, around each phase (microbench_probe)
        wall_s, cpu_s = time.perf_counter(), time.thread_time()
        record: dict[str, Any] = {"device": measure_device(s)}
        record["compute"], during_wall_s = host.measure_compute(s)
        # the core share this rank got (its compute runs on this thread: one intra-op thread)
        record["cpu_share"] = min(1.0, (time.thread_time() - cpu_s) / (time.perf_counter() - wall_s))
        readings.append(probe())
        dist.barrier()
        record["links"] = measure_fitting_links(world)
        readings.append(probe())
        record["host"] = host.measure_host(s, world)
        record["speed_probe"] = profile_probe([*readings, probe()], during_wall_s)
        if rank == 0:
            results.put(record)
        dist.barrier()  # no rank tears gloo down while a peer still has work in flight
    finally:
        dist.destroy_process_group()


def delivered_record(exit_codes: list[int | None], results: Any) -> dict[str, Any]:
    """Rank 0's record from `results` (a queue). Rank 0 hands it over only once every collective of
    every phase is done, so a rank that dies after that (gloo's teardown has aborted on this project's
    CI: "terminate called without an active exception") cost no measurement; without the record the
    run failed, and the error names the ranks and their exit codes."""
    failed = [r for r, code in enumerate(exit_codes) if code != 0]
    if results.empty():
        codes = [exit_codes[r] for r in failed]
        raise RuntimeError(f"microbenchmark rank(s) {failed} failed (exit codes {codes})")
    record: dict[str, Any] = results.get()
    return record


def measure(s: Scenario, world: int = 2, timeout_s: float = 300) -> dict[str, Any]:
    """Every microbenchmark above on `world` gloo processes of this machine, as one JSON-able dict."""
    world = max(2, world)
    ctx = mp.get_context("spawn")
    results = ctx.SimpleQueue()
    with tempfile.TemporaryDirectory() as tmp:
        init_file = str(Path(tmp) / "init")
        procs = [ctx.Process(target=_worker, args=(r, world, init_file, s, results)) for r in range(world)]
        for p in procs:
            p.start()
        for p in procs:
            p.join(timeout=timeout_s)
        for p in procs:
            if p.is_alive():
                p.kill()
        record = delivered_record([p.exitcode for p in procs], results)
    record.update(world=world, cores=cores(), threads=1, cpu=cpu_model(), torch=torch.__version__)
    return record
