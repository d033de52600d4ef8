"""The real server (dashboard.serve) rendered by headless Chromium: the Overview shows the run's numbers.

Needs Debian's ``chromium`` (``apt-get install -y chromium``); skipped without it.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from plancast.dashboard import frames, serve
from plancast.traces.store import read_json

pytestmark = pytest.mark.browser

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture
def server(healthy_run: Path) -> Iterator[str]:
    port = free_port()
    process = serve.serve([healthy_run], port=port)
    try:
        serve.wait_until_ready(process, port, timeout_s=90)
        yield serve.url(port)
    finally:
        process.terminate()
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def chromium(url: str, profile: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    assert CHROMIUM is not None
    command = [
        CHROMIUM,
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        f"--user-data-dir={profile}",
        "--virtual-time-budget=15000",
        *extra,
        url,
    ]
    return subprocess.run(command, capture_output=True, text=True, timeout=120, check=True)


def rendered_dom(url: str, profile: Path, expected: str, deadline_s: float = 90.0) -> str:
    """The page's DOM once it shows ``expected`` (the last DOM if it never does within ``deadline_s``).

    The app arrives over a websocket after the HTML; headless Chromium's virtual clock can run out
    before the server's first, cold script run (imports, reading and reconciling the run) answers,
    leaving Streamlit's skeleton. That work is cached in the server, so a later load is fast: retrying
    absorbs exactly that race.
    """
    stop = time.monotonic() + deadline_s
    dom = chromium(url, profile, "--dump-dom").stdout
    while expected not in dom and time.monotonic() < stop:
        time.sleep(1.0)
        dom = chromium(url, profile, "--dump-dom").stdout
    return dom


@pytest.mark.skipif(CHROMIUM is None, reason="needs Debian's chromium: apt-get install -y chromium")
def test_overview_renders_in_a_real_browser(server: str, healthy_run: Path, tmp_path: Path) -> None:
    dom = rendered_dom(server, tmp_path / "profile", "Predicted step time")
    summary = read_json(healthy_run / "predicted" / "summary.json")
    assert "Predicted step time" in dom, dom[-2000:]
    assert frames.format_seconds(summary["step_time_s"]) in dom
    assert f"Run {healthy_run.name}" in dom
    assert "Events matched" in dom
    # the same race as rendered_dom's, for the screenshot's own page load: a skeleton-only page is a
    # near-blank PNG of a few kB, the rendered Overview several tens of kB
    # (under a loaded CI machine five tries a second apart once all caught the skeleton: a deadline)
    stop = time.monotonic() + 60.0
    screenshot = tmp_path / "overview.png"  # the test's own folder, not a fixed name in /tmp
    while True:
        screenshot.unlink(missing_ok=True)
        chromium(server, tmp_path / "profile", f"--screenshot={screenshot}", "--window-size=1400,1000")
        if screenshot.stat().st_size > 10_000 or time.monotonic() > stop:
            break
        time.sleep(1.0)
    assert screenshot.stat().st_size > 10_000


@pytest.mark.skipif(CHROMIUM is None, reason="needs Debian's chromium: apt-get install -y chromium")
def test_memory_page_renders_the_timeline_in_a_real_browser(server: str, tmp_path: Path) -> None:
    """The Memory page's timeline (predicted; the CPU fixture run records peaks only) reaches the browser."""
    dom = rendered_dom(f"{server.rstrip('/')}/memory", tmp_path / "profile", "Over the step")
    assert "Over the step" in dom, dom[-2000:]
    assert "Measured: not recorded for this run" in dom
    assert "Predicted peak" in dom
