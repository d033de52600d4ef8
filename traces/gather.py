"""``plancast gather``: one run directory from the folders of a multi-node run without a shared file system.

Each node's ``plancast run`` writes its own ranks' files (``measured/rank-NNNNN.parquet``, its logs);
node 0 also writes ``scenario.toml``, ``measured/env.json`` and ``measured/summary.json``. Gathering
copies every such file into the target run, and refuses (naming both folders) a file two folders hold
with different contents: nothing already gathered is overwritten by something else. Only regular files
with the names a run writes are taken, never a link, and nothing outside the given folders is followed.
"""

from __future__ import annotations

import filecmp
import os
import re
import shutil
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from plancast.traces.store import RunDir, TraceReadError, read_events

MEASURED_NAMES = re.compile(
    r"^(rank-\d{5}\.parquet|env\.json|summary\.json|telemetry\.parquet|checkpoints\.json)$"
)
LOG_NAMES = re.compile(r"^(rank-\d{5}\.log|rank-\d{5}\.error\.json|torchrun(-node\d+)?\.log|node-\d+\.json)$")
TOP_NAMES = re.compile(r"^scenario\.toml$")
MAX_FILE_BYTES = 4 << 30
"""A rank's trace of millions of events stays far below 4 GiB; a bigger file is not one plancast wrote."""


class GatherError(ValueError):
    """The folders cannot be merged as they are; the message names the file and the folders."""


@dataclass
class Gathered:
    copied: list[str] = field(default_factory=list)
    """Files copied, relative to the target run."""
    same: list[str] = field(default_factory=list)
    """Files the target already held with the same contents."""
    ranks: list[int] = field(default_factory=list)


def _files(source: Path) -> list[tuple[Path, str]]:
    """(file, path relative to the run) of every file a run writes that ``source`` holds."""
    found: list[tuple[Path, str]] = []
    for sub, names in (("", TOP_NAMES), ("measured", MEASURED_NAMES), ("logs", LOG_NAMES)):
        folder = source / sub if sub else source
        if not folder.is_dir() or folder.is_symlink():
            continue
        for entry in os.scandir(folder):
            if names.match(entry.name) and entry.is_file(follow_symlinks=False):
                found.append((Path(entry.path), f"{sub}/{entry.name}" if sub else entry.name))
    return found


def _check(path: Path, rel: str) -> None:
    size = path.stat().st_size
    if size > MAX_FILE_BYTES:
        raise GatherError(
            f"{path} is {size / 2**30:.1f} GiB, more than a run writes ({MAX_FILE_BYTES >> 30} GiB)"
        )
    if rel.startswith("measured/rank-") and rel.endswith(".parquet"):
        try:
            read_events(path)
        except TraceReadError as e:
            raise GatherError(f"{path} is not a readable rank file ({e}); re-copy it from its node") from None


def plan_gather(target: Path, sources: Sequence[Path]) -> dict[str, Path]:
    """Which file each target path comes from; GatherError on a conflict (pure reading)."""
    chosen: dict[str, Path] = {}
    for source in sources:
        if not source.is_dir():
            raise GatherError(f"{source} is not a folder: give the run folder each node wrote")
        for path, rel in _files(source):
            _check(path, rel)
            earlier = chosen.get(rel)
            if earlier is not None and not filecmp.cmp(earlier, path, shallow=False):
                raise GatherError(
                    f"{rel} differs between {earlier.parent} and {path.parent}: two nodes wrote the same "
                    "file (the same ranks, or two runs); gather the folders of one run only"
                )
            chosen.setdefault(rel, path)
            existing = target / rel
            if existing.exists() and not filecmp.cmp(existing, path, shallow=False):
                raise GatherError(
                    f"{existing} already holds a different {rel} than {path}; gather into a new folder"
                )
    if not any(rel.startswith("measured/rank-") for rel in chosen) and not RunDir(target).rank_files():
        raise GatherError(f"no rank files (measured/rank-NNNNN.parquet) in {', '.join(map(str, sources))}")
    return chosen


def gather(target: Path, sources: Sequence[Path]) -> Gathered:
    """Copy every node's files into ``target`` (see the module docstring); atomic per file."""
    target = Path(target)
    resolved = [Path(s) for s in sources if Path(s).resolve() != target.resolve()]
    chosen = plan_gather(target, resolved)
    report = Gathered()
    for rel, path in sorted(chosen.items()):
        dest = target / rel
        if dest.exists():
            report.same.append(rel)
            continue
        dest.parent.mkdir(parents=True, exist_ok=True)
        tmp = dest.with_name(f".{dest.name}.gather.tmp")
        shutil.copyfile(path, tmp, follow_symlinks=False)
        os.replace(tmp, dest)
        report.copied.append(rel)
    report.ranks = sorted(RunDir(target).rank_files())
    return report
