"""MoE and context-parallel costs: exact identities, the event contract, and that every knob moves what it
should (a feature flag that changes nothing is a bug)."""

from __future__ import annotations

import math
from typing import Any

import pandas as pd
import pytest

from plancast.simulator.costs.collectives import Level, Link, all_to_all_seconds
from plancast.simulator.costs.memory import rank_memory
from plancast.simulator.costs.model_flops import model_flops_per_token
from plancast.simulator.costs.moe import DROPLESS_IMBALANCE, GROUPED_GEMM_M_TILE, moe_block_forward
from plancast.simulator.costs.ops import Shape
from plancast.simulator.loader import parse_scenario
from plancast.simulator.predict import simulate
from plancast.simulator.scenario import Scenario

MOE: dict[str, Any] = {
    "model": {"preset": "tiny-moe"},
    "training": {"seq_len": 128, "micro_batch_size": 1, "global_batch_size": 8},
    "parallelism": {"expert_parallel_degree": 2},
    "cluster": {"preset": "dgx-h100-80gb", "num_nodes": 1},
}


def _scenario(**edits: dict[str, Any]) -> Scenario:
    data = {k: {**v, **edits.get(k, {})} for k, v in MOE.items()}
    return parse_scenario(data).scenario


def _events(s: Scenario) -> pd.DataFrame:
    return simulate(s).events


def test_all_to_all_is_the_ring_share_on_one_tier_and_the_slowest_tier_over_two() -> None:
    fast, slow = Link(100e9, 0.0), Link(10e9, 0.0)
    # one tier: (N-1)/N of X crosses it
    assert all_to_all_seconds([Level(8, fast)], 8e9) == pytest.approx(7 / 8 * 8e9 / 100e9)
    # 8 per node x 4 nodes: 7/32 of X over NVLink, 24/32 over IB at once; IB is slower
    assert all_to_all_seconds([Level(8, fast), Level(4, slow)], 32e9) == pytest.approx(24e9 / 10e9)
    assert all_to_all_seconds([Level(1, fast)], 1e9) == 0.0


def test_ep_events_follow_the_contract() -> None:
    """Per MoE layer and micro-batch: forward dispatch+combine, backward combine-grad+dispatch-grad;
    `index` counts on through forward, recompute and backward; bytes = T * k * h * dtype."""
    s = _scenario(training={"recompute": "full"})
    ev = _events(s)
    ep = ev[(ev["stream"] == "ep") & (ev["rank"] == 0) & (ev["microbatch"] == 0)]
    moe_layers = 3  # tiny-moe: 4 layers, first_k_dense_replace = 1
    assert set(ep["kind"]) == {"all_to_all"}
    assert sorted(ep["index"]) == list(range(6 * moe_layers))  # forward 2L, recompute 2L, backward 2L
    assert set(ep["bytes"]) == {128 * 2 * 64 * 2}
    compute = ev[(ev["stream"] == "compute") & (ev["rank"] == 0) & (ev["microbatch"] == 0)]
    for _, row in ep.iterrows():  # every all-to-all sits inside a compute span of its micro-batch
        inside = compute[
            (compute["start_us"] <= row["start_us"])
            & (row["start_us"] < compute["start_us"] + compute["dur_us"])
        ]
        assert len(inside) == 1
    assert ev[ev["stream"] == "ep"]["rank"].nunique() == s.world_size


def test_cp_events_gather_forward_and_reduce_scatter_backward() -> None:
    s = _scenario(
        model={"preset": "tiny-llama"},
        parallelism={"expert_parallel_degree": 1, "context_parallel_degree": 2},
    )
    ev = _events(s)
    cp = ev[(ev["stream"] == "cp") & (ev["rank"] == 0) & (ev["microbatch"] == 0)]
    layers = 4
    assert cp.groupby("kind")["index"].apply(sorted).to_dict() == {
        "all_gather": list(range(layers)),
        "reduce_scatter": list(range(layers)),
    }
    kv_dim = 2 * 16  # tiny-llama: 2 kv heads of 16
    assert set(cp[cp["kind"] == "all_gather"]["bytes"]) == {2 * 64 * kv_dim * 2}  # K and V of 128 / 2 tokens
    summary = simulate(s).summary
    assert summary["exposed_comm_s"]["cp"] > 0 and "ep" not in summary["exposed_comm_s"]


def _expert_memory(ep: int) -> float:
    return rank_memory(_scenario(parallelism={"expert_parallel_degree": ep}), 0).parameters


def test_flags_move_what_they_should() -> None:
    """ep up -> parameters per rank down; cp up -> activations down; capacity factor up -> expert time up;
    first_k_dense_replace up -> fewer all-to-alls; MFU counts active parameters only."""
    assert _expert_memory(1) > _expert_memory(2) > _expert_memory(4)
    dense = {"preset": "tiny-llama"}
    acts = [
        rank_memory(
            _scenario(
                model=dense,
                training={"seq_len": 512},
                parallelism={"expert_parallel_degree": 1, "context_parallel_degree": cp},
            ),
            0,
        )
        for cp in (1, 2, 4)
    ]
    assert acts[0].activations > acts[1].activations > acts[2].activations
    step = [
        simulate(_scenario(model={"moe_capacity_factor": cf})).summary["compute_time_s"] for cf in (1.0, 2.0)
    ]
    assert step[1] > step[0]
    counts = [
        (_events(_scenario(model={"first_k_dense_replace": k}))["stream"] == "ep").sum() for k in (0, 1, 3)
    ]
    assert counts[0] > counts[1] > counts[2] > 0
    more_experts = _scenario(model={"num_local_experts": 8})
    # twice the experts, same top-k: only the router's [h, E] GEMM grows (3 MoE layers, fwd + 2x bwd)
    router_growth = 3 * 3 * 2 * 64 * (8 - 4)
    assert model_flops_per_token(more_experts) == model_flops_per_token(_scenario()) + router_growth


def test_dropless_experts_cost_the_imbalance_factor_and_capacity_the_padding() -> None:
    s = _scenario()
    x = Shape.of(s)
    gemm = [op for op in moe_block_forward(x, s.model, 2) if op.name == "expert_gate_up"]
    rows = 2 * 128 * 2 / 4  # ep * T * k / E
    # one grouped GEMM over the E / ep = 2 local experts, each expert's rows padded to the 128-row tile
    padded = math.ceil(rows * DROPLESS_IMBALANCE / GROUPED_GEMM_M_TILE) * GROUPED_GEMM_M_TILE
    assert len(gemm) == 1
    assert gemm[0].flops == pytest.approx(2 * padded * 2 * 64 * 2 * 64)
    capped = _scenario(model={"moe_capacity_factor": 1.0})
    gemm = [op for op in moe_block_forward(Shape.of(capped), capped.model, 2) if op.name == "expert_gate_up"]
    assert gemm[0].flops == pytest.approx(2 * 128 * 2 * 64 * 2 * 64)


@pytest.mark.parametrize(("ep", "expert_buckets"), [(2, 1), (8, 0)])
def test_expert_gradients_are_reduced_over_edp_after_the_dense_ones(ep: int, expert_buckets: int) -> None:
    """dp 8: ep 2 leaves 4 replicas of each expert (one more all-reduce per chunk, of the rank's experts'
    gradients); ep 8 leaves one (no expert reduction)."""
    s = _scenario(model={"num_local_experts": 8}, parallelism={"expert_parallel_degree": ep})
    ev = _events(s)
    dp = ev[(ev["stream"] == "dp") & (ev["rank"] == 0)].sort_values("index")
    assert len(dp) == 1 + expert_buckets
    if expert_buckets:
        swiglu_expert = 3 * 64 * 64 * 4  # fp32 gradients of one expert's three matrices
        assert dp["bytes"].iloc[-1] == 3 * (8 // ep) * swiglu_expert  # 3 MoE layers, 8 / ep experts each
        assert dp["index"].tolist() == [0, 1]
