"""Pure chart builders: a shaped DataFrame (dashboard.frames) in, an Altair chart out.

No Streamlit and no I/O here, so every chart is unit-tested through ``chart.to_dict()``.
"""

from __future__ import annotations

import altair as alt
import pandas as pd

from plancast.dashboard.frames import SOURCES, lane_order

SOURCE_COLORS = alt.Scale(domain=list(SOURCES), range=["#4c78a8", "#f58518"])
STREAM_ROW_PX = 14  # height of one stream's row inside a rank's lane


def component_error_chart(components: pd.DataFrame) -> alt.Chart:
    """Signed error per component (frames.component_rows), coloured by the direction of the miss."""
    data = components.dropna(subset=["error_pct"])[["component", "error_pct"]]
    data = data.assign(
        direction=["predicted too high" if e > 0 else "predicted too low" for e in data["error_pct"]]
    )
    return (
        alt.Chart(data, title="Prediction error per component")
        .mark_bar()
        .encode(
            x=alt.X("error_pct:Q", title="error (predicted − measured) / measured, %"),
            y=alt.Y("component:N", sort="x", title=None),
            color=alt.Color(
                "direction:N",
                title=None,
                scale=alt.Scale(
                    domain=["predicted too low", "predicted too high"], range=["#4c78a8", "#f58518"]
                ),
                legend=alt.Legend(orient="bottom"),
            ),
            tooltip=["component:N", alt.Tooltip("error_pct:Q", format="+.1f", title="error %")],
        )
    )


def gantt_chart(timeline: pd.DataFrame) -> alt.Chart:
    """Gantt of one step: a lane per rank and source (predicted above measured), streams stacked
    inside a lane, colour = kind; drag to pan, scroll to zoom the time axis."""
    lanes = lane_order(timeline)
    zoom = alt.selection_interval(bind="scales", encodings=["x"])
    return (
        alt.Chart(timeline, title="Timeline of one step")
        .mark_bar()
        .encode(
            x=alt.X("start_ms:Q", title="time from step start (ms)"),
            x2="end_ms:Q",
            y=alt.Y("lane:N", sort=lanes, title=None),
            yOffset=alt.YOffset("stream:N", title="stream"),
            color=alt.Color("kind:N", title="kind"),
            tooltip=[
                "rank:O",
                "source:N",
                "stream:N",
                "kind:N",
                "stage:O",
                "microbatch:O",
                alt.Tooltip("start_ms:Q", format=".3f"),
                alt.Tooltip("dur_ms:Q", format=".3f"),
            ],
        )
        .properties(height=alt.Step(STREAM_ROW_PX))  # with yOffset, the step sizes each stream's row
        .add_params(zoom)
    )


def breakdown_chart(breakdown: pd.DataFrame) -> alt.Chart:
    """Stacked time components per rank, predicted and measured side by side (frames.breakdown)."""
    return (
        alt.Chart(breakdown, title="Where each rank's step time goes")
        .mark_bar()
        .encode(
            x=alt.X("rank:O", title="rank"),
            xOffset=alt.XOffset("source:N", sort=list(SOURCES)),
            y=alt.Y("sum(ms):Q", stack="zero", title="time (ms)"),
            color=alt.Color("component:N", title="component"),
            opacity=alt.Opacity("source:N", sort=list(SOURCES), scale=alt.Scale(range=[1.0, 0.6])),
            tooltip=["rank:O", "source:N", "component:N", alt.Tooltip("ms:Q", format=".2f")],
        )
    )


def memory_chart(memory: pd.DataFrame, limit_gib: float | None) -> alt.LayerChart:
    """Peak memory per rank: predicted components stacked next to the measured peak, a rule at the
    GPU's memory (frames.memory)."""
    bars = (
        alt.Chart(memory)
        .mark_bar()
        .encode(
            x=alt.X("rank:O", title="rank"),
            xOffset=alt.XOffset("source:N", sort=list(SOURCES)),
            y=alt.Y("sum(gib):Q", stack="zero", title="peak memory (GiB)"),
            color=alt.Color("component:N", title="component"),
            tooltip=["rank:O", "source:N", "component:N", alt.Tooltip("gib:Q", format=".3f")],
        )
    )
    limit = pd.DataFrame({"limit_gib": [limit_gib] if limit_gib is not None else []})
    rule = (
        alt.Chart(limit)
        .mark_rule(color="#e45756", strokeDash=[6, 4], size=2)
        .encode(y="limit_gib:Q", tooltip=[alt.Tooltip("limit_gib:Q", title="GPU memory (GiB)")])
    )
    return alt.LayerChart(layer=[bars, rule], title="Peak memory per rank")


def memory_timeline_chart(timeline: pd.DataFrame) -> alt.FacetChart:
    """Memory over one step, predicted against measured: a line per source over the rank's compute events
    in issue order, one row per rank shown (frames.memory_timeline)."""
    return (
        alt.Chart(timeline)
        .mark_line(point=True)
        .encode(
            x=alt.X("order:Q", title="compute event of the step, in issue order"),
            y=alt.Y("gib:Q", title="allocated (GiB)"),
            color=alt.Color("source:N", sort=list(SOURCES), title="source"),
            tooltip=[
                "source:N",
                "kind:N",
                "stage:Q",
                "chunk:Q",
                "microbatch:Q",
                alt.Tooltip("gib:Q", format=".3f"),
            ],
        )
        .properties(height=180)
        .facet(row=alt.Row("rank:O", title="rank"), title="Memory over the step")
    )


def telemetry_chart(samples: pd.DataFrame, metric: str, title: str) -> alt.Chart:
    """One telemetry metric over time, a line per GPU (frames.telemetry)."""
    return (
        alt.Chart(samples, title=title)
        .mark_line()
        .encode(
            x=alt.X("time_s:Q", title="time (s)"),
            y=alt.Y(f"{metric}:Q", title=title),
            color=alt.Color("device:N", title="GPU"),
            tooltip=[
                "device:N",
                alt.Tooltip("time_s:Q", format=".2f"),
                alt.Tooltip(f"{metric}:Q", format=".1f"),
            ],
        )
        .add_params(alt.selection_interval(bind="scales", encodings=["x"]))
    )


def sweep_chart(plans: pd.DataFrame, selected: str | None = None) -> alt.LayerChart:
    """Step time vs peak memory of each plan; the Pareto front (``pareto`` column) drawn as a line,
    ``selected`` (a ``plan`` label) ringed."""
    base = alt.Chart(plans).encode(
        x=alt.X("peak_memory_gib:Q", title="peak memory per GPU (GiB)", scale=alt.Scale(zero=False)),
        y=alt.Y("step_time_s:Q", title="step time (s)", scale=alt.Scale(zero=False)),
    )
    points = base.mark_circle(size=70).encode(
        color=alt.Color(
            "pareto:N",
            title="Pareto front",
            scale=alt.Scale(domain=[True, False], range=["#e45756", "#9ecae9"]),
        ),
        tooltip=[
            "plan:N",
            alt.Tooltip("step_time_s:Q", format=".4f"),
            alt.Tooltip("peak_memory_gib:Q", format=".2f"),
        ],
    )
    front = base.transform_filter(alt.datum.pareto).mark_line(color="#e45756", strokeDash=[4, 3])
    ring = (
        alt.Chart(plans[plans["plan"] == selected])
        .mark_point(size=300, color="black", strokeWidth=2)
        .encode(x="peak_memory_gib:Q", y="step_time_s:Q")
    )
    return alt.LayerChart(layer=[front, points, ring], title="Step time vs memory of each plan")


def step_time_chart(rows: pd.DataFrame) -> alt.Chart:
    """The step times the What-if page compares (frames.step_time_rows)."""
    return (
        alt.Chart(rows, title="Step time")
        .mark_bar()
        .encode(
            x=alt.X("step_time_ms:Q", title="step time (ms)"),
            y=alt.Y("label:N", sort=list(rows["label"]), title=None),
            color=alt.Color("label:N", legend=None),
            tooltip=["label:N", alt.Tooltip("step_time_ms:Q", format=".2f")],
        )
    )
