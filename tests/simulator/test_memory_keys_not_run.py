"""The memory keys of issue 33 that describe other frameworks' behaviour, which plancast's runtime does not
run, are refused by `plancast run` before anything starts (exit 2, naming the fix; runtime/plan.py):
pure 16-bit parameters (training.master_weights), bf16 Adam moments (training.optimizer_moment_dtype),
the SwiGLU's input stored in FP8 (training.activation_input_store), the attention output cached in
E5M6 (training.attention_output_store), stage outputs kept for the step
(parallelism.pipeline_output_chunks) and DualPipe's second copy (parallelism.pipeline_parameter_copies)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.cli_runner import assert_run_refused

CASES: dict[str, tuple[dict[str, Any], dict[str, Any], str]] = {
    "pure-bf16": ({"dtype": "bf16", "master_weights": False}, {}, "remove the key to run it"),
    "bf16-moments": (
        {"optimizer_moment_dtype": "bf16", "elementwise": "eager"},
        {"framework": "megatron-lm"},
        "AdamW keeps fp32 moments",
    ),
    "fp8-act-input": (
        {"activation_input_store": "fp8"},
        {},
        "remove the key to run it",
    ),
    "e5m6-attention-output": ({"attention_output_store": "e5m6"}, {}, "remove the key to run it"),
    "kept-outputs": (
        {},
        {"pipeline_parallel_degree": 2, "pipeline_output_chunks": "last_stage"},
        "pipeline_output_chunks = 'none'",
    ),
    "dualpipe-copies": (
        {},
        {
            "pipeline_parallel_degree": 2,
            "pipeline_parallel_schedule": "DualPipeV",
            "virtual_stages_per_rank": 2,
            "pipeline_parameter_copies": 2,
        },
        "pipeline_parameter_copies = 1",
    ),
}


SWIGLU_PRESET, SWIGLU_CASES = "tiny-llama", {"fp8-act-input"}  # the key needs a SwiGLU model


@pytest.mark.parametrize("name", list(CASES))
def test_the_runtime_refuses_it_with_the_fix(name: str, tmp_path: Path) -> None:
    training, parallelism, fix = CASES[name]
    data = {
        "model": {"preset": SWIGLU_PRESET if name in SWIGLU_CASES else "tiny-gpt"},
        "training": {"seq_len": 32, "global_batch_size": 8, "dtype": "fp32", **training},
        "parallelism": parallelism,
        "cluster": {"preset": "local-cpu", "gpus_per_node": parallelism.get("pipeline_parallel_degree", 1)},
    }
    assert_run_refused(tmp_path, data, fix)
