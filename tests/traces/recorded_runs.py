"""A recorded run of tests/data/cpu_runs, copied for a test, with its machine profile as this host's
latest microbenchmark record in the tests' own cache (conftest.py points PLANCAST_CACHE_DIR at a folder
of their own), so that `plancast compare` reads the speed the run was recorded against."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

from plancast.runtime.local_profile import cache_dir, machine_key

CPU_RUNS = Path(__file__).resolve().parents[1] / "data" / "cpu_runs"


def recorded_run(recorded: Path, tmp_path: Path) -> Iterator[Path]:
    """Yield a copy of `recorded` (its README and machine files left out) while its machine profile is
    the cache's record; the record is removed after."""
    folder = cache_dir() / machine_key()
    folder.mkdir(parents=True, exist_ok=True)
    record = folder / f"{recorded.name}.json"
    shutil.copyfile(recorded / "machine-profile.json", record)
    copy = shutil.copytree(recorded, tmp_path / "run", ignore=shutil.ignore_patterns("*.md", "machine-*"))
    try:
        yield Path(copy)
    finally:
        record.unlink()
