"""Run `plancast` in-process through `cli.main`, its global error handler included (fast CLI tests)."""

from __future__ import annotations

import io
import subprocess
import sys
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path
from typing import Any
from unittest import mock

from plancast import cli

REPO = Path(__file__).resolve().parent.parent


def cli_main(*args: str) -> tuple[int, str, str]:
    """(exit code, stdout, stderr) of `plancast ARGS`."""
    stdout, stderr = io.StringIO(), io.StringIO()
    argv = mock.patch.object(sys, "argv", ["plancast", *args])
    with argv, redirect_stdout(stdout), redirect_stderr(stderr):
        try:
            cli.main()
            code: Any = 0
        except SystemExit as exit_:
            code = exit_.code
    return (0 if code is None else int(code)), stdout.getvalue(), stderr.getvalue()


def cli_subprocess(*args: str, timeout_s: float = 120) -> subprocess.CompletedProcess[str]:
    """`python -m plancast ARGS` in a real subprocess, from the repository root."""
    return module_subprocess("plancast", *args, timeout_s=timeout_s)


def module_subprocess(module: str, *args: str, timeout_s: float = 120) -> subprocess.CompletedProcess[str]:
    """`python -m MODULE ARGS` (a benchmark's command line, or plancast's) in a real subprocess, from the
    repository root, its output captured; the exit status is the caller's to check."""
    return subprocess.run(
        [sys.executable, "-m", module, *args],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=timeout_s,
        check=False,
    )


def assert_run_refused(tmp_path: Path, scenario: dict[str, Any], fix: str) -> None:
    """`plancast run` on `scenario` stops before anything starts: exit 2, `fix` named, no traceback,
    no measured run written."""
    import tomli_w

    path = tmp_path / "scenario.toml"
    path.write_text(tomli_w.dumps(scenario))
    code, _, stderr = cli_main("run", str(path), "--out", str(tmp_path / "run"))
    assert code == 2, stderr
    assert fix in stderr and "Traceback" not in stderr, stderr
    assert not (tmp_path / "run" / "measured").exists()


def run_and_compare(scenario_path: Path, run_dir: Path) -> dict[str, Any]:
    """`plancast run` in a real process (torchrun and its ranks), then `plancast compare --json` in this
    one (it starts nothing, and a process start costs seconds of imports); both must succeed and every
    predicted event must have its measured twin. Returns compare's JSON."""
    import json

    ran = cli_subprocess("run", str(scenario_path), "--out", str(run_dir), timeout_s=300)
    assert ran.returncode == 0, ran.stderr[-3000:]
    code, stdout, stderr = cli_main("compare", str(run_dir), "--json")
    assert code == 0, stderr[-3000:]
    summary: dict[str, Any] = json.loads(stdout)
    assert (summary["events_missing"], summary["events_extra"]) == (0, 0), summary
    assert summary["events_matched"] > 0
    return summary
