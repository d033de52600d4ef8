"""ComputeModel.p2p_thread_us: gloo's threads' CPU time per pipeline transfer side takes a core only
where ranks share the cores (4 ranks on 2), and never holds a rank back where each rank has its own."""

from __future__ import annotations

from typing import Any

import pytest

from plancast.simulator.loader import parse_scenario
from plancast.simulator.predict import simulate


def step(thread_us: float, ranks: int, cores: int) -> float:
    data: dict[str, Any] = {
        "model": {"preset": "tiny-gpt"},
        "training": {"seq_len": 128, "micro_batch_size": 2, "global_batch_size": 16, "dtype": "fp32"},
        "parallelism": {"pipeline_parallel_degree": ranks},
        "cluster": {
            "preset": "local-cpu",
            "gpus_per_node": ranks,
            "compute_slots_per_node": cores,
            "compute": {"p2p_thread_us": thread_us},
        },
    }
    return float(simulate(parse_scenario(data).scenario, events=False).summary["step_time_s"])


def test_transport_threads_lengthen_a_step_where_ranks_share_the_cores() -> None:
    assert step(2_000.0, ranks=4, cores=2) > step(0.0, ranks=4, cores=2) * 1.05


def test_transport_threads_change_nothing_where_each_rank_has_a_core() -> None:
    assert step(2_000.0, ranks=2, cores=2) == pytest.approx(step(0.0, ranks=2, cores=2))
