"""Decision: what the whole run costs (time to train, goodput under failures, money, energy) on this
run's plan, how goodput falls with scale, and which cluster and size to buy (a cross-cluster search)."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from plancast.dashboard import decision_charts, frames
from plancast.dashboard.app_pages.common import current_run
from plancast.pool import collector_paused
from plancast.simulator.catalog import CLUSTERS
from plancast.simulator.cluster_search import RANK_KEYS, search
from plancast.simulator.goodput import goodput_curve, plan_run
from plancast.simulator.scenario import Scenario

SEARCH_KEY = "plancast_decision"  # session state: the ranked plans shown, kept across reruns
DEFAULT_TOKENS = 300e9  # GPT-3's training run (Brown et al. 2020, sec. 2.2), when the scenario has none
SCALE_GPUS = [2**k for k in range(3, 16)]  # 8 .. 32,768 GPUs


@st.cache_data(show_spinner="Searching plans on each cluster and size…", max_entries=8)
def cached_search(
    scenario_json: str, gpus: tuple[int, ...], clusters: tuple[str, ...], rank_by: str
) -> pd.DataFrame:
    s = Scenario.model_validate_json(scenario_json)
    with collector_paused():  # as the CLI's searches run (plancast/pool.py)
        found = search(s, list(gpus), list(clusters), rank_by=rank_by, finalists=2)
    return pd.DataFrame(found.rows)


def this_plan(s: Scenario, step_time_s: float | None, power_W: float | None) -> None:
    g = plan_run(s, step_time_s or 0.0, power_W=power_W)
    if g is None:
        st.info("This run has no prediction to plan from: run `plancast simulate SCENARIO --out RUN`.")
        return
    cols = st.columns(5)
    days = g["time_to_train_days"]
    cols[0].metric("Goodput", f"{g['goodput_fraction']:.1%}")
    cols[1].metric("Time to train", "never" if days is None else f"{days:.3g} days")
    cols[2].metric("GPU-hours", "-" if g["gpu_hours"] is None else f"{g['gpu_hours']:,.0f}")
    cols[3].metric("Cost", "-" if g["cost_usd"] is None else f"${g['cost_usd']:,.0f}")
    cols[4].metric("Energy", "-" if g["energy_MWh"] is None else f"{g['energy_MWh']:.3g} MWh")
    st.caption(
        f"Checkpoint {g['checkpoint_bytes'] / 1e9:.3g} GB every "
        f"{frames.format_seconds(g['checkpoint_interval_s'])} "
        f"({g['checkpoint_interval_source']}); job MTBF {g['job_mtbf_hours']:.3g} h; energy at "
        f"{'-' if g['power_W'] is None else format(g['power_W'], '.4g')} W per GPU ({g['power_source']}). "
        "Cost and energy need cluster.gpu.price_usd_per_hour and power_W (catalog GPUs have them)."
    )


def across_clusters(s: Scenario) -> None:
    with st.form("decision_search"):
        cols = st.columns(3)
        clusters = cols[0].multiselect(
            "Clusters", [c for c in CLUSTERS if c != "local-cpu"], default=["dgx-a100-80gb", "dgx-h100-80gb"]
        )
        sizes = cols[1].text_input("GPU counts", value="8,16", help="Comma-separated, multiples of 8")
        rank_by = cols[2].selectbox("Rank by", list(RANK_KEYS), index=list(RANK_KEYS).index("cost"))
        submitted = st.form_submit_button("Search", type="primary")
    if submitted:
        try:
            gpus = tuple(int(x) for x in sizes.split(",") if x.strip())
            st.session_state[SEARCH_KEY] = cached_search(s.model_dump_json(), gpus, tuple(clusters), rank_by)
        except ValueError as err:
            st.error(f"Search not possible: {err}")
    plans = st.session_state.get(SEARCH_KEY)
    if plans is None:
        return
    if len(plans) == 0:
        st.warning("No plan fits on any of the clusters and sizes searched.")
        return
    st.caption(
        f"{len(plans)} plans, {int(plans['pareto'].sum())} on the Pareto front "
        "(no other plan is both faster and cheaper)."
    )
    st.altair_chart(decision_charts.decision_chart(plans), width="stretch")
    columns = ["cluster", "gpus", "plan", "step_time_s", "goodput_fraction", "time_to_train_days", "cost_usd"]
    st.dataframe(plans[[*columns, "energy_MWh", "pareto"]], width="stretch", hide_index=True)


st.title("Decision")
run = current_run()
if run.scenario is None:
    st.warning("This run has no readable scenario.toml: nothing to plan.")
    st.stop()
tokens = st.number_input(
    "Tokens to train",
    min_value=1e6,
    value=float(run.scenario.training.total_tokens or DEFAULT_TOKENS),
    format="%.4g",
    help="training.total_tokens; the default is GPT-3's 300B when the scenario does not set it",
)
planned = run.scenario.model_copy(
    update={"training": run.scenario.training.model_copy(update={"total_tokens": float(tokens)})}
)
st.subheader("This plan")
this_plan(
    planned, (run.predicted_summary or {}).get("step_time_s"), decision_charts.mean_power_W(run.telemetry)
)
st.subheader("How goodput falls with scale")
st.altair_chart(
    decision_charts.goodput_scale_chart(pd.DataFrame(goodput_curve(planned, SCALE_GPUS))), width="stretch"
)
st.subheader("Which cluster, how many GPUs")
across_clusters(planned)
