"""Turn measured events into calibration data: compute durations per pass and link alpha/beta.

Pure pandas/numpy. The simulator-side fit of the compute model lives in simulator/calibration.py
(it needs the cost model, and traces must not import the simulator); the link fit is here because
it needs nothing but bytes and seconds.

Link model (Hockney's alpha-beta): a collective's time t = steps * alpha + volume / B, where steps
and volume depend on the algorithm (ring all-reduce over n ranks: 2(n-1) steps, 2(n-1)/n * X bytes).
Measured collectives also contain waiting for the slowest peer, so each (kind, bytes) group is
summarised by a low quantile before fitting.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np
import pandas as pd

from plancast.traces import schema

WAIT_FREE_QUANTILE = 0.1  # a collective rarely waits for its peer in its fastest tenth of samples


def ring_terms(kind: str, ranks: int, nbytes: float) -> tuple[float, float]:
    """(latency steps, bytes on the wire per rank) of a ring collective; send/recv is one message."""
    n = max(ranks, 2)
    if kind == "all_reduce":
        return 2.0 * (n - 1), 2.0 * (n - 1) / n * nbytes
    if kind in ("all_gather", "reduce_scatter"):
        return float(n - 1), (n - 1) / n * nbytes
    if kind == "broadcast":
        return float(n - 1), float(nbytes)
    return 1.0, float(nbytes)


def fit_link(samples: pd.DataFrame) -> tuple[float, float]:
    """Fit (latency_s, bandwidth_Bps) from rows with columns kind, ranks, bytes, seconds.

    Raises ValueError when the samples cannot determine both (fewer than two distinct sizes)."""
    if samples.empty:
        raise ValueError("no collective timings to fit a link from")
    grouped = samples.groupby(["kind", "ranks", "bytes"], as_index=False)["seconds"].quantile(
        WAIT_FREE_QUANTILE
    )
    if grouped["bytes"].nunique() < 2:
        raise ValueError("link fit needs collectives of at least two different sizes")
    terms = np.array(
        [
            ring_terms(k, int(n), float(b))
            for k, n, b in grouped[["kind", "ranks", "bytes"]].itertuples(index=False)
        ]
    )
    seconds = grouped["seconds"].to_numpy()
    weights = 1.0 / np.maximum(seconds, 1e-9)  # relative error: small messages count as much as large
    solution, *_ = np.linalg.lstsq(terms * weights[:, None], seconds * weights, rcond=None)
    alpha, inverse_bw = float(solution[0]), float(solution[1])
    if inverse_bw <= 0:
        raise ValueError("measured collectives do not grow with size; cannot fit a bandwidth")
    return max(alpha, 0.0), 1.0 / inverse_bw


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
    tp_time = tp.groupby(key)["dur_us"].sum() if not tp.empty else pd.Series(dtype=float)
    rows = []
    for r in compute.itertuples(index=False):
        inside = (
            float(tp_time.get((r.rank, r.step, r.stage, r.microbatch), 0.0)) if r.kind != "optimizer" else 0.0
        )
        seconds = r.dur_us - (
            inside if r.kind in ("forward", "backward", "backward_input", "recompute") else 0.0
        )
        rows.append({"rank": r.rank, "stage": r.stage, "kind": r.kind, "seconds": max(seconds, 0.0) * 1e-6})
    return pd.DataFrame(rows, columns=["rank", "stage", "kind", "seconds"])


def median_observations(obs: pd.DataFrame) -> pd.DataFrame:
    """One row per (stage, kind): the median measured seconds (what the fit targets)."""
    return obs.groupby(["stage", "kind"], as_index=False)["seconds"].median()


def collective_samples(events: Iterable[dict[str, object]]) -> pd.DataFrame:
    """Rows (kind, ranks, bytes, seconds) from microbenchmark records."""
    return pd.DataFrame(list(events), columns=["kind", "ranks", "bytes", "seconds"])
