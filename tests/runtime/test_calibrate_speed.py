"""runtime/calibrate.py: runs that recorded the speed probe are normalised to one speed (their median
probe) before the fit, so a run made while the machine was slow does not bend the fitted constants."""

from __future__ import annotations

from pathlib import Path

import pytest

from plancast.runtime.calibrate import at_speed, local_cpu_scenario, normalise_speed, run_probe, runs_probe
from plancast.simulator.calibration.compute import Observation
from plancast.simulator.calibration.runs import RunData
from plancast.traces.store import RunDir, write_json

WORKLOAD = "cpu: the probe's workload"


def run_dir(tmp_path: Path, name: str, probe_s: float | None, workload: str = WORKLOAD) -> Path:
    """A run folder whose measured/summary.json holds `probe_s` (nothing where None)."""
    path = tmp_path / name
    RunDir(path).measured_dir.mkdir(parents=True)
    probe = {} if probe_s is None else {"speed_probe_s": probe_s, "speed_probe_workload": workload}
    write_json(RunDir(path).measured_summary, {"status": "ok", "step_time_s": 1.0, **probe})
    return path


def data(name: str) -> RunData:
    observations = (Observation(0, "forward", 1.0), Observation(0, "backward", 2.0))
    return RunData(name, local_cpu_scenario(), observations, 4.0, {"dp": 0.5}, (0.25, 8.0))


def test_a_run_is_scaled_in_every_measured_time() -> None:
    run = at_speed(data("a"), 0.5)
    assert [o.seconds for o in run.observations] == [0.5, 1.0]
    assert (run.step_s, run.collective_s, run.untracked) == (2.0, {"dp": 0.25}, (0.125, 8.0))


def test_the_reference_is_the_median_probe_of_the_same_workload(tmp_path: Path) -> None:
    runs = [
        run_dir(tmp_path, "a", 1.0),
        run_dir(tmp_path, "b", 3.0),
        run_dir(tmp_path, "c", 2.0),
        run_dir(tmp_path, "d", None),
        run_dir(tmp_path, "e", 100.0, "cuda: another"),
    ]
    assert runs_probe(runs) == {"probe_s": 2.0, "workload": WORKLOAD}
    assert run_probe(runs[3]) is None and run_probe(tmp_path / "missing") is None
    assert runs_probe([runs[3]]) is None


def test_each_probing_run_is_brought_to_the_median_speed(tmp_path: Path) -> None:
    runs = [run_dir(tmp_path, "fast", 1.0), run_dir(tmp_path, "slow", 4.0), run_dir(tmp_path, "none", None)]
    normalised, notes = normalise_speed(runs, [data("fast"), data("slow"), data("none")])
    # the median of 1 and 4 is 2.5: the fast run's times x 2.5, the slow run's x 0.625, the third as is
    assert [r.step_s for r in normalised] == pytest.approx([10.0, 2.5, 4.0])
    assert len(notes) == 1 and "2 of 3 runs normalised to 2500.000 ms" in notes[0]


def test_runs_without_a_probe_are_fitted_as_measured(tmp_path: Path) -> None:
    runs = [run_dir(tmp_path, "a", None), run_dir(tmp_path, "b", None)]
    normalised, notes = normalise_speed(runs, [data("a"), data("b")])
    assert [r.step_s for r in normalised] == [4.0, 4.0] and notes == []


def test_a_run_that_read_between_steps_is_brought_by_its_steps_own_probes(tmp_path: Path) -> None:
    """Two runs at the same 10 ms pair; the second read 20 ms between its steps 1-3, which took twice as
    long: its median step at each step's own probe (traces/speed_readings.py) is the fast steps' 1 s,
    so its times are halved, where the pair alone would leave them as they are."""
    flat, wave = run_dir(tmp_path, "flat", 0.010), run_dir(tmp_path, "wave", 0.010)
    summary = {
        "status": "ok",
        "speed_probe_s": 0.010,
        "speed_probe_workload": WORKLOAD,
        "step_times_s": [3.0, 2.0, 2.0, 2.0, 1.0],
        "warmup_steps": 1,
        "step_time_s": 2.0,
        "speed_probe_readings": {
            "after_step": [-1, 0, 1, 2, 3, 4],
            "probe_s": [0.01, 0.02, 0.02, 0.02, 0.02, 0.01],
        },
    }
    write_json(RunDir(wave).measured_summary, summary)
    normalised, notes = normalise_speed([flat, wave], [data("flat"), data("wave")])
    assert normalised[0] == data("flat")  # the pair at the reference: x 1
    # steps 1-4 at probes 20, 20, 20, 15 ms: 1.0, 1.0, 1.0, 0.667 s at 10 ms; median 1.0 of the 2.0 s
    assert normalised[1].step_s == pytest.approx(4.0 * 0.5)
    assert "x 0.500 to 1.000" in notes[0]
