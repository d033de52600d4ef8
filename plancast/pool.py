"""Worker processes for the plan search: `sweep --workers N` spreads the search over N cores.

The search itself stays pure (`simulator.sweep.sweep(..., map_fn=...)`); this module only supplies
the map: the standard library's `concurrent.futures.ProcessPoolExecutor`, whose `map` yields results in
the items' order, so the ranking does not depend on how many workers ran it. One worker is the plain
built-in `map` in this process (no pool, no start-up cost).

Everything sent to a worker is a module-level function and plain data, so the pool also works where
processes are spawned rather than forked (macOS, Windows): `start_method="spawn"` runs it that way.

The search runs with Python's cyclic garbage collector paused (`collector_paused`), in this process and
in each worker's items: it builds large long-lived tables (per-layer costs, groups, a heap of bounds)
that every collection re-scans, and makes almost no reference cycles for the collector to find.
"""

from __future__ import annotations

import gc
import multiprocessing
import os
import signal
import sys
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import Executor, ProcessPoolExecutor
from contextlib import contextmanager
from typing import Any

Map = Callable[[Callable[[Any], Any], Sequence[Any]], Iterable[Any]]

TASKS_PER_WORKER = 8
"""Items go to workers in chunks of len(items) / (workers x this): small enough to balance uneven
items (one finalist can take 40x another's time), large enough that pickling stays negligible."""


@contextmanager
def collector_paused() -> Iterator[None]:
    """The cyclic garbage collector off for the block, then as it was. Memory is still freed as the last
    reference goes; only objects in reference cycles wait, and the search makes almost none: a
    DeepSeek-V3 sweep on 2,048 H800 run with the collector off left `gc.collect()` 0 unreachable objects
    (GPT-3 175B on 1,536 A100 too; a prediction on the SimPy engine, which the sweep uses where ranks
    differ, leaves 8), while the collections it skipped, each re-scanning the search's tables, were 9-11%
    of its time in one process (benchmarks/sweep_phases.py shows it with and without: `--collector`)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


class _Paused:
    """`fn` run with the collector paused (`collector_paused`): what a worker runs for each item. Plain
    data with a module-level function inside, so it pickles where the workers are spawned."""

    def __init__(self, fn: Callable[[Any], Any]) -> None:
        self.fn = fn

    def __call__(self, item: Any) -> Any:
        with collector_paused():
            return self.fn(item)


def available_cores() -> int:
    """Cores this process may run on (its CPU affinity, as `os.process_cpu_count` of Python 3.13)."""
    if hasattr(os, "sched_getaffinity"):
        return max(len(os.sched_getaffinity(0)), 1)
    return os.cpu_count() or 1


def _ignore_interrupt() -> None:
    """Worker initializer: Ctrl-C reaches every process of the terminal's group; the parent alone
    handles it (and stops the workers), so no worker prints a traceback of its own. A worker starts with
    SIGINT blocked (`_interrupts_held`) and unblocks it only once it is ignored."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if hasattr(signal, "pthread_sigmask"):
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})


@contextmanager
def _interrupts_held() -> Iterator[None]:
    """SIGINT blocked while the workers start: a Ctrl-C then would reach a worker between its fork and
    its initializer (a KeyboardInterrupt inside the pool's start-up, seen to leave the command hanging
    with its workers alive). The parent gets the held signal as the block ends, as a KeyboardInterrupt
    with every worker running and ignoring it. POSIX only (no pthread_sigmask on Windows)."""
    if not hasattr(signal, "pthread_sigmask"):
        yield
        return
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


def _default_start_method() -> str:
    # fork starts a worker in milliseconds (spawn re-imports plancast in each, ~0.5 s); it is safe here
    # because the workers are started before any thread exists (`_start_workers`). Linux only: macOS
    # defaults to spawn since fork there breaks system libraries (CPython issue 33725).
    return "fork" if sys.platform == "linux" else "spawn"


def _start_workers(executor: ProcessPoolExecutor) -> None:
    """Start the workers now, while this process has one thread: with fork, a worker copies only the
    forking thread, and a lock held by another thread (a progress bar's refresh) would stay locked."""
    executor.submit(os.getpid).result()


MANAGER_JOIN_S = 10.0
"""How long a stopped search waits for the executor's manager thread (it ends once its workers do)."""


def _stop(executor: Executor) -> None:
    """Cancel what has not started and end the workers now (a Ctrl-C must not wait for a long item)."""
    terminate = getattr(executor, "terminate_workers", None)  # Python 3.14+: shuts down and terminates
    # Read the manager thread and the workers before `shutdown`: CPython 3.11-3.13's shutdown(wait=False)
    # drops both references (`_executor_manager_thread = None`, `_processes = None`), so read after it
    # they were always None, the workers were never terminated here and the join below never ran.
    manager = getattr(executor, "_executor_manager_thread", None)
    processes = list((getattr(executor, "_processes", None) or {}).values())
    if terminate is not None:
        terminate()
    else:
        executor.shutdown(wait=False, cancel_futures=True)
        for process in processes:
            process.terminate()
    # Let the executor's manager thread see its workers gone and close its wake-up pipe before the
    # interpreter exits: CPython 3.11's exit hook (concurrent/futures/process.py `_python_exit`) checks
    # the pipe's `_closed` flag and writes to it without a lock, so a thread closing it at that moment
    # printed "Exception ignored ... OSError: Bad file descriptor" after a Ctrl-C (seen in a CI run).
    if manager is not None:
        manager.join(timeout=MANAGER_JOIN_S)


@contextmanager
def process_map(workers: int, start_method: str | None = None, pause_collector: bool = True) -> Iterator[Map]:
    """A `map` over `workers` processes (the built-in `map` for one); workers end when the block does,
    at once on an error or Ctrl-C. A worker's exception reaches the caller with its own type. Each item
    runs with the collector paused (`collector_paused`) unless `pause_collector` is False; the built-in
    `map` runs in the caller's process, which pauses it itself (`worker_pool` does)."""
    if workers <= 1:
        yield map
        return
    context = multiprocessing.get_context(start_method or _default_start_method())
    executor = ProcessPoolExecutor(workers, mp_context=context, initializer=_ignore_interrupt)

    def pool_map(fn: Callable[[Any], Any], items: Sequence[Any]) -> Iterable[Any]:
        chunk = max(len(items) // (workers * TASKS_PER_WORKER), 1)
        return executor.map(_Paused(fn) if pause_collector else fn, items, chunksize=chunk)

    try:
        with _interrupts_held():
            _start_workers(executor)
        yield pool_map
    except BaseException:
        _stop(executor)
        raise
    executor.shutdown(wait=True)


EXIT_INTERRUPTED = 130  # 128 + SIGINT, as a shell reports a command stopped by Ctrl-C
EXIT_WORKER_DIED = 1


@contextmanager
def worker_pool(workers: int | None) -> Iterator[Map]:
    """`process_map` for a verb (None: every available core), this process's collector paused for the
    block (`collector_paused`): Ctrl-C, or a worker killed from outside (out of memory), ends the
    command with one line on stderr and an exit code (130, 1) instead of a traceback or a hang."""
    from concurrent.futures.process import BrokenProcessPool

    import typer

    from plancast.app import err

    workers = workers or available_cores()
    try:
        with collector_paused(), process_map(workers) as map_fn:
            yield map_fn
    except KeyboardInterrupt:
        err.print("interrupted: the search was stopped (Ctrl-C) and its worker processes ended", markup=False)
        raise typer.Exit(EXIT_INTERRUPTED) from None
    except BrokenProcessPool:
        err.print(
            f"error: a worker process of the search died (killed from outside, or out of memory); "
            f"nothing was ranked. Rerun with fewer --workers (now {workers}), or --workers 1",
            markup=False,
        )
        raise typer.Exit(EXIT_WORKER_DIED) from None
