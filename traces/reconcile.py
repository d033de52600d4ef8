"""Align predicted and measured events one to one and say where the prediction is off.

Predicted and measured events of one plan share ``schema.ALIGNMENT_KEY``, so reconciliation is an
outer join: matched rows carry both durations, ``missing`` rows were predicted but not measured,
``extra`` rows were measured but not predicted. One measured step is scored (the simulator predicts
one step; step 0 of a real run is warm-up), and time is broken into components:

- per kind: per-rank sum of durations, mean over ranks;
- ``compute``, ``exposed_comm`` (all streams but the pipeline's), ``exposed_comm:STREAM`` and
  ``bubble``: the breakdown of each side's critical rank, as ``simulate`` reports it (one definition,
  traces/breakdown.py); ``bubble_fraction_predicted`` / ``_measured`` are its bubble over the step;
- ``step_time``, and ``peak_memory`` when both summaries carry ``peak_memory_gib``.

Errors are signed and relative: ``(predicted - measured) / measured`` (NaN when measured is 0).
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from plancast.traces import schema
from plancast.traces.breakdown import critical_rank, rank_breakdown_us, step_bubble

KEY = list(schema.ALIGNMENT_KEY)
LARGEST_MISMATCHES = 10
US_PER_S = 1e6


@dataclass(frozen=True)
class Reconciliation:
    """Predicted vs measured for one scored measured step (all frames are new objects)."""

    step: int  # measured step scored; predicted events were relabelled to it
    scored_steps: tuple[int, ...]  # measured steps whose median step time is step_time_measured_s
    matched: pd.DataFrame  # KEY + *_predicted / *_measured + dur_error_us, dur_error, start_error_us
    missing: pd.DataFrame  # predicted rows with no measured row (schema columns)
    extra: pd.DataFrame  # measured rows with no predicted row (schema columns)
    step_time_predicted_s: float
    step_time_measured_s: float
    step_time_error: float
    components: pd.DataFrame  # component, predicted_s, measured_s, predicted_gib, measured_gib, error
    largest_mismatches: pd.DataFrame  # the matched rows with the largest |dur_error_us|
    critical_path: pd.DataFrame  # measured events of the scored step on the critical path (schema columns)
    bubble_fraction_predicted: float = 0.0  # traces/breakdown.step_bubble of the predicted step
    bubble_fraction_measured: float = 0.0  # ... and of the scored measured step


def relative_error(predicted: float, measured: float) -> float:
    """``(predicted - measured) / measured``; NaN when measured is 0 or either value is NaN."""
    if measured == 0 or math.isnan(measured) or math.isnan(predicted):
        return math.nan
    return (predicted - measured) / measured


def step_times_us(frame: pd.DataFrame) -> pd.Series:
    """Step -> step time: the latest event end over all ranks (events start at the step origin)."""
    ends_us = frame["start_us"] + frame["dur_us"]
    return ends_us.groupby(frame["step"]).max().sort_index()


def scored_steps(measured: pd.DataFrame) -> list[int]:
    """Steps that count: every step but step 0 (warm-up) when there are at least two steps."""
    steps = sorted(int(s) for s in measured["step"].unique())
    return [s for s in steps if s >= 1] if len(steps) >= 2 else steps


def median_step(measured: pd.DataFrame, steps: list[int]) -> int:
    """The scored step whose step time is the median (the lower one of the middle two if even)."""
    times_us = step_times_us(measured[measured["step"].isin(steps)]).sort_values(kind="stable")
    return int(times_us.index[(len(times_us) - 1) // 2])


def kind_means_us(step_frame: pd.DataFrame) -> dict[str, float]:
    """Kind -> mean over the step's ranks of the per-rank sum of durations (0 for a rank without it)."""
    ranks = step_frame["rank"].nunique()
    if ranks == 0:
        return {}
    sums = step_frame.groupby("kind")["dur_us"].sum()
    return {str(kind): float(total) / ranks for kind, total in sums.items()}


def component_table(
    predicted: pd.DataFrame,
    measured: pd.DataFrame,
    step_time_predicted_us: float,
    step_time_measured_us: float,
    overlapped: Collection[str] = (),
) -> pd.DataFrame:
    """One row per time component of the scored step: predicted_s, measured_s, error. ``overlapped``: the
    streams the prediction hides under compute (its summary's ``overlapped_streams``)."""
    pred_kinds, meas_kinds = kind_means_us(predicted), kind_means_us(measured)
    pred_rank = _critical(predicted, step_time_predicted_us, overlapped)
    meas_rank = _critical(measured, step_time_measured_us)
    pairs: dict[str, tuple[float, float]] = {"step_time": (step_time_predicted_us, step_time_measured_us)}
    for kind in sorted(set(pred_kinds) | set(meas_kinds)):
        pairs[kind] = (pred_kinds.get(kind, 0.0), meas_kinds.get(kind, 0.0))
    for name in sorted(set(pred_rank) | set(meas_rank)):
        pairs[name] = (pred_rank.get(name, 0.0), meas_rank.get(name, 0.0))
    rows = [
        {
            "component": name,
            "predicted_s": pred_us / US_PER_S,
            "measured_s": meas_us / US_PER_S,
            "predicted_gib": math.nan,
            "measured_gib": math.nan,
            "error": relative_error(pred_us, meas_us),
        }
        for name, (pred_us, meas_us) in pairs.items()
    ]
    return pd.DataFrame(rows)


def _critical(
    step_frame: pd.DataFrame, step_time_us: float, overlapped: Collection[str] = ()
) -> dict[str, float]:
    """The breakdown of the step's critical rank (traces/breakdown.py): compute, exposed comm, bubble."""
    if len(step_frame) == 0:
        return {}
    per_rank = rank_breakdown_us(step_frame, step_time_us, overlapped)
    row = per_rank[per_rank["rank"] == critical_rank(per_rank)].iloc[0]
    return {str(k): float(v) for k, v in row.items() if k not in ("rank", "pipeline")}


def memory_component(
    predicted_summary: Mapping[str, Any] | None, measured_summary: Mapping[str, Any] | None
) -> pd.DataFrame:
    """The memory rows, each where both summaries carry it: ``peak_memory`` (allocated,
    ``peak_memory_gib``), ``peak_memory_reserved`` (``peak_reserved_gib``; GPU runs) and
    ``memory_timeline`` (the mean over the compute events both ``rank_memory_timeline`` hold, with the
    mean relative error of those events as its error)."""
    if not predicted_summary or not measured_summary:
        return pd.DataFrame()
    rows = []
    for component, key in (("peak_memory", "peak_memory_gib"), ("peak_memory_reserved", "peak_reserved_gib")):
        pred, meas = predicted_summary.get(key), measured_summary.get(key)
        if isinstance(pred, int | float) and isinstance(meas, int | float):
            error = relative_error(float(pred), float(meas))
            rows.append(_memory_row(component, float(pred), float(meas), error))
    pairs = timeline_pairs(predicted_summary, measured_summary)
    if pairs:
        pred_mean = sum(p for p, _ in pairs) / len(pairs)
        meas_mean = sum(m for _, m in pairs) / len(pairs)
        error = sum(relative_error(p, m) for p, m in pairs) / len(pairs)
        rows.append(_memory_row("memory_timeline", pred_mean, meas_mean, error))
    return pd.DataFrame(rows)


def _memory_row(component: str, predicted_gib: float, measured_gib: float, error: float) -> dict[str, Any]:
    return {
        "component": component,
        "predicted_s": math.nan,
        "measured_s": math.nan,
        "predicted_gib": predicted_gib,
        "measured_gib": measured_gib,
        "error": error,
    }


def timeline_pairs(predicted: Mapping[str, Any], measured: Mapping[str, Any]) -> list[tuple[float, float]]:
    """(predicted, measured) GiB of every (rank, kind, stage, chunk, microbatch) both summaries'
    ``rank_memory_timeline`` hold: ``{"R": [[order, kind, stage, chunk, microbatch, gib], ...]}``."""

    def points(summary: Mapping[str, Any]) -> dict[tuple[Any, ...], float]:
        table = summary.get("rank_memory_timeline")
        if not isinstance(table, Mapping):
            return {}
        return {
            (str(rank), *point[1:5]): float(point[5])
            for rank, entries in table.items()
            if isinstance(entries, list)
            for point in entries
            if isinstance(point, list) and len(point) == 6 and isinstance(point[5], int | float)
        }

    pred, meas = points(predicted), points(measured)
    return [(pred[k], meas[k]) for k in pred.keys() & meas.keys() if meas[k] > 0]


def _check_unique_keys(frame: pd.DataFrame, source: str) -> None:
    duplicated = frame[frame.duplicated(KEY, keep=False)]
    if len(duplicated):
        first = duplicated.iloc[0][KEY].to_dict()
        raise ValueError(
            f"{source} events have {len(duplicated)} rows sharing an alignment key, e.g. {first}: "
            "each (rank, step, kind, stage, chunk, microbatch, index) must be one span; give repeated "
            "spans distinct 'index' values"
        )


def align(predicted: pd.DataFrame, measured: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """Outer join of two single-step tables on the alignment key -> (matched, missing, extra)."""
    _check_unique_keys(predicted, "predicted")
    _check_unique_keys(measured, "measured")
    joined = predicted.merge(
        measured, on=KEY, how="outer", suffixes=("_predicted", "_measured"), indicator=True
    )
    both = joined[joined["_merge"] == "both"]
    matched = both[KEY].copy()
    for column in ("start_us", "dur_us"):
        matched[f"{column}_predicted"] = both[f"{column}_predicted"]
        matched[f"{column}_measured"] = both[f"{column}_measured"]
    matched["dur_error_us"] = matched["dur_us_predicted"] - matched["dur_us_measured"]
    matched["dur_error"] = matched["dur_error_us"] / matched["dur_us_measured"].where(
        matched["dur_us_measured"] != 0
    )
    matched["start_error_us"] = matched["start_us_predicted"] - matched["start_us_measured"]
    missing = _one_side(joined[joined["_merge"] == "left_only"], "_predicted")
    extra = _one_side(joined[joined["_merge"] == "right_only"], "_measured")
    return matched.reset_index(drop=True), missing, extra


def _one_side(rows: pd.DataFrame, suffix: str) -> pd.DataFrame:
    renamed = rows.rename(columns={f"{c}{suffix}": c for c in schema.COLUMNS if c not in KEY})
    return schema.validate(renamed[list(schema.COLUMNS)])


def critical_path(step_frame: pd.DataFrame) -> pd.DataFrame:
    """The chain of events ending at the step's last-ending event, in time order.

    Walking back from the last-ending event, the predecessor of an event is the latest-ending
    event on the same rank that ends no later than it starts, or — for a ``recv`` — the matching
    ``send`` on the peer rank (same microbatch and index, started before the recv ended), whichever
    ends later. ``step_frame`` holds one step of one source.
    """
    frame = schema.validate(step_frame)
    if len(frame) == 0:
        return frame
    starts = frame["start_us"].to_numpy()
    ends = starts + frame["dur_us"].to_numpy()
    ranks = frame["rank"].to_numpy()
    current = int(np.lexsort((starts, ends))[-1])
    path = [current]
    while (
        previous := _predecessor(frame, current, starts, ends, ranks)
    ) is not None and previous not in path:
        path.append(previous)
        current = previous
    return frame.iloc[path[::-1]].reset_index(drop=True)


def _predecessor(
    frame: pd.DataFrame, current: int, starts: np.ndarray, ends: np.ndarray, ranks: np.ndarray
) -> int | None:
    tolerance_us = 1e-9 * max(1.0, abs(starts[current]))
    candidates = []
    same_rank = np.flatnonzero((ranks == ranks[current]) & (ends <= starts[current] + tolerance_us))
    same_rank = same_rank[same_rank != current]
    if len(same_rank):
        candidates.append(int(same_rank[np.argmax(ends[same_rank])]))
    row = frame.iloc[current]
    if row["kind"] == "recv":
        sends = np.flatnonzero(
            (frame["kind"] == "send").to_numpy()
            & (ranks == row["peer"])
            & (frame["peer"] == row["rank"]).to_numpy()
            & (frame["microbatch"] == row["microbatch"]).to_numpy()
            & (frame["index"] == row["index"]).to_numpy()
            & (starts <= ends[current])
        )
        if len(sends):
            candidates.append(int(sends[np.argmax(ends[sends])]))
    if not candidates:
        return None
    return max(candidates, key=lambda i: ends[i])


def reconcile(
    predicted: pd.DataFrame,
    measured: pd.DataFrame,
    step: int | None = None,
    predicted_summary: Mapping[str, Any] | None = None,
    measured_summary: Mapping[str, Any] | None = None,
) -> Reconciliation:
    """Score one measured step against the prediction (see the module docstring).

    ``step`` picks the measured step; by default the scored step (steps >= 1 when there are two or
    more) whose step time is the median. Predicted events of that step are used if present, else
    those of the first predicted step, relabelled to it.
    """
    predicted, measured = schema.validate(predicted), schema.validate(measured)
    if len(measured) == 0 or len(predicted) == 0:
        empty = "measured" if len(measured) == 0 else "predicted"
        raise ValueError(f"no {empty} events to reconcile: check the run directory's {empty}/ folder")
    steps = [step] if step is not None else scored_steps(measured)
    chosen = step if step is not None else median_step(measured, steps)
    if chosen not in set(measured["step"].tolist()):
        raise ValueError(
            f"measured events have no step {chosen}; they have steps {sorted(set(measured['step']))}"
        )
    pred_step = chosen if chosen in set(predicted["step"].tolist()) else int(predicted["step"].min())
    pred = predicted[predicted["step"] == pred_step].assign(step=chosen)
    meas = measured[measured["step"] == chosen]
    matched, missing, extra = align(schema.validate(pred), schema.validate(meas))
    overlapped = overlapped_streams(predicted_summary)
    pred_time_us = float(step_times_us(pred).iloc[0])
    # the chosen step's time: the scored steps' median (the lower of the middle two if even), so the
    # step time and the components compared are one step's
    meas_time_us = float(step_times_us(meas).iloc[0])
    components = pd.concat(
        [
            component_table(pred, meas, pred_time_us, meas_time_us, overlapped),
            memory_component(predicted_summary, measured_summary),
        ],
        ignore_index=True,
    )
    order = matched["dur_error_us"].abs().sort_values(ascending=False, kind="stable").index
    return Reconciliation(
        step=chosen,
        scored_steps=tuple(steps),
        matched=matched,
        missing=missing,
        extra=extra,
        step_time_predicted_s=pred_time_us / US_PER_S,
        step_time_measured_s=meas_time_us / US_PER_S,
        step_time_error=relative_error(pred_time_us, meas_time_us),
        components=components,
        largest_mismatches=matched.loc[order[:LARGEST_MISMATCHES]].reset_index(drop=True),
        critical_path=critical_path(meas),
        bubble_fraction_predicted=step_bubble(pred, overlapped)[1],
        bubble_fraction_measured=step_bubble(meas)[1],
    )


def overlapped_streams(predicted_summary: Mapping[str, Any] | None) -> tuple[str, ...]:
    """The blocking streams the prediction hides under compute (`simulate`'s ``overlapped_streams``)."""
    streams = (predicted_summary or {}).get("overlapped_streams") or ()
    return tuple(str(x) for x in streams) if isinstance(streams, list | tuple) else ()


def _jsonable(value: Any) -> Any:
    """numpy scalars -> Python, NaN -> None, so the summary is strict JSON."""
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float) and math.isnan(value):
        return None
    return value


def _records(frame: pd.DataFrame) -> list[dict[str, Any]]:
    return [{str(k): _jsonable(v) for k, v in row.items()} for row in frame.to_dict("records")]


def to_summary(rec: Reconciliation) -> dict[str, Any]:
    """A JSON-able summary (the ``plancast compare --json`` object and ``compare/summary.json``)."""
    components = [
        {k: v for k, v in row.items() if v is not None or k == "error"} for row in _records(rec.components)
    ]
    return {
        "step": rec.step,
        "scored_steps": list(rec.scored_steps),
        "step_time_predicted_s": _jsonable(rec.step_time_predicted_s),
        "step_time_measured_s": _jsonable(rec.step_time_measured_s),
        "step_time_error": _jsonable(rec.step_time_error),
        "events_matched": len(rec.matched),
        "events_missing": len(rec.missing),
        "events_extra": len(rec.extra),
        "bubble_fraction_predicted": _jsonable(rec.bubble_fraction_predicted),
        "bubble_fraction_measured": _jsonable(rec.bubble_fraction_measured),
        "components": components,
        "largest_mismatches": _records(rec.largest_mismatches),
        "critical_path": _records(rec.critical_path[[*KEY, "start_us", "dur_us"]]),
    }
