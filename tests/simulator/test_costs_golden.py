"""Golden numbers from the seeds and the published runs: the ideal model must reproduce them exactly."""

from __future__ import annotations

import math

import pytest

from plancast.simulator.costs.collectives import (
    Level,
    Link,
    collective_seconds,
    group_levels,
    ring_seconds,
    tree_seconds,
)
from plancast.simulator.costs.memory import model_state_bytes
from plancast.simulator.costs.params import count_parameters
from plancast.simulator.scenario import Model

GB = 1e9
REL = 1e-9


@pytest.mark.parametrize(
    ("params", "dp", "zero", "expected_gb"),
    [
        (7e9, 1, 0, 112.0),  # seeds: 7B x 16 bytes
        (7e9, 8, 1, 38.5),  # 4P + 12P/N
        (7e9, 8, 2, 26.25),  # 2P + 14P/N
        (7e9, 8, 3, 14.0),  # 16P/N
        (70e9, 1, 0, 1120.0),  # 70B = 1.12 TB
    ],
)
def test_mixed_precision_adam_model_states(params: float, dp: int, zero: int, expected_gb: float) -> None:
    total = sum(model_state_bytes(params, dp=dp, zero_stage=zero, dtype="bf16"))
    assert total / GB == pytest.approx(expected_gb, rel=REL)


def test_fp32_gradient_accumulation_costs_18_bytes_per_parameter() -> None:
    # Megatron-LM keeps fp32 main gradients: 2 + 4 + 12 (Korthikanti et al. Figure 1 is consistent with it).
    assert sum(model_state_bytes(1e9, dp=1, zero_stage=0, dtype="fp16", grad_fp32=True)) == pytest.approx(
        18e9
    )


@pytest.mark.parametrize(
    ("n", "size_gb", "bw_gbps", "expected_s"),
    [
        (8, 2.0, 25.0, 0.14),  # seeds: ring all-reduce, 2 GB at 25 GB/s
        (8, 2.0, 12.5, 0.28),  # ... at 12.5 GB/s
        (8, 28.0, 600.0, 28 * 2 * 7 / 8 / 600),  # 28 GB over 600 GB/s: 0.0817 s
    ],
)
def test_ring_all_reduce_seed_numbers(n: int, size_gb: float, bw_gbps: float, expected_s: float) -> None:
    seconds = ring_seconds("all_reduce", n, size_gb * GB, Link.of(bw_gbps, 0.0))
    assert seconds == pytest.approx(expected_s, rel=REL)


def test_28gb_over_600gbps_rounds_to_the_seed_figure() -> None:
    assert round(ring_seconds("all_reduce", 8, 28 * GB, Link.of(600.0, 0.0)), 4) == 0.0817


def test_all_gather_and_reduce_scatter_are_half_an_all_reduce() -> None:
    link = Link.of(100.0, 0.0)
    ar = ring_seconds("all_reduce", 16, 4 * GB, link)
    assert ring_seconds("all_gather", 16, 4 * GB, link) == pytest.approx(ar / 2, rel=REL)
    assert ring_seconds("reduce_scatter", 16, 4 * GB, link) == pytest.approx(ar / 2, rel=REL)


def test_latency_terms() -> None:
    link = Link.of(1e12, 5.0)  # bandwidth term negligible: only alpha remains
    assert ring_seconds("all_reduce", 8, 1.0, link) == pytest.approx(2 * 7 * 5e-6, rel=1e-6)
    assert tree_seconds("all_reduce", 8, 1.0, link) == pytest.approx(
        2 * math.ceil(math.log2(8)) * 5e-6, rel=1e-6
    )


def test_hierarchical_beats_flat_ring_across_slow_tier() -> None:
    nvlink, ib = Link.of(300.0, 2.0), Link.of(25.0, 5.0)
    ranks = list(range(64))  # 8 nodes of 8
    levels = group_levels(ranks, (8, 64), (nvlink, ib))
    assert levels == (Level(8, nvlink), Level(8, ib))
    flat = ring_seconds("all_reduce", 64, 1 * GB, ib)
    assert collective_seconds("all_reduce", levels, 1 * GB) < flat


def test_one_member_per_node_is_a_flat_ring_on_the_outer_tier() -> None:
    nvlink, ib = Link.of(300.0, 2.0), Link.of(25.0, 5.0)
    levels = group_levels(list(range(0, 64, 8)), (8, 64), (nvlink, ib))
    assert levels == (Level(8, ib),)


def test_llama3_8b_parameter_count() -> None:
    assert count_parameters(Model.model_validate({"preset": "llama3-8b"})) == pytest.approx(8.03e9, rel=0.005)
