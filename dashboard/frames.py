"""Shape run tables into what the charts draw. Pure pandas: no Streamlit, no files.

Times come in as microseconds (the trace schema) and leave as milliseconds (``*_ms``), the unit the
pages show; memory is GiB throughout.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pandas as pd

from plancast.simulator import cluster_search
from plancast.simulator.costs.memory import GiB, rank_memory
from plancast.simulator.costs.memory_timeline import memory_timeline as predicted_timeline
from plancast.simulator.loader import Loaded, parse_scenario, to_toml_dict
from plancast.simulator.mesh import RankGrid
from plancast.simulator.scenario import Scenario
from plancast.simulator.schedules import build_schedule
from plancast.traces import schema
from plancast.traces.breakdown import rank_breakdown_us, step_bubble

US_PER_MS = 1e3
SOURCES = ("predicted", "measured")  # predicted is drawn above / left of measured
MAX_TIMELINE_MARKS = 20_000  # Vega-Lite stays interactive up to a few tens of thousands of bars
MAX_MEMORY_RANKS = 64  # above this, one representative rank per pipeline stage


def format_seconds(seconds: float) -> str:
    """``0.6462`` -> ``"646.2 ms"``, ``12.3`` -> ``"12.30 s"``; NaN -> ``"n/a"``."""
    if math.isnan(seconds):
        return "n/a"
    return f"{seconds * 1e3:.1f} ms" if abs(seconds) < 1 else f"{seconds:.2f} s"


def format_error(error: float) -> str:
    """Signed relative error as a percentage; NaN -> ``"n/a"``."""
    return "n/a" if math.isnan(error) else f"{error:+.1%}"


# ------------------------------------------------------------------------------------------ overview
def component_rows(components: pd.DataFrame) -> pd.DataFrame:
    """`Reconciliation.components` for display: ``component, unit, predicted, measured, error_pct``.

    Time components are in ms, ``peak_memory`` in GiB.
    """
    is_memory = components["predicted_s"].isna() & components["predicted_gib"].notna()
    out = pd.DataFrame(
        {"component": components["component"], "unit": is_memory.map({True: "GiB", False: "ms"})}
    )
    out["predicted"] = components["predicted_gib"].where(is_memory, components["predicted_s"] * 1e3)
    out["measured"] = components["measured_gib"].where(is_memory, components["measured_s"] * 1e3)
    out["error_pct"] = components["error"] * 100
    return out.reset_index(drop=True)


def critical_path_rows(path: pd.DataFrame) -> pd.DataFrame:
    """The critical path grouped by rank and kind: events, total_ms, share of the path's busy time."""
    if len(path) == 0:
        return pd.DataFrame(columns=["rank", "kind", "events", "total_ms", "share"])
    grouped = path.groupby(["rank", "kind"], sort=True)["dur_us"].agg(["count", "sum"]).reset_index()
    grouped.columns = ["rank", "kind", "events", "total_us"]
    grouped["total_ms"] = grouped.pop("total_us") / US_PER_MS
    grouped["share"] = grouped["total_ms"] / grouped["total_ms"].sum()
    return grouped.sort_values("total_ms", ascending=False, kind="stable").reset_index(drop=True)


def predicted_breakdown_rows(summary: Mapping[str, Any]) -> pd.DataFrame:
    """Where the predicted step goes, from predicted/summary.json: part, seconds, share of the step."""
    step = float(summary.get("step_time_s", math.nan))
    rows = [("compute", summary.get("compute_time_s"))]
    rows += [(f"exposed {k} comm", v) for k, v in (summary.get("exposed_comm_s") or {}).items()]
    rows += [
        ("optimizer", summary.get("optimizer_time_s")),
        ("pipeline bubble", summary.get("bubble_time_s")),
    ]
    frame = pd.DataFrame(
        [(n, float(v)) for n, v in rows if isinstance(v, int | float)], columns=["part", "seconds"]
    )
    frame["share"] = frame["seconds"] / step if step else math.nan
    return frame


# ------------------------------------------------------------------------------------------ timeline
def step_events(predicted: pd.DataFrame, measured: pd.DataFrame, measured_step: int | None) -> pd.DataFrame:
    """Predicted events of their first step and measured events of ``measured_step``, in one table."""
    parts = []
    if len(predicted):
        parts.append(predicted[predicted["step"] == predicted["step"].min()])
    if len(measured) and measured_step is not None:
        parts.append(measured[measured["step"] == measured_step])
    return pd.concat(parts, ignore_index=True) if parts else schema.empty_frame()


@dataclass(frozen=True)
class Timeline:
    """Gantt rows (``lane, rank, source, stream, kind, start_ms, end_ms, dur_ms, stage, microbatch``)."""

    frame: pd.DataFrame
    total_events: int

    @property
    def note(self) -> str | None:
        """Says so when not every event is drawn."""
        shown = len(self.frame)
        if shown == self.total_events:
            return None
        return (
            f"Showing the {shown:,} longest of {self.total_events:,} events, so the chart stays "
            "responsive; pick fewer ranks to see every event."
        )


def timeline(
    events: pd.DataFrame, ranks: Sequence[int] | None, max_marks: int = MAX_TIMELINE_MARKS
) -> Timeline:
    """Rows of ``events`` (one step per source) on ``ranks``, at most ``max_marks`` (the longest)."""
    chosen = events if ranks is None else events[events["rank"].isin(list(ranks))]
    total = len(chosen)
    if total > max_marks:
        chosen = chosen.nlargest(max_marks, "dur_us", keep="first")
    frame = pd.DataFrame(
        {
            "lane": [f"rank {r} · {s}" for r, s in zip(chosen["rank"], chosen["source"], strict=True)],
            "rank": chosen["rank"].astype(int),
            "source": chosen["source"].astype(str),
            "stream": chosen["stream"].astype(str),
            "kind": chosen["kind"].astype(str),
            "start_ms": chosen["start_us"] / US_PER_MS,
            "end_ms": (chosen["start_us"] + chosen["dur_us"]) / US_PER_MS,
            "dur_ms": chosen["dur_us"] / US_PER_MS,
            "stage": chosen["stage"].astype(int),
            "microbatch": chosen["microbatch"].astype(int),
        }
    )
    return Timeline(frame.sort_values(["rank", "source", "start_ms"]).reset_index(drop=True), total)


def lane_order(frame: pd.DataFrame) -> list[str]:
    """Lanes by rank, predicted above measured."""
    lanes = frame[["lane", "rank", "source"]].drop_duplicates()
    lanes = lanes.assign(order=lanes["source"].map({s: i for i, s in enumerate(SOURCES)}))
    return lanes.sort_values(["rank", "order"])["lane"].tolist()


# ----------------------------------------------------------------------------------------- breakdown
def breakdown(events: pd.DataFrame, overlapped: Collection[str] = ()) -> pd.DataFrame:
    """Per source and rank of one step: ``rank, source, component, ms`` (long form, for stacking).

    Components: compute (without the optimizer), optimizer, exposed comm per stream, bubble (the step
    time minus compute and exposed comm: the rank waits on the pipeline; traces/breakdown.py). They
    add up to the step time when the streams' exposed spans do not overlap one another.
    """
    parts = []
    for source in SOURCES:
        frame = events[events["source"] == source]
        if len(frame) == 0:
            continue
        step_us = float((frame["start_us"] + frame["dur_us"]).max())
        hidden = overlapped if source == "predicted" else ()
        per_rank = rank_breakdown_us(frame, step_us, hidden).set_index("rank")
        optimizer = frame[frame["kind"] == "optimizer"].groupby("rank")["dur_us"].sum()
        per_rank["optimizer"] = optimizer.reindex(per_rank.index, fill_value=0.0)
        per_rank["compute"] = (per_rank["compute"] - per_rank["optimizer"]).clip(lower=0.0)
        per_rank = per_rank.drop(columns=["exposed_comm", "pipeline"]).rename(
            columns=lambda c: f"exposed {c.split(':', 1)[1]} comm" if c.startswith("exposed_comm:") else c
        )
        long = per_rank.reset_index().melt(id_vars="rank", var_name="component", value_name="us")
        parts.append(long.assign(source=source))
    if not parts:
        return pd.DataFrame(columns=["rank", "source", "component", "ms"])
    out = pd.concat(parts, ignore_index=True)
    out["ms"] = out.pop("us") / US_PER_MS
    return out[["rank", "source", "component", "ms"]]


def bubble_fractions(events: pd.DataFrame, overlapped: Collection[str] = ()) -> dict[str, float]:
    """Source -> the step's bubble fraction (its critical rank's, traces/breakdown.step_bubble);
    ``overlapped``: the streams the prediction hides under compute (its summary's)."""
    return {
        source: step_bubble(
            events[events["source"] == source], overlapped if source == "predicted" else ()
        )[1]
        for source in SOURCES
        if (events["source"] == source).any()
    }


# -------------------------------------------------------------------------------------------- memory
def predicted_memory(scenario: Scenario | None, summary: Mapping[str, Any] | None) -> pd.DataFrame:
    """Predicted peak memory per rank and component (``rank, source, component, gib``).

    With the scenario, every pipeline position is computed (simulator.costs.memory.rank_memory; ranks
    of one stage are alike); without it, the summary's breakdown of the peak rank is placed on the ranks
    of that stage. Big worlds keep one representative rank per stage.
    """
    if scenario is not None:
        grid = RankGrid(scenario.pp, scenario.dp, scenario.tp)
        par = scenario.parallelism
        sched = build_schedule(
            par.pipeline_parallel_schedule, scenario.pp, scenario.num_microbatches, scenario.vpp
        )
        per_stage = {pp: rank_memory(scenario, pp, sched).gib() for pp in range(scenario.pp)}
    elif summary and isinstance(summary.get("memory_gib"), dict) and isinstance(summary.get("degrees"), dict):
        deg = summary["degrees"]
        grid = RankGrid(int(deg["pp"]), int(deg["dp"]), int(deg["tp"]))
        per_stage = {int(summary.get("peak_memory_pp_rank", 0)): dict(summary["memory_gib"])}
    else:
        return pd.DataFrame(columns=["rank", "source", "component", "gib"])
    ranks = range(grid.world_size)
    if grid.world_size > MAX_MEMORY_RANKS:
        ranks = range(0, grid.world_size, grid.dp * grid.tp)  # first rank of each stage
    rows = [
        {"rank": rank, "source": "predicted", "component": component, "gib": float(gib)}
        for rank in ranks
        if grid.coord(rank).pp in per_stage
        for component, gib in per_stage[grid.coord(rank).pp].items()
    ]
    return pd.DataFrame(rows)


def measured_peaks(summary: Mapping[str, Any] | None) -> dict[int, float]:
    """Rank -> measured peak GiB from measured/summary.json's ``rank_memory_gib`` (runtime/worker.py
    writes ``{"R": {"peak": X, "parameters": ..., ...}}``)."""
    if not summary:
        return {}
    per_rank = summary.get("rank_memory_gib")
    if not isinstance(per_rank, dict):
        return {}
    peaks = {
        int(r): float(entry["peak"])
        for r, entry in per_rank.items()
        if isinstance(entry, dict) and isinstance(entry.get("peak"), int | float)
    }
    return dict(sorted(peaks.items()))


def memory(
    scenario: Scenario | None,
    predicted_summary: Mapping[str, Any] | None,
    measured_summary: Mapping[str, Any] | None,
) -> pd.DataFrame:
    """Predicted components and measured peaks per rank (``rank, source, component, gib``)."""
    pred = predicted_memory(scenario, predicted_summary)
    meas = pd.DataFrame(
        [
            {"rank": r, "source": "measured", "component": "measured peak", "gib": g}
            for r, g in measured_peaks(measured_summary).items()
        ],
        columns=["rank", "source", "component", "gib"],
    )
    if len(pred) and len(meas):
        meas = meas[meas["rank"].isin(pred["rank"])]
    frames = [f for f in (pred, meas) if len(f)]
    return pd.concat(frames, ignore_index=True) if frames else pred


TIMELINE_COLUMNS = ["rank", "source", "order", "kind", "stage", "chunk", "microbatch", "gib"]


def memory_timeline(scenario: Scenario | None, measured_summary: Mapping[str, Any] | None) -> pd.DataFrame:
    """Memory after each compute event of one step, for the first rank of each pipeline position: predicted
    (simulator.costs.memory_timeline) and, where the run recorded it, measured (measured/summary.json
    ``rank_memory_timeline``: ``{"R": [[order, kind, stage, chunk, microbatch, allocated_gib], ...]}``)."""
    if scenario is None:
        return pd.DataFrame(columns=TIMELINE_COLUMNS)
    firsts = {pp: pp * (scenario.world_size // scenario.pp) for pp in range(scenario.pp)}  # pp outermost
    rows = [
        {"rank": firsts[pp], "source": "predicted", **p._asdict(), "gib": p.allocated_bytes / GiB}
        for pp in range(scenario.pp)
        for p in predicted_timeline(scenario, pp)
    ]
    measured = (measured_summary or {}).get("rank_memory_timeline")
    if isinstance(measured, dict):
        for rank, points in measured.items():
            if not (str(rank).isdigit() and int(rank) in firsts.values() and isinstance(points, list)):
                continue
            for point in points:
                if isinstance(point, list) and len(point) == 6 and isinstance(point[5], int | float):
                    keys = dict(zip(TIMELINE_COLUMNS[2:7], point[:5], strict=True))
                    rows.append({"rank": int(rank), "source": "measured", **keys, "gib": float(point[5])})
    frame = pd.DataFrame(rows).drop(columns=["allocated_bytes"], errors="ignore")
    return frame.reindex(columns=TIMELINE_COLUMNS)


def memory_limit_gib(scenario: Scenario | None, summary: Mapping[str, Any] | None) -> float | None:
    """The GPU's memory (summary ``gpu_memory_gib``, else the scenario's GPU)."""
    value = (summary or {}).get("gpu_memory_gib")
    if isinstance(value, int | float):
        return float(value)
    return float(scenario.cluster.gpu.memory_GiB) if scenario is not None else None


# ----------------------------------------------------------------------------------------- telemetry
TELEMETRY_METRICS: dict[str, str] = {
    "util_pct": "GPU utilisation (%)",
    "power_W": "Power (W)",
    "memory_used_MiB": "Memory used (MiB)",
    "sm_clock_MHz": "SM clock (MHz)",
    "temperature_C": "Temperature (°C)",
}


def telemetry(samples: pd.DataFrame) -> pd.DataFrame:
    """Samples with ``device`` (``node/gpuN``) and ``time_s`` from the first sample."""
    out = samples.copy()
    out["device"] = out["node"].astype(str) + "/gpu" + out["gpu"].astype(str)
    out["time_s"] = (out["time_us"] - out["time_us"].min()) / 1e6 if len(out) else pd.Series(dtype=float)
    return out.sort_values(["device", "time_s"]).reset_index(drop=True)


# --------------------------------------------------------------------------------------------- sweep
def pareto_front(frame: pd.DataFrame, x: str = "peak_memory_gib", y: str = "step_time_s") -> pd.Series:
    """True for rows no other row beats on both ``x`` and ``y`` (simulator.cluster_search's rule)."""
    front = set(cluster_search.pareto_front(frame[[x, y]].to_dict("records"), x, y))
    return pd.Series([i in front for i in range(len(frame))], index=frame.index)


# ------------------------------------------------------------------------------------------- what-if
@dataclass(frozen=True)
class WhatIf:
    """The plan knobs the What-if page turns."""

    micro_batch_size: int
    tp: int
    pp: int
    zero_stage: int
    schedule: str
    virtual_stages: int
    recompute: str

    @classmethod
    def of(cls, s: Scenario) -> WhatIf:
        par = s.parallelism
        return cls(
            s.training.micro_batch_size,
            s.tp,
            s.pp,
            par.zero_stage,
            par.pipeline_parallel_schedule,
            s.vpp,
            s.training.recompute,
        )


def what_if_scenario(base: Scenario, change: WhatIf) -> Loaded:
    """``base`` with the knobs changed, validated again (data-parallel degree and layer split re-derived).

    Raises ScenarioError naming the key path of every problem, as ``plancast validate`` does.
    """
    data = to_toml_dict(base)
    data["training"].update(micro_batch_size=change.micro_batch_size, recompute=change.recompute)
    data["parallelism"].update(
        tensor_parallel_degree=change.tp,
        pipeline_parallel_degree=change.pp,
        data_parallel_degree=-1,
        zero_stage=change.zero_stage,
        pipeline_parallel_schedule=change.schedule,
        virtual_stages_per_rank=change.virtual_stages,
    )
    data["parallelism"].pop("pipeline_layer_split", None)
    return parse_scenario(data, "what-if scenario")


def _figure(value: Any, fmt: str) -> str:
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int | float):
        return format_seconds(float(value)) if fmt == "seconds" else format(value, fmt)
    return "n/a"


# summary key -> (label, format: "seconds" or a format spec)
SUMMARY_FIGURES: dict[str, tuple[str, str]] = {
    "step_time_s": ("step time", "seconds"),
    "bubble_fraction": ("bubble fraction", ".1%"),
    "exposed_comm_time_s": ("exposed communication", "seconds"),
    "peak_memory_gib": ("peak memory (GiB)", ".4g"),
    "mfu": ("MFU", ".2%"),
    "tokens_per_s": ("tokens/s", ",.0f"),
    "fits_in_memory": ("fits in memory", ""),
}


def summary_comparison(original: Mapping[str, Any] | None, changed: Mapping[str, Any]) -> pd.DataFrame:
    """``figure, original, what-if``: the summaries' headline figures, formatted for reading."""
    rows = [
        {
            "figure": label,
            "original": _figure((original or {}).get(key), fmt),
            "what-if": _figure(changed.get(key), fmt),
        }
        for key, (label, fmt) in SUMMARY_FIGURES.items()
    ]
    return pd.DataFrame(rows)


def step_time_rows(original_s: float | None, what_if_s: float, measured_s: float | None) -> pd.DataFrame:
    """``label, step_time_ms`` for the step times the What-if page compares."""
    rows = [("original prediction", original_s), ("what-if prediction", what_if_s), ("measured", measured_s)]
    return pd.DataFrame(
        [(label, s * 1e3) for label, s in rows if s is not None and not math.isnan(s)],
        columns=["label", "step_time_ms"],
    )
