"""Breakdown: compute / exposed comm per stream / bubble / optimizer per rank, predicted vs measured."""

from __future__ import annotations

import streamlit as st

from plancast.dashboard import charts, frames
from plancast.dashboard.app_pages.common import current_run, measured_step_picker
from plancast.traces.reconcile import overlapped_streams

run = current_run()
st.title("Breakdown")
if not run.has_predicted and not run.has_measured:
    st.error("No readable events in this run.")
    st.stop()
step = measured_step_picker(run)
events = frames.step_events(run.predicted, run.measured, step)
overlapped = overlapped_streams(run.predicted_summary)  # tp_comm_overlap hides the prediction's tp
parts = frames.breakdown(events, overlapped)
st.caption(
    "Per rank of one step: compute (without the optimizer), optimizer, communication not hidden under "
    "compute (per stream), and bubble (waiting on the pipeline). Left bar predicted, right bar measured."
)
bubble_cols = st.columns(2)
fractions = frames.bubble_fractions(events, overlapped)
for col, (source, fraction) in zip(bubble_cols, fractions.items(), strict=False):
    col.metric(f"Bubble fraction ({source})", f"{fraction:.1%}", help="The critical rank's, as simulate")
st.altair_chart(charts.breakdown_chart(parts), width="stretch")
table = parts.pivot_table(index=["rank", "source"], columns="component", values="ms", aggfunc="sum")
st.dataframe(table.reset_index(), hide_index=True)
