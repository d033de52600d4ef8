"""Telemetry: pynvml samples (utilisation, power, memory, SM clock, temperature) per GPU over time."""

from __future__ import annotations

import streamlit as st

from plancast.dashboard import charts, frames
from plancast.dashboard.app_pages.common import current_run

run = current_run()
st.title("Telemetry")
if run.telemetry is None:
    st.info("This run has no measured/telemetry.parquet (no measured run, or it could not be read).")
    st.stop()
if len(run.telemetry) == 0:
    st.info("The telemetry table is empty: the measured run had no GPU (the CPU path samples nothing).")
    st.stop()
samples = frames.telemetry(run.telemetry)
st.caption(f"{len(samples):,} samples from {samples['device'].nunique()} GPU(s).")
cols = st.columns(2)
for i, (metric, title) in enumerate(frames.TELEMETRY_METRICS.items()):
    cols[i % 2].altair_chart(charts.telemetry_chart(samples, metric, title), width="stretch")
