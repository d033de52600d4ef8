"""A cluster profile from microbenchmark numbers (simulator/calibration/microbench.py): each host cost
comes from the measurement that isolates it, and none leaves its physical bound."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from plancast.simulator.calibration.links import ring_terms
from plancast.simulator.calibration.microbench import BOUNDS, bound_violations, bounded, profile_cluster
from plancast.simulator.loader import parse_scenario
from plancast.simulator.scenario import Scenario

ALPHA_S, BANDWIDTH_BPS = 200e-6, 1e9


def scenario() -> Scenario:
    data = {
        "model": {"preset": "tiny-gpt"},
        "training": {"seq_len": 128, "micro_batch_size": 2, "global_batch_size": 16, "dtype": "fp32"},
        "cluster": {"preset": "local-cpu", "gpus_per_node": 2},
    }
    return parse_scenario(data).scenario


def record() -> dict[str, Any]:
    """Numbers of the shape runtime/microbench.py measures (a 2-core machine, roughly)."""
    links = []
    for kind in ("all_reduce", "all_gather", "send"):
        for nbytes in (1024, 65536, 1048576, 4194304):
            steps, volume = ring_terms(kind, 2, nbytes)
            links.append(
                {
                    "kind": kind,
                    "ranks": 2,
                    "bytes": nbytes,
                    "seconds": steps * ALPHA_S + volume / BANDWIDTH_BPS,
                }
            )
    return {
        "device": {
            "matmul_flops": {"256x64x64": 10e9, "256x64x256": 20e9, "256x256x64": 18e9},
            "peak_flops": 20e9,
            "memory_Bps": 5e9,
        },
        "compute": {"1": {"forward": 0.004, "backward": 0.009}, "3": {"forward": 0.010, "backward": 0.024}},
        "links": links,
        "host": {
            "transfer_host_s": 40e-6,
            "collective_s": {
                "all_reduce": 400e-6,
                "all_gather": 450e-6,
                "dtensor_all_reduce": 700e-6,
                "dtensor_all_gather": 1000e-6,
            },
            "block_s": {
                "plain": {"1": 0.006, "3": 0.016},
                "tp": {"1": 0.012, "3": 0.040},
                "sp": {"1": 0.016, "3": 0.056},
                "fsdp": {"1": 0.015, "3": 0.041},
            },
            "optimizer_s": {"plain": {"8": 0.0008, "32": 0.0026}, "dtensor": {"8": 0.004, "32": 0.016}},
        },
        "world": 2,
        "cores": 2,
    }


def test_each_host_cost_comes_from_its_own_microbenchmark() -> None:
    cluster, notes = profile_cluster(scenario(), record())
    c = cluster.compute
    assert c.p2p_overhead_us == pytest.approx(40.0)
    assert c.tp_collective_overhead_us == pytest.approx(300.0)  # DTensor all-reduce minus plain
    assert c.sp_collective_overhead_us == pytest.approx(550.0)
    # AdamW: (32 - 8) tensors cost 1.8 ms more, less the time to move each tensor's optimizer bytes
    # (64 x 32 fp32 parameters, 32 bytes each: engine.optimizer_bytes_per_param)
    memory_us = 64 * 32 * 32 / (cluster.gpu.hbm_GBps * 1e9 * c.memory_efficiency) * 1e6
    assert c.optimizer_overhead_us == pytest.approx(75.0 - memory_us)
    assert c.dtensor_optimizer_overhead_us == pytest.approx(500.0 - memory_us)
    assert cluster.tiers[0].latency_us == pytest.approx(ALPHA_S * 1e6, rel=1e-6)
    assert cluster.tiers[0].bandwidth_GBps == pytest.approx(BANDWIDTH_BPS / 1e9, rel=1e-6)
    assert cluster.compute_slots_per_node == 2
    assert cluster.gpu.peak_tflops["fp32"] == pytest.approx(0.02)
    # device, compute, core share, then each host field (op overhead: compute; the collectives' waits
    # in a run: only runs have them, simulator/calibration/runs.py)
    waits = ("tp_collective_wait_us", "ddp_collective_wait_us")
    assert len(notes) == 3 + len(BOUNDS) - 1 - len(waits)
    assert not any(n.startswith(waits) for n in notes)
    assert c.tp_collective_wait_us == c.ddp_collective_wait_us == 0


@pytest.mark.parametrize(
    ("variant", "field"),
    [("tp", "tp_layer_overhead_us"), ("sp", "sp_layer_overhead_us"), ("fsdp", "fsdp_unit_overhead_us")],
)
def test_a_slower_block_raises_exactly_its_own_per_block_cost(variant: str, field: str) -> None:
    """The per-block cost is the slope over blocks (3 minus 1) less the simulated work: 2 ms more for
    the 3-block model is 1 ms more per block, and nothing else moves."""
    base, _ = profile_cluster(scenario(), record())
    slower = copy.deepcopy(record())
    slower["host"]["block_s"][variant]["3"] += 0.002
    changed, _ = profile_cluster(scenario(), slower)
    assert getattr(changed.compute, field) - getattr(base.compute, field) == pytest.approx(1000.0, rel=1e-6)
    others = {f for f in BOUNDS if f != field}
    assert {f: getattr(changed.compute, f) for f in others} == {f: getattr(base.compute, f) for f in others}


def test_a_measurement_beyond_its_bound_is_clipped_and_reported() -> None:
    wild = copy.deepcopy(record())
    wild["host"]["transfer_host_s"] = 0.012  # 12 ms a transfer: not bookkeeping
    cluster, notes = profile_cluster(scenario(), wild)
    assert cluster.compute.p2p_overhead_us == BOUNDS["p2p_overhead_us"].high_us
    assert any("p2p_overhead_us: measured 12000 us > bound" in n for n in notes)
    assert bound_violations(cluster.compute) == []


def test_on_a_shared_core_the_bounds_scale_with_the_measured_core_share() -> None:
    """A rank that got a quarter of its core takes 4x the wall time for the same CPU work: 12 ms to post
    a send is beyond the idle bound (1 ms) and beyond 4x it; 3 ms is within 4x it and kept."""
    shared = copy.deepcopy(record())
    shared["cpu_share"] = 0.25
    shared["host"]["transfer_host_s"] = 0.003
    cluster, notes = profile_cluster(scenario(), shared)
    assert cluster.compute.p2p_overhead_us == pytest.approx(3000.0)
    assert any("core share of a rank during the microbenchmarks: 0.25" in n for n in notes)
    assert bound_violations(cluster.compute) != [] and bound_violations(cluster.compute, 0.25) == []
    shared["host"]["transfer_host_s"] = 0.012
    cluster, _ = profile_cluster(scenario(), shared)
    assert cluster.compute.p2p_overhead_us == pytest.approx(4 * BOUNDS["p2p_overhead_us"].high_us)


def test_bounded_keeps_values_inside_and_floors_at_zero() -> None:
    assert bounded("p2p_overhead_us", 50.0) == (50.0, None)
    assert bounded("p2p_overhead_us", -5.0) == (0.0, None)


def test_a_load_that_slows_the_plain_and_fsdp_blocks_alike_leaves_the_unit_cost() -> None:
    """The blocks are sampled in turns, so a load that comes and goes hits them alike; their host cost
    is measured against the plain block of the same samples, not against the compute microbenchmark
    taken a minute earlier."""
    base, _ = profile_cluster(scenario(), record())
    loaded = copy.deepcopy(record())
    for variant in ("plain", "fsdp"):
        loaded["host"]["block_s"][variant]["3"] += 0.004
    changed, _ = profile_cluster(scenario(), loaded)
    assert changed.compute.fsdp_unit_overhead_us == pytest.approx(base.compute.fsdp_unit_overhead_us)
