"""Sweep: step time vs memory of many plans (a `plancast sweep --table` CSV, or a sweep run here)."""

from __future__ import annotations

import io
import os

import pandas as pd
import streamlit as st

from plancast.dashboard import charts, data, frames
from plancast.dashboard.app_pages.common import current_run
from plancast.dashboard.data import UploadError
from plancast.simulator.validation import MAX_WORLD_SIZE

SWEEP_KEY = "plancast_sweep"  # session state: the plans table shown, kept across reruns
FROM_SCENARIO, FROM_CSV = "Sweep this run's scenario", "Load a sweep CSV"


def sweep_from_scenario() -> None:
    run = current_run()
    if run.scenario is None:
        st.warning("This run has no readable scenario.toml to sweep; load a CSV instead.")
        return
    s = run.scenario
    cols = st.columns(2)
    gpus = cols[0].number_input(
        "GPUs", min_value=1, max_value=MAX_WORLD_SIZE, value=s.world_size, step=s.cluster.gpus_per_node
    )
    finalists = cols[1].number_input("Plans simulated in full", min_value=1, max_value=200, value=24)
    if st.button("Run sweep", type="primary"):
        try:
            st.session_state[SWEEP_KEY] = data.cached_sweep(s.model_dump_json(), int(gpus), int(finalists))
        except ValueError as err:
            st.error(f"Sweep not possible: {err}")


def sweep_from_csv() -> None:
    path = st.text_input(
        "CSV path",
        placeholder="sweep.csv",
        help="Written by `plancast sweep SCENARIO --gpus N --table FILE`, under the dashboard's runs folder.",
    )
    upload = st.file_uploader("…or upload the CSV", type=["csv"])
    try:
        if upload is not None:
            st.session_state[SWEEP_KEY] = data.read_sweep_csv(io.BytesIO(upload.getvalue()), upload.name)
        elif path:
            root = data.allowed_root(os.environ)
            st.session_state[SWEEP_KEY] = data.read_sweep_csv(data.confined(path, [root]), path)
    except UploadError as err:
        st.error(str(err))


def show(plans: pd.DataFrame) -> None:
    if len(plans) == 0:
        st.warning("No plan fits in memory: the sweep found nothing to show.")
        return
    if "plan" not in plans.columns:
        plans = plans.assign(plan=[f"plan {i}" for i in range(len(plans))])
    plans = plans.assign(pareto=frames.pareto_front(plans)).sort_values("step_time_s", kind="stable")
    st.caption(
        f"{len(plans)} plans, {int(plans['pareto'].sum())} on the Pareto front "
        "(no other plan is both faster and smaller)."
    )
    selected = st.selectbox("Plan", plans["plan"].tolist(), help="Fastest first")
    st.altair_chart(charts.sweep_chart(plans, selected), width="stretch")
    row = plans[plans["plan"] == selected].iloc[0]
    cols = st.columns(3)
    cols[0].metric("Step time", frames.format_seconds(float(row["step_time_s"])))
    cols[1].metric("Peak memory", f"{row['peak_memory_gib']:.3g} GiB")
    if "mfu" in row and pd.notna(row["mfu"]):
        cols[2].metric("MFU", f"{row['mfu']:.1%}")
    st.dataframe(row.drop(labels=["pareto"]).astype(str).rename("value"), width="stretch")


st.title("Sweep")
source = st.radio("Plans", [FROM_SCENARIO, FROM_CSV], horizontal=True)
if source == FROM_SCENARIO:
    sweep_from_scenario()
else:
    sweep_from_csv()
plans = st.session_state.get(SWEEP_KEY)
if plans is not None:
    show(plans)
