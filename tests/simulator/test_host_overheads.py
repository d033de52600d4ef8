"""Host overheads of the compute model (simulator/costs/host.py): pipeline transfers, DTensor blocks,
FSDP2 units and the optimizer's per-tensor loop.

Each is checked against an exact identity of the engine, and the calibration inverse recovers the
constant a simulation was made with.
"""

from __future__ import annotations

from typing import Any

import pytest

from plancast.simulator.calibration.compute import optimizer_tensor_overhead_us
from plancast.simulator.costs.host import HostCosts, optimizer_tensors
from plancast.simulator.costs.params import chunk_tensor_bytes
from plancast.simulator.loader import parse_scenario
from plancast.simulator.predict import simulate
from plancast.simulator.scenario import Scenario


def scenario(compute: dict[str, float] | None = None, batch: int = 8, **parallelism: Any) -> Scenario:
    data: dict[str, Any] = {
        "model": {"preset": "tiny-gpt"},
        "training": {"seq_len": 32, "micro_batch_size": 1, "global_batch_size": batch, "dtype": "fp32"},
        "parallelism": parallelism,
        "cluster": {"preset": "local-cpu", "gpus_per_node": 2, "compute": compute or {}},
    }
    return parse_scenario(data).scenario


def step_s(s: Scenario) -> float:
    return float(simulate(s, events=False).summary["step_time_s"])


@pytest.mark.parametrize("schedule", ["GPipe", "1F1B"])
def test_one_microbatch_pays_four_transfer_posts(schedule: str) -> None:
    """pp 2, one micro-batch: the critical path is F0, send, recv, F1, B1, send, recv, B0; each of the
    four posts costs the overhead once (the tied embedding's reduction waits for the later rank)."""
    plan = {"pipeline_parallel_degree": 2, "pipeline_parallel_schedule": schedule}
    base = step_s(scenario(batch=1, **plan))
    slowed = step_s(scenario({"p2p_overhead_us": 500.0}, batch=1, **plan))
    assert slowed - base == pytest.approx(4 * 500e-6, rel=1e-9)


def test_transfer_overhead_leaves_plans_without_a_pipeline_alone() -> None:
    assert step_s(scenario({"p2p_overhead_us": 500.0})) == step_s(scenario())


def test_transfer_overhead_is_inside_the_recv_spans() -> None:
    plan = {"pipeline_parallel_degree": 2}
    events = simulate(scenario({"p2p_overhead_us": 700.0}, **plan)).events
    recv = events[events["kind"] == "recv"]
    assert (recv["dur_us"] >= 700.0 - 1e-6).all()


def test_optimizer_tensors_follow_the_runtime_model() -> None:
    s = scenario()
    m = s.model
    tensors = len(chunk_tensor_bytes(m, 1, layers=m.num_hidden_layers, has_embedding=True, has_head=True))
    assert optimizer_tensors(s, [0]) == tensors
    # ZeRO-1 gives each rank whole tensors: a 1/dp share; FSDP2 shards every tensor: all of them
    assert optimizer_tensors(scenario(zero_stage=1), [0]) == tensors / 2
    assert optimizer_tensors(scenario(zero_stage=3), [0]) == tensors


@pytest.mark.parametrize(
    ("plan", "field"),
    [
        ({}, "optimizer_overhead_us"),
        ({"pipeline_parallel_degree": 2}, "optimizer_overhead_us"),
        ({"tensor_parallel_degree": 2}, "dtensor_optimizer_overhead_us"),
        ({"zero_stage": 3}, "dtensor_optimizer_overhead_us"),
    ],
)
def test_calibration_recovers_the_per_tensor_overhead(plan: dict[str, Any], field: str) -> None:
    s = scenario({field: 123.0}, **plan)
    events = simulate(s).events
    optimizer = events[events["kind"] == "optimizer"]
    seconds = float(optimizer["dur_us"].median()) * 1e-6
    assert optimizer_tensor_overhead_us(s, seconds) == pytest.approx(123.0, rel=1e-6)


def test_the_dtensor_rate_applies_only_to_dtensor_parameters() -> None:
    compute = {"dtensor_optimizer_overhead_us": 1000.0}
    assert step_s(scenario(compute)) == step_s(scenario())
    assert step_s(scenario(compute, tensor_parallel_degree=2)) > step_s(scenario(tensor_parallel_degree=2))


@pytest.mark.parametrize(
    ("field", "plan", "other", "per_step"),
    [
        # tp 2, dp 1: 8 micro-batches through 4 tensor-parallel layers
        ("tp_layer_overhead_us", {"tensor_parallel_degree": 2}, "sp_layer_overhead_us", 8 * 4),
        (
            "sp_layer_overhead_us",
            {"tensor_parallel_degree": 2, "sequence_parallel": True},
            "tp_layer_overhead_us",
            8 * 4,
        ),
        # ZeRO-3 over dp 2: 4 micro-batches per rank through 4 block units and the root unit
        ("fsdp_unit_overhead_us", {"zero_stage": 3}, "tp_layer_overhead_us", 4 * (4 + 1)),
    ],
)
def test_a_block_overhead_adds_once_per_block_and_microbatch(
    field: str, plan: dict[str, Any], other: str, per_step: int
) -> None:
    """Per-block host time sits between the last backward and the optimizer, after every wait: it adds
    exactly (micro-batches x blocks) times; the other families' constants leave the plan alone."""
    base = step_s(scenario(**plan))
    assert step_s(scenario({field: 700.0}, **plan)) - base == pytest.approx(per_step * 700e-6, rel=1e-9)
    assert step_s(scenario({other: 700.0}, **plan)) == base
    assert step_s(scenario({field: 700.0})) == step_s(scenario())  # plain DDP: none of them


def test_block_overheads_follow_the_layers_each_pipeline_rank_holds() -> None:
    """tp 2 x pp 2 over 4 ranks: each pipeline rank holds 2 of the 4 layers, 8 micro-batches each."""
    s = parse_scenario(
        {
            "model": {"preset": "tiny-gpt"},
            "training": {"seq_len": 32, "micro_batch_size": 1, "global_batch_size": 8, "dtype": "fp32"},
            "parallelism": {"tensor_parallel_degree": 2, "pipeline_parallel_degree": 2},
            "cluster": {
                "preset": "local-cpu",
                "gpus_per_node": 4,
                "compute": {"tp_layer_overhead_us": 100.0},
            },
        }
    ).scenario
    host = HostCosts.of(s)
    assert host.step_s(s, 0) == host.step_s(s, 1) == pytest.approx(8 * 2 * 100e-6)
