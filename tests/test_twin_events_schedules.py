"""The new schedules' predicted events are the runtime's, key for key (runtime.expected), at the shapes
the CPU runtime cannot start here (more than 2 ranks): V placement at pp 4, with tensor parallel and
a tied vocab-parallel embedding, a mixture-of-experts model (with expert parallel under DualPipeV), and
HSDP 2 x 2."""

from __future__ import annotations

from typing import Any

import pytest

from plancast.runtime.expected import expected_event_keys
from tests.test_twin_events import MOE, predicted_keys, scenario

PLANS: dict[str, dict[str, Any]] = {
    "zbh2-pp4": {
        "parallelism": {"pipeline_parallel_degree": 4, "pipeline_parallel_schedule": "ZBH2"},
        "world": 4,
    },
    "zbv-pp4": {
        "parallelism": {
            "pipeline_parallel_degree": 4,
            "pipeline_parallel_schedule": "ZBV",
            "virtual_stages_per_rank": 2,
        },
        "world": 4,
        "model": {"preset": "tiny-gpt", "num_hidden_layers": 8},
    },
    "dualpipev-pp4": {
        "parallelism": {
            "pipeline_parallel_degree": 4,
            "pipeline_parallel_schedule": "DualPipeV",
            "virtual_stages_per_rank": 2,
        },
        "world": 4,
        "model": {"preset": "tiny-gpt", "num_hidden_layers": 8},  # a layer per stage of the V
    },
    "dualpipev-tp2-pp2-tied": {
        "parallelism": {
            "tensor_parallel_degree": 2,
            "pipeline_parallel_degree": 2,
            "pipeline_parallel_schedule": "DualPipeV",
            "virtual_stages_per_rank": 2,
            "vocab_parallel": True,
        },
        "world": 4,
        "model": {"preset": "tiny-llama"},
    },
    "dualpipev-moe-pp2": {
        "parallelism": {
            "pipeline_parallel_degree": 2,
            "pipeline_parallel_schedule": "DualPipeV",
            "virtual_stages_per_rank": 2,
        },
        "world": 2,
        "model": MOE,
    },
    # expert parallel carved out of dp 2: the first stage's backward all-to-alls run in its weight pass
    "dualpipev-moe-ep2-pp2": {
        "parallelism": {
            "data_parallel_degree": 2,
            "expert_parallel_degree": 2,
            "pipeline_parallel_degree": 2,
            "pipeline_parallel_schedule": "DualPipeV",
            "virtual_stages_per_rank": 2,
        },
        "world": 4,
        "model": MOE,
    },
    "hsdp-2x2-zero3": {
        "parallelism": {"data_parallel_degree": 4, "data_parallel_replicate_degree": 2, "zero_stage": 3},
        "world": 4,
    },
}


@pytest.mark.parametrize("plan", PLANS)
def test_predicted_events_equal_the_runtimes(plan: str) -> None:
    s = scenario(PLANS[plan])
    expected = expected_event_keys(s)
    predicted = predicted_keys(s)
    merged = expected.astype(str).merge(predicted.astype(str), how="outer", indicator=True)
    missing = merged[merged["_merge"] == "left_only"]
    extra = merged[merged["_merge"] == "right_only"]
    assert missing.empty and extra.empty, (
        f"\nmissing from prediction:\n{missing}\nextra in prediction:\n{extra}"
    )
    assert len(expected) > 0
