"""How a measured run ended when it did not finish: which rank failed first, and why.

torchrun's failure summary (``ChildFailedError``) lists every rank that exited, but its "root cause"
is the first failure its monitor *observed*, which after a rank dies is often a peer whose collective
broke (or one torchrun stopped itself). The first rank that failed is found from two sources:

1. ranks killed by a signal torchrun does not send (SIGKILL, SIGSEGV, ...): nothing else kills a rank
   that way, so such a rank died first;
2. else the earliest ``logs/rank-NNNNN.error.json``, which a rank writes, timestamped, the moment it
   raises (``runtime.worker``); peers whose collectives broke because of it raise later.

Pure functions, plus reading those small files. Importing this module does not import torch.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from plancast.traces.store import RunDir, read_json_object


@dataclass(frozen=True)
class RankFailure:
    """One entry of torchrun's failure summary."""

    rank: int
    local_rank: int
    host: str
    exitcode: int
    signal: str | None
    root_cause: bool

    def describe(self) -> str:
        how = f"killed by {self.signal}" if self.signal else f"exit code {self.exitcode}"
        return f"{how}, on {self.host}"


@dataclass(frozen=True)
class RankError:
    """What a rank wrote as it raised: when (``time.time()``) and its exception's last line."""

    rank: int
    time_s: float
    error: str


_FAILURE_RE = re.compile(
    r"host\s*:\s*(?P<host>\S+)\s*\n"
    r"\s*rank\s*:\s*(?P<rank>\d+) \(local_rank: (?P<local_rank>\d+)\)\s*\n"
    r"\s*exitcode\s*:\s*(?P<exitcode>-?\d+) \(pid: \d+\)[ \t]*(?:\((?P<signal>SIG\w+)\))?"
)
_ROOT_CAUSE = "Root Cause (first observed failure):"


def parse_failures(output: str) -> list[RankFailure]:
    """The ranks torchrun's failure summary (``ChildFailedError``) lists, root cause first (pure)."""
    root_at = output.rfind(_ROOT_CAUSE)
    failures = [
        RankFailure(
            rank=int(m["rank"]),
            local_rank=int(m["local_rank"]),
            host=m["host"],
            exitcode=int(m["exitcode"]),
            signal=m["signal"],
            root_cause=root_at >= 0 and m.start() > root_at,
        )
        for m in _FAILURE_RE.finditer(output)
    ]
    return sorted(failures, key=lambda f: (not f.root_cause, f.rank))


def is_collateral(failure: RankFailure) -> bool:
    """A rank torchrun itself stopped (SIGTERM) because another rank failed first."""
    return not failure.root_cause and failure.signal == "SIGTERM"


def read_rank_errors(run: RunDir, world_size: int) -> dict[int, RankError]:
    """The error records ranks wrote in ``logs/`` (unreadable ones are skipped: they only rank causes)."""
    errors: dict[int, RankError] = {}
    if not run.logs_dir.is_dir():
        return errors
    for rank in range(min(world_size, 4096)):
        path = run.rank_error(rank)
        if not path.is_file():
            continue
        try:  # bounded (traces/bounded.py); a TraceReadError is a ValueError
            record = read_json_object(path)
            errors[rank] = RankError(rank, float(record["time_s"]), str(record["error"]))
        except (OSError, ValueError, KeyError, TypeError):
            continue
    return errors


def first_failure(failures: Sequence[RankFailure], errors: Mapping[int, RankError]) -> tuple[int, str] | None:
    """The rank that failed first and how (pure); None when nothing says (a timeout, a lost node)."""
    killed = sorted(
        (f for f in failures if f.signal and f.signal != "SIGTERM" and f.rank not in errors),
        key=lambda f: f.rank,
    )
    if killed:
        return killed[0].rank, killed[0].describe()
    if errors:
        first = min(errors.values(), key=lambda e: (e.time_s, e.rank))
        return first.rank, first.error
    own = [f for f in failures if not is_collateral(f)]
    if own:
        return own[0].rank, own[0].describe()
    return None


def last_error_line(log: Path, limit_bytes: int = 65536) -> str | None:
    """The last ``SomethingError: message`` line of a rank's log (its exception), if any."""
    try:
        with log.open("rb") as handle:
            handle.seek(max(0, log.stat().st_size - limit_bytes))
            lines = handle.read().decode(errors="replace").splitlines()
    except OSError:
        return None
    for line in reversed(lines):
        if re.match(r"^[\w.]+(Error|Exception|Interrupt|Exit)\b.*", line.strip()):
            return line.strip()
    return None
