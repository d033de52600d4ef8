"""runtime/step_probe.py on this machine's CPU, one process: the reading runs after every
PROBE_EVERY_STEPS-th step (never after the last), between that step's end and the next step's start,
with its gaps to both (never asserting on a time's size, only on order)."""

from __future__ import annotations

import time

import torch

from plancast.runtime.microbench_probe import PROBE_EVERY_STEPS
from plancast.runtime.step_probe import Reading, StepProbe


def test_readings_sit_between_the_steps_they_follow_and_precede() -> None:
    steps = 2 * PROBE_EVERY_STEPS + 1  # the last step is followed by the pair's probe, not a reading
    readings: list[Reading] = []
    between = StepProbe(torch.device("cpu"), steps, readings)
    a = torch.ones(64, 64)
    windows: list[tuple[float, float]] = []
    for step in range(steps):
        start = between.before_step()
        (a @ a).sum().item()  # the step's work
        end = time.perf_counter()
        windows.append((start, end))
        between.after_step(step, end)
    assert [r[0] for r in readings] == [PROBE_EVERY_STEPS - 1, 2 * PROBE_EVERY_STEPS - 1]
    for step, probe_s, gap_before_s, gap_after_s, wall_s in readings:
        assert probe_s > 0 and gap_before_s >= 0 and gap_after_s >= 0 and wall_s > 0
        # the reading's wall time and its gaps fill the time between the two steps, inside neither
        idle_s = windows[step + 1][0] - windows[step][1]
        assert gap_before_s + wall_s + gap_after_s <= idle_s + 1e-9


def test_a_resumed_run_reads_nothing_between_steps() -> None:
    """Its earlier steps' readings were not kept: it keeps the pair around its steps, as before."""
    readings: list[Reading] = []
    between = StepProbe(torch.device("cpu"), 2 * PROBE_EVERY_STEPS + 1, readings, first_step=2)
    for step in range(2, 2 * PROBE_EVERY_STEPS + 1):
        between.before_step()
        assert between.after_step(step, time.perf_counter()) is False
    assert readings == []


def test_a_gpu_run_reads_nothing_between_steps() -> None:
    """Not yet on a device (what a reading costs there is unmeasured): the pair around the steps, as
    before. The device is only named, never used: no reading runs."""
    readings: list[Reading] = []
    between = StepProbe(torch.device("cuda"), 2 * PROBE_EVERY_STEPS + 1, readings)
    for step in range(2 * PROBE_EVERY_STEPS + 1):
        between.before_step()
        assert between.after_step(step, time.perf_counter()) is False
    assert readings == []
