"""training.activation_func_fp8_input_store: Megatron-Core's FP8 store of the SwiGLU's input
(`--activation-func-fp8-input-store`; megatron/core/fusions/fused_bias_swiglu.py saves
`input.to(torch.float8_e4m3fn)`), the DeepSeek-V3 report's FP8-cached MoE SwiGLU inputs (arXiv 2412.19437
sec. 3.3.3): one byte an element of FC1's output instead of two, for one more cast each way (issue 33)."""

from __future__ import annotations

from typing import Any

import pytest

from plancast.simulator.costs.memory import layer_activation_bytes
from plancast.simulator.costs.moe import moe_activation_bytes
from plancast.simulator.costs.ops import Shape
from plancast.simulator.importers.megatron import from_megatron_args
from plancast.simulator.loader import ScenarioError, parse_scenario
from plancast.simulator.predict import simulate
from plancast.simulator.scenario import Scenario

ARGS = (
    "--num-layers 4 --hidden-size 1024 --num-attention-heads 16 --vocab-size 32000 --seq-length 2048 --bf16"
)


def scenario(store: bool, preset: str = "llama3-8b", **model: Any) -> Scenario:
    data: dict[str, Any] = {
        "model": {"preset": preset, "num_hidden_layers": 2, **model},
        "training": {
            "seq_len": 4096,
            "micro_batch_size": 1,
            "global_batch_size": 16,
            "dtype": "bf16",
            "flash_attention": True,
            "activation_func_fp8_input_store": store,
        },
        "parallelism": {"framework": "megatron-lm"},
        "cluster": {"preset": "dgx-h100-80gb", "num_nodes": 1},
    }
    return parse_scenario(data).scenario


def test_a_dense_block_keeps_one_byte_less_per_element_of_fc1s_output() -> None:
    on, off = scenario(True), scenario(False)
    x = Shape.of(off)
    saved = layer_activation_bytes(Shape.of(off), "none") - layer_activation_bytes(Shape.of(on), "none")
    # FC1's output: two halves of ffn a token under SwiGLU, 2 bytes in bf16 -> 1 in FP8
    assert saved == pytest.approx(2 * x.ffn * x.s * x.b * (2 - 1))


def test_an_moe_block_keeps_its_experts_swiglu_inputs_in_fp8() -> None:
    on, off = scenario(True, "deepseek-v2-lite"), scenario(False, "deepseek-v2-lite")
    m = on.model
    assert moe_activation_bytes(Shape.of(on), m) < moe_activation_bytes(Shape.of(off), m)


def test_it_lowers_the_peak_and_costs_step_time() -> None:
    a, b = simulate(scenario(True), events=False).summary, simulate(scenario(False), events=False).summary
    assert a["memory_gib"]["activations"] < b["memory_gib"]["activations"]
    assert a["peak_memory_gib"] < b["peak_memory_gib"]
    assert a["step_time_s"] > b["step_time_s"]  # the cast to FP8 and back


def test_without_swiglu_it_is_refused_naming_the_key() -> None:
    with pytest.raises(ScenarioError) as err:
        scenario(True, "gpt3-1.3b")
    assert "training.activation_func_fp8_input_store" in str(err.value)


def test_import_megatron_reads_the_flag_under_swiglu_only() -> None:
    flag = " --activation-func-fp8-input-store"
    assert from_megatron_args(ARGS + " --swiglu" + flag)["training"]["activation_func_fp8_input_store"]
    plain = from_megatron_args(ARGS + flag)
    assert "activation_func_fp8_input_store" not in plain["training"]
    assert any("--activation-func-fp8-input-store" in w for w in plain["warnings"])
