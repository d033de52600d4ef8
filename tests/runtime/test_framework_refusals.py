"""Behaviours of other frameworks that the simulator models and the runtime does not run are refused by
`plancast run` before anything starts (exit 2, the key to change): a run that ignored them would not be
the plan that was predicted (runtime/plan.py, check_framework_behaviour)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.cli_runner import assert_run_refused

TRAINING = {"seq_len": 32, "micro_batch_size": 1, "global_batch_size": 8, "dtype": "fp32"}
FSDP = {"data_parallel_degree": 2, "zero_stage": 3}

CASES: dict[str, tuple[dict[str, Any], dict[str, Any], str]] = {
    # name: (training keys, parallelism, what the message must name)
    "selective-op": ({"recompute": "selective", "selective_recompute": "op"}, {}, "'attention'"),
    "fsdp-prefetch-post": ({}, {**FSDP, "fsdp_backward_prefetch": "post"}, "fsdp_backward_prefetch = 'pre'"),
    "elementwise-fused": ({"elementwise": "fused"}, {}, "elementwise = 'eager'"),
    "megatron-default-fused": ({}, {"framework": "megatron-lm"}, "elementwise = 'eager'"),
    "optimizer-offload": ({"optimizer_cpu_offload": True}, {}, "optimizer_cpu_offload = false"),
    "activation-offload": ({"activation_offload": True}, {}, "activation_offload = false"),
    "te-loss": ({"fused_cross_entropy": "te"}, {}, "fused_cross_entropy = 'none'"),
    "pipelining-buffers": ({}, {"pipeline_receive_buffers": "per_microbatch"}, "'per_transfer'"),
    "distopt-overlapped-gather": (
        {},
        {
            "data_parallel_degree": 2,
            "zero_stage": 1,
            "distributed_optimizer": True,
            "overlap_param_gather": True,
        },
        "overlap_param_gather = false",
    ),
    "split-backward-fsdp": (
        {},
        {**FSDP, "pipeline_parallel_degree": 2, "pipeline_parallel_schedule": "ZBH2"},
        "only under zero_stage 0 or 1 without tensor parallel",
    ),
}


@pytest.mark.parametrize("name", list(CASES))
def test_unrun_behaviour_is_refused_with_the_fix(name: str, tmp_path: Path) -> None:
    training, parallelism, fix = CASES[name]
    ranks = parallelism.get("data_parallel_degree", 1) * parallelism.get("pipeline_parallel_degree", 1)
    data = {
        "model": {"preset": "tiny-gpt"},
        "training": {**TRAINING, **training},
        "parallelism": parallelism,
        "cluster": {"preset": "local-cpu", "gpus_per_node": ranks},
    }
    assert_run_refused(tmp_path, data, fix)


def test_fp16_is_refused_for_want_of_a_loss_scaler(tmp_path: Path) -> None:
    data = {
        "model": {"preset": "tiny-gpt"},
        "training": {**TRAINING, "dtype": "fp16"},
        "parallelism": {},
        "cluster": {"preset": "local-cpu", "gpus_per_node": 1, "gpu": "A100-SXM4-80GB"},
    }
    assert_run_refused(tmp_path, data, "use bf16")
