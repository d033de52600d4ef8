"""`plancast dashboard`: serve the Streamlit dashboard on some runs."""

from __future__ import annotations

import os
import signal
from collections.abc import Callable
from pathlib import Path
from typing import Annotated

import typer

from plancast.app import UserError, app, err, out, require_extra, user_errors

PortOpt = Annotated[
    int | None,
    typer.Option(
        help="Port to serve on (default: $STREAMLIT_SERVER_PORT, else the first free port from 8501); "
        "a busy port that was asked for is an error."
    ),
]

AddressOpt = Annotated[
    str | None,
    typer.Option(
        help="Address to listen on (default: $STREAMLIT_SERVER_ADDRESS, else 127.0.0.1, this machine "
        "only). 0.0.0.0 offers the dashboard, and the files it can read, to the network."
    ),
]

RunsFolderOpt = Annotated[
    Path,
    typer.Option(
        "--runs-folder",
        help="The only folder the browser may open runs and sweep CSVs from (besides the RUN arguments).",
    ),
]


def _runs_to_open(runs: list[Path], inside: Callable[[Path], Path]) -> list[Path]:
    """Each RUN, or the measured run inside a demo folder (`inside`: serve.measured_run_inside), saying so."""
    opened = [inside(r) for r in runs]
    for asked, run in zip(runs, opened, strict=True):
        if run != asked:
            out.print(f"{asked} is a demo folder: opening its measured run, {run}", markup=False)
    return opened


@app.command("dashboard")
def dashboard(
    runs: Annotated[list[Path] | None, typer.Argument(help="Run directories to open.")] = None,
    port: PortOpt = None,
    browser: Annotated[
        bool, typer.Option(help="Open a browser tab (default: headless; the URL is printed).")
    ] = False,
    address: AddressOpt = None,
    runs_folder: RunsFolderOpt = Path("runs"),
) -> None:
    """Open the dashboard: Overview, Timeline, Breakdown, Memory, Telemetry, Sweep and What-if.

    RUN directories come from `plancast simulate --out` or `plancast run --out`; without RUN, pick a
    run in the sidebar from the runs folder (default runs/) or upload a zipped run directory.
    Other Streamlit settings are read from its STREAMLIT_* environment variables."""
    with user_errors():
        require_extra("dashboard", "plancast dashboard")
    from plancast.dashboard.serve import (
        PortBusyError,
        is_loopback,
        measured_run_inside,
        resolve_address,
        resolve_port,
        serve,
        stop,
        url,
        wait_until_ready,
    )
    from plancast.runtime.process import Stopped, stop_on_signals

    opened = _runs_to_open(runs or [], measured_run_inside)
    with user_errors():
        host = resolve_address(address, os.environ)
        try:
            chosen = resolve_port(port, host, os.environ)
            process = serve(
                opened, port=chosen, headless=not browser, address=host, runs_root=runs_folder
            )
        except (FileNotFoundError, PortBusyError) as e:
            raise UserError(str(e)) from None
    if not is_loopback(host):
        err.print(
            f"warning: listening on {host}: anyone who can reach this machine can open the dashboard and "
            f"the runs under {runs_folder.resolve()}",
            markup=False,
        )
    try:
        with stop_on_signals():
            try:
                wait_until_ready(process, chosen, timeout_s=60, address=host)
            except RuntimeError as e:
                raise UserError(f"{e}; nothing is being served") from None
            shown = "127.0.0.1" if host in ("0.0.0.0", "localhost") else host
            out.print(f"dashboard: {url(chosen, shown)}  (Ctrl-C to stop)", markup=False)
            process.wait()
    except (KeyboardInterrupt, Stopped):
        pass
    finally:
        stop(process)
    if process.returncode not in (0, -signal.SIGTERM, None):
        err.print(f"the dashboard server exited with code {process.returncode}", markup=False)
