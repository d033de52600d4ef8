"""Every parallel plan reproduces the single-process reference (fp32): losses and parameters after 3 steps."""

from __future__ import annotations

from typing import Any

import pytest

from tests.distributed.checks import tiny_scenario, train_matches_reference
from tests.distributed.spawn import run_ranks

pytestmark = pytest.mark.distributed

CASES: dict[str, tuple[int, dict[str, Any], dict[str, Any]]] = {
    # name: (world size, parallelism, model overrides)
    "ddp": (2, {"data_parallel_degree": 2}, {}),
    "zero1": (2, {"data_parallel_degree": 2, "zero_stage": 1}, {}),
    "zero2": (2, {"data_parallel_degree": 2, "zero_stage": 2}, {"activation": "swiglu", "norm": "rmsnorm"}),
    "zero3": (2, {"data_parallel_degree": 2, "zero_stage": 3}, {"tie_word_embeddings": False}),
    "tp": (
        2,
        {"tensor_parallel_degree": 2, "vocab_parallel": False},
        {"activation": "swiglu", "position_embedding": "rope"},
    ),
    "tp-sp": (2, {"tensor_parallel_degree": 2, "sequence_parallel": True, "vocab_parallel": False}, {}),
    # vocab-parallel embedding, output layer and loss_parallel (issue 9): tied in one chunk, untied with
    # rope under sequence parallelism (reduce-scattered lookup), tied over two stages, tied under DDP
    "tp-vocab": (2, {"tensor_parallel_degree": 2, "vocab_parallel": True}, {}),
    "tp-vocab-sp-rope": (
        2,
        {"tensor_parallel_degree": 2, "vocab_parallel": True, "sequence_parallel": True},
        {"position_embedding": "rope", "tie_word_embeddings": False, "activation": "swiglu"},
    ),
    "tp-vocab-pp-tied": (
        4,
        {"tensor_parallel_degree": 2, "pipeline_parallel_degree": 2, "vocab_parallel": True},
        {},
    ),
    "tp-vocab-ddp-tied": (
        4,
        {"tensor_parallel_degree": 2, "data_parallel_degree": 2, "vocab_parallel": True},
        {},
    ),
    "pp-gpipe": (2, {"pipeline_parallel_degree": 2, "pipeline_parallel_schedule": "GPipe"}, {}),
    "pp-1f1b": (2, {"pipeline_parallel_degree": 2}, {"tie_word_embeddings": False}),
    "pp-interleaved": (
        2,
        {
            "pipeline_parallel_degree": 2,
            "pipeline_parallel_schedule": "Interleaved1F1B",
            "virtual_stages_per_rank": 2,
        },
        {},
    ),
    "pp-zerobubble": (2, {"pipeline_parallel_degree": 2, "pipeline_parallel_schedule": "ZeroBubble"}, {}),
    "3d-2x2x2": (
        8,
        {"pipeline_parallel_degree": 2, "data_parallel_degree": 2, "tensor_parallel_degree": 2},
        {},
    ),
}


@pytest.mark.parametrize("name", list(CASES))
def test_parallel_plan_matches_single_process_reference(name: str) -> None:
    world, parallelism, model = CASES[name]
    run_ranks(world, train_matches_reference, tiny_scenario(world, model=model, **parallelism))


@pytest.mark.parametrize("recompute", ["selective", "full"])
def test_recompute_keeps_numerics(recompute: str) -> None:
    data = tiny_scenario(2, training={"recompute": recompute}, pipeline_parallel_degree=2)
    run_ranks(2, train_matches_reference, data)
