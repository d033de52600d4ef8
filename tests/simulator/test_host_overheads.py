"""Host overheads of the compute model (simulator/costs/host.py): pipeline transfers, DTensor blocks,
FSDP2 units and the optimizer's per-tensor loop.

Each is checked against an exact identity of the engine, and the calibration inverse recovers the
constant a simulation was made with.
"""

from __future__ import annotations

from typing import Any

import pytest

from plancast.simulator.calibration.compute import optimizer_tensor_overhead_us
from plancast.simulator.calibration.observations import untracked_per_step
from plancast.simulator.costs.host import FSDP_FORWARD_SHARE, HostCosts, optimizer_tensors
from plancast.simulator.costs.params import chunk_tensor_bytes
from plancast.simulator.loader import parse_scenario
from plancast.simulator.predict import simulate
from plancast.simulator.scenario import Scenario

# GEMMs on the A100 fit's size curve (ComputeModel's default matmul_half_gflop) rather than local-cpu's:
# tiny-gpt's passes then outlast every 200-us loopback gather, so an FSDP unit's host time has nothing to
# hide; on local-cpu's own curve a pass is shorter than a gather, and the host time added to it hides
# part of the gather's wait (the engine is right to; these tests count the host time alone).
LONG_PASSES = {"matmul_half_gflop": 0.35}


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


def test_transfer_overhead_is_between_the_spans_as_the_runtime_measures_it() -> None:
    """The runtime's recv span wraps only the wait (runtime/parallel/pp.py posts the next receive
    after it): a transfer side's host time is in no span, so each side adds it to the untracked time."""
    plan = {"pipeline_parallel_degree": 2}
    base, slow = (simulate(scenario(c, **plan)).events for c in ({}, {"p2p_overhead_us": 700.0}))
    recv = slow[slow["kind"] == "recv"]
    assert (recv["dur_us"] < 700.0).any()  # a receive whose data had landed waits for nothing
    (before, sides), (after, same) = untracked_per_step(base), untracked_per_step(slow)  # type: ignore[misc]
    assert sides == same == 16  # 8 micro-batches, one send and one receive each per rank
    assert after - before == pytest.approx(sides * 700e-6, rel=1e-6)


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
    """Per-block host time runs inside the blocks' forward and backward spans: with nothing for it to
    overlap, it adds exactly (micro-batches x blocks) times; the other families' constants leave the
    plan alone."""
    base = step_s(scenario(LONG_PASSES, **plan))
    added = step_s(scenario({**LONG_PASSES, field: 700.0}, **plan)) - base
    assert added == pytest.approx(per_step * 700e-6, rel=1e-9)
    assert step_s(scenario({**LONG_PASSES, other: 700.0}, **plan)) == base
    assert step_s(scenario({field: 700.0})) == step_s(scenario())  # plain DDP: none of them


def pp2_tp2(compute: dict[str, float]) -> Scenario:
    return parse_scenario(
        {
            "model": {"preset": "tiny-gpt"},
            "training": {"seq_len": 32, "micro_batch_size": 1, "global_batch_size": 8, "dtype": "fp32"},
            "parallelism": {"tensor_parallel_degree": 2, "pipeline_parallel_degree": 2},
            "cluster": {"preset": "local-cpu", "gpus_per_node": 4, "compute": compute},
        }
    ).scenario


def test_block_overheads_sit_in_the_passes_of_the_layers_each_pipeline_rank_holds() -> None:
    """tp 2 x pp 2 over 4 ranks: each pipeline rank holds 2 of the 4 layers, 8 micro-batches each. A
    block's host time is in its passes (half forward, half backward), where the runtime measures it,
    so it also holds back the next stage: the step grows by more than one rank's own share."""
    base, slow = (simulate(pp2_tp2(c)) for c in ({}, {"tp_layer_overhead_us": 100.0}))
    assert HostCosts.of(pp2_tp2({"tp_layer_overhead_us": 100.0})).layer_s == pytest.approx(100e-6)
    for kind in ("forward", "backward"):
        before, after = (
            r.events[(r.events["stream"] == "compute") & (r.events["kind"] == kind)] for r in (base, slow)
        )
        grown = (after["dur_us"].to_numpy() - before["dur_us"].to_numpy()) * 1e-6
        assert len(grown) == 2 * 2 * 8  # tp 2 x pp 2 ranks, 8 micro-batches
        assert grown == pytest.approx(2 * 50e-6)
    assert slow.summary["bubble_fraction"] == pytest.approx(base.summary["bubble_fraction"], abs=0.02)
    grew = slow.summary["step_time_s"] - base.summary["step_time_s"]
    assert 8 * 2 * 100e-6 < grew < 2 * 8 * 2 * 100e-6


def test_tensor_parallel_host_time_is_compute_not_bubble() -> None:
    """tp 2 without a pipeline has no bubble, however much DTensor dispatch a block costs (it used to
    be a lump between the last backward and the optimizer, reported as 60% bubble for a CPU tp run)."""
    r = simulate(scenario({"tp_layer_overhead_us": 5_000.0}, tensor_parallel_degree=2))
    assert r.summary["bubble_fraction"] < 0.01
    assert r.summary["compute_time_s"] > 8 * 4 * 5_000e-6


@pytest.mark.parametrize("stage", [2, 3])
def test_an_fsdp_units_host_time_leans_to_its_backward(stage: int) -> None:
    """A unit's backward also issues the gradient reduce-scatter (and under ZeRO-3 re-gathers): its
    passes carry the measured shares of the unit's host time (FSDP_FORWARD_SHARE)."""
    runs = [
        simulate(scenario({**LONG_PASSES, **c}, zero_stage=stage))
        for c in ({}, {"fsdp_unit_overhead_us": 1e3})
    ]
    grown = {}
    for kind in ("forward", "backward"):
        before, after = (
            r.events[(r.events["stream"] == "compute") & (r.events["kind"] == kind)] for r in runs
        )
        grown[kind] = float((after["dur_us"].to_numpy() - before["dur_us"].to_numpy()).sum())
    assert grown["forward"] / (grown["forward"] + grown["backward"]) == pytest.approx(
        FSDP_FORWARD_SHARE[stage]
    )
    assert grown["forward"] + grown["backward"] == pytest.approx(
        2 * 4 * (4 + 1) * 1_000.0
    )  # ranks x mb x units
