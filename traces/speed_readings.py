"""The machine-speed probe's readings between a run's steps, and each step's probe from them (pure).

The runtime reads the probe right before the first step, right after the last and between steps every
few (runtime/microbench_probe.py PROBE_EVERY_STEPS; runtime/worker.py), and measured/summary.json keeps
them as ``speed_probe_readings``: ``after_step`` (the step each reading follows: -1 for the one before
the first step) and ``probe_s`` (the slowest rank's reading). Runs from before the readings have only
the pair around the steps; ``readings`` then returns None and the pair's keys stand.

The rule for a step's probe: step ``i`` runs between the readings after steps ``i - 1`` and ``i``, so
its probe is the readings' straight line at ``i - 0.5``, between the nearest reading on each side
(linear interpolation; the readings come every few steps and a wave of the machine's speed lasts ~10,
docs/accuracy.md). Outside the readings it takes the nearest one.
"""

from __future__ import annotations

import bisect
import itertools
import math
from typing import Any

MAX_READINGS = 100_000
"""More readings than any run's steps this project makes: a longer list is not a summary it wrote."""


def readings(summary: dict[str, Any]) -> list[tuple[float, float]] | None:
    """The run's ``(after_step, probe_s)`` readings in step order, or None where it has none (a run from
    before them) or they are malformed (lengths differ, a step not an integer, a probe not > 0, not
    increasing steps, more than MAX_READINGS)."""
    block = summary.get("speed_probe_readings")
    if not isinstance(block, dict):
        return None
    steps, probes = block.get("after_step"), block.get("probe_s")
    if not isinstance(steps, list) or not isinstance(probes, list) or len(steps) != len(probes):
        return None
    if not 2 <= len(steps) <= MAX_READINGS:
        return None
    if any(isinstance(s, bool) or not isinstance(s, int) for s in steps):
        return None
    if any(isinstance(p, bool) or not isinstance(p, int | float) or not 0 < p < math.inf for p in probes):
        return None
    if any(b <= a for a, b in itertools.pairwise(steps)):
        return None
    return [(float(s), float(p)) for s, p in zip(steps, probes, strict=True)]


def probe_at_steps(points: list[tuple[float, float]], steps: int) -> list[float]:
    """Each step's probe: the readings' straight line at the step's middle, ``i - 0.5`` (module rule)."""
    xs = [x for x, _ in points]
    out = []
    for i in range(steps):
        at = i - 0.5
        right = bisect.bisect_left(xs, at)
        if right == 0:
            out.append(points[0][1])
        elif right == len(points):
            out.append(points[-1][1])
        else:
            (x0, y0), (x1, y1) = points[right - 1], points[right]
            out.append(y0 + (y1 - y0) * (at - x0) / (x1 - x0))
    return out
