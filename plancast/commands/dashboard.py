"""`plancast dashboard`: serve the Streamlit dashboard on some runs.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from plancast.app import UserError, app, out, user_errors


@app.command("dashboard")
def dashboard(
    runs: Annotated[list[Path] | None, typer.Argument(help="Run directories to open.")] = None,
    port: Annotated[int, typer.Option(help="Port to serve on.")] = 8501,
    browser: Annotated[
        bool, typer.Option(help="Open a browser tab (default: headless; the URL is printed).")
    ] = False,
) -> None:
    """Open the dashboard: Overview, Timeline, Breakdown, Memory, Telemetry, Sweep and What-if.

    RUN directories come from `plancast simulate --out` or `plancast run --out`; without RUN, pick a
    run in the sidebar from a folder (default runs/) or upload a zipped run directory."""
    from plancast.dashboard.serve import serve, url, wait_until_ready

    with user_errors():
        try:
            process = serve(list(runs or []), port=port, headless=not browser)
        except FileNotFoundError as e:
            raise UserError(str(e)) from None
    try:
        wait_until_ready(process, port, timeout_s=60)
        out.print(f"dashboard: {url(port)}  (Ctrl-C to stop)", markup=False)
        process.wait()
    except KeyboardInterrupt:
        process.terminate()
        process.wait(timeout=10)
