"""Narrow caches of activations for backward (issue 33), each lowering the peak and costing its casts:
- training.activation_input_store: the SwiGLU's input in FP8. "fp8" is Megatron-Core's
  `--activation-func-fp8-input-store` (megatron/core/fusions/fused_bias_swiglu.py saves
  `input.to(torch.float8_e4m3fn)`, no scales); "fp8_recipe" quantizes with the run's FP8 recipe, as the
  DeepSeek-V3 report caches its MoE SwiGLU inputs (arXiv 2412.19437 sec. 3.3.3);
- training.attention_output_store = "e5m6": the attention output kept once in E5M6 with 1x128 tile scales
  (the same section)."""

from __future__ import annotations

from typing import Any

import pytest

from plancast.simulator.costs.fp8 import recipe
from plancast.simulator.costs.memory import layer_activation_bytes
from plancast.simulator.costs.moe import moe_activation_bytes
from plancast.simulator.costs.ops import E5M6_BYTES, Shape
from plancast.simulator.importers.megatron import from_megatron_args
from plancast.simulator.loader import ScenarioError, parse_scenario
from plancast.simulator.predict import simulate
from plancast.simulator.scenario import Scenario

ARGS = (
    "--num-layers 4 --hidden-size 1024 --num-attention-heads 16 --vocab-size 32000 --seq-length 2048 --bf16"
)


def scenario(preset: str = "llama3-8b", **training: Any) -> Scenario:
    data: dict[str, Any] = {
        "model": {"preset": preset, "num_hidden_layers": 2},
        "training": {
            "seq_len": 4096,
            "micro_batch_size": 1,
            "global_batch_size": 16,
            "dtype": "bf16",
            "flash_attention": True,
            **training,
        },
        "parallelism": {"framework": "megatron-lm"},
        "cluster": {"preset": "dgx-h100-80gb", "num_nodes": 1},
    }
    return parse_scenario(data).scenario


@pytest.mark.parametrize("store", ["fp8", "fp8_recipe"])
def test_a_dense_block_keeps_fc1s_output_narrow(store: str) -> None:
    fp8 = {"fp8": True, "fp8_recipe": "blockwise"}
    on, off = scenario(activation_input_store=store, **fp8), scenario(**fp8)
    x = Shape.of(off)
    narrow = 1.0 if store == "fp8" else recipe("blockwise").saved_input_bytes  # its 1x128 tile scales too
    saved = layer_activation_bytes(x, "none") - layer_activation_bytes(Shape.of(on), "none")
    # FC1's output: two halves of ffn a token under SwiGLU, 2 bytes in bf16
    assert saved == pytest.approx(2 * x.ffn * x.s * x.b * (2 - narrow))


def test_an_moe_block_keeps_its_experts_swiglu_inputs_in_fp8() -> None:
    on, off = scenario("deepseek-v2-lite", activation_input_store="fp8"), scenario("deepseek-v2-lite")
    m = on.model
    assert moe_activation_bytes(Shape.of(on), m) < moe_activation_bytes(Shape.of(off), m)


@pytest.mark.parametrize(
    "keys", [{"activation_input_store": "fp8"}, {"attention_output_store": "e5m6"}], ids=["swiglu", "e5m6"]
)
def test_each_lowers_the_peak_and_costs_step_time(keys: dict[str, str]) -> None:
    a, b = simulate(scenario(**keys), events=False).summary, simulate(scenario(), events=False).summary
    assert a["memory_gib"]["activations"] < b["memory_gib"]["activations"]
    assert a["peak_memory_gib"] < b["peak_memory_gib"]
    assert a["step_time_s"] > b["step_time_s"]  # the casts in forward and back in backward


@pytest.mark.parametrize("preset", ["llama3-8b", "deepseek-v2-lite"])  # grouped-query and MLA attention
def test_e5m6_keeps_the_attention_output_once_at_12_bits_and_its_scales(preset: str) -> None:
    on, off = scenario(preset, attention_output_store="e5m6"), scenario(preset)
    x = Shape.of(off)
    saved = layer_activation_bytes(x, "none") - layer_activation_bytes(Shape.of(on), "none")
    assert E5M6_BYTES == 1.5 + 4 / 128
    assert saved == pytest.approx((2 - E5M6_BYTES) * x.s * x.b * x.o_dim)


def test_without_swiglu_or_without_fp8_the_store_is_refused_naming_the_key() -> None:
    for preset, training in (
        ("gpt3-1.3b", {"activation_input_store": "fp8"}),
        ("llama3-8b", {"activation_input_store": "fp8_recipe"}),
    ):
        with pytest.raises(ScenarioError) as err:
            scenario(preset, **training)
        assert "training.activation_input_store" in str(err.value)


def test_import_megatron_reads_the_flag_under_swiglu_only() -> None:
    flag = " --activation-func-fp8-input-store"
    assert from_megatron_args(ARGS + " --swiglu" + flag)["training"]["activation_input_store"] == "fp8"
    plain = from_megatron_args(ARGS + flag)
    assert "activation_input_store" not in plain["training"]
    assert any("--activation-func-fp8-input-store" in w for w in plain["warnings"])
