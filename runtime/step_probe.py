"""The speed probe read between a rank's steps (microbench_probe.between_probe), outside every step.

runtime/worker.py calls ``before_step`` as each step starts and ``after_step`` once its events and step
time are recorded; every PROBE_EVERY_STEPS steps (not after the last: the pair's after-probe is there)
the reading runs, then every rank meets at a barrier, so no rank's next step waits in a collective for
a peer still probing. Each reading keeps the step it follows, its ``probe_s``, the seconds from that
step's work end to the reading's start and from the reading's end to the next step's start (both >= 0:
outside the steps), and the wall time all readings took (what they cost the run).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any, Protocol

import torch
import torch.distributed as dist

from plancast.runtime.microbench_probe import (
    PROBE_EVERY_STEPS,
    between_probe,
    probe_pair_summary,
    probe_readings_summary,
)

Reading = tuple[int, float, float, float, float]
"""The step a reading follows, its probe_s, its gap after that step, its gap before the next and the
wall time it took (the barrier included: what it cost the run)."""


class StepProbe:
    """One rank's readings between steps."""

    def __init__(
        self, device: torch.device, steps: int, readings: list[Reading], first_step: int = 0
    ) -> None:
        """Readings go to `readings` (the rank result's list) as each next step starts. A run resumed
        from a checkpoint (`first_step` > 0) reads none: its earlier steps' readings are not kept, so it
        keeps the pair around its steps, as it keeps no core waits (runtime/worker.py). A GPU run reads
        none either, until a run on a device shows what the readings cost there (docs/run-directory.md):
        the waves they catch are those of shared CPU cores."""
        self.steps, self.readings = steps, readings
        self.off = first_step > 0 or device.type != "cpu"
        self.read = (lambda: 0.0) if self.off else between_probe(device)  # kernels made only when read
        self._pending: tuple[int, float, float, float, float] | None = None

    def before_step(self) -> float:
        """This step's start (``time.perf_counter()``), closing the reading after the previous step with
        its gap to it."""
        start_s = time.perf_counter()
        if self._pending is not None:
            step, probe_s, gap_s, end_s, wall_s = self._pending
            self.readings.append((step, probe_s, gap_s, start_s - end_s, wall_s))
            self._pending = None
        return start_s

    def after_step(self, step: int, work_end_s: float) -> bool:
        """Read the probe after `step` where the cadence says so, then meet the other ranks; whether it
        read (the caller restarts its per-step core-wait and CPU-time counts after it: no step's)."""
        if self.off or (step + 1) % PROBE_EVERY_STEPS or step + 1 >= self.steps:
            return False
        begin_s = time.perf_counter()
        probe_s = self.read()
        if dist.is_initialized():
            dist.barrier()
        end_s = time.perf_counter()
        self._pending = (step, probe_s, begin_s - work_end_s, end_s, end_s - begin_s)
        return True


class RankReadings(Protocol):
    """What between_summary reads of a rank's result (runtime/worker.RankResult)."""

    rank: int
    speed_probes: tuple[dict[str, Any] | None, dict[str, Any] | None]
    speed_readings: list[Reading]
    step_times_s: list[float]


def between_summary(results: Sequence[RankReadings], steps: int) -> dict[str, Any]:
    """measured/summary.json's probe keys from the ranks' results: the pair around the steps
    (microbench_probe.probe_pair_summary), the readings between them (probe_readings_summary), each
    rank's ``[after_step, gap_before_s, gap_after_s]``
    (``rank_speed_probe_gaps_s``) and ``speed_probe_between_cost``: the readings' wall time over the
    steps' on the rank that paid most."""
    results = sorted(results, key=lambda r: r.rank)
    readings, pairs = [r.speed_readings for r in results], [r.speed_probes for r in results]
    keys = probe_readings_summary(pairs, [[(row[0], row[1]) for row in rank] for rank in readings], steps)
    if not keys:
        return probe_pair_summary(pairs)
    keys["rank_speed_probe_gaps_s"] = {
        str(r): [[row[0], row[2], row[3]] for row in rank] for r, rank in enumerate(readings)
    }
    keys["speed_probe_between_cost"] = max(
        sum(row[4] for row in r.speed_readings) / sum(r.step_times_s) if sum(r.step_times_s) > 0 else 0.0
        for r in results
    )
    return probe_pair_summary(pairs) | keys
