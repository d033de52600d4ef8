"""Keys the simulator prices and the CPU runtime does not run are refused by `plancast run` (exit 2, the key
and the fix named, nothing started), and accepted where the runtime runs them (runtime/plan.py,
runtime/model_support.py). The scenario validation refuses Megatron's overlapped parameter gather without
its overlapped gradient reduce (simulator/validation_data_parallel.py), as Megatron-LM does."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import tomli_w

from plancast.runtime.plan import PlanError, check_runtime_support
from plancast.simulator.loader import parse_scenario
from tests.cli_runner import assert_run_refused, cli_main

TRAINING = {"seq_len": 32, "micro_batch_size": 1, "global_batch_size": 8, "dtype": "fp32"}
DP2 = {"data_parallel_degree": 2, "zero_stage": 1}
SELECTIVE = {"recompute": "selective", "selective_recompute": "attention"}

REFUSED: dict[str, tuple[dict[str, Any], dict[str, Any], dict[str, Any], str]] = {
    # name: (model keys, training keys, parallelism, what the message must name)
    "hidden-dropout": ({"hidden_dropout": 0.1}, {}, {}, "model.hidden_dropout = 0.1: the runtime's model"),
    "attention-dropout": ({"attention_dropout": 0.1}, {}, {}, "model.attention_dropout = 0.1"),
    "framework-default-dropout": (
        {},
        {"elementwise": "eager"},
        {"framework": "megatron-lm"},
        "model.hidden_dropout = 0.1 (unset: parallelism.framework = 'megatron-lm' defaults it)",
    ),
    "recompute-modules-mlp": (
        {},
        {**SELECTIVE, "recompute_modules": ["core_attn", "mlp"]},
        {},
        "training.recompute_modules = ['core_attn', 'mlp']",
    ),
    "recompute-modules-none": ({}, {**SELECTIVE, "recompute_modules": []}, {}, "set recompute_modules"),
    "distributed-optimizer": (
        {},
        {},
        {**DP2, "distributed_optimizer": True},
        "parallelism.distributed_optimizer = true: the runtime runs ZeRO-1 as DDP's all-reduce",
    ),
    "attention-sinks": ({"attention_sinks": True}, {}, {}, "model.attention_sinks = true: the runtime's"),
    "expert-bias": (
        {"num_local_experts": 4, "num_experts_per_tok": 2, "moe_expert_bias": True},
        {},
        {},
        "set moe_expert_bias = false",
    ),
}


def _scenario(model: dict[str, Any], training: dict[str, Any], parallelism: dict[str, Any]) -> dict[str, Any]:
    ranks = parallelism.get("data_parallel_degree", 1)
    return {
        "model": {"preset": "tiny-gpt", **model},
        "training": {**TRAINING, **training},
        "parallelism": parallelism,
        "cluster": {"preset": "local-cpu", "gpus_per_node": ranks},
    }


@pytest.mark.parametrize("name", list(REFUSED))
def test_unrun_key_is_refused_naming_it(name: str, tmp_path: Path) -> None:
    model, training, parallelism, fix = REFUSED[name]
    assert_run_refused(tmp_path, _scenario(model, training, parallelism), fix)


RUNNABLE: dict[str, tuple[dict[str, Any], dict[str, Any], dict[str, Any]]] = {
    # what the runtime does run: the refusals above stop exactly at the line
    "zero-dropout": ({"hidden_dropout": 0.0, "attention_dropout": 0.0}, {}, {}),
    "megatron-zero-dropout": (
        {"hidden_dropout": 0.0, "attention_dropout": 0.0},
        {"elementwise": "eager"},
        {"framework": "megatron-lm"},
    ),
    "core-attn-recompute": ({}, {**SELECTIVE, "recompute_modules": ["core_attn"]}, {}),
    "zero1-without-distopt": ({}, {}, DP2),
    "distopt-one-rank": ({}, {}, {"zero_stage": 1, "distributed_optimizer": True}),
}


@pytest.mark.parametrize("name", list(RUNNABLE))
def test_runnable_keys_pass_the_runtime_checks(name: str) -> None:
    data = _scenario(*RUNNABLE[name])
    scenario = parse_scenario(data).scenario
    check_runtime_support(scenario, scenario.world_size)  # raises PlanError if refused


def test_the_refusals_are_plan_errors() -> None:
    scenario = parse_scenario(_scenario({"hidden_dropout": 0.1}, {}, {})).scenario
    with pytest.raises(PlanError, match=r"model\.hidden_dropout"):
        check_runtime_support(scenario, 1)


GATHER = {**DP2, "distributed_optimizer": True, "overlap_param_gather": True}


@pytest.mark.parametrize(
    ("parallelism", "refused"),
    [
        ({**GATHER, "overlap_grad_reduce": False}, True),
        ({**GATHER, "framework": "megatron-lm"}, True),  # Megatron-LM's default: no overlapped reduce
        ({**GATHER, "overlap_grad_reduce": True}, False),
        ({**DP2, "distributed_optimizer": True, "overlap_grad_reduce": False}, False),
    ],
)
def test_validate_refuses_param_gather_without_grad_reduce(
    parallelism: dict[str, Any], refused: bool, tmp_path: Path
) -> None:
    data = _scenario({}, {"elementwise": "eager"}, parallelism)
    path = tmp_path / "scenario.toml"
    path.write_text(tomli_w.dumps(data))
    code, _, stderr = cli_main("validate", str(path))
    key = "parallelism.overlap_param_gather: true under the distributed optimizer needs overlap_grad_reduce"
    assert (code, key in stderr) == ((2, True) if refused else (0, False)), stderr
    assert "Traceback" not in stderr
