"""Per-rank entry of a measured run, started by torchrun (``runtime.launch`` builds the command).

    python -m torch.distributed.run --standalone --nproc-per-node 2 \\
        -m plancast.runtime.worker --scenario S.toml --out RUN --steps K

Each rank reads ``RANK``/``WORLD_SIZE``/``LOCAL_RANK``/``GROUP_RANK`` from torchrun's environment,
joins the default process group (NCCL when CUDA is available, else gloo with one CPU thread per
rank), builds its ``Trainer`` and runs K steps. After every step it appends the step's events to its
rank stream (``measured/rank-NNNNN.arrows``, traces/rank_stream.py), so a killed run keeps its finished
steps, and at the end writes them as ``measured/rank-NNNNN.parquet``. Local rank 0
of every node samples that node's GPUs (``runtime.telemetry``). Rank 0 writes ``measured/env.json``
once every rank has joined, and ``measured/summary.json`` plus ``measured/telemetry.parquet`` at
the end, from what every rank sends it (``gather_object``; no shared file system is needed for them).
Each rank's output goes to ``logs/rank-NNNNN.log``; a rank that raises also writes when and what
(``logs/rank-NNNNN.error.json``), so the launcher can name the rank that failed first.

Test hook: with ``PLANCAST_FAULT_RANK=r PLANCAST_FAULT_STEP=k`` in the environment, rank ``r`` kills
itself with SIGKILL at the start of step ``k`` (tests of the failure path use it).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import platform
import signal
import statistics
import sys
import time
import traceback
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

import pandas as pd
import torch
import torch.distributed as dist
from torch.distributed.elastic.multiprocessing.errors import record

from plancast.runtime.checkpoint import Checkpointer, Progress
from plancast.runtime.gc_schedule import StepGC
from plancast.runtime.instrument import CpuCapture, cpu_capture_from
from plancast.runtime.microbench_probe import probe, workload
from plancast.runtime.placement import rank_placement
from plancast.runtime.schedstat import ThreadTimes, core_wait_s, this_thread_times
from plancast.runtime.step_probe import Reading, StepProbe, between_summary
from plancast.runtime.telemetry import TelemetrySampler, empty_table, make_sampler, write_telemetry
from plancast.runtime.trainer import Trainer
from plancast.simulator.loader import load_scenario
from plancast.traces.rank_stream import RankEventWriter
from plancast.traces.store import RunDir, write_json

WARMUP_STEPS = 1
"""Steps left out of the median step time (step 0 pays for allocator growth and lazy init)."""
GiB = 1024**3
MEMORY_PARTS = ("parameters", "gradients", "optimizer", "activations")


@dataclass(frozen=True)
class RankEnv:
    """Where this process sits in the job, as torchrun describes it."""

    rank: int
    world_size: int
    local_rank: int
    node: int


@dataclass
class RankResult:
    """What one rank sends rank 0 at the end of the run."""

    rank: int
    step_times_s: list[float] = field(default_factory=list)
    losses: list[float | None] = field(default_factory=list)
    memory_bytes: dict[str, int] = field(default_factory=dict)
    memory_timeline: list[list[Any]] = field(default_factory=list)
    """The first step's memory after each compute span (Trainer.memory_timeline)."""
    telemetry: pd.DataFrame | None = None
    core_wait_s: list[float] | None = field(default_factory=list)
    """Per step, how long this rank's threads waited for a CPU core (schedstat.py); None where the
    kernel does not say."""
    compute_thread_s: list[ThreadTimes] | None = field(default_factory=list)
    """Per step, the compute thread's own CPU time and run-queue wait (schedstat.py): its core share
    is cpu / (cpu + wait); None where the kernel does not say."""
    speed_probes: tuple[dict[str, Any] | None, dict[str, Any] | None] = (None, None)
    """The machine-speed probe right before the first step and right after the last (microbench_probe)."""
    speed_readings: list[Reading] = field(default_factory=list)  # between steps (step_probe.py)


def rank_env(environ: Mapping[str, str]) -> RankEnv:
    """Read torchrun's variables; a clear error when the module is started without torchrun."""
    missing = [k for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK") if k not in environ]
    if missing:
        raise SystemExit(
            f"plancast.runtime.worker: {', '.join(missing)} not set; start it under torchrun "
            "(python -m plancast.runtime.launch SCENARIO --out RUN, or plancast run)"
        )
    return RankEnv(
        rank=int(environ["RANK"]),
        world_size=int(environ["WORLD_SIZE"]),
        local_rank=int(environ["LOCAL_RANK"]),
        node=int(environ.get("GROUP_RANK", "0")),
    )


def fault_step(environ: Mapping[str, str], rank: int) -> int | None:
    """The step at which this rank must kill itself (test hook), or None."""
    fault_rank, step = environ.get("PLANCAST_FAULT_RANK"), environ.get("PLANCAST_FAULT_STEP")
    if fault_rank is None or step is None or int(fault_rank) != rank:
        return None
    return int(step)


def select_device(local_rank: int) -> tuple[torch.device, str]:
    """This rank's device and backend: ``cuda:LOCAL_RANK`` with NCCL, else CPU with gloo."""
    if torch.cuda.is_available():
        torch.cuda.set_device(local_rank)
        return torch.device("cuda", local_rank), "nccl"
    torch.set_num_threads(1)  # ranks share the CPU cores; one thread each avoids oversubscription
    return torch.device("cpu"), "gloo"


def describe_device(device: torch.device) -> str:
    """A device in words, e.g. ``cuda:0 (NVIDIA H100 80GB HBM3)`` or ``cpu (x86_64)``."""
    if device.type == "cuda":
        return f"{device} ({torch.cuda.get_device_name(device)})"
    return f"cpu ({platform.machine()})"


def environment(backend: str, world_size: int, ranks: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The content of ``measured/env.json``: versions, backend and one entry per rank."""
    nccl = _nccl_version() if backend == "nccl" else None
    return {
        "world_size": world_size,
        "backend": backend,
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "nccl": nccl,
        "python": platform.python_version(),
        "hostnames": [r["hostname"] for r in ranks],
        "devices": [r["device"] for r in ranks],
        "ranks": list(ranks),
        "speed_probe_workload": workload(torch.device("cuda" if backend == "nccl" else "cpu")),
    }


def _nccl_version() -> str:
    """NCCL's version as ``2.21.5`` (torch returns a tuple; older releases an int like 22105)."""
    version = torch.cuda.nccl.version()
    return ".".join(map(str, version)) if isinstance(version, tuple) else str(version)


def summarize(results: Sequence[RankResult], steps: int) -> dict[str, Any]:
    """The content of ``measured/summary.json`` from every rank's result (pure).

    A step takes as long as its slowest rank; the median runs over the steps after warm-up (over
    all steps when there is nothing else). Memory is the peak of each rank; the top-level
    ``peak_memory_gib``/``memory_gib`` are those of the rank with the largest peak, as in the
    simulator's summary. Where Linux reports it, the time the ranks' threads waited for a CPU core
    (schedstat.py) is summarized beside the step time.
    """
    per_step = [max(r.step_times_s[i] for r in results) for i in range(steps)]
    scored = per_step[WARMUP_STEPS:] or per_step
    memory = {r.rank: _memory_gib(r.memory_bytes) for r in results}
    peak_rank = max(memory, key=lambda r: memory[r]["peak"])
    return {
        "status": "ok",
        "world_size": len(results),
        "steps": steps,
        "warmup_steps": min(WARMUP_STEPS, steps - 1),
        "step_time_s": statistics.median(scored),
        "step_times_s": per_step,
        "losses": [_mean_loss(results, i) for i in range(steps)],
        "peak_memory_gib": memory[peak_rank]["peak"],
        "peak_memory_rank": peak_rank,
        "memory_gib": {k: memory[peak_rank][k] for k in MEMORY_PARTS},
        "rank_memory_gib": {str(r): m for r, m in sorted(memory.items())},
        **_reserved(results),
        "rank_memory_timeline": {
            str(r.rank): [[i, *point[:4], point[4] / GiB] for i, point in enumerate(r.memory_timeline)]
            for r in sorted(results, key=lambda r: r.rank)
            if r.memory_timeline
        },
        **_core_waits(results, steps),
        **_core_shares(results, steps),
        **between_summary(results, steps),  # and the pair around them
    }


def _core_waits(results: Sequence[RankResult], steps: int) -> dict[str, Any]:
    """``core_wait_s``: the median over the scored steps of the ranks' mean wait for a CPU core in the
    step; ``rank_core_wait_s``: each rank's median. Nothing where a rank could not read it or the run
    was resumed (its earlier steps' waits are not kept)."""
    waits = [r.core_wait_s for r in results]
    if not all(w is not None and len(w) == steps for w in waits):
        return {}
    per_rank = {r.rank: r.core_wait_s[WARMUP_STEPS:] or r.core_wait_s for r in results if r.core_wait_s}
    mean_per_step = [statistics.fmean(step) for step in zip(*per_rank.values(), strict=True)]
    return {
        "core_wait_s": statistics.median(mean_per_step),
        "rank_core_wait_s": {str(r): statistics.median(w) for r, w in sorted(per_rank.items())},
    }


def _reserved(results: Sequence[RankResult]) -> dict[str, float]:
    """``peak_reserved_gib``: the caching allocator's highest reserve over the ranks (GPU runs only)."""
    reserved = [r.memory_bytes["reserved_bytes"] for r in results if "reserved_bytes" in r.memory_bytes]
    return {"peak_reserved_gib": max(reserved) / GiB} if reserved else {}


def _core_shares(results: Sequence[RankResult], steps: int) -> dict[str, Any]:
    """``core_share``: the smallest over the ranks (the slowest sets the step) of the share of its ready
    time a rank's compute thread ran, CPU / (CPU + run-queue wait) summed over the scored steps;
    ``rank_core_share`` each rank's. What traces/contention.py applies to the prediction. Nothing
    where a rank could not read it, or the run was resumed."""
    times = [r.compute_thread_s for r in results]
    if not all(t is not None and len(t) == steps for t in times):
        return {}
    shares: dict[str, float] = {}
    for r in results:
        scored = (r.compute_thread_s or [])[WARMUP_STEPS:] or r.compute_thread_s or []
        cpu_s, wait_s = sum(t.cpu_s for t in scored), sum(t.wait_s for t in scored)
        if cpu_s + wait_s > 0:
            shares[str(r.rank)] = cpu_s / (cpu_s + wait_s)
    if not shares:
        return {}
    return {
        "core_share": min(shares.values()),
        "rank_core_share": dict(sorted(shares.items())),
        "core_share_own": own_core_share(len(results)),
    }


def own_core_share(ranks: int) -> float:
    """The share of its ready time each of `ranks` threads runs on this process's cores with nothing
    else on the machine: min(1, cores / ranks), CFS's fair share (simulator/engine/cores.py cites it)."""
    return min(1.0, len(os.sched_getaffinity(0)) / max(ranks, 1))


def _memory_gib(memory_bytes: Mapping[str, int]) -> dict[str, float]:
    out = {k: memory_bytes.get(k, 0) / GiB for k in MEMORY_PARTS}
    out["peak"] = memory_bytes.get("peak_bytes", 0) / GiB
    return out


def _mean_loss(results: Sequence[RankResult], step: int) -> float | None:
    """Mean of the step's loss over the ranks that report one (last-stage ranks)."""
    losses = [loss for r in results if (loss := r.losses[step]) is not None]
    return statistics.fmean(losses) if losses else None


def run_steps(
    trainer: Trainer,
    writer: RankEventWriter,
    steps: int,
    env: RankEnv,
    fault_at: int | None,
    checkpointer: Checkpointer | None = None,
    resume_step: int | None = None,
) -> RankResult:
    """Run ``steps`` steps, appending each one's events to the rank stream; rank 0 reports progress.
    With a checkpointer: save every K steps, and with ``resume_step`` start after that checkpoint."""
    result = RankResult(env.rank)
    done = Progress()
    if checkpointer is not None and resume_step is not None:
        done = checkpointer.restore(writer, resume_step)
    result.losses, result.step_times_s = done.losses, done.step_times_s
    before = probe(trainer.device)  # ~0.1 s, outside every measured step (microbench_probe.py)
    between = StepProbe(trainer.device, steps, result.speed_readings, done.steps_done)  # step_probe.py
    waited = core_wait_s()  # read once a step (~0.1 ms with a dozen threads), at its end
    computed = this_thread_times()
    with StepGC() as collector:  # no collector pass stalls one rank mid-step (gc_schedule.py)
        for step in range(done.steps_done, steps):
            if step == fault_at:
                os.kill(os.getpid(), signal.SIGKILL)
            start = between.before_step()  # time.perf_counter(), closing the reading before this step
            out = trainer.step(step)
            # up to the end of the device work (the recorder synchronizes), not the profiler's read-out
            # after it, which TP/FSDP2 plans need to attribute library collectives (runtime/instrument/)
            result.step_times_s.append((out.work_end_s or time.perf_counter()) - start)
            waited = note_core_wait(result, waited)
            computed = note_compute_thread(result, computed)
            result.losses.append(out.loss)
            writer.append_step(out.events)
            if env.rank == 0:
                say(f"step {step + 1}/{steps} {result.step_times_s[-1]:.3f} s")
            if checkpointer is not None:
                checkpointer.maybe_save(step + 1, Progress(step + 1, result.losses, result.step_times_s))
            collector.between_steps(step + 1)
            if between.after_step(step, start + result.step_times_s[-1]):  # the reading is no step's
                waited, computed = core_wait_s(), this_thread_times()
    result.memory_bytes = trainer.memory()
    result.memory_timeline = trainer.memory_timeline
    result.speed_probes = (before, probe(trainer.device))  # after the memory is read: it is the run's
    return result


def note_core_wait(result: RankResult, before_s: float | None) -> float | None:
    """Append the core wait since `before_s` (the previous step's end: the step and the work between
    steps), or give up on it for the run where unknown; returns the reading now."""
    now_s = core_wait_s()
    if result.core_wait_s is None or before_s is None or now_s is None:
        result.core_wait_s = None
    else:
        result.core_wait_s.append(now_s - before_s)
    return now_s


def note_compute_thread(result: RankResult, before: ThreadTimes | None) -> ThreadTimes | None:
    """Append the compute thread's CPU time and wait since `before`, or give up on them for the run
    where unknown; returns the reading now."""
    now = this_thread_times()
    if result.compute_thread_s is None or before is None or now is None:
        result.compute_thread_s = None
    else:
        result.compute_thread_s.append(ThreadTimes(now.cpu_s - before.cpu_s, now.wait_s - before.wait_s))
    return now


def gather_to_rank0(obj: Any, env: RankEnv) -> list[Any]:
    """Every rank's ``obj`` on rank 0 (an empty list on the others)."""
    out: list[Any] = [None] * env.world_size if env.rank == 0 else []
    dist.gather_object(obj, out if env.rank == 0 else None, dst=0)
    return out


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m plancast.runtime.worker", description=__doc__.splitlines()[0])
    p.add_argument("--scenario", type=Path, required=True, help="scenario TOML file")
    p.add_argument("--out", type=Path, required=True, help="run directory")
    p.add_argument("--steps", type=int, default=None, help="steps to run (default: training.steps)")
    p.add_argument(
        "--timeout-s", type=float, default=600.0, help="process-group timeout for joining and collectives"
    )
    p.add_argument("--telemetry-interval-s", type=float, default=0.5, help="GPU sampling period")
    p.add_argument("--checkpoint-every", type=int, default=None, help="checkpoint every K steps")
    p.add_argument(
        "--resume-step", type=int, default=None, help="resume from the checkpoint after this many steps"
    )
    return p.parse_args(argv)


def log_to_file(run: RunDir, rank: int, append: bool = False) -> None:
    """Send this process's stdout and stderr (tracebacks included) to ``logs/rank-NNNNN.log``
    (appended to when resuming); a previous attempt's error record is removed.

    What the user should see on the console goes through ``say`` to the original stderr."""
    global _console  # noqa: PLW0603 - one per process, set once before anything prints
    run.logs_dir.mkdir(parents=True, exist_ok=True)
    _console = os.fdopen(os.dup(2), "w", buffering=1)
    run.rank_error(rank).unlink(missing_ok=True)
    mode = os.O_APPEND if append else os.O_TRUNC
    log_fd = os.open(run.rank_log(rank), os.O_WRONLY | os.O_CREAT | mode, 0o644)
    sys.stdout.flush()
    sys.stderr.flush()
    os.dup2(log_fd, 1)
    os.dup2(log_fd, 2)
    os.close(log_fd)


_console = sys.stderr


def say(message: str) -> None:
    """A ``plancast:`` line on the console (the launcher shows these) and in this rank's log."""
    line = f"plancast: {message}"
    print(line, file=sys.stderr, flush=True)
    if _console is not sys.stderr:
        print(line, file=_console, flush=True)


def record_error(run: RunDir, rank: int, error: BaseException) -> None:
    """``logs/rank-NNNNN.error.json``: when this rank raised and its exception's last line, so the
    launcher can name the rank that failed first (``runtime.failures``)."""
    text = "".join(traceback.format_exception_only(type(error), error)).strip().splitlines()
    write_json(run.rank_error(rank), {"time_s": time.time(), "error": text[-1] if text else repr(error)})


@record  # an exception's traceback reaches torchrun's failure summary
def main(argv: Sequence[str] | None = None) -> int:
    """Run this rank's share of the measured run; 0 on success."""
    args = parse_args(argv)
    env = rank_env(os.environ)
    try:  # read once, here, and passed down (runtime/instrument/capture.py)
        cpu_capture = cpu_capture_from(os.environ)
    except ValueError as err:
        raise SystemExit(f"plancast.runtime.worker: {err}") from None
    run = RunDir(args.out)
    log_to_file(run, env.rank, append=args.resume_step is not None)
    try:
        return run_rank(args, env, run, cpu_capture)
    except BaseException as error:
        if not isinstance(error, SystemExit | KeyboardInterrupt):
            record_error(run, env.rank, error)
        raise


def run_rank(args: argparse.Namespace, env: RankEnv, run: RunDir, cpu_capture: CpuCapture) -> int:
    """Join the job, run the steps, write this rank's results; 0 on success."""
    scenario = load_scenario(args.scenario).scenario
    steps = args.steps or scenario.training.steps
    device, backend = select_device(env.local_rank)
    dist.init_process_group(backend, timeout=timedelta(seconds=args.timeout_s))
    try:
        sampler: TelemetrySampler | None = None
        if env.local_rank == 0 and device.type == "cuda":  # CPU ranks: no GPUs to sample, nothing to say
            sampler = make_sampler(env.node, args.telemetry_interval_s)
            sampler.start()
        info = rank_placement(env.rank, env.node, env.local_rank)
        ranks = gather_to_rank0({**info, "device": describe_device(device)}, env)
        if env.rank == 0:
            write_json(run.env_json, environment(backend, env.world_size, ranks))
        trainer = Trainer(
            scenario, env.rank, env.world_size, device, instrument=True, cpu_capture=cpu_capture
        )
        writer = RankEventWriter(run, env.rank)
        every = args.checkpoint_every or scenario.training.checkpoint_every_steps
        ckpt = Checkpointer(trainer, run, env.rank, every) if every or args.resume_step is not None else None
        try:
            result = run_steps(
                trainer, writer, steps, env, fault_step(os.environ, env.rank), ckpt, args.resume_step
            )
        except BaseException:  # the finished steps become the rank's parquet file all the same; the
            with contextlib.suppress(Exception):  # step's error is the one to report
                writer.close()
            raise
        writer.close()
        result.telemetry = sampler.stop() if sampler is not None else None
        results: list[RankResult] = gather_to_rank0(result, env)
        if env.rank == 0:
            write_results(run, results, steps)
        dist.barrier()
    finally:
        dist.destroy_process_group()
    return 0


def write_results(run: RunDir, results: Sequence[RankResult], steps: int) -> None:
    """Rank 0: ``measured/telemetry.parquet`` (every node's samples) and ``measured/summary.json``."""
    tables = [r.telemetry for r in results if r.telemetry is not None and len(r.telemetry)]
    write_telemetry(run.telemetry, pd.concat(tables, ignore_index=True) if tables else empty_table())
    write_json(run.measured_summary, summarize(results, steps))


if __name__ == "__main__":
    sys.exit(main())
