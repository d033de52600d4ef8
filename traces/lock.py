"""One writer per run directory: an exclusive lock on ``RUN/.plancast.lock``, and the write guard
(``claim``) every verb that writes into a run directory goes through.

The lock is ``fcntl.flock`` on a file inside the run directory, so the kernel releases it when its
holder exits however it exits (a killed writer never leaves a stale lock behind); the file keeps the
holder's pid, host and command so a refused writer can say who holds it. The file name starts with a
dot, so readers of the run ignore it.
"""

from __future__ import annotations

import fcntl
import json
import os
import socket
import stat
import sys
import time
from pathlib import Path
from types import TracebackType

LOCK_NAME = ".plancast.lock"


class RunLockedError(ValueError):
    """Another process is writing the run directory; the message names it and what to do."""


def lock_path(run_path: Path, name: str = LOCK_NAME) -> Path:
    """Where the lock of a run directory lives."""
    return Path(run_path) / name


def _describe_holder(path: Path) -> str:
    try:
        with path.open("rb") as handle:  # the holder's own small JSON (a few hundred bytes)
            holder = json.loads(handle.read(64 * 1024))
        return f"pid {holder['pid']} on {holder['host']} ({holder['command']}, since {holder['since']})"
    except (OSError, ValueError, KeyError, TypeError):
        return "another process"


class RunLock:
    """``with RunLock(RUN, "plancast run"):`` holds the run directory's lock for the block.

    A second writer gets ``RunLockedError`` at once (no waiting). ``name`` lets the nodes of one
    multi-node job that share a file system take one lock each.
    """

    def __init__(self, run_path: Path, command: str, name: str = LOCK_NAME) -> None:
        self.path = lock_path(run_path, name)
        self.command = command
        self._fd: int | None = None

    def acquire(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        try:  # never through a link: a run folder from elsewhere could point it at a file of yours
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK, 0o644)
        except OSError as err:
            raise RunLockedError(
                f"{self.path} cannot be used as the run's lock ({err.strerror or err}); it should be a "
                "plain file plancast creates: remove it if nothing is writing the run"
            ) from None
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            os.close(fd)
            why = "is not a regular file; remove it if nothing is writing the run"
            raise RunLockedError(f"{self.path} {why}")
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise RunLockedError(
                f"{self.path.parent} is being written by {_describe_holder(self.path)}; wait for it to "
                "finish or stop it, or pick another run directory"
            ) from None
        holder = {
            "pid": os.getpid(),
            "host": socket.gethostname(),
            "command": self.command,
            "since": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "argv": sys.argv,
        }
        os.ftruncate(fd, 0)
        os.write(fd, json.dumps(holder).encode())
        self._fd = fd

    def release(self) -> None:
        if self._fd is not None:
            os.ftruncate(self._fd, 0)
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = None

    def __enter__(self) -> RunLock:
        if self._fd is None:  # `with claim(...):` enters a lock claim() already holds
            self.acquire()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, value: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.release()


class MeasuredRunError(ValueError):
    """A verb would replace the measured data of a run without --force; the message names the run."""


def measured_files(run_path: Path) -> list[str]:
    """The measured data in a run directory (rank files, summary, env), as paths relative to it."""
    measured = Path(run_path) / "measured"
    if not measured.is_dir():
        return []
    names = sorted(p.name for p in measured.iterdir() if not p.name.startswith("."))
    return [f"measured/{name}" for name in names]


def claim(run_path: Path, command: str, replaces: str | None = None, force: bool = False) -> RunLock:
    """The held lock of ``run_path`` for ``command``, the one write guard of every verb that writes
    into a run directory. RunLockedError when another process writes it; MeasuredRunError when the
    verb would replace ``replaces`` (say what, e.g. "measured/") of a run holding measured data and
    ``force`` is not given. The caller releases the lock (``with claim(...):``)."""
    lock = RunLock(run_path, command)
    lock.acquire()
    found = measured_files(run_path) if replaces is not None and not force else []
    if found:
        lock.release()
        shown = ", ".join(found[:3]) + (f" and {len(found) - 3} more" if len(found) > 3 else "")
        raise MeasuredRunError(
            f"{run_path} holds a measured run ({shown}); `{command}` would replace its {replaces}. "
            "Choose another run directory, or pass --force to replace what this command writes "
            "(nothing else is deleted)"
        )
    return lock
