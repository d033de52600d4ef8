"""Expert- and context-parallel plans the runtime does not execute are refused by `plancast run` before
anything starts: exit code 2, the key to change, no traceback (runtime/plan.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.cli_runner import assert_run_refused

MOE = {"preset": "tiny-gpt", "num_local_experts": 4, "num_experts_per_tok": 2}

CASES: dict[str, tuple[dict[str, Any], dict[str, Any], int, str]] = {
    # name: (model, parallelism, ranks, what the message must name)
    "moe-tp2": (MOE, {"tensor_parallel_degree": 2}, 2, "tensor_parallel_degree = 1"),
    "moe-zero1": (
        MOE,
        {"data_parallel_degree": 2, "expert_parallel_degree": 2, "zero_stage": 1},
        2,
        "set zero_stage = 0",
    ),
    "moe-cp2": (MOE, {"context_parallel_degree": 2}, 2, "context_parallel_degree = 1"),
    "moe-deepep": (MOE, {"expert_parallel_degree": 2, "moe_token_dispatcher": "deepep"}, 2, "'alltoall'"),
    "moe-overlap": (MOE, {"expert_parallel_degree": 2, "moe_overlap_ep_comm": True}, 2, "= false"),
    "moe-etp2": (MOE, {"expert_tensor_parallel_degree": 2}, 2, "set it to 1 or unset it"),
    "cp2-tp2": (
        {"preset": "tiny-gpt"},
        {"context_parallel_degree": 2, "tensor_parallel_degree": 2},
        4,
        "set one",
    ),
    "cp2-zero3": (
        {"preset": "tiny-gpt"},
        {"context_parallel_degree": 2, "data_parallel_degree": 2, "zero_stage": 3},
        4,
        "use zero_stage 0 or 1",
    ),
}


@pytest.mark.parametrize("name", list(CASES))
def test_unsupported_plan_is_refused_with_the_fix(name: str, tmp_path: Path) -> None:
    model, parallelism, ranks, fix = CASES[name]
    data = {
        "model": model,
        "training": {"seq_len": 32, "micro_batch_size": 1, "global_batch_size": 8, "dtype": "fp32"},
        "parallelism": parallelism,
        "cluster": {"preset": "local-cpu", "gpus_per_node": ranks},
    }
    assert_run_refused(tmp_path, data, fix)
