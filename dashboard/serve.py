"""Start the dashboard server: ``python -m streamlit run dashboard/app.py ... -- RUN...``.

`plancast dashboard` calls `serve`; the tests start the real server the same way.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from pathlib import Path

RUNS_ENV = "PLANCAST_DASHBOARD_RUNS"
"""os.pathsep-separated run directories for the server (read by dashboard.data). Defined here, not in
data.py, so that starting the server does not import streamlit in the CLI's process (its caches log
"No runtime found" there)."""
APP = Path(__file__).resolve().parent / "app.py"
DEFAULT_PORT = 8501


def url(port: int = DEFAULT_PORT, host: str = "localhost") -> str:
    """Where the dashboard started on ``port`` answers."""
    return f"http://{host}:{port}/"


def command(runs: Sequence[Path], port: int = DEFAULT_PORT, headless: bool = True) -> list[str]:
    """The ``streamlit run`` command line; runs go after ``--`` as absolute paths."""
    return [
        sys.executable,
        "-m",
        "streamlit",
        "run",
        str(APP),
        "--server.headless",
        str(headless).lower(),
        "--server.port",
        str(port),
        "--browser.gatherUsageStats",
        "false",
        "--client.toolbarMode",
        "viewer",
        # Quiet start: `plancast dashboard` prints the URL itself; a set serverAddress also spares
        # Streamlit's external-IP lookup (a web request, and a warning when offline: streamlit/net_util.py).
        "--browser.serverAddress",
        "localhost",
        "--logger.hideWelcomeMessage",
        "true",
        "--logger.level",
        "warning",
        "--",
        *(str(Path(r).resolve()) for r in runs),
    ]


def serve(runs: Sequence[Path], port: int = DEFAULT_PORT, headless: bool = True) -> subprocess.Popen[bytes]:
    """Start the server in the background and return its process (the caller waits on or stops it).

    The runs are also passed in ``$PLANCAST_DASHBOARD_RUNS`` for pages that start without arguments.
    ``headless=False`` lets Streamlit open a browser tab.
    """
    missing = [str(r) for r in runs if not Path(r).is_dir()]
    if missing:
        raise FileNotFoundError(
            f"run director{'y' if len(missing) == 1 else 'ies'} not found: {', '.join(missing)}"
        )
    env = {**os.environ, RUNS_ENV: os.pathsep.join(str(Path(r).resolve()) for r in runs)}
    return subprocess.Popen(command(runs, port, headless), env=env)


def wait_until_ready(process: subprocess.Popen[bytes], port: int, timeout_s: float = 60.0) -> None:
    """Block until the server answers its health check; RuntimeError if it exits or times out first."""
    health = f"{url(port)}_stcore/health"
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"the dashboard server exited with code {process.returncode} before answering")
        try:
            with urllib.request.urlopen(health, timeout=2) as response:
                if response.status == 200:
                    return
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            pass
        time.sleep(0.25)
    raise RuntimeError(f"the dashboard server did not answer {health} within {timeout_s:g} s")
