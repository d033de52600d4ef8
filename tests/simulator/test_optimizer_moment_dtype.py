"""training.optimizer_moment_dtype: Megatron-Core's precision-aware optimizer with bf16 Adam moments
(`--use-precision-aware-optimizer --exp-avg-dtype bf16 --exp-avg-sq-dtype bf16`, Megatron-Bridge's
DeepSeek-V3 recipe) halves the moments' bytes and the optimizer step's moment traffic (issue 33)."""

from __future__ import annotations

from typing import Any

import pytest

from plancast.simulator.costs.memory import rank_memory
from plancast.simulator.costs.optimizer import optimizer_bytes_per_param
from plancast.simulator.costs.params import rank_parameters
from plancast.simulator.importers.megatron import from_megatron_args
from plancast.simulator.loader import ScenarioError, parse_scenario
from plancast.simulator.predict import simulate
from plancast.simulator.scenario import Scenario

ARGS = (
    "--num-layers 4 --hidden-size 1024 --num-attention-heads 16 --vocab-size 32000 --seq-length 2048 --bf16"
)


def scenario(moments: str, framework: str = "megatron-lm", **parallelism: Any) -> Scenario:
    data: dict[str, Any] = {
        "model": {"preset": "llama3-8b", "num_hidden_layers": 2},
        "training": {
            "seq_len": 2048,
            "micro_batch_size": 1,
            "global_batch_size": 16,
            "dtype": "bf16",
            "optimizer_moment_dtype": moments,
        },
        "parallelism": {"framework": framework, **parallelism},
        "cluster": {"preset": "dgx-h100-80gb", "num_nodes": 1},
    }
    return parse_scenario(data).scenario


@pytest.mark.parametrize("zero_stage", [0, 1])
def test_bf16_moments_keep_4_fewer_bytes_a_parameter_sharded_as_the_optimizer(zero_stage: int) -> None:
    extra = {"zero_stage": zero_stage, "distributed_optimizer": zero_stage == 1}
    bf16, fp32 = scenario("bf16", **extra), scenario("fp32", **extra)
    n = rank_parameters(bf16.model, bf16.layer_split, (0,), tp=1, vocab_tp=1, ep=1, etp=1)[0]
    shard = bf16.zero_dp if zero_stage else 1
    assert rank_memory(fp32, 0).optimizer - rank_memory(bf16, 0).optimizer == pytest.approx(4 * n / shard)
    assert rank_memory(bf16, 0).optimizer == pytest.approx(8 * n / shard)  # fp32 master + 2 + 2
    assert rank_memory(bf16, 0).parameters == rank_memory(fp32, 0).parameters


def test_bf16_moments_lower_the_peak_and_the_optimizer_step() -> None:
    bf16, fp32 = scenario("bf16"), scenario("fp32")
    assert optimizer_bytes_per_param(fp32) - optimizer_bytes_per_param(bf16) == 8.0  # 2 moments, r + w
    a, b = simulate(bf16, events=False).summary, simulate(fp32, events=False).summary
    assert a["peak_memory_gib"] < b["peak_memory_gib"] and a["step_time_s"] < b["step_time_s"]


@pytest.mark.parametrize("framework", ["torchtitan", "deepspeed"])
def test_outside_megatron_it_is_refused(framework: str) -> None:
    with pytest.raises(ScenarioError) as err:
        scenario("bf16", framework)
    assert "training.optimizer_moment_dtype" in str(err.value)


def test_import_megatron_reads_the_precision_aware_optimizer() -> None:
    flags = " --use-precision-aware-optimizer --exp-avg-dtype bf16 --exp-avg-sq-dtype bf16"
    assert from_megatron_args(ARGS + flags)["training"]["optimizer_moment_dtype"] == "bf16"
    plain = from_megatron_args(ARGS)
    assert "optimizer_moment_dtype" not in plain["training"]
    half = from_megatron_args(ARGS + " --use-precision-aware-optimizer --exp-avg-dtype bf16")
    assert "optimizer_moment_dtype" not in half["training"]
    assert any("--exp-avg-dtype" in w for w in half["warnings"])
