"""The benchmarks' saved figures: one JSON file per benchmark under benchmarks/results/, which
scripts/gen_readme_table.py turns into the README's accuracy table (tests/test_readme_table.py checks
the README against them). Each file says which command wrote it, when, and under what machine load,
so a figure is never quoted without the conditions it was measured in."""

from __future__ import annotations

import json
import os
import platform
import subprocess
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parent / "results"
MAX_RESULT_BYTES = 1 << 20  # a results file is a few hundred bytes; anything larger is not one


def _commit() -> str | None:
    """The checkout's commit (with "-dirty" for uncommitted changes), None outside a git checkout."""
    try:
        head = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, timeout=10, check=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return head + ("-dirty" if dirty else "")


def write_result(name: str, command: str, figures: dict[str, Any], folder: Path = RESULTS) -> Path:
    """benchmarks/results/NAME.json: `figures` with the command, time, commit and machine load."""
    try:
        load = os.getloadavg()[0]
    except (AttributeError, OSError):
        load = None
    record = {
        "command": command,
        "written_utc": datetime.now(UTC).strftime("%Y-%m-%d %H:%M"),
        "commit": _commit(),
        "machine": f"{platform.machine()}, {os.cpu_count()} cores",
        "load_1min": load,
        "figures": figures,
    }
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}.json"
    path.write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")
    print(f"saved to {path}")
    return path


def read_result(name: str, folder: Path = RESULTS) -> dict[str, Any] | None:
    """The saved record of benchmark `name`, None where it has not been run (or is not a record)."""
    path = folder / f"{name}.json"
    if not path.is_file() or path.stat().st_size > MAX_RESULT_BYTES:
        return None
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        return None
    return record if isinstance(record, dict) and isinstance(record.get("figures"), dict) else None


def error_figures(errors: list[float]) -> dict[str, Any]:
    """Rows, mean absolute error and the worst row's signed error (`predicted / measured - 1`)."""
    if not errors:
        return {"rows": 0, "mape": None, "worst": None}
    worst = max(errors, key=abs)
    return {"rows": len(errors), "mape": sum(abs(e) for e in errors) / len(errors), "worst": worst}
