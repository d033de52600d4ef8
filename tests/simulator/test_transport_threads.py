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
from plancast.simulator.scenario import Scenario


def scenario(ranks: int, cores: int | None, compute: dict[str, float], interleaved: bool = False) -> Scenario:
    """A tiny-gpt pipeline of `ranks` ranks on a node of `cores` cores (None: a core each)."""
    parallelism: dict[str, Any] = {"pipeline_parallel_degree": ranks}
    model: dict[str, Any] = {"preset": "tiny-gpt"}
    if interleaved:
        parallelism |= {"pipeline_parallel_schedule": "Interleaved1F1B", "virtual_stages_per_rank": 2}
        model["num_hidden_layers"] = 8
    data: dict[str, Any] = {
        "model": model,
        "training": {"seq_len": 128, "micro_batch_size": 2, "global_batch_size": 16, "dtype": "fp32"},
        "parallelism": parallelism,
        "cluster": {"preset": "local-cpu", "gpus_per_node": ranks, "compute_slots_per_node": cores},
    }
    return with_fields(parse_scenario(data).scenario, compute)


def step(s: Scenario) -> float:
    return float(simulate(s, events=False).summary["step_time_s"])


def test_transport_threads_lengthen_a_step_where_ranks_share_the_cores() -> None:
    threads = step(scenario(4, 2, {"p2p_thread_us": 2_000.0}))
    assert threads > step(scenario(4, 2, {"p2p_thread_us": 0.0})) * 1.05


def test_transport_threads_change_nothing_where_each_rank_has_a_core() -> None:
    threads = step(scenario(2, 2, {"p2p_thread_us": 2_000.0}))
    assert threads == pytest.approx(step(scenario(2, 2, {"p2p_thread_us": 0.0})))


def test_a_thread_waits_for_a_slice_only_while_every_core_of_its_node_runs_a_job() -> None:
    sim = Engine(scenario(4, 2, {"p2p_busy_delay_us": 1_500.0}))
    assert slice_wait_s(sim, 0) == 0.0  # nothing runs
    sim.busy(1, 1.0)
    assert slice_wait_s(sim, 0) == 0.0  # a core is free
    sim.busy(2, 1.0)
    assert slice_wait_s(sim, 0) == pytest.approx(1.5e-3)  # both cores run a job
    dedicated = Engine(scenario(4, None, {"p2p_busy_delay_us": 1_500.0}))
    dedicated.busy(1, 1.0)
    dedicated.busy(2, 1.0)
    assert slice_wait_s(dedicated, 0) == 0.0  # a core per rank: never taken by another


def test_a_thread_woken_while_every_core_is_taken_waits_for_a_slice() -> None:
    def busy_step(delay_us: float, cores: int) -> float:
        return step(scenario(4, cores, {"p2p_busy_delay_us": delay_us}, interleaved=True))

    # 4 ranks on 2 cores: transfers landing on, and receivers woken on, a saturated node wait; with a
    # core per rank only a receive posted while its sender computes does (the busy-sender delay)
    shared = busy_step(1_500.0, cores=2) - busy_step(0.0, cores=2)
    dedicated = busy_step(1_500.0, cores=4) - busy_step(0.0, cores=4)
    assert shared > dedicated + 3 * 1.5e-3
