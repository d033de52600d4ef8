"""`plancast sweep --workers N`: the same ranking and numbers for any N; Ctrl-C and a dead worker end
the command with a message and an exit code, never a hang or a traceback."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from plancast.pool import _interrupts_held, process_map
from plancast.simulator.loader import load_scenario
from plancast.simulator.sweep import sweep
from tests.cli_runner import REPO, cli_subprocess

TINY = str(REPO / "examples" / "tiny-local-cpu.toml")
GPT3 = str(REPO / "examples" / "gpt3-175b-dgx-a100.toml")


def _sweep_json(workers: int) -> dict[str, object]:
    args = ("sweep", TINY, "--gpus", "4", "--top", "8", "--json")
    done = cli_subprocess(*args, "--workers", str(workers))
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    data.pop("seconds")  # wall time, the only thing that may differ
    return data


def test_one_and_two_workers_rank_the_same_plans_with_the_same_numbers() -> None:
    one, two = _sweep_json(1), _sweep_json(2)
    assert one["plans_enumerated"] > 0 and len(one["plans"]) == 8  # type: ignore[arg-type]
    assert one == two


def test_workers_must_be_positive() -> None:
    done = cli_subprocess("sweep", TINY, "--gpus", "4", "--workers", "0")
    assert done.returncode == 2
    assert "--workers" in done.stderr and "Traceback" not in done.stderr


def _raise_on_three(n: int) -> int:
    if n == 3:
        raise ValueError("three is not allowed")
    return n * n


def test_a_spawned_pool_gives_what_map_gives() -> None:
    """Spawn-safe: what goes to a worker is importable by a fresh interpreter (macOS, Windows)."""
    base = load_scenario(TINY).scenario
    serial = sweep(base, 4, finalists=4)
    with process_map(2, start_method="spawn") as map_fn:
        spread = sweep(base, 4, finalists=4, map_fn=map_fn)
    assert [r.row() for r in spread.finalists] == [r.row() for r in serial.finalists]
    assert [r.summary for r in spread.finalists] == [r.summary for r in serial.finalists]
    assert (spread.enumerated, spread.fits, spread.pruned_subtrees) == (
        serial.enumerated,
        serial.fits,
        serial.pruned_subtrees,
    )


def test_an_error_in_a_worker_reaches_the_caller_with_its_type() -> None:
    with pytest.raises(ValueError, match="three is not allowed"), process_map(2) as map_fn:
        list(map_fn(_raise_on_three, list(range(6))))


def _children(pid: int) -> list[int]:
    path = Path(f"/proc/{pid}/task/{pid}/children")
    return [int(p) for p in path.read_text().split()] if path.exists() else []


def _start_gpt3_sweep() -> tuple[subprocess.Popen[str], list[int]]:
    """A long sweep with two workers (its own process group, as a terminal runs it), once they exist."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "plancast", "sweep", GPT3, "--gpus", "1536", "--json", "--workers", "2"],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    deadline = time.monotonic() + 120
    while len(workers := _children(proc.pid)) < 2:
        assert proc.poll() is None and time.monotonic() < deadline, "the sweep never started its workers"
        time.sleep(0.05)
    return proc, workers


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return Path(f"/proc/{pid}/stat").read_text().split()[2] == "Z"  # exited, not yet reaped


@pytest.mark.skipif(not Path("/proc/self/task").exists(), reason="needs Linux /proc to find the workers")
def test_ctrl_c_stops_the_sweep_and_its_workers() -> None:
    proc, workers = _start_gpt3_sweep()
    os.killpg(proc.pid, signal.SIGINT)  # what Ctrl-C in a terminal does: the whole foreground group
    _, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 130, stderr
    assert "interrupted" in stderr and "Traceback" not in stderr
    assert all(_gone(w) for w in workers)


@pytest.mark.skipif(not Path("/proc/self/task").exists(), reason="needs Linux /proc to find the workers")
def test_a_killed_worker_ends_the_sweep_with_a_message() -> None:
    proc, workers = _start_gpt3_sweep()
    os.kill(workers[0], signal.SIGKILL)  # as the out-of-memory killer would
    _, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 1, stderr
    assert "worker process of the search died" in stderr and "--workers" in stderr
    assert "Traceback" not in stderr
    assert all(_gone(w) for w in workers)


def _sigint_state(_: int) -> tuple[bool, bool]:
    blocked = signal.SIGINT in signal.pthread_sigmask(signal.SIG_BLOCK, set())
    return signal.getsignal(signal.SIGINT) == signal.SIG_IGN, blocked


@pytest.mark.skipif(not hasattr(signal, "pthread_sigmask"), reason="POSIX signal masks")
def test_a_ctrl_c_during_the_workers_start_reaches_the_parent_once_they_ignore_it() -> None:
    """The workers start with SIGINT held (a Ctrl-C between a worker's fork and its initializer left the
    sweep hanging, about 1 in 100 immediate Ctrl-Cs under load); the parent gets it as the hold ends."""
    with process_map(2) as map_fn:
        assert set(map_fn(_sigint_state, [0, 1, 2, 3])) == {(True, False)}  # ignored, not blocked
    assert signal.SIGINT not in signal.pthread_sigmask(signal.SIG_BLOCK, set())
    reached = False
    # sent to this thread: a process-wide signal may land on another thread pytest runs, unheld
    with pytest.raises(KeyboardInterrupt), _interrupts_held():
        signal.pthread_kill(threading.get_ident(), signal.SIGINT)
        time.sleep(0.05)  # held: nothing is raised here
        reached = True
    assert reached


def test_a_stopped_pool_ends_a_busy_worker_at_once_and_its_manager_thread() -> None:
    """`_stop` must read the workers and the manager thread before `shutdown(wait=False)` drops them
    (CPython 3.11-3.13): a worker busy on a long item is terminated, not left to finish it, and the
    manager thread has ended before the interpreter's exit hook touches its wake-up pipe."""
    from concurrent.futures import ProcessPoolExecutor

    from plancast.pool import _stop

    executor = ProcessPoolExecutor(1)
    executor.submit(os.getpid).result()  # the worker is up
    (worker,) = list(executor._processes.values())  # type: ignore[union-attr]
    manager = executor._executor_manager_thread
    executor.submit(time.sleep, 60)
    time.sleep(0.5)  # the worker has taken the 60 s item
    started = time.monotonic()
    _stop(executor)
    worker.join(timeout=10)
    assert not worker.is_alive() and time.monotonic() - started < 10
    assert manager is not None and not manager.is_alive()
