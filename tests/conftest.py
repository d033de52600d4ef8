"""Every test runs with its own plancast cache and the shipped local-cpu numbers (machine-independent
predictions); tests of the measured local machine (tests/runtime/test_local_profile.py) opt back in."""

from __future__ import annotations

import os
import tempfile

import pytest


def pytest_configure(config: pytest.Config) -> None:
    # set before any test starts, so CLI subprocesses inherit them too
    os.environ["PLANCAST_CACHE_DIR"] = tempfile.mkdtemp(prefix="plancast-test-cache-")
    os.environ["PLANCAST_LOCAL_CPU"] = "shipped"


def pytest_unconfigure(config: pytest.Config) -> None:
    import shutil

    shutil.rmtree(os.environ.get("PLANCAST_CACHE_DIR", ""), ignore_errors=True)
