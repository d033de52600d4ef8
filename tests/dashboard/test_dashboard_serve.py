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


def test_a_file_or_a_missing_runs_folder_is_named_before_serving(tmp_path: Path) -> None:
    from tests.cli_runner import cli_main

    a_file = tmp_path / "notes.txt"
    a_file.write_text("x")
    code, _, err = cli_main("dashboard", str(a_file))
    assert code == 2 and "not a run directory (a file)" in err
    code, _, err = cli_main("dashboard", "--runs-folder", str(tmp_path / "nowhere"))
    assert code == 2 and "--runs-folder" in err and "not found" in err
