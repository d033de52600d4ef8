"""What the dashboard exposes (issue 11): the real `plancast dashboard` listens on loopback only
(checked with `ss -ltn`), never prints the URL of another server on a busy port, stops its server on
SIGTERM; the browser cannot name files outside the runs folder or expand an upload without limit."""

from __future__ import annotations

import http.server
import io
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from plancast.dashboard import data, serve
from tests.cli_runner import REPO, cli_main


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def listeners(port: int) -> list[str]:
    """Local addresses listening on ``port``, from ``ss -ltn`` (iproute2)."""
    out = subprocess.run(
        ["ss", "-ltnH", f"sport = :{port}"], capture_output=True, text=True, check=True
    ).stdout
    return [line.split()[3] for line in out.splitlines() if line.strip()]


@pytest.fixture
def impostor() -> Iterator[int]:
    """Another program's HTTP server on a port: it answers 200 on every path, /_stcore/health included."""

    class Always200(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.end_headers()
            self.wfile.write(b"ok")

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), Always200)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield int(server.server_address[1])
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.skipif(shutil.which("ss") is None, reason="needs iproute2's ss")
def test_dashboard_listens_on_loopback_only_and_sigterm_stops_its_server(tmp_path: Path) -> None:
    (tmp_path / "run" / "measured").mkdir(parents=True)
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "plancast", "dashboard", str(tmp_path / "run"), "--port", str(port)],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        lines = iter(proc.stdout.readline, "")  # until the command says it is ready (or ends)
        line = next((x for x in lines if x.startswith("dashboard:")), "")
        assert line.startswith(f"dashboard: http://127.0.0.1:{port}/"), line
        assert listeners(port) == [f"127.0.0.1:{port}"]
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    deadline = time.monotonic() + 15
    while listeners(port) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert listeners(port) == []  # the streamlit child is gone too


def test_a_busy_port_is_exit_2_and_never_the_other_servers_url(tmp_path: Path, impostor: int) -> None:
    (tmp_path / "run").mkdir()
    code, out, err = cli_main("dashboard", str(tmp_path / "run"), "--port", str(impostor))
    assert code == 2
    assert "http://" not in out
    assert f"port {impostor} on 127.0.0.1 is in use" in err and "--port" in err


def test_streamlit_port_variable_is_honoured(impostor: int, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STREAMLIT_SERVER_PORT", str(impostor))
    with pytest.raises(serve.PortBusyError, match=f"port {impostor}"):
        serve.resolve_port(None, "127.0.0.1", os.environ)
    free = free_port()
    monkeypatch.setenv("STREAMLIT_SERVER_PORT", str(free))
    assert serve.resolve_port(None, "127.0.0.1", os.environ) == free


def test_readiness_needs_our_own_listening_socket(impostor: int) -> None:
    """A process that answers nothing on the port is not made 'ready' by the other server there."""
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        assert serve.listening_ports(child.pid) == set()
        with pytest.raises(RuntimeError, match="did not answer"):
            serve.wait_until_ready(child, impostor, timeout_s=2)  # type: ignore[arg-type]
    finally:
        child.kill()
        child.wait()


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="needs Linux /proc")
def test_a_process_busy_with_files_is_still_read_as_listening_on_nothing() -> None:
    """A descriptor closed between listing /proc/PID/fd and reading it once made the check answer
    "cannot say" (about one read in ten against this child), and the impostor's health answer was
    then taken for our server's (a CI failure of the test above)."""
    churn = "import os\nwhile True: os.close(os.open(os.devnull, os.O_RDONLY))"
    child = subprocess.Popen([sys.executable, "-c", churn])
    try:
        answers = [serve.listening_ports(child.pid) for _ in range(1500)]
    finally:
        child.kill()
        child.wait()
    assert answers.count(None) == 0 and all(a == set() for a in answers)
    assert serve.listening_ports(child.pid) == set()  # exited: listens on nothing


def test_streamlit_settings_from_the_environment_win_over_plancast_defaults() -> None:
    command = serve.command([], 9000, environ={"STREAMLIT_CLIENT_TOOLBAR_MODE": "developer"})
    assert "--client.toolbarMode" not in command
    assert serve.env_name("server.maxUploadSize") == "STREAMLIT_SERVER_MAX_UPLOAD_SIZE"
    assert command[command.index("--server.address") + 1] == "127.0.0.1"


def test_only_loopback_addresses_count_as_this_machine_only() -> None:
    assert serve.is_loopback("127.0.0.1") and serve.is_loopback("::1") and serve.is_loopback("localhost")
    assert not serve.is_loopback("0.0.0.0") and not serve.is_loopback("192.168.1.2")


# ------------------------------------------------------------------------------- paths and uploads
def test_paths_are_confined_to_the_runs_folder(tmp_path: Path) -> None:
    root = tmp_path / "runs"
    (root / "a").mkdir(parents=True)
    (tmp_path / "secret").mkdir()
    (root / "link").symlink_to(tmp_path / "secret")
    assert data.confined("a", [root]) == (root / "a").resolve()
    assert data.confined(str(root / "a"), [root]) == (root / "a").resolve()
    for outside in ("/", "/dev/zero", "../secret", "link", str(tmp_path / "secret")):
        with pytest.raises(data.UploadError, match="is outside"):
            data.confined(outside, [root])


def test_csv_that_is_not_a_regular_file_or_too_big_is_refused(tmp_path: Path) -> None:
    with pytest.raises(data.UploadError, match="not a regular file"):
        data.read_sweep_csv(Path("/dev/zero"), "/dev/zero")
    big = io.BytesIO(b"0" * (data.MAX_CSV_BYTES + 1))
    with pytest.raises(data.UploadError, match="larger than"):
        data.read_sweep_csv(big, "big.csv")


def test_a_zip_bomb_is_stopped_at_the_extraction_limit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(data, "MAX_EXTRACTED_BYTES", 8 * 1024**2)
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("run/measured/rank-00000.parquet", b"\0" * (64 * 1024**2))  # 64 MiB -> ~64 KiB
    assert len(buffer.getvalue()) < 1024**2
    with pytest.raises(data.UploadError, match="expands to more than"):
        data.materialize_upload([("bomb.zip", buffer.getvalue())], tmp_path)
    written = sum(p.stat().st_size for p in tmp_path.rglob("*") if p.is_file())
    assert written <= 9 * 1024**2


def test_a_zip_whose_declared_sizes_lie_is_still_stopped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(data, "MAX_EXTRACTED_BYTES", 1024**2)
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_STORED) as archive:
        for i in range(3):
            archive.writestr(f"run/measured/rank-{i:05d}.parquet", b"x" * (600 * 1024))
    with pytest.raises(data.UploadError, match="expands to more than"):
        data.materialize_upload([("many.zip", buffer.getvalue())], tmp_path)


def test_the_sweep_refuses_absurd_gpu_counts_quickly() -> None:
    code, _, err = cli_main("sweep", str(REPO / "examples" / "tiny-local-cpu.toml"), "--gpus", str(10**12))
    assert code == 2 and "--gpus must be between 1 and 1,000,000" in err
