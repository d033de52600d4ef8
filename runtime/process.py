"""Run the launcher as a child so that nothing it starts outlives the run, however the run ends.

torchrun runs in its own session with its output piped here (kept in ``logs/torchrun.log``; only
``plancast:`` lines are shown). A timeout, Ctrl-C, or SIGTERM/SIGHUP (turned into ``Stopped`` by
``stop_on_signals``) stops torchrun, which stops its workers; whatever is left is killed. If the
launcher itself is killed outright, the kernel sends torchrun SIGTERM (``PR_SET_PDEATHSIG``).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import IO

import plancast

IMPORT_ROOT = Path(plancast.__file__).resolve().parent.parent
"""The folder holding the ``plancast`` package (the source tree or site-packages): the workers' PYTHONPATH."""
TERMINATE_GRACE_S = 10.0
"""After a timeout or a stop, how long torchrun gets to stop its workers before everything is killed."""
TIMEOUT_EXIT_CODE = 124
"""Exit code of a run stopped at ``timeout_s`` (as coreutils ``timeout``)."""
PR_SET_PDEATHSIG = 1
"""prctl option: a signal the kernel sends a child when its parent dies (linux/prctl.h)."""


class Stopped(BaseException):
    """SIGTERM/SIGHUP reached the launcher: stop the job as Ctrl-C (KeyboardInterrupt) would."""


def _raise_stopped(signum: int, frame: object) -> None:
    raise Stopped(signal.Signals(signum).name)


@contextlib.contextmanager
def stop_on_signals() -> Iterator[None]:
    """SIGTERM and SIGHUP raise ``Stopped`` in the main thread, so the job is stopped and recorded."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {sig: signal.signal(sig, _raise_stopped) for sig in (signal.SIGTERM, signal.SIGHUP)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _forward(stream: IO[str], lines: list[str], log: IO[str]) -> None:
    """Keep torchrun's output (logs/torchrun.log and memory); show only plancast's own lines."""
    for line in stream:
        lines.append(line)
        log.write(line)
        log.flush()
        if line.startswith("plancast:"):
            sys.stderr.write(line)
            sys.stderr.flush()


def _children(pid: int) -> list[int]:
    """Direct children of ``pid`` (Linux /proc; empty elsewhere): torchrun's workers."""
    try:
        text = Path(f"/proc/{pid}/task/{pid}/children").read_text()
    except OSError:
        return []
    return [int(p) for p in text.split()]


def _kill_job(proc: subprocess.Popen[str]) -> None:
    """Stop torchrun (SIGTERM lets it stop its workers), then SIGKILL what is left.

    torchrun starts each worker in its own session, so the workers' process groups are killed too.
    """
    workers = _children(proc.pid)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(TERMINATE_GRACE_S)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    for pid in workers:
        with contextlib.suppress(ProcessLookupError):  # already gone with torchrun
            os.killpg(pid, signal.SIGKILL)


def _die_with_parent() -> None:
    """In the child before exec: SIGTERM when the launcher dies, even by SIGKILL (Linux prctl)."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


def run_streaming(cmd: Sequence[str], timeout_s: float, log_path: Path) -> tuple[int, str, bool]:
    """Run ``cmd`` in its own process group, logging its output; ``(exit code, output, timed out)``.

    However this ends (timeout, Ctrl-C, SIGTERM via ``stop_on_signals``), the job is stopped first."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    # torchrun's own default (torch/distributed/run.py sets 1 and prints a banner when it is unset);
    # set here, the value is the same and the banner is gone.
    env.setdefault("OMP_NUM_THREADS", "1")
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(IMPORT_ROOT), env.get("PYTHONPATH")) if p)
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with log_path.open("w", encoding="utf-8") as log:
        proc = subprocess.Popen(
            list(cmd),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            errors="replace",
            start_new_session=True,
            preexec_fn=_die_with_parent if sys.platform == "linux" else None,  # noqa: PLW1509
            env=env,
        )
        assert proc.stdout is not None
        lines: list[str] = []
        reader = threading.Thread(target=_forward, args=(proc.stdout, lines, log), daemon=True)
        reader.start()
        timed_out = False
        try:
            proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            timed_out = True
            _kill_job(proc)
        except BaseException:  # Ctrl-C or SIGTERM while waiting: never leave the job running
            _kill_job(proc)
            reader.join(TERMINATE_GRACE_S)
            raise
        reader.join(TERMINATE_GRACE_S)
    return (TIMEOUT_EXIT_CODE if timed_out else proc.returncode), "".join(lines), timed_out
