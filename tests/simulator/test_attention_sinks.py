"""model.attention_sinks (simulator/model_window.py, costs/ops.py sink_rescale; issue 31): gpt-oss's sink
logits cost nothing inside cuDNN's fused kernel (Transformer Engine, attention_backend 'te') and an
elementwise rescale of the output after a FlexAttention kernel (NeMo AutoModel). The key's direction:
sinks under flex are slower, under te and sdpa not; the rescale's bytes follow its four ops."""

from __future__ import annotations

from typing import Any

import pytest

from plancast.runtime.plan import PlanError, check_framework_behaviour
from plancast.simulator.costs.ops import Shape, attention_forward
from plancast.simulator.importers import import_file
from plancast.simulator.loader import parse_scenario
from plancast.simulator.predict import simulate
from plancast.simulator.scenario import Scenario
from tests.simulator.test_expert_bias import DATA


def _scenario(backend: str, sinks: bool, framework: str = "torchtitan", **model: Any) -> Scenario:
    data = {
        "model": {
            "preset": "gpt-oss-120b",
            "num_hidden_layers": 4,
            "layer_types": ["sliding_attention", "full_attention"] * 2,
            "attention_sinks": sinks,
            **model,
        },
        "training": {
            "seq_len": 4096,
            "micro_batch_size": 2,
            "global_batch_size": 64,
            "dtype": "bf16",
            "flash_attention": True,
            "attention_backend": backend,
        },
        "parallelism": {"framework": framework, "expert_parallel_degree": 8},
        "cluster": {"preset": "dgx-h100-80gb", "num_nodes": 1},
    }
    return parse_scenario(data, "attention-sinks").scenario


def _step_s(s: Scenario) -> float:
    return float(simulate(s, events=False).summary["step_time_s"])


def test_sinks_after_flex_attention_are_slower() -> None:
    assert _step_s(_scenario("flex", True)) > _step_s(_scenario("flex", False))


@pytest.mark.parametrize("backend", ["te", "sdpa"])
def test_sinks_inside_a_fused_kernel_or_where_no_rescale_runs_cost_nothing(backend: str) -> None:
    assert _step_s(_scenario(backend, True)) == _step_s(_scenario(backend, False))


def test_the_rescale_reads_and_writes_what_its_four_ops_do() -> None:
    x = Shape.of(_scenario("flex", True))
    (op,) = [op for op in attention_forward(x) if op.name == "attn_sink_rescale"]
    rows = x.b * x.heads * x.s  # one fp32 log-sum-exp per query and head
    # lse - sink and sigmoid: 4 + 4 and 4 + 4 a row, the scale read by the multiply: 4 a row; the multiply
    # reads bf16 and writes fp32 (2 + 4), the cast back reads fp32 and writes bf16 (4 + 2), per element
    assert op.bytes == pytest.approx(rows * 20 + rows * x.v_dim * 12)
    assert op.calls == 4
    assert not [o for o in attention_forward(Shape.of(_scenario("flex", False))) if o.name == op.name]


def test_the_preset_and_the_importer_give_gpt_oss_sinks() -> None:
    assert _scenario("te", True).model.attention_sinks
    assert parse_scenario(
        {
            "model": {"preset": "gpt-oss-120b"},
            "training": {"seq_len": 4096, "micro_batch_size": 1, "global_batch_size": 64},
            "cluster": {"preset": "dgx-h100-80gb", "num_nodes": 8},
            "parallelism": {"expert_parallel_degree": 8},
        },
        "preset",
    ).scenario.model.attention_sinks
    assert import_file("hf", DATA / "gpt-oss-120b.config.json")["model"]["attention_sinks"] is True
    assert "attention_sinks" not in import_file("hf", DATA / "llama3-8b.config.json")["model"]


def test_the_runtime_refuses_sinks_it_does_not_build() -> None:
    plan = _scenario("sdpa", True, moe_expert_bias=False)
    with pytest.raises(PlanError, match=r"model\.attention_sinks"):
        check_framework_behaviour(plan)
    check_framework_behaviour(_scenario("sdpa", False, moe_expert_bias=False))  # runs without them
