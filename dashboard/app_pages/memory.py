"""Memory: predicted (by component) vs measured peak memory per rank, against the GPU's memory."""

from __future__ import annotations

import streamlit as st

from plancast.dashboard import charts, frames
from plancast.dashboard.app_pages.common import current_run

LIMIT_IN_VIEW = 0.05  # draw the GPU-memory rule by default when the peak reaches 5% of it

run = current_run()
st.title("Memory")
table = frames.memory(run.scenario, run.predicted_summary, run.measured_summary)
limit = frames.memory_limit_gib(run.scenario, run.predicted_summary)
if len(table) == 0:
    st.error(
        "No memory figures: scenario.toml, predicted/summary.json and measured/summary.json are all unusable."
    )
    st.stop()
if "measured" not in set(table["source"]):
    st.info(
        "No measured per-rank peak memory (measured/summary.json `ranks[].peak_memory_gib`): "
        "showing the prediction only."
    )
cols = st.columns(3)
peaks = table.groupby(["source", "rank"])["gib"].sum()
for col, source in zip(cols, frames.SOURCES, strict=False):
    if source in peaks.index.get_level_values(0):
        col.metric(f"{source.capitalize()} peak", f"{peaks[source].max():.3g} GiB")
if limit is not None:
    cols[2].metric("GPU memory", f"{limit:g} GiB")
if run.scenario is not None and run.scenario.world_size > frames.MAX_MEMORY_RANKS:
    st.caption("Large world: one representative rank (the first) per pipeline stage is shown.")
highest = float(peaks.max())
show_limit = limit is not None and st.toggle(
    "Draw the GPU's memory",
    value=limit is not None and highest >= LIMIT_IN_VIEW * limit,
    help="Off by default when the peaks are a small fraction of the GPU's memory, so the bars stay visible.",
)
st.altair_chart(charts.memory_chart(table, limit if show_limit else None), width="stretch")
st.dataframe(
    table.pivot_table(index=["rank", "source"], columns="component", values="gib").reset_index(),
    hide_index=True,
)

st.subheader("Over the step")
timeline = frames.memory_timeline(run.scenario, run.measured_summary)
if len(timeline) == 0:
    st.info("No memory timeline: the run has no usable scenario.toml to predict it from.")
else:
    if "measured" not in set(timeline["source"]):
        st.caption(
            "Measured: not recorded for this run (the runtime records allocated memory at each compute "
            "event on GPU only; CPU runs report the peak). Showing the prediction."
        )
    st.altair_chart(charts.memory_timeline_chart(timeline), width="stretch")
