"""training.selective_recompute: the attention core (Korthikanti et al. 2022) or torchtitan's per-op
policy, which keeps matmul, SDPA and reduce-scatter outputs except every second matmul of a block."""

from __future__ import annotations

from typing import Any

import pytest

from plancast.simulator.costs.memory import layer_activation_bytes, rank_memory
from plancast.simulator.costs.ops import Shape, attention_core, layer_forward
from plancast.simulator.costs.recompute import op_sac_recompute, selective_recompute
from plancast.simulator.costs.stage import stage_costs
from plancast.simulator.engine import Topology
from plancast.simulator.loader import parse_scenario
from plancast.simulator.scenario import Scenario


def scenario(preset: str, **training: Any) -> Scenario:
    data: dict[str, Any] = {
        "model": {"preset": preset},
        "training": {"seq_len": 4096, "global_batch_size": 8, "flash_attention": True, **training},
        "cluster": {"preset": "dgx-a100-80gb"},
    }
    return parse_scenario(data).scenario


def matmul_flops(ops: Any) -> float:
    return sum(op.flops for op in ops if op.category == "matmul")


def test_the_default_is_the_attention_core() -> None:
    s = scenario("llama3-8b", recompute="selective")
    x = Shape.of(s)
    assert s.training.selective_recompute == "attention"
    ops = layer_forward(x)
    assert selective_recompute(ops, x, "attention") == attention_core(ops)


def test_op_policy_recomputes_every_second_matmul_of_a_swiglu_block() -> None:
    """torchtitan's Llama issues wq, wk, wv, wo, w1, w3, w2: the 2nd, 4th and 6th (wk, wo, w3) re-run."""
    x = Shape.of(scenario("llama3-8b"))
    h, kv, ffn = x.h, x.kv_dim, x.ffn
    tokens = x.b * x.s
    recomputed = op_sac_recompute(layer_forward(x), x)
    expected = 2 * tokens * (h * kv + h * h + h * ffn)
    assert matmul_flops(recomputed) == pytest.approx(expected, rel=1e-12)
    names = {op.name for op in recomputed}
    assert "attention" not in names  # SDPA's output is saved
    assert {op.name for op in layer_forward(x) if op.category == "memory"} <= names


def test_op_policy_on_a_gelu_block_recomputes_wk_wo_and_fc2() -> None:
    x = Shape.of(scenario("gpt3-1.3b", seq_len=2048))
    tokens = x.b * x.s
    expected = 2 * tokens * (x.h * x.kv_dim + x.h * x.h + x.ffn * x.h)
    assert matmul_flops(op_sac_recompute(layer_forward(x), x)) == pytest.approx(expected, rel=1e-12)


def test_the_policy_moves_the_backward_of_a_selective_plan_only() -> None:
    """Short sequences: the op policy re-runs more than the attention core; full and none ignore it."""

    def layer(**training: Any) -> Any:
        s = scenario("llama2-13b", **{"seq_len": 2048, **training})
        return next(g for g in stage_costs(s, Topology.of(s).levels("tp"))[0].segments if g.part == "layer")

    attention, op = layer(recompute="selective"), layer(recompute="selective", selective_recompute="op")
    assert op.forward_s == attention.forward_s
    assert op.backward_input_s > attention.backward_input_s
    for recompute in ("none", "full"):
        assert layer(recompute=recompute, selective_recompute="op") == layer(recompute=recompute)


def test_op_policy_keeps_the_saved_outputs_not_the_whole_block() -> None:
    """Llama 3 8B, one token, tp 1: the block's input (a residual-stream element: fp32 under autocast over
    fp32 weights without FSDP), wq, wv, w1, w2 and SDPA's output stay (2 bytes each), plus fp32 logsumexp
    per head; the attention policy keeps every elementwise input as well."""
    s = scenario("llama3-8b", recompute="selective", selective_recompute="op", micro_batch_size=1)
    x = Shape.of(s)
    tokens = x.b * x.s
    kept = layer_activation_bytes(x, "selective", None, "op")
    assert x.residual_bytes == 4  # torchtitan's autocast, no FSDP (costs/ops.py Shape.of)
    expected = 4 * tokens * x.h + 2 * tokens * (x.h + x.kv_dim + x.ffn + x.h + x.h) + 4 * x.heads * tokens
    assert kept == pytest.approx(expected, rel=1e-12)
    assert layer_activation_bytes(x, "full") < kept < layer_activation_bytes(x, "selective") / 2
    assert layer_activation_bytes(x, "selective", None, "attention") == layer_activation_bytes(x, "selective")


def test_op_policy_lowers_the_peak_and_adds_one_rebuilt_block() -> None:
    """The per-op policy's peak lies between the attention policy's and full recompute's: the saved
    outputs of every in-flight block, and one block rebuilt during backward."""
    peaks = {
        name: rank_memory(scenario("llama3-8b", **kw), 0).activations
        for name, kw in {
            "none": {"recompute": "none"},
            "attention": {"recompute": "selective"},
            "op": {"recompute": "selective", "selective_recompute": "op"},
            "full": {"recompute": "full"},
        }.items()
    }
    assert peaks["full"] < peaks["op"] < peaks["attention"] <= peaks["none"]
