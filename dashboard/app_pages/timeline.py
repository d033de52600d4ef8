"""Timeline: a Gantt of one step per rank, predicted above measured."""

from __future__ import annotations

import streamlit as st

from plancast.dashboard import charts, frames
from plancast.dashboard.app_pages.common import current_run, measured_step_picker

DEFAULT_RANKS = 8

run = current_run()
st.title("Timeline")
if not run.has_predicted and not run.has_measured:
    st.error("No readable events in this run.")
    st.stop()
left, right = st.columns([1, 3])
with left:
    step = measured_step_picker(run)
events = frames.step_events(run.predicted, run.measured, step)
all_ranks = sorted(int(r) for r in events["rank"].unique())
with right:
    ranks = st.multiselect(
        "Ranks",
        all_ranks,
        default=all_ranks[:DEFAULT_RANKS],
        help="Fewer ranks draw faster and show every event.",
    )
if not ranks:
    st.info("Pick at least one rank.")
    st.stop()
gantt = frames.timeline(events, ranks)
if gantt.note:
    st.caption(gantt.note)
st.caption("Scroll to zoom the time axis, drag to pan, double-click to reset.")
st.altair_chart(charts.gantt_chart(gantt.frame), width="stretch")
