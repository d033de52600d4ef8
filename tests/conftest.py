"""Every test runs with its own plancast cache and the shipped local-cpu numbers (machine-independent
predictions); tests of the measured local machine (tests/runtime/test_local_profile.py) opt back in.
The Ctrl-C tests stand for a terminal's Ctrl-C, so subprocesses start with SIGINT at its default."""

from __future__ import annotations

import os
import signal
import tempfile

import pytest


def pytest_configure(config: pytest.Config) -> None:
    _check_loadgroup_groups(config)
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


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook, which reads the marker into the node id
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # under `pytest -n 2 --dist loadgroup` (make test) one xdist group runs on one worker, in turn, while
    # the other worker takes the single-process tests; without xdist the marker changes nothing
    for item in items:
        if any(item.get_closest_marker(m) for m in SERIAL_MARKERS) or item.path.name in SERIAL_FILES:
            item.add_marker(pytest.mark.xdist_group("ranks"))


def _version(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in text.split(".")[:3] if part.isdigit())


def _check_loadgroup_groups(config: pytest.Config) -> None:
    """Refuse to start when --dist loadgroup would not keep the serial group on one worker.

    pytest-xdist 3.8 groups by writing `item._nodeid`, which pytest 9.2 no longer reads (a node id comes
    from `_id` there): the group was silently split, tests with ranks ran two at a time on two workers,
    and two workers' SLURM test clusters (the same node names) killed each other's jobs. pyproject.toml
    keeps pytest below 9.2; this says so if another install brings 9.2 back."""
    if os.environ.get("PYTEST_XDIST_WORKER") or config.getoption("dist", "no") != "loadgroup":
        return
    import xdist

    if _version(pytest.__version__) >= (9, 2) and _version(xdist.__version__) <= (3, 8, 0):
        raise pytest.UsageError(
            f"pytest-xdist {xdist.__version__}'s --dist loadgroup does not group under pytest "
            f"{pytest.__version__}: the tests that start ranks would run two at a time on two workers. "
            "Install pytest below 9.2 (pip install 'pytest<9.2', as pyproject.toml's dev extra pins it)."
        )
