"""What a measured run gives calibration: compute seconds per (stage, pass), collective samples.

Pure pandas over the trace contract (plancast.traces.schema); nothing here reads files.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np
import pandas as pd

from plancast.traces import schema
from plancast.traces.breakdown import union_us
from plancast.traces.schema import ALIGNMENT_KEY


def compute_observations(measured: pd.DataFrame) -> pd.DataFrame:
    """Per measured compute span: (stage, kind, seconds) with the tensor-parallel collectives issued
    inside it subtracted (they are communication, fitted as links). Steps < 1 (warm-up) are dropped
    when later steps exist."""
    frame = _after_warm_up(measured)
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


def waiting_collectives(events: pd.DataFrame, stream: str) -> pd.Series:
    """The collectives whose wait in a run calibration measures on `stream`: every tensor-parallel one;
    on "dp", the all-reduces (DDP's gradient buckets, beside the backward), not ZeRO-1's broadcasts
    (after the optimizer, with the cores free)."""
    kinds = ["all_reduce"] if stream == "dp" else ["all_reduce", "all_gather", "reduce_scatter"]
    return events["stream"].eq(stream) & events["kind"].isin(kinds)


def collective_means_s(measured: pd.DataFrame) -> dict[str, float]:
    """Mean seconds of a run's waiting collectives per stream, "tp" and "dp" (steps < 1 dropped as
    above), the waits inside them included; a stream the run has none of is absent."""
    frame = _after_warm_up(measured)
    out = {}
    for stream in ("tp", "dp"):
        durations = frame.loc[waiting_collectives(frame, stream), "dur_us"]
        if not durations.empty:
            out[stream] = float(durations.mean()) * 1e-6
    return out


def _after_warm_up(events: pd.DataFrame) -> pd.DataFrame:
    frame = schema.validate(events)
    return frame[frame["step"] >= 1] if frame["step"].nunique() > 1 else frame


def untracked_per_step(events: pd.DataFrame) -> tuple[float, float] | None:
    """(seconds, transfer sides) per rank and step, means over ranks and steps (>= 1): the time a rank's
    step holds no span that blocks its main thread (what is left: its bookkeeping between actions,
    posting transfers, and any wait to be scheduled back), and the pipeline sends + receives it posts.
    Rank steps start at 0 (measured: each rank's own start; predicted: the simulated step's). None for
    a trace without transfers."""
    frame = _after_warm_up(events)
    transfers = frame["stream"].eq("pp") & frame["kind"].isin(["send", "recv"])
    if not transfers.any():
        return None
    # what holds the main thread: not a send (posted, then in flight beside what follows) nor a
    # data-parallel collective (in flight beside the backward)
    blocking = ~(frame["kind"].eq("send") | frame["stream"].eq("dp"))
    sides = transfers.groupby([frame["rank"], frame["step"]]).sum()
    untracked = []
    for _, g in frame[blocking].groupby(["rank", "step"]):
        starts = g["start_us"].to_numpy(dtype=float)
        ends = starts + g["dur_us"].to_numpy(dtype=float)
        untracked.append((ends.max() - union_us(starts, ends)) * 1e-6)
    return float(np.mean(untracked)), float(sides.mean())


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
