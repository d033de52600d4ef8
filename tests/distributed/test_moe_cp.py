"""Expert and context parallelism on real gloo ranks: the losses and parameters of the single-process
reference, and exactly the expected events (expert all-to-alls, K/V all-gathers and reduce-scatters
with the keys of docs/moe.md) on every capture path."""

from __future__ import annotations

from typing import Any

import pytest

from tests.distributed.checks import events_match_expected, tiny_scenario, train_matches_reference
from tests.distributed.spawn import run_ranks

pytestmark = pytest.mark.distributed

MOE = {"num_local_experts": 4, "num_experts_per_tok": 2, "moe_intermediate_size": 24}

CASES: dict[str, tuple[int, dict[str, Any], dict[str, Any]]] = {
    # name: (world size, parallelism, model overrides)
    "ep2": (2, {"data_parallel_degree": 2, "expert_parallel_degree": 2}, MOE),
    "ep2-capacity-shared-aux": (
        2,
        {"data_parallel_degree": 2, "expert_parallel_degree": 2},
        {
            **MOE,
            "activation": "swiglu",
            "moe_capacity_factor": 0.75,
            "n_shared_experts": 1,
            "first_k_dense_replace": 1,
            "router_aux_loss_coef": 0.01,
        },
    ),
    "ep2xdp2": (4, {"data_parallel_degree": 4, "expert_parallel_degree": 2}, MOE),
    # the folded expert grid (simulator/mesh.py, etp set) drives the runtime's groups; at tp 1 it is the
    # carved-out-of-dp layout, the one the runtime can run (it refuses MoE with tp > 1)
    "ep2-folded-etp1": (
        2,
        {"data_parallel_degree": 2, "expert_parallel_degree": 2, "expert_tensor_parallel_degree": 1},
        MOE,
    ),
    # MoE parallel folding across tensor parallel: ep 2 over the tp pair, whole experts on sequence shards
    "ep2-over-tp2-etp1": (
        2,
        {
            "tensor_parallel_degree": 2,
            "sequence_parallel": True,
            "expert_parallel_degree": 2,
            "expert_tensor_parallel_degree": 1,
        },
        MOE,
    ),
    "moe-pp2-aux": (2, {"pipeline_parallel_degree": 2}, {**MOE, "router_aux_loss_coef": 0.1}),
    "cp2": (2, {"context_parallel_degree": 2}, {}),
    "cp2-rope-gqa": (
        2,
        {"context_parallel_degree": 2},
        {"position_embedding": "rope", "activation": "swiglu"},
    ),
    "cp2xdp2-zero1": (4, {"context_parallel_degree": 2, "data_parallel_degree": 2, "zero_stage": 1}, {}),
}


@pytest.mark.parametrize("name", list(CASES))
def test_expert_and_context_parallel_plans_match_the_reference(name: str) -> None:
    world, parallelism, model = CASES[name]
    data = tiny_scenario(world, model=model, **parallelism)
    run_ranks(world, train_matches_reference, data, 3, True)


EVENT_CASES: dict[str, tuple[int, dict[str, Any], dict[str, Any], dict[str, Any]]] = {
    # name: (world size, parallelism, model overrides, training overrides)
    "ep2": (2, {"data_parallel_degree": 2, "expert_parallel_degree": 2}, MOE, {}),
    "ep2-full-recompute": (
        2,
        {"data_parallel_degree": 2, "expert_parallel_degree": 2},
        {**MOE, "first_k_dense_replace": 1},
        {"recompute": "full"},
    ),
    "ep2xdp2": (4, {"data_parallel_degree": 4, "expert_parallel_degree": 2}, MOE, {}),
    "ep2-folded-etp1": (
        2,
        {"data_parallel_degree": 2, "expert_parallel_degree": 2, "expert_tensor_parallel_degree": 1},
        MOE,
        {},
    ),
    "ep2-over-tp2-etp1": (
        2,
        {
            "tensor_parallel_degree": 2,
            "sequence_parallel": True,
            "expert_parallel_degree": 2,
            "expert_tensor_parallel_degree": 1,
        },
        MOE,
        {},
    ),
    "cp2": (2, {"context_parallel_degree": 2}, {}, {}),
    "cp2-full-recompute": (2, {"context_parallel_degree": 2}, {}, {"recompute": "full"}),
    "cp2-pp2": (4, {"context_parallel_degree": 2, "pipeline_parallel_degree": 2}, {}, {}),
}


@pytest.mark.parametrize("name", list(EVENT_CASES))
def test_measured_events_equal_expected_keys(name: str) -> None:
    world, parallelism, model, training = EVENT_CASES[name]
    run_ranks(
        world, events_match_expected, tiny_scenario(world, model=model, training=training, **parallelism)
    )


@pytest.mark.parametrize("capture", ["dispatch", "profiler"])
@pytest.mark.parametrize("name", ["ep2", "cp2"])
def test_every_capture_path_records_the_same_keys(name: str, capture: str) -> None:
    world, parallelism, model, training = EVENT_CASES[name]
    data = tiny_scenario(world, model=model, training=training, **parallelism)
    run_ranks(world, events_match_expected, data, 2, "dispatch", capture)
