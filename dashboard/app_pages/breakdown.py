"""Breakdown: compute / exposed comm per stream / bubble / optimizer per rank, predicted vs measured."""

from __future__ import annotations

import streamlit as st

from plancast.dashboard import charts, frames
from plancast.dashboard.app_pages.common import current_run, measured_step_picker

run = current_run()
st.title("Breakdown")
if not run.has_predicted and not run.has_measured:
    st.error("No readable events in this run.")
    st.stop()
step = measured_step_picker(run)
events = frames.step_events(run.predicted, run.measured, step)
parts = frames.breakdown(events)
st.caption(
    "Per rank of one step: compute (without the optimizer), optimizer, communication not hidden under "
    "compute (per stream), and bubble (waiting on the pipeline). Left bar predicted, right bar measured."
)
bubble_cols = st.columns(2)
for col, (source, fraction) in zip(bubble_cols, frames.bubble_fractions(events).items(), strict=False):
    col.metric(f"Bubble fraction ({source})", f"{fraction:.1%}", help="The critical rank's, as simulate")
st.altair_chart(charts.breakdown_chart(parts), width="stretch")
table = parts.pivot_table(index=["rank", "source"], columns="component", values="ms", aggfunc="sum")
st.dataframe(table.reset_index(), hide_index=True)
