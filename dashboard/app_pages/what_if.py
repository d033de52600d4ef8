"""What-if: change the plan's knobs, re-simulate, compare with the original prediction and the measurement."""

from __future__ import annotations

import math

import streamlit as st

from plancast.dashboard import charts, data, frames
from plancast.dashboard.app_pages.common import current_run
from plancast.simulator.loader import ScenarioError
from plancast.simulator.scenario import Scenario
from plancast.simulator.schedules import SCHEDULE_NAMES
from plancast.simulator.sweep_axes import RECOMPUTE
from plancast.simulator.validation import BOUNDS

NO_CHANGE = 5e-4  # relative step-time change shown as no change


def divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def knobs(s: Scenario) -> frames.WhatIf:
    """The widgets, starting at the run's plan."""
    now = frames.WhatIf.of(s)
    degrees = divisors(s.world_size)
    cols = st.columns(4)
    tp = cols[0].selectbox("Tensor parallel (tp)", degrees, index=degrees.index(now.tp))
    pp = cols[1].selectbox("Pipeline parallel (pp)", degrees, index=degrees.index(now.pp))
    mbs = cols[2].number_input(
        "Micro-batch size",
        min_value=1,
        max_value=int(BOUNDS["training.micro_batch_size"][1]),
        value=now.micro_batch_size,
    )
    zero = cols[3].selectbox("ZeRO stage", [0, 1, 2, 3], index=now.zero_stage)
    left, middle, right = st.columns(3)
    # every schedule plancast runs (the sweep searches fewer): a run of any of them opens here
    names: list[str] = list(SCHEDULE_NAMES)
    schedule = left.selectbox("Pipeline schedule", names, index=names.index(now.schedule))
    virtual = middle.number_input(
        "Virtual stages per rank",
        min_value=1,
        max_value=int(BOUNDS["parallelism.virtual_stages_per_rank"][1]),
        value=now.virtual_stages,
    )
    recompute = right.selectbox("Recompute", RECOMPUTE, index=RECOMPUTE.index(now.recompute))
    st.caption(f"World size {s.world_size}: data parallel = {s.world_size} / (tp · pp).")
    return frames.WhatIf(int(mbs), int(tp), int(pp), int(zero), str(schedule), int(virtual), str(recompute))


run = current_run()
st.title("What-if")
if run.scenario is None:
    st.warning("This run has no readable scenario.toml, so there is no plan to change.")
    st.stop()
change = knobs(run.scenario)
try:
    loaded = frames.what_if_scenario(run.scenario, change)
except ScenarioError as err:
    st.error(f"This plan cannot be simulated:\n\n{err}")
    st.stop()
for warning in loaded.warnings:
    st.warning(warning)
summary = data.cached_summary(loaded.scenario.model_dump_json())
original = run.predicted_summary or data.cached_summary(run.scenario.model_dump_json())
original_s = float(original["step_time_s"])
new_s = float(summary["step_time_s"])
measured_s: float | None = None
if run.has_measured and run.has_predicted:
    try:
        measured_s = data.get_reconciliation(run).step_time_measured_s
    except ValueError as err:
        st.caption(f"No measured step time: {err}")
cols = st.columns(3)
change_pct = (new_s - original_s) / original_s if original_s else math.nan
cols[0].metric(
    "What-if step time",
    frames.format_seconds(new_s),
    delta=f"{frames.format_error(change_pct)} vs original" if abs(change_pct) >= NO_CHANGE else None,
    delta_color="inverse",
)
cols[1].metric("Original prediction", frames.format_seconds(original_s))
cols[2].metric("Measured", frames.format_seconds(measured_s) if measured_s is not None else "n/a")
st.altair_chart(charts.step_time_chart(frames.step_time_rows(original_s, new_s, measured_s)), width="stretch")
st.dataframe(frames.summary_comparison(original, summary), hide_index=True)
