"""Link latency and bandwidth from collective timings (microbenchmarks or a run's collectives).

Link model (Hockney's alpha-beta): a collective's time t = steps * alpha + volume / B, where steps
and volume depend on the algorithm (ring all-reduce over n ranks: 2(n-1) steps, 2(n-1)/n * X bytes).
Measured collectives also contain waiting for the slowest peer, so each (kind, bytes) group is
summarised by a low quantile before fitting.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

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
