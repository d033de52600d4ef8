"""`plancast calibrate`'s host-overhead fits recover the constants that made the step times.

The "measured" summaries are simulated with known overheads (nothing else differs), so a fit that
inverts the simulator must give them back.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from plancast.runtime.calibrate import fit_overhead, fit_two_overheads, simulated_step_s
from plancast.simulator.loader import parse_scenario
from plancast.simulator.scenario import Scenario
from plancast.traces.store import RunDir, write_json


def scenario(micro_batch: int, **parallelism: Any) -> Scenario:
    data: dict[str, Any] = {
        "model": {"preset": "tiny-gpt"},
        "training": {
            "seq_len": 64,
            "micro_batch_size": micro_batch,
            "global_batch_size": 16,
            "dtype": "fp32",
        },
        "parallelism": parallelism,
        "cluster": {"preset": "local-cpu", "gpus_per_node": 2},
    }
    return parse_scenario(data).scenario


def fake_run(tmp_path: Path, name: str, step_s: float) -> Path:
    run = tmp_path / name
    RunDir(run).measured_dir.mkdir(parents=True)
    write_json(RunDir(run).measured_summary, {"status": "ok", "step_time_s": step_s})
    return run


@pytest.mark.parametrize(
    ("fields", "plan"),
    [
        (("dp_collective_overhead_us", "fsdp_step_overhead_us"), {"zero_stage": 3}),
        (("tp_collective_overhead_us", "tp_step_overhead_us"), {"tensor_parallel_degree": 2}),
        (
            ("sp_collective_overhead_us", "sp_step_overhead_us"),
            {"tensor_parallel_degree": 2, "sequence_parallel": True},
        ),
    ],
)
def test_per_collective_and_per_step_overheads_separate_on_two_micro_batch_counts(
    tmp_path: Path, fields: tuple[str, str], plan: dict[str, Any]
) -> None:
    truth = dict(zip(fields, (1800.0, 30_000.0), strict=True))
    chosen = []
    for mb in (4, 1):
        s = scenario(mb, **plan)
        chosen.append((fake_run(tmp_path, f"mb{mb}", simulated_step_s(s, truth)), s))
    fitted = fit_two_overheads(fields, chosen)
    for field, value in truth.items():
        assert fitted[field] == pytest.approx(value, rel=0.02), field


@pytest.mark.parametrize(
    ("field", "plan"),
    [
        ("p2p_overhead_us", {"pipeline_parallel_degree": 2}),
        ("tp_collective_overhead_us", {"tensor_parallel_degree": 2}),
        ("sp_collective_overhead_us", {"tensor_parallel_degree": 2, "sequence_parallel": True}),
        ("dp_collective_overhead_us", {"zero_stage": 2}),
    ],
)
def test_one_overhead_is_found_by_bisection(tmp_path: Path, field: str, plan: dict[str, Any]) -> None:
    s = scenario(2, **plan)
    run = fake_run(tmp_path, "run", simulated_step_s(s, {field: 2500.0}))
    assert fit_overhead(field, s, run) == pytest.approx(2500.0, rel=1e-3)


def test_a_run_faster_than_the_model_gets_no_overhead(tmp_path: Path) -> None:
    s = scenario(2, pipeline_parallel_degree=2)
    run = fake_run(tmp_path, "run", 0.5 * simulated_step_s(s, {}))
    assert fit_overhead("p2p_overhead_us", s, run) == 0.0
