"""What a measured run gives calibration: compute seconds per (stage, pass), collective samples.

Pure pandas over the trace contract (plancast.traces.schema); nothing here reads files.
"""

from __future__ import annotations

from collections.abc import Iterable

import pandas as pd

from plancast.traces import schema
from plancast.traces.schema import ALIGNMENT_KEY


def compute_observations(measured: pd.DataFrame) -> pd.DataFrame:
    """Per measured compute span: (stage, kind, seconds) with the tensor-parallel collectives issued
    inside it subtracted (they are communication, fitted as links). Steps < 1 (warm-up) are dropped
    when later steps exist."""
    frame = schema.validate(measured)
    if frame["step"].nunique() > 1:
        frame = frame[frame["step"] >= 1]
    compute = frame[frame["stream"] == "compute"]
    tp = frame[frame["stream"] == "tp"]
    key = ["rank", "step", "stage", "microbatch"]
    # a tp collective belongs to the span it starts in (a forward's and a backward's share the key)
    by_key = {k: g[["start_us", "dur_us"]].to_numpy() for k, g in tp.groupby(key)} if not tp.empty else {}
    rows = []
    for r in compute.itertuples(index=False):
        inside = 0.0
        if r.kind in ("forward", "backward", "backward_input", "recompute"):
            starts_durs = by_key.get((r.rank, r.step, r.stage, r.microbatch))
            if starts_durs is not None:
                within = (starts_durs[:, 0] >= r.start_us) & (starts_durs[:, 0] < r.start_us + r.dur_us)
                inside = float(starts_durs[within, 1].sum())
        seconds = r.dur_us - inside
        rows.append({"rank": r.rank, "stage": r.stage, "kind": r.kind, "seconds": max(seconds, 0.0) * 1e-6})
    return pd.DataFrame(rows, columns=["rank", "stage", "kind", "seconds"])


def tp_collective_mean_s(measured: pd.DataFrame) -> float | None:
    """Mean measured seconds of a run's tensor-parallel collectives (steps < 1 dropped as above), the
    waits for a late peer included; None where the run has none."""
    frame = schema.validate(measured)
    if frame["step"].nunique() > 1:
        frame = frame[frame["step"] >= 1]
    tp = frame[frame["stream"] == "tp"]
    return float(tp["dur_us"].mean()) * 1e-6 if not tp.empty else None


def mean_observations(obs: pd.DataFrame) -> pd.DataFrame:
    """One row per (stage, kind): the mean measured seconds (what the fit targets).

    The mean, not the median: the step time a run reports is the median over steps of a SUM of spans,
    and on a shared core the spans are skewed by preemption (a tiny pipeline run at load ~7 on 2 cores:
    forward spans from 2.8 ms to 27 ms); the median of a sum of many such spans is near the sum of
    their means, while the sum of their medians drops every preempted span."""
    return obs.groupby(["stage", "kind"], as_index=False)["seconds"].mean()


def collective_samples(events: Iterable[dict[str, object]]) -> pd.DataFrame:
    """Rows (kind, ranks, bytes, seconds) from microbenchmark records."""
    return pd.DataFrame(list(events), columns=["kind", "ranks", "bytes", "seconds"])


def run_links(predicted: pd.DataFrame, measured: pd.DataFrame, groups: dict[str, int]) -> pd.DataFrame:
    """Collective samples of a run: predicted bytes (measured traces carry none), measured seconds.
    `groups` maps a stream (tp, dp, pp) to its group size."""
    key = list(ALIGNMENT_KEY)
    comm = measured[measured["stream"] != "compute"]
    steps = sorted(comm["step"].unique())
    pred = predicted[predicted["stream"] != "compute"].drop(columns=["step"])
    rows = []
    for step in steps[1:] or steps:
        joined = comm[comm["step"] == step].merge(
            pred, on=[k for k in key if k != "step"], suffixes=("", "_predicted")
        )
        for r in joined.itertuples(index=False):
            if r.kind == "recv" or r.bytes_predicted <= 0:
                continue  # a recv's span is mostly waiting for its sender
            rows.append(
                {
                    "kind": r.kind,
                    "ranks": groups.get(r.stream, 2),
                    "bytes": r.bytes_predicted,
                    "seconds": r.dur_us * 1e-6,
                }
            )
    return pd.DataFrame(rows, columns=["kind", "ranks", "bytes", "seconds"])
