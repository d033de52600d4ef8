"""Every test runs with its own plancast cache and the shipped local-cpu numbers (machine-independent
predictions); tests of the measured local machine (tests/runtime/test_local_profile.py) opt back in.
The Ctrl-C tests stand for a terminal's Ctrl-C, so subprocesses start with SIGINT at its default."""

from __future__ import annotations

import os
import signal
import tempfile

import pytest


def pytest_configure(config: pytest.Config) -> None:
    # set before any test starts, so CLI subprocesses inherit them too
    os.environ["PLANCAST_CACHE_DIR"] = tempfile.mkdtemp(prefix="plancast-test-cache-")
    os.environ["PLANCAST_LOCAL_CPU"] = "shipped"
    # a suite started in the background by a non-interactive shell (`make test &`) inherits SIGINT
    # ignored, and an ignored signal stays ignored across exec: every CLI it starts would then shrug
    # off the Ctrl-C tests' SIGINT. A handled one is reset to the default in the child instead.
    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


def pytest_unconfigure(config: pytest.Config) -> None:
    import shutil

    shutil.rmtree(os.environ.get("PLANCAST_CACHE_DIR", ""), ignore_errors=True)
