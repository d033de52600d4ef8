"""The server's command line (the real start is exercised by test_browser.py)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from plancast.dashboard import serve


def test_command_runs_streamlit_with_the_runs_after_the_separator(tmp_path: Path) -> None:
    command = serve.command([tmp_path / "a", Path("relative")], port=9123, headless=True, environ={})
    assert command[:5] == [sys.executable, "-m", "streamlit", "run", str(serve.APP)]
    options = command[5 : command.index("--")]
    assert dict(zip(options[::2], options[1::2], strict=True)) == {
        "--server.headless": "true",
        "--server.port": "9123",
        "--server.address": "127.0.0.1",
        "--browser.gatherUsageStats": "false",
        "--client.toolbarMode": "viewer",
        "--server.maxUploadSize": "200",
        "--browser.serverAddress": "localhost",
        "--logger.hideWelcomeMessage": "true",
        "--logger.level": "warning",
    }
    assert command[command.index("--") + 1 :] == [str(tmp_path / "a"), str(Path("relative").resolve())]
    assert serve.APP.is_file()


def test_url_names_the_port() -> None:
    assert serve.url(9123) == "http://localhost:9123/"


def test_serve_refuses_a_missing_run(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match=r"run directory not found: .*absent"):
        serve.serve([tmp_path / "absent"])
