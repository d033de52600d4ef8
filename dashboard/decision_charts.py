"""Pure helpers of the Decision page: its chart builders (DataFrame -> Altair chart, testable without a
browser) and the measured power it plans the energy with."""

from __future__ import annotations

import math

import altair as alt
import pandas as pd


def mean_power_W(telemetry: pd.DataFrame | None) -> float | None:
    """Mean board power of one GPU over a run's telemetry samples (every GPU, every sample); None when
    nothing was sampled (CPU runs, boards that do not report power)."""
    if telemetry is None or "power_W" not in telemetry.columns:
        return None
    power = float(telemetry["power_W"].mean())
    return None if math.isnan(power) else power


def goodput_scale_chart(curve: pd.DataFrame) -> alt.Chart:
    """Goodput against GPU count (simulator.goodput.goodput_curve rows), log-scaled GPUs."""
    return (
        alt.Chart(curve, title="Goodput at a fixed per-GPU failure rate")
        .mark_line(point=True)
        .encode(
            x=alt.X("gpus:Q", title="GPUs", scale=alt.Scale(type="log", base=2)),
            y=alt.Y(
                "goodput_fraction:Q", title="goodput (useful share of wall time)", axis=alt.Axis(format="%")
            ),
            tooltip=[
                alt.Tooltip("gpus:Q", format=",.0f"),
                alt.Tooltip("goodput_fraction:Q", format=".2%"),
                alt.Tooltip("job_mtbf_hours:Q", title="job MTBF (h)", format=".3g"),
                alt.Tooltip("checkpoint_interval_s:Q", title="checkpoint every (s)", format=".4g"),
            ],
        )
    )


def decision_chart(plans: pd.DataFrame) -> alt.LayerChart:
    """Time to train against cost of every plan (simulator.cluster_search rows): one colour per cluster,
    size by GPU count, the Pareto front (``pareto`` column) as a dashed line."""
    known = plans.dropna(subset=["time_to_train_days", "cost_usd"])
    base = alt.Chart(known).encode(
        x=alt.X("time_to_train_days:Q", title="time to train (days)", scale=alt.Scale(zero=False)),
        y=alt.Y("cost_usd:Q", title="cost (USD)", scale=alt.Scale(zero=False)),
    )
    points = base.mark_circle(opacity=0.8).encode(
        color=alt.Color("cluster:N", title="cluster"),
        size=alt.Size("gpus:Q", title="GPUs"),
        tooltip=[
            "cluster:N",
            "gpus:Q",
            "plan:N",
            alt.Tooltip("time_to_train_days:Q", format=".3g"),
            alt.Tooltip("cost_usd:Q", format=",.0f"),
            alt.Tooltip("energy_MWh:Q", format=".4g"),
            alt.Tooltip("goodput_fraction:Q", format=".1%"),
        ],
    )
    front = base.transform_filter(alt.datum.pareto).mark_line(color="#e45756", strokeDash=[4, 3])
    return alt.LayerChart(layer=[front, points], title="Time to train vs cost")
