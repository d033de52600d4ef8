"""Run `plancast` in-process through `cli.main`, its global error handler included (fast CLI tests)."""

from __future__ import annotations

import io
import sys
from contextlib import redirect_stderr, redirect_stdout
from typing import Any
from unittest import mock

from plancast import cli


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
