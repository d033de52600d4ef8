"""ComputeModel.p2p_thread_us: gloo's threads' CPU time per pipeline transfer side takes a core only
where ranks share the cores (4 ranks on 2), and never holds a rank back where each rank has its own."""

from __future__ import annotations

from typing import Any

import pytest

from plancast.simulator.calibration.runs import with_fields
from plancast.simulator.engine.core import Engine
from plancast.simulator.engine.pipeline import slice_wait_s
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


def busy_step(delay_us: float, ranks: int, cores: int) -> float:
    data: dict[str, Any] = {
        "model": {"preset": "tiny-gpt", "num_hidden_layers": 8},
        "training": {"seq_len": 128, "micro_batch_size": 2, "global_batch_size": 16, "dtype": "fp32"},
        "parallelism": {
            "pipeline_parallel_degree": ranks,
            "pipeline_parallel_schedule": "Interleaved1F1B",
            "virtual_stages_per_rank": 2,
        },
        "cluster": {
            "preset": "local-cpu",
            "gpus_per_node": ranks,
            "compute_slots_per_node": cores,
            "compute": {"p2p_busy_delay_us": delay_us},
        },
    }
    return float(simulate(parse_scenario(data).scenario, events=False).summary["step_time_s"])


def test_a_thread_waits_for_a_slice_only_while_every_core_of_its_node_runs_a_job() -> None:
    data: dict[str, Any] = {
        "model": {"preset": "tiny-gpt"},
        "training": {"seq_len": 128, "micro_batch_size": 2, "global_batch_size": 16, "dtype": "fp32"},
        "parallelism": {"pipeline_parallel_degree": 4},
        "cluster": {"preset": "local-cpu", "gpus_per_node": 4, "compute_slots_per_node": 2},
    }
    s = parse_scenario(data).scenario
    sim = Engine(with_fields(s, {"p2p_busy_delay_us": 1_500.0}))
    assert slice_wait_s(sim, 0) == 0.0  # nothing runs
    sim.busy(1, 1.0)
    assert slice_wait_s(sim, 0) == 0.0  # a core is free
    sim.busy(2, 1.0)
    assert slice_wait_s(sim, 0) == pytest.approx(1.5e-3)  # both cores run a job
    dedicated = Engine(
        with_fields(
            s.model_copy(update={"cluster": s.cluster.model_copy(update={"compute_slots_per_node": None})}),
            {"p2p_busy_delay_us": 1_500.0},
        )
    )
    dedicated.busy(1, 1.0)
    dedicated.busy(2, 1.0)
    assert slice_wait_s(dedicated, 0) == 0.0  # a core per rank: never taken by another


def test_a_thread_woken_while_every_core_is_taken_waits_for_a_slice() -> None:
    # 4 ranks on 2 cores: transfers landing on, and receivers woken on, a saturated node wait
    assert busy_step(1_500.0, ranks=4, cores=2) - busy_step(0.0, ranks=4, cores=2) > 3 * 1.5e-3
    # a core per rank: a woken receiver always finds its own core (the delay is a busy sender's only,
    # and with receives posted ahead the sender's posting thread writes the message)
    assert busy_step(1_500.0, ranks=4, cores=4) == pytest.approx(busy_step(0.0, ranks=4, cores=4), rel=0.02)
