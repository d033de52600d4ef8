"""ComputeModel.p2p_busy_delay_us (a pipeline transfer's mean extra time when its sender computes on a
machine with no idle core, measured by runtime/microbench_host.py): it lengthens pipeline plans' steps
and leaves plans without transfers alone; the profile bounds it by a scheduler period."""

from __future__ import annotations

from typing import Any

import pytest

from plancast.simulator.calibration.microbench import BOUNDS, bounded
from plancast.simulator.loader import parse_scenario
from plancast.simulator.predict import simulate


def step(delay_us: float, **parallelism: Any) -> float:
    data = {
        "model": {"preset": "tiny-gpt"},
        "training": {"seq_len": 128, "micro_batch_size": 2, "global_batch_size": 8, "dtype": "fp32"},
        "parallelism": parallelism,
        "cluster": {"preset": "local-cpu", "gpus_per_node": 2, "compute": {"p2p_busy_delay_us": delay_us}},
    }
    return float(simulate(parse_scenario(data).scenario, events=False).summary["step_time_s"])


@pytest.mark.parametrize("schedule", ["1F1B", "GPipe"])
def test_a_busy_delay_lengthens_a_pipeline_step(schedule: str) -> None:
    plan = {"pipeline_parallel_degree": 2, "pipeline_parallel_schedule": schedule}
    assert step(1000.0, **plan) > step(0.0, **plan) + 1e-3  # at least one transfer on the critical path


def test_plans_without_transfers_are_unchanged() -> None:
    assert step(1000.0, data_parallel_degree=2) == pytest.approx(step(0.0, data_parallel_degree=2))


def test_the_bound_is_a_scheduler_period() -> None:
    value, clipped = bounded("p2p_busy_delay_us", 50_000.0)
    assert value == BOUNDS["p2p_busy_delay_us"].high_us and clipped is not None
    assert bounded("p2p_busy_delay_us", 900.0) == (900.0, None)
