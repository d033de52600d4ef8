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


SERIAL_MARKERS = ("distributed", "browser")
"""Tests that start ranks (torchrun, gloo process groups) or a browser: two at once would put four
ranks on a 2-core machine and stretch both past their timeouts."""
SERIAL_FILES = ("test_dashboard_exposure.py", "test_demo_cli.py")
"""Real dashboard servers on real ports (checked with `ss`), and the demo's ranks."""


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # under `pytest -n 2 --dist loadgroup` (make test) one xdist group runs on one worker, in turn, while
    # the other worker takes the single-process tests; without xdist the marker changes nothing
    for item in items:
        if any(item.get_closest_marker(m) for m in SERIAL_MARKERS) or item.path.name in SERIAL_FILES:
            item.add_marker(pytest.mark.xdist_group("ranks"))
