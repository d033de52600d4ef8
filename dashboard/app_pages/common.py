"""What every page shares: the sidebar run picker, and the selected run with its problems shown."""

from __future__ import annotations

import contextlib
import os
import sys
from pathlib import Path
from typing import Any

import streamlit as st

from plancast.dashboard import data
from plancast.dashboard.data import RunData, UploadError
from plancast.traces.contention import contention, machine_speed, share_or_none, speed_verdict, verdict
from plancast.traces.reconcile import median_step, scored_steps
from plancast.traces.store import RunDir, TraceReadError, read_json_object

RUN_KEY = "plancast_run"  # session state: path (str) of the run the pages show
APP_SCRIPT = Path(__file__).resolve().parents[1] / "app.py"


def _uploaded_run() -> Path | None:
    files = st.file_uploader(
        "…or upload a run",
        type=["zip", "parquet", "toml"],
        accept_multiple_files=True,
        help="A .zip of a run directory, or parquet files: events.parquet (predicted), "
        "rank-NNNNN.parquet and telemetry.parquet (measured), plus scenario.toml.",
    )
    if not files:
        return None
    try:
        return data.materialize_upload([(f.name, f.getvalue()) for f in files], data.upload_root())
    except (UploadError, OSError) as err:
        st.error(f"Upload not used: {err}")
        return None


def run_picker() -> None:
    """Sidebar: choose a run from the command line, a folder, or an upload; remember it in RUN_KEY."""
    with st.sidebar:
        st.subheader("Run")
        root = data.allowed_root(os.environ)
        folder = st.text_input(
            "Runs folder",
            value=str(root),
            help=f"A run directory, or a folder of them, under {root} (the folder the dashboard was "
            "started with: `plancast dashboard --runs-folder DIR`).",
        )
        uploaded = _uploaded_run()
        found = data.command_line_runs(sys.argv, APP_SCRIPT, os.environ)
        try:
            roots = [root, *filter(None, [data.session_upload_root()])]
            found += data.runs_in_folder(data.confined(folder, roots), roots)
        except UploadError as err:
            st.error(str(err))
        choices = list(dict.fromkeys([uploaded, *found] if uploaded else found))
        if not choices:
            st.info(
                f"No run found in {folder!r}. Pass one to `plancast dashboard RUN`, type a folder of runs "
                "above, or upload one."
            )
            st.session_state.pop(RUN_KEY, None)
            return
        chosen = st.selectbox(
            "Show run", choices, format_func=lambda p: p.name, help="Runs found, by folder name"
        )
        st.caption(f"`{chosen}`")
        st.session_state[RUN_KEY] = str(chosen)


def current_run() -> RunData:
    """The chosen run, after warning about each file that could not be read; stops the page if none."""
    chosen = st.session_state.get(RUN_KEY)
    if chosen is None:
        st.info("Choose a run in the sidebar.")
        st.stop()
    path = Path(chosen)
    if not data.looks_like_run(path):
        st.error(f"{path} is not a run directory (no scenario.toml, predicted/ or measured/).")
        st.stop()
    run = data.get_run(path)
    for problem in run.problems:
        st.warning(problem, icon=":material/warning:")
    machine_load_banner(run)
    return run


def machine_load(
    run: RunData, predicted_s: float | None = None, measured_s: float | None = None
) -> dict[str, Any] | None:
    """How busy and how fast the machine was for the run (traces/contention.py), or None where the run
    recorded neither a core share nor a speed probe. The references are the ones `plancast compare`
    used (RUN/compare/summary.json), else a core of its own and no speed; step times default to the
    predicted and measured summaries'."""
    measured = run.measured_summary or {}
    share = share_or_none(measured.get("core_share"))
    if share is None and measured.get("speed_probe_s") is None:
        return None
    compared = _compare_summary(run)
    reference = share_or_none(compared.get("core_share_reference")) or 1.0
    # compare kept the reference probe only where it ran the run's workload
    probe = {
        "probe_s": compared.get("speed_probe_reference_s"),
        "workload": measured.get("speed_probe_workload"),
    }
    speed = machine_speed(measured, probe)
    predicted_s = predicted_s or (run.predicted_summary or {}).get("step_time_s")
    measured_s = measured_s or measured.get("step_time_s")
    own = share_or_none(measured.get("core_share_own"))
    return speed | contention(predicted_s, measured_s, share, reference, own, speed["speed_factor"])


def _compare_summary(run: RunData) -> dict[str, Any]:
    """RUN/compare/summary.json, empty where absent or unreadable (compare rewrites it meanwhile)."""
    compared = RunDir(run.path).compare_summary
    if compared.is_file():
        with contextlib.suppress(TraceReadError):
            return read_json_object(compared)
    return {}


def machine_load_banner(run: RunData) -> None:
    """Every page: a run measured on a busy machine, or one whose speed changed during its steps, says
    so first (its errors are not the model's)."""
    keys = machine_load(run) or {}
    for line, flagged in (
        (verdict(keys), keys.get("machine_busy")),
        (speed_verdict(keys), keys.get("machine_speed_changed")),
    ):
        if line and flagged:
            st.warning(line, icon=":material/speed:")
        elif line:
            st.caption(line)


def measured_step_picker(run: RunData) -> int | None:
    """A select box of the measured steps, defaulting to the one reconciliation scores; None if none."""
    if not run.has_measured:
        return None
    steps = sorted(int(s) for s in run.measured["step"].unique())
    default = median_step(run.measured, scored_steps(run.measured))
    return int(
        st.selectbox(
            "Measured step",
            steps,
            index=steps.index(default),
            help="Step 0 is the warm-up; the default is the median step that reconciliation scores.",
        )
    )
