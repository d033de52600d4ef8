"""training.moe_fp8_quantize (costs/moe_gemm.py per_expert_quantize, issue 31): under FP8, Transformer
Engine's GroupedLinear quantizes each local expert's rows by a call of its own, each paying the per-op
time every op pays; one grouped call pays it once. The key's direction: per_expert is slower, by one
per-op time per extra expert and cast (forward) plus the backward's casts of the output gradients, and
by more the more experts a rank holds; unset it follows the framework."""

from __future__ import annotations

from typing import Any

import pytest

from plancast.simulator.costs.efficiency import op_seconds
from plancast.simulator.costs.moe import moe_block_forward
from plancast.simulator.costs.ops import Shape
from plancast.simulator.loader import parse_scenario
from plancast.simulator.predict import simulate
from plancast.simulator.scenario import Scenario
from tests.simulator.test_moe_keys import MOE

FP8 = {"fp8": True, "fp8_recipe": "tensorwise_current"}


def _scenario(framework: str = "megatron-lm", ep: int = 32, **training: Any) -> Scenario:
    precision = FP8 if training.get("fp8", True) else {}
    data = {
        **MOE,
        "training": {**MOE["training"], **precision, **training},
        "parallelism": {**MOE["parallelism"], "framework": framework, "expert_parallel_degree": ep},
    }
    return parse_scenario(data, "moe-fp8-quantize").scenario


def _step_s(s: Scenario) -> float:
    return float(simulate(s, events=False).summary["step_time_s"])


def _casts(s: Scenario) -> list[Any]:
    ops = moe_block_forward(Shape.of(s), s.model, s.ep)
    return [op for op in ops if op.name.startswith("expert_") and op.name.endswith("_fp8_cast")]


@pytest.mark.parametrize("ep", [8, 32])
def test_per_expert_quantize_costs_one_op_time_per_extra_expert_and_cast(ep: int) -> None:
    per = _scenario(ep=ep, moe_fp8_quantize="per_expert")
    grouped = _scenario(ep=ep, moe_fp8_quantize="grouped")
    groups = per.model.num_experts // ep
    gpu, compute = per.cluster.gpu, per.cluster.compute
    pairs = list(zip(_casts(per), _casts(grouped), strict=True))
    assert len(pairs) == 2  # the gate/up and the down projections' inputs
    for a, b in pairs:
        assert (a.calls, b.calls) == (groups, 1)
        assert a.bytes == b.bytes  # the same elements read and written
        extra = op_seconds(a, gpu, compute, "bf16") - op_seconds(b, gpu, compute, "bf16")
        assert extra == pytest.approx((groups - 1) * compute.op_overhead_us * 1e-6)


def test_per_expert_quantize_is_slower_and_more_so_with_more_experts_a_rank() -> None:
    gap = {
        ep: _step_s(_scenario(ep=ep, moe_fp8_quantize="per_expert"))
        - _step_s(_scenario(ep=ep, moe_fp8_quantize="grouped"))
        for ep in (8, 32)
    }
    assert gap[32] > 0  # 2 experts a rank: one extra call per cast
    assert gap[8] > 3 * gap[32]  # 8 experts a rank: seven


@pytest.mark.parametrize(
    ("framework", "training", "expected"),
    [
        ("megatron-lm", {}, True),  # TE GroupedLinear's split_quantize (current scaling)
        ("megatron-lm", {"fp8_recipe": "blockwise"}, True),
        ("megatron-lm", {"fp8_recipe": "tensorwise_delayed"}, False),  # one multi-tensor cast-transpose
        ("torchtitan", {}, False),  # grouped casts
        ("megatron-lm", {"fp8": False}, False),  # nothing to quantize
        ("torchtitan", {"moe_fp8_quantize": "per_expert"}, True),  # set, it wins
        ("megatron-lm", {"moe_fp8_quantize": "grouped"}, False),
    ],
)
def test_unset_it_follows_the_framework_and_recipe(
    framework: str, training: dict[str, Any], expected: bool
) -> None:
    assert Shape.of(_scenario(framework, **training)).per_expert_quantize is expected


def test_bf16_plans_do_not_move() -> None:
    a = _step_s(_scenario(fp8=False, moe_fp8_quantize="per_expert"))
    b = _step_s(_scenario(fp8=False, moe_fp8_quantize="grouped"))
    assert a == b


def test_setting_it_without_an_fp8_expert_gemm_warns() -> None:
    data = {**MOE, "training": {**MOE["training"], "moe_fp8_quantize": "per_expert"}}
    warnings = parse_scenario(data, "moe-fp8-quantize").warnings
    assert any("training.moe_fp8_quantize is ignored" in w for w in warnings)
    quiet = parse_scenario({**MOE, "training": {**MOE["training"], **FP8}}, "x").warnings
    assert not any("moe_fp8_quantize" in w for w in quiet)
