"""Overview: predicted vs measured step time, error per component, alignment counts, critical path."""

from __future__ import annotations

from typing import Any

import streamlit as st

from plancast.dashboard import charts, data, frames
from plancast.dashboard.app_pages.common import current_run, machine_load
from plancast.dashboard.data import RunData
from plancast.traces.contention import BUSY_LABEL, SPEED_CHANGED_LABEL
from plancast.traces.reconcile import Reconciliation
from plancast.traces.telemetry import busy_gpu


def prediction_only(run: RunData) -> None:
    st.info(
        "Only a prediction: this run has no measured events (measured/rank-*.parquet), so there is "
        "nothing to compare yet. Run it with `plancast run SCENARIO --out RUN`."
    )
    summary = run.predicted_summary
    if summary is None:
        st.error("predicted/summary.json is absent or unreadable: nothing to show.")
        return
    cols = st.columns(4)
    cols[0].metric("Predicted step time", frames.format_seconds(float(summary["step_time_s"])))
    cols[1].metric("Bubble fraction", f"{summary.get('bubble_fraction', float('nan')):.1%}")
    cols[2].metric("Peak memory", f"{summary.get('peak_memory_gib', float('nan')):.3g} GiB")
    cols[3].metric("MFU", f"{summary.get('mfu', float('nan')):.1%}")
    st.subheader("Where the predicted step goes")
    st.dataframe(frames.predicted_breakdown_rows(summary), hide_index=True)


def comparison(run: RunData) -> None:
    try:
        rec = data.get_reconciliation(run)
    except ValueError as err:
        st.error(f"Predicted and measured events cannot be reconciled: {err}")
        return
    error = frames.format_error(rec.step_time_error)
    head = st.columns(4)
    head[0].metric(
        "Predicted step time",
        frames.format_seconds(rec.step_time_predicted_s),
        delta=f"{error} vs measured",
        delta_color="off",
    )
    head[1].metric(
        "Measured step time",
        frames.format_seconds(rec.step_time_measured_s),
        help=f"Step {rec.step}: the median of measured steps {list(rec.scored_steps)} (the lower of the "
        "middle two when even; step 0 is warm-up).",
    )
    head[2].metric("Step-time error", error, help="(predicted − measured) / measured")
    adjusted_error(head[3], run, rec)
    bubble = st.columns(2)
    bubble[0].metric("Bubble fraction (predicted)", f"{rec.bubble_fraction_predicted:.1%}")
    bubble[1].metric("Bubble fraction (measured)", f"{rec.bubble_fraction_measured:.1%}")
    measured_conditions(run)
    cols = st.columns(3)
    cols[0].metric("Events matched", len(rec.matched))
    cols[1].metric("Events missing", len(rec.missing), help="Predicted but not measured")
    cols[2].metric("Events extra", len(rec.extra), help="Measured but not predicted")

    st.subheader(f"Error per component (measured step {rec.step})")
    components = frames.component_rows(rec.components)
    left, right = st.columns([1, 1])
    left.dataframe(
        components,
        hide_index=True,
        column_config={
            "predicted": st.column_config.NumberColumn(format="%.4g"),
            "measured": st.column_config.NumberColumn(format="%.4g"),
            "error_pct": st.column_config.NumberColumn("error", format="%+.1f%%"),
        },
    )
    right.altair_chart(charts.component_error_chart(components), width="stretch")

    st.subheader("Largest mismatches")
    st.dataframe(rec.largest_mismatches, hide_index=True)

    st.subheader("Critical path of the measured step")
    path = rec.critical_path
    if len(path):
        span_ms = float((path["start_us"] + path["dur_us"]).max() - path["start_us"].min()) / 1e3
        st.caption(f"{len(path)} events over ranks {sorted(set(path['rank']))}, {span_ms:.1f} ms end to end.")
    st.dataframe(frames.critical_path_rows(path), hide_index=True)


def adjusted_error(col: Any, run: RunData, rec: Reconciliation) -> None:
    """The step-time error with the run's measured core share (and speed, where probed against a
    reference) applied to the prediction, where recorded."""
    load = machine_load(run, rec.step_time_predicted_s, rec.step_time_measured_s)
    if load is not None and isinstance(load["step_time_error_adjusted"], float):
        sped = load["speed_factor"] is not None
        flag = BUSY_LABEL if load["machine_busy"] else None
        flag = flag or (SPEED_CHANGED_LABEL if load["machine_speed_changed"] else None)
        col.metric(
            "Error at the measured core share" + (" and speed" if sped else ""),
            frames.format_error(load["step_time_error_adjusted"]),
            delta=flag,
            delta_color="off",
            help="The prediction x the reference core share / the run's measured share"
            + (" x the run's speed probe / the reference's" if sped else "")
            + " (traces/contention.py): what the model says for the cores the ranks actually got.",
        )


def measured_conditions(run: RunData) -> None:
    """What the measured step ran under, as `plancast compare` prints it: the ranks' wait for a CPU core
    (measured/summary.json) and the GPUs' clock while busy (measured/telemetry.parquet)."""
    wait = (run.measured_summary or {}).get("core_wait_s")
    gpu = busy_gpu(run.telemetry) if run.telemetry is not None else None
    if not isinstance(wait, int | float) and gpu is None:
        return
    cols = st.columns(3)
    if isinstance(wait, int | float) and not isinstance(wait, bool):
        cols[0].metric(
            "Measured core wait",
            f"{wait * 1e3:.3g} ms a step",
            help="A rank's threads ready to run with no core free (Linux schedstat).",
        )
    if gpu is not None and gpu["sm_clock_MHz"] is not None:
        cols[1].metric(
            "GPU SM clock while busy",
            f"{gpu['sm_clock_MHz']:.0f} MHz",
            help=f"Median of {gpu['busy_samples']} samples at >= 50% utilization (the slowest GPU's). A "
            "long job at the power limit settles at a lower clock than a short check.",
        )
        if gpu["power_W"] is not None:
            cols[2].metric("GPU power while busy", f"{gpu['power_W']:.0f} W")


def measured_status(run: RunData) -> None:
    """A failed or interrupted measured run says so above everything else (its steps are partial)."""
    summary = run.measured_summary or {}
    status = summary.get("status")
    if run.has_measured and status not in (None, "ok"):
        reason = summary.get("reason") or "no reason recorded"
        st.error(
            f"The measured run {status}: {reason}. Only the steps it finished are shown.",
            icon=":material/error:",
        )


run = current_run()
st.title(f"Run {run.name}")
measured_status(run)
if run.has_measured and run.has_predicted:
    comparison(run)
elif run.has_predicted or run.predicted_summary is not None:
    prediction_only(run)
elif run.has_measured:
    st.info("Only measured events: there is no prediction (predicted/events.parquet) to compare them with.")
else:
    st.error(f"{run.path} has neither readable predicted nor measured events.")
