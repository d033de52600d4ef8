"""The first pipeline rank's peak of in-flight layers, as the sweep's memory check counts it: in closed
form where the schedule has one, else from a schedule of at most `INFLIGHT_STEADY` micro-batches walked
(simulator/sweep_estimate.py, Estimator._inflight_layers)."""

from __future__ import annotations

from collections.abc import Callable

CLOSED_FORM = ("GPipe", "1F1B", "ZeroBubble", "Interleaved1F1B")
"""The schedules `inflight_layers` counts in closed form."""

INFLIGHT_STEADY: dict[str, Callable[[int], int]] = {
    "ZBH2": lambda pp: 2 * pp - 1,
    "ZBV": lambda pp: 2 * pp,
    "DualPipeV": lambda pp: 2 * pp,
}
"""Per schedule without a closed form, a micro-batch count M(pp) past which the first rank's peak of
in-flight layers no longer grows: its peak over m >= M micro-batches is its peak over M, so the sweep
walks a schedule of min(m, M) micro-batches (O(pp) actions, not O(m)). From the builders
(simulator/schedules_zb.py), rank 0, c0 and c1 the micro-batches in flight on its two chunks (a forward
adds one, a backward B releases one; W changes nothing, costs/memory.py peak_inflight_bytes):
- ZB-H2: min(2 pp - 1, m) warm-up forwards, then each B is followed by at most one F: the peak is
  the warm-up's, min(2 pp - 1, m) x chunk 0's layers, the same for every m >= 2 pp - 1.
- ZB-V (m >= 2 pp - 1: no padding): 2 pp - 1 forwards of chunk 0, then pp rounds F1 B1 (c1 <= 1);
  each steady round F0 B0 F1 B1 starts and ends at (c0, c1) = (2 pp - 1, 0) and peaks at c0 = 2 pp or
  (2 pp - 1, 1); once every F0 has run, the rounds and the cool-down only release. So every m >= 2 pp
  (one steady F0 at least) has the peak of m = 2 pp.
- DualPipeV (m >= 2 pp): 2 pp - 1 forwards of chunk 0 and one of chunk 1, pp - 1 rounds B1 W F1
  (c1 back to 1), then m - 2 pp + 1 rounds F0 B1 F1 B0, each from and back to (2 pp - 1, 1) with
  (2 pp, 1) at its peak; phase 5 and the cool-down only release: every m >= 2 pp has m = 2 pp's peak.
tests/simulator/test_sweep_inflight.py checks each against the built schedule of every m up to 3 M."""


def inflight_layers(schedule: str, pp: int, m: int, v: int, chunk_layers: tuple[int, ...]) -> int:
    """Peak layer-micro-batches on the first pipeline rank, in closed form.

    GPipe holds every micro-batch; 1F1B and ZB-H1 hold min(pp, m) (warm-up pp - 1 forwards, then one
    more before the first backward, Narayanan et al. 2021 sec. 2.2); interleaved 1F1B holds
    min(warm-up + 1, v m) chunk passes with warm-up (v - 1) pp + 2 (pp - 1) (simulator/schedules.py).
    Exactly `peak_inflight_layers` of the built schedule when chunks have equal layers (a test checks
    it); with uneven chunks it uses the smallest chunk, a lower bound, so pruning stays safe."""
    if schedule == "GPipe":
        return m * chunk_layers[0]
    if schedule != "Interleaved1F1B":
        return min(pp, m) * chunk_layers[0]
    warmup = min((v - 1) * pp + 2 * (pp - 1), v * m)
    return min(warmup + 1, v * m) * min(chunk_layers)
