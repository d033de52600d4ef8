"""torch-native mixed precision and gradient accumulation (simulator/costs/mixed_precision.py): under
torchtitan's autocast each forward casts the GEMM weights to bf16 and backward casts their gradients
back; autograd adds each micro-batch's gradient into `.grad`. Megatron-LM does neither (bf16 weights,
fused accumulation); FSDP casts at the gather instead; one micro-batch accumulates nothing."""

from __future__ import annotations

from typing import Any

import pytest

from plancast.simulator.costs.params import layer_params
from plancast.simulator.costs.stage import stage_costs
from plancast.simulator.engine import Topology
from plancast.simulator.loader import parse_scenario
from plancast.simulator.scenario import Scenario


def scenario(framework: str, *, dtype: str = "bf16", micro: int = 2, **parallelism: Any) -> Scenario:
    data = {
        "model": {"preset": "llama3-8b", "num_hidden_layers": 4},
        "training": {
            "seq_len": 4096,
            "micro_batch_size": 2,
            "global_batch_size": 2 * micro * 8,
            "dtype": dtype,
            "elementwise": "fused",  # the frameworks' defaults differ there too (costs/eager.py)
        },
        "parallelism": {"framework": framework, **parallelism},
        "cluster": {"preset": "dgx-h100-80gb"},
    }
    return parse_scenario(data).scenario


def layer(s: Scenario) -> Any:
    return next(g for g in stage_costs(s, Topology.of(s).levels("tp"))[0].segments if g.part == "layer")


def test_autocast_casts_the_weights_each_forward_and_their_gradients_back() -> None:
    titan, megatron = layer(scenario("torchtitan", micro=1)), layer(scenario("megatron-lm", micro=1))
    m = scenario("torchtitan").model
    cast_s = layer_params(m).sharded * 6 / (3350e9 * 0.95)  # read fp32, write bf16 (H100 HBM3 at 0.95)
    assert titan.forward_s - megatron.forward_s == pytest.approx(cast_s + 26e-6, rel=0.05)
    assert titan.backward_weight_s - megatron.backward_weight_s == pytest.approx(cast_s + 26e-6, rel=0.05)
    assert titan.backward_input_s == pytest.approx(megatron.backward_input_s)


def test_accumulation_grows_with_micro_batches_and_fsdp_casts_at_the_gather() -> None:
    one, four = layer(scenario("torchtitan", micro=1)), layer(scenario("torchtitan", micro=4))
    assert four.forward_s == pytest.approx(one.forward_s)
    assert four.backward_weight_s > one.backward_weight_s  # 12 (m - 1) / m bytes per parameter
    fsdp = layer(scenario("torchtitan", micro=4, zero_stage=3))
    assert fsdp.forward_s < four.forward_s  # no autocast cast: FSDP2 gathers bf16
    fp32 = layer(scenario("torchtitan", dtype="fp32", micro=4))
    fp32_one = layer(scenario("torchtitan", dtype="fp32", micro=1))
    assert fp32.backward_weight_s > fp32_one.backward_weight_s  # accumulation without autocast
