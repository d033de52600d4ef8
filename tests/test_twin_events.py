"""Predicted and measured events are twins: the simulator emits exactly the keys the runtime produces.

`runtime.expected.expected_event_keys` is what a real run yields (tests/runtime and tests/distributed
check it against real gloo runs); here the simulator's events must equal it, key for key, for every
plan shape the runtime executes.
"""

from __future__ import annotations

from typing import Any

import pandas as pd
import pytest

from plancast.runtime.expected import KEY_COLUMNS, expected_event_keys
from plancast.simulator.loader import parse_scenario
from plancast.simulator.predict import simulate
from plancast.simulator.scenario import Scenario

MOE = {"preset": "tiny-gpt", "num_local_experts": 4, "num_experts_per_tok": 2, "moe_intermediate_size": 128}
PLANS: dict[str, dict[str, Any]] = {
    "dp2": {"parallelism": {}, "world": 2},
    "dp2-bucketed": {
        "parallelism": {"ddp_bucket_cap_MiB": 0.05},
        "world": 2,
        "model": {"preset": "small-gpt"},
    },
    "zero1": {"parallelism": {"zero_stage": 1}, "world": 2},
    "zero2": {"parallelism": {"zero_stage": 2}, "world": 2},
    "zero3": {"parallelism": {"zero_stage": 3}, "world": 2},
    "zero3-full-recompute": {"parallelism": {"zero_stage": 3}, "world": 2, "recompute": "full"},
    "tp2": {"parallelism": {"tensor_parallel_degree": 2, "vocab_parallel": False}, "world": 2},
    "tp2-sp-full": {
        "parallelism": {"tensor_parallel_degree": 2, "sequence_parallel": True, "vocab_parallel": False},
        "world": 2,
        "recompute": "full",
    },
    "tp2-vocab": {"parallelism": {"tensor_parallel_degree": 2, "vocab_parallel": True}, "world": 2},
    "tp2-vocab-sp-full": {
        "parallelism": {"tensor_parallel_degree": 2, "sequence_parallel": True, "vocab_parallel": True},
        "world": 2,
        "recompute": "full",
    },
    "llama-tp2-vocab-sp-zb": {
        "parallelism": {
            "tensor_parallel_degree": 2,
            "pipeline_parallel_degree": 2,
            "sequence_parallel": True,
            "vocab_parallel": True,
            "pipeline_parallel_schedule": "ZeroBubble",
        },
        "world": 4,
        "model": {"preset": "tiny-llama"},
    },
    "3d-vocab": {
        "parallelism": {"tensor_parallel_degree": 2, "pipeline_parallel_degree": 2, "vocab_parallel": True},
        "world": 8,
    },
    "gpipe": {
        "parallelism": {"pipeline_parallel_degree": 2, "pipeline_parallel_schedule": "GPipe"},
        "world": 2,
    },
    "1f1b-full": {"parallelism": {"pipeline_parallel_degree": 2}, "world": 2, "recompute": "full"},
    # partial recompute (issue 33): checkpointed blocks re-run inside their backward, no recompute event
    "1f1b-partial-block": {
        "parallelism": {"pipeline_parallel_degree": 2},
        "world": 2,
        "recompute": "full",
        "training": {"recompute_num_layers": 1, "recompute_method": "block"},
    },
    "dp2-partial-uniform": {
        "parallelism": {},
        "world": 2,
        "recompute": "full",
        "training": {"recompute_num_layers": 2, "recompute_method": "uniform"},
    },
    "interleaved": {
        "parallelism": {
            "pipeline_parallel_degree": 2,
            "pipeline_parallel_schedule": "Interleaved1F1B",
            "virtual_stages_per_rank": 2,
        },
        "world": 2,
    },
    "zero-bubble": {
        "parallelism": {"pipeline_parallel_degree": 4, "pipeline_parallel_schedule": "ZeroBubble"},
        "world": 4,
    },
    "llama-tp2-pp2": {
        "parallelism": {"tensor_parallel_degree": 2, "pipeline_parallel_degree": 2},
        "world": 4,
        "model": {"preset": "tiny-llama"},
    },
    "3d": {"parallelism": {"tensor_parallel_degree": 2, "pipeline_parallel_degree": 2}, "world": 8},
    "3d-zero1": {
        "parallelism": {"tensor_parallel_degree": 2, "pipeline_parallel_degree": 2, "zero_stage": 1},
        "world": 8,
    },
    "pp2-zero2": {"parallelism": {"pipeline_parallel_degree": 2, "zero_stage": 2}, "world": 4},
    # mixture of experts (docs/moe.md): expert all-to-alls inside the compute spans
    "moe-ep2": {"parallelism": {"expert_parallel_degree": 2}, "world": 2, "model": MOE},
    # the folded expert grid (etp set, simulator/mesh.py) at tp 1, the layout the runtime runs
    "moe-ep2-folded-etp1": {
        "parallelism": {"expert_parallel_degree": 2, "expert_tensor_parallel_degree": 1},
        "world": 2,
        "model": MOE,
    },
    "moe-ep2-full-recompute": {
        "parallelism": {"expert_parallel_degree": 2},
        "world": 2,
        "model": {**MOE, "first_k_dense_replace": 1},
        "recompute": "full",
    },
    # MoE parallel folding: ep 2 over the tensor-parallel pair, whole experts on sequence shards
    "moe-ep2-over-tp2-etp1": {
        "parallelism": {
            "tensor_parallel_degree": 2,
            "sequence_parallel": True,
            "expert_parallel_degree": 2,
            "expert_tensor_parallel_degree": 1,
        },
        "world": 2,
        "model": MOE,
    },
    "moe-pp2": {"parallelism": {"pipeline_parallel_degree": 2}, "world": 2, "model": MOE},
    "moe-ep2xdp2": {
        "parallelism": {"data_parallel_degree": 4, "expert_parallel_degree": 2},
        "world": 4,
        "model": MOE,
    },
}

# Context parallel: the runtime reduces dense gradients over dp x cp (docs/moe.md; with cp = 2 and
# dp = 1 the ranks' gradients differ, tests/distributed/test_moe_cp.py) and ZeRO-1 broadcasts once per
# dp x cp rank; the engine keys both on the same dp x cp (engine/plan.py `dense_dp`).
CP_PLANS: dict[str, dict[str, Any]] = {
    "cp2": {"parallelism": {"context_parallel_degree": 2}, "world": 2},
    "cp2-full-recompute": {"parallelism": {"context_parallel_degree": 2}, "world": 2, "recompute": "full"},
    "cp2-pp2": {"parallelism": {"context_parallel_degree": 2, "pipeline_parallel_degree": 2}, "world": 4},
    "cp2xdp2-zero1": {
        "parallelism": {"context_parallel_degree": 2, "data_parallel_degree": 2, "zero_stage": 1},
        "world": 4,
    },
}


def scenario(spec: dict[str, Any]) -> Scenario:
    data = {
        "model": spec.get("model", {"preset": "tiny-gpt"}),
        "training": {
            "seq_len": 32,
            "micro_batch_size": 1,
            "global_batch_size": 8,
            "dtype": "fp32",
            "recompute": spec.get("recompute", "none"),
            **spec.get("training", {}),
        },
        "parallelism": spec["parallelism"],
        "cluster": {
            "preset": "local-cpu",
            "gpus_per_node": spec["world"],
            "tiers": [{"name": "loopback", "bandwidth_GBps": 1.0, "latency_us": 50.0}],
        },
    }
    return parse_scenario(data).scenario


def predicted_keys(s: Scenario) -> pd.DataFrame:
    events = simulate(s).events
    return (
        events[KEY_COLUMNS].sort_values(KEY_COLUMNS).reset_index(drop=True).astype("int64", errors="ignore")
    )


@pytest.mark.parametrize("plan", [*PLANS, *CP_PLANS])
def test_predicted_events_equal_the_runtimes(plan: str) -> None:
    s = scenario({**PLANS, **CP_PLANS}[plan])
    expected = expected_event_keys(s)
    predicted = predicted_keys(s)
    merged = expected.astype(str).merge(predicted.astype(str), how="outer", indicator=True)
    missing = merged[merged["_merge"] == "left_only"]
    extra = merged[merged["_merge"] == "right_only"]
    assert missing.empty and extra.empty, (
        f"\nmissing from prediction:\n{missing}\nextra in prediction:\n{extra}"
    )
