"""`plancast`: one command, many verbs. The front door only.

Every verb module is imported here, at the top, so `plancast.cli.app` always has every command; each
verb imports its packages lazily inside the command, so `--help` stays fast. Bad input never shows a
traceback: `UserError` (and the packages' own error types) become a message naming what is wrong and
how to fix it, and exit code 2.
"""

from __future__ import annotations

import sys

from plancast.app import EXIT_BAD_INPUT, app, err, user_error_types
from plancast.commands import calibrate, dashboard, demo, imports, run, runs, scenario, simulate, submit

VERB_MODULES = (scenario, simulate, imports, runs, run, submit, calibrate, dashboard, demo)
"""Imported for their side effect of registering commands on `app` (listed so none is dropped)."""

__all__ = ["VERB_MODULES", "app", "main"]


def main() -> None:
    """Console entry point."""
    try:
        app(standalone_mode=True)
    except user_error_types() as e:  # any verb: bad input is a message and exit 2, never a traceback
        err.print(f"error: {e}", markup=False)
        sys.exit(EXIT_BAD_INPUT)
