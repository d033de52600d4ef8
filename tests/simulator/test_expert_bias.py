"""model.moe_expert_bias and training.moe_expert_bias_add (simulator/expert_bias.py, costs/expert_bias.py,
issue 31): gpt-oss's experts carry biases, which a framework adds around its grouped GEMMs. The keys'
directions: biased experts are slower; a per-expert loop costs more the more experts a rank holds, a
gathered add does not; both projections' loops cost more than fc2's alone; fp32 routing probabilities
(DeepEP) cost more bytes than bf16 ones; unset, the key follows the framework."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from plancast.runtime.plan import PlanError, check_framework_behaviour
from plancast.simulator.costs.efficiency import op_seconds
from plancast.simulator.costs.moe import moe_block_forward
from plancast.simulator.costs.ops import Op, Shape
from plancast.simulator.importers import import_file
from plancast.simulator.loader import parse_scenario
from plancast.simulator.predict import simulate
from plancast.simulator.scenario import Scenario
from plancast.simulator.validation import check_plan

DATA = Path(__file__).parent.parent / "data" / "importers"


def _scenario(ep: int = 8, framework: str = "megatron-lm", bias: bool = True, **training: Any) -> Scenario:
    data = {
        "model": {
            "preset": "gpt-oss-120b",
            "num_hidden_layers": 4,
            "layer_types": ["sliding_attention", "full_attention"] * 2,
            "moe_expert_bias": bias,
        },
        "training": {
            "seq_len": 4096,
            "micro_batch_size": 1,
            "global_batch_size": 64,
            "dtype": "bf16",
            "flash_attention": True,
            **training,
        },
        "parallelism": {"framework": framework, "expert_parallel_degree": ep},
        "cluster": {"preset": "dgx-h100-80gb", "num_nodes": 1},
    }
    return parse_scenario(data, "expert-bias").scenario


def _step_s(s: Scenario) -> float:
    return float(simulate(s, events=False).summary["step_time_s"])


def _bias_ops(s: Scenario) -> list[Op]:
    return [op for op in moe_block_forward(Shape.of(s), s.model, s.ep) if op.name.endswith("_bias")]


def _bias_s(s: Scenario) -> float:
    gpu, compute = s.cluster.gpu, s.cluster.compute
    return sum(op_seconds(op, gpu, compute, "bf16") for op in _bias_ops(s))


@pytest.mark.parametrize("mode", ["per_expert_down", "per_expert", "gathered"])
def test_biased_experts_are_slower(mode: str) -> None:
    biased = _step_s(_scenario(moe_expert_bias_add=mode))
    assert biased > _step_s(_scenario(bias=False))
    assert _bias_ops(_scenario(bias=False)) == []


def test_a_per_expert_loop_costs_more_with_more_experts_a_rank_a_gathered_add_does_not() -> None:
    loop = {ep: _scenario(ep=ep, moe_expert_bias_add="per_expert_down") for ep in (2, 8)}
    gathered = {ep: _scenario(ep=ep, moe_expert_bias_add="gathered") for ep in (2, 8)}
    groups = {ep: s.model.num_experts // ep for ep, s in loop.items()}
    (down2,), (down8,) = _bias_ops(loop[2]), _bias_ops(loop[8])
    assert (down2.calls, down8.calls) == (2 * groups[2] + 1, 2 * groups[8] + 1)  # multiply + add each, cat
    assert down2.bytes == down8.bytes  # the rank's rows: ep x T x k / E a local expert, E / ep of them
    assert _bias_s(loop[2]) > _bias_s(loop[8])
    calls = [[op.calls for op in _bias_ops(gathered[ep])] for ep in (2, 8)]
    assert calls == [[2, 2], [2, 2]]  # repeat_interleave and the add, per projection
    assert _bias_s(gathered[2]) < _bias_s(loop[2])


def test_both_projections_loop_costs_more_than_fc2s_alone() -> None:
    both, down = _scenario(moe_expert_bias_add="per_expert"), _scenario(moe_expert_bias_add="per_expert_down")
    assert [op.name for op in _bias_ops(both)] == ["expert_up_bias", "expert_down_bias"]
    assert _bias_s(both) > _bias_s(down)
    assert _step_s(both) > _step_s(down)


def test_fp32_probabilities_through_deepep_cost_more_bytes_and_a_cast() -> None:
    bf16 = _scenario(moe_expert_bias_add="per_expert_down")
    fp32 = _scenario(moe_expert_bias_add="per_expert_down")
    fp32 = fp32.model_copy(
        update={"parallelism": fp32.parallelism.model_copy(update={"moe_token_dispatcher": "deepep"})}
    )
    (a,), (b,) = _bias_ops(bf16), _bias_ops(fp32)
    rows_h = a.bytes / 12  # bf16: multiply writes 2, add reads 4 writes 2, cat reads and writes 2
    assert b.bytes == pytest.approx(rows_h * 28)  # fp32: 4 + (2 + 8) + 8 + cast back (4 + 2)
    assert b.calls == a.calls + 1


def test_unset_follows_the_framework() -> None:
    for framework, mode in (("megatron-lm", "per_expert_down"), ("torchtitan", "gathered")):
        unset = _scenario(framework=framework)
        named = _scenario(framework=framework, moe_expert_bias_add=mode)
        assert _bias_ops(unset) == _bias_ops(named) != []


def test_the_key_on_a_model_without_expert_biases_is_named_as_ignored() -> None:
    _, warnings = check_plan(_scenario(bias=False, moe_expert_bias_add="per_expert"))
    assert any("training.moe_expert_bias_add is ignored" in w for w in warnings)
    _, warnings = check_plan(_scenario(moe_expert_bias_add="per_expert"))
    assert not any("moe_expert_bias_add" in w for w in warnings)


def test_the_preset_and_the_importer_give_gpt_oss_expert_biases() -> None:
    assert _scenario().model.moe_expert_bias
    assert import_file("hf", DATA / "gpt-oss-120b.config.json")["model"]["moe_expert_bias"] is True
    assert "moe_expert_bias" not in import_file("hf", DATA / "qwen3-30b-a3b.config.json")["model"]


def test_the_runtime_refuses_biased_experts_it_does_not_build() -> None:
    with pytest.raises(PlanError, match=r"model\.moe_expert_bias"):
        check_framework_behaviour(_scenario(framework="torchtitan"))
