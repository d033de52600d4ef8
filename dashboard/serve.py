"""Start the dashboard server: ``python -m streamlit run dashboard/app.py ... -- RUN...``.

`plancast dashboard` calls `serve`; the tests start the real server the same way. The server binds
127.0.0.1 unless asked otherwise, honours Streamlit's own ``STREAMLIT_*`` environment settings, never
starts on a port another server holds, and is only reported ready when the server answering is the
child this call started (its own listening socket, read from /proc on Linux).
"""

from __future__ import annotations

import ipaddress
import os
import re
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from pathlib import Path

APP = Path(__file__).resolve().parent / "app.py"
RUNS_ENV = "PLANCAST_DASHBOARD_RUNS"
"""os.pathsep-separated run directories given at start (read by dashboard.data). Defined here, not in
data.py, so that starting the server does not import streamlit in the CLI's process (its caches log
"No runtime found" there)."""
ROOT_ENV = "PLANCAST_DASHBOARD_ROOT"
"""The one folder the browser may name runs and files in (read by dashboard.data)."""
DEFAULT_PORT = 8501
"""Streamlit's own default port."""
DEFAULT_ADDRESS = "127.0.0.1"
"""Loopback only: the dashboard reads files on this machine, so it is not offered to the network
unless ``--address`` says so."""
PORT_SEARCH = 100
"""Ports tried after a busy default port before giving up."""
MAX_UPLOAD_MB = 200
"""Largest upload the browser may send (Streamlit's ``server.maxUploadSize``, its default)."""


class PortBusyError(ValueError):
    """The port asked for is held by another program; the message names a free one."""


def url(port: int = DEFAULT_PORT, host: str = "localhost") -> str:
    """Where the dashboard started on ``port`` answers."""
    return f"http://{host}:{port}/"


def env_name(option: str) -> str:
    """Streamlit's environment variable for a config option: ``server.maxUploadSize`` ->
    ``STREAMLIT_SERVER_MAX_UPLOAD_SIZE`` (streamlit/config.py, "Configuration options")."""
    snake = re.sub(r"(?<=[a-z0-9])([A-Z])", r"_\1", option.replace(".", "_"))
    return f"STREAMLIT_{snake.upper()}"


def command(
    runs: Sequence[Path],
    port: int = DEFAULT_PORT,
    headless: bool = True,
    address: str = DEFAULT_ADDRESS,
    environ: Mapping[str, str] | None = None,
) -> list[str]:
    """The ``streamlit run`` command line; runs go after ``--`` as absolute paths.

    plancast's defaults give way to the ``STREAMLIT_*`` variables set in ``environ``; the port and
    address are always passed (``resolve_port``/``resolve_address`` read their variables)."""
    environ = os.environ if environ is None else environ
    defaults = {
        "server.headless": str(headless).lower(),
        "browser.gatherUsageStats": "false",
        "client.toolbarMode": "viewer",
        "server.maxUploadSize": str(MAX_UPLOAD_MB),
        # Quiet start: `plancast dashboard` prints the URL itself; a set serverAddress also spares
        # Streamlit's external-IP lookup (a web request, and a warning when offline: streamlit/net_util.py).
        "browser.serverAddress": "localhost" if address in ("127.0.0.1", "::1") else address,
        "logger.hideWelcomeMessage": "true",
        "logger.level": "warning",
    }
    options = [sys.executable, "-m", "streamlit", "run", str(APP)]
    options += ["--server.port", str(port), "--server.address", address]
    for option, value in defaults.items():
        if env_name(option) not in environ:
            options += [f"--{option}", value]
    return [*options, "--", *(str(Path(r).resolve()) for r in runs)]


def resolve_address(address: str | None, environ: Mapping[str, str]) -> str:
    """``--address``, else ``STREAMLIT_SERVER_ADDRESS``, else 127.0.0.1."""
    return address or environ.get(env_name("server.address")) or DEFAULT_ADDRESS


def is_loopback(address: str) -> bool:
    """Whether only this machine can reach ``address`` (``localhost``, 127.0.0.0/8, ::1)."""
    if address == "localhost":
        return True
    try:
        return ipaddress.ip_address(address).is_loopback
    except ValueError:
        return False


def _bindable(address: str, port: int) -> bool:
    family = socket.AF_INET6 if ":" in address else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as Tornado binds: TIME_WAIT is free
        try:
            probe.bind((address, port))
        except OSError:
            return False
    return True


def resolve_port(port: int | None, address: str, environ: Mapping[str, str]) -> int:
    """``port``, else ``STREAMLIT_SERVER_PORT``, else the first free port from 8501 on.

    A port that was asked for (option or variable) and is busy is a PortBusyError naming a free one."""
    asked = port if port is not None else environ.get(env_name("server.port"))
    if asked is not None:
        try:
            number = int(asked)
        except ValueError:
            raise PortBusyError(f"STREAMLIT_SERVER_PORT={asked!r} is not a port number") from None
        if not 1 <= number <= 65535:
            raise PortBusyError(f"port {number} is outside 1..65535")
        if _bindable(address, number):
            return number
        free = next((p for p in range(number + 1, number + PORT_SEARCH) if _bindable(address, p)), None)
        hint = f"pass --port {free}" if free else "pass another --port"
        raise PortBusyError(f"port {number} on {address} is in use by another program; {hint}, or stop it")
    for candidate in range(DEFAULT_PORT, DEFAULT_PORT + PORT_SEARCH):
        if _bindable(address, candidate):
            return candidate
    raise PortBusyError(f"ports {DEFAULT_PORT}-{DEFAULT_PORT + PORT_SEARCH - 1} are all in use; pass --port")


def serve(
    runs: Sequence[Path],
    port: int = DEFAULT_PORT,
    headless: bool = True,
    address: str = DEFAULT_ADDRESS,
    runs_root: Path | None = None,
) -> subprocess.Popen[bytes]:
    """Start the server in the background and return its process (the caller waits on or stops it).

    The runs are also passed in ``$PLANCAST_DASHBOARD_RUNS`` for pages that start without arguments;
    ``runs_root`` (default ``./runs``) is the only folder the browser may open runs or files from
    (``$PLANCAST_DASHBOARD_ROOT``). ``headless=False`` lets Streamlit open a browser tab. The server
    runs in its own session: the caller stops it (Ctrl-C at the terminal reaches only the caller).
    """
    files = [str(r) for r in runs if Path(r).exists() and not Path(r).is_dir()]
    if files:
        raise FileNotFoundError(
            f"not a run directory (a file): {', '.join(files)}; give the folder `plancast run --out` or "
            "`simulate --out` wrote"
        )
    missing = [str(r) for r in runs if not Path(r).is_dir()]
    if missing:
        raise FileNotFoundError(
            f"run director{'y' if len(missing) == 1 else 'ies'} not found: {', '.join(missing)}"
        )
    if runs_root is not None and runs_root != Path("runs") and not runs_root.is_dir():
        raise FileNotFoundError(f"--runs-folder {runs_root} not found: give an existing folder of runs")
    env = {
        **os.environ,
        RUNS_ENV: os.pathsep.join(str(Path(r).resolve()) for r in runs),
        ROOT_ENV: str((runs_root or Path("runs")).resolve()),
    }
    return subprocess.Popen(command(runs, port, headless, address, env), env=env, start_new_session=True)


def listening_ports(pid: int) -> set[int] | None:
    """TCP ports process ``pid`` itself listens on (Linux /proc), or None where /proc cannot say.

    A descriptor the process closes between the listing and the read is skipped, and a process that
    has exited listens on nothing: neither is "cannot say", or another program's server on the port
    would pass for ours while our server starts (it opens and closes files all the while)."""
    if not Path("/proc/self/fd").is_dir():
        return None  # not Linux, or no /proc
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
    except FileNotFoundError:
        return set()
    except OSError:
        return None  # another user's process: its descriptors are not ours to read
    inodes = set()
    for fd in fds:
        try:
            link = os.readlink(f"/proc/{pid}/fd/{fd}")
        except FileNotFoundError:
            continue
        if link.startswith("socket:["):
            inodes.add(link[8:-1])
    ports: set[int] = set()
    for table in ("tcp", "tcp6"):
        try:
            lines = Path(f"/proc/{pid}/net/{table}").read_text().splitlines()[1:]
        except FileNotFoundError:
            continue  # the process exited, or no IPv6
        for line in lines:
            fields = line.split()
            if fields[3] == "0A" and fields[9] in inodes:  # 0A: TCP_LISTEN (include/net/tcp_states.h)
                ports.add(int(fields[1].rsplit(":", 1)[1], 16))
    return ports


def wait_until_ready(
    process: subprocess.Popen[bytes], port: int, timeout_s: float = 60.0, address: str = DEFAULT_ADDRESS
) -> None:
    """Block until OUR server listens on ``port`` and answers its health check; RuntimeError if it
    exits or times out first (a health answer from another program on that port does not count)."""
    host = "127.0.0.1" if address in ("0.0.0.0", "", "localhost") else address
    host = "[::1]" if host == "::" else f"[{host}]" if ":" in host else host
    health = f"http://{host}:{port}/_stcore/health"
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"the dashboard server exited with code {process.returncode} before answering")
        ours = listening_ports(process.pid)
        if ours is None or port in ours:
            try:
                with urllib.request.urlopen(health, timeout=2) as response:
                    if response.status == 200:
                        return
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                pass
        time.sleep(0.25)
    raise RuntimeError(f"the dashboard server did not answer {health} within {timeout_s:g} s")


def stop(process: subprocess.Popen[bytes], grace_s: float = 10.0) -> None:
    """Stop the server: SIGTERM, then SIGKILL after ``grace_s``."""
    if process.poll() is not None:
        return
    process.terminate()
    try:
        process.wait(grace_s)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def measured_run_inside(path: Path) -> Path:
    """`path`, or the measured run one level down where `path` is a demo folder (`make demo` writes
    runs/demo/{scenario.toml, run/, calibration-mb*/}: the scored run is runs/demo/run) holding no
    events of its own."""
    if (path / "predicted").is_dir() or (path / "measured").is_dir():  # traces/store.RunDir's layout
        return path
    inner = path / "run"
    return inner if (inner / "measured").is_dir() else path
