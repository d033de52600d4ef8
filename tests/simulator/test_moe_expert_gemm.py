"""training.moe_expert_gemm (costs/moe_gemm.py, issue 31): Transformer Engine's GroupedLinear runs one
cuBLAS GEMM per expert over a few streams, below a grouped kernel when each expert's GEMM is small (TE PR
#2045's H100 table). The key's direction: multi_stream is slower than grouped, and more so with smaller
expert GEMMs; its rate is the measured ratio at the measured points; unset it follows the framework."""

from __future__ import annotations

from typing import Any

import pytest

from plancast.simulator.costs.moe import moe_block_forward
from plancast.simulator.costs.moe_gemm import (
    GROUPED_GEMM_RELATIVE_RATE,
    MULTI_STREAM_POINTS,
    multi_stream_relative,
)
from plancast.simulator.costs.ops import Shape
from plancast.simulator.loader import parse_scenario
from plancast.simulator.predict import simulate
from plancast.simulator.scenario import Scenario
from tests.simulator.test_moe_keys import MOE

EXPERT_GEMMS = ("expert_gate_up", "expert_down")


def _scenario(framework: str = "megatron-lm", mbs: int = 1, cluster: Any = None, **training: Any) -> Scenario:
    data = {
        **MOE,
        "training": {**MOE["training"], "micro_batch_size": mbs, **training},
        "parallelism": {**MOE["parallelism"], "framework": framework},
        "cluster": cluster or MOE["cluster"],
    }
    return parse_scenario(data, "moe-expert-gemm").scenario


def _rates(s: Scenario) -> set[float]:
    ops = moe_block_forward(Shape.of(s), s.model, s.ep)
    return {op.relative_rate for op in ops if op.name in EXPERT_GEMMS}


def _step_s(s: Scenario) -> float:
    return float(simulate(s, events=False).summary["step_time_s"])


def test_the_ratio_is_the_measurement_at_its_points_and_held_outside() -> None:
    # TE PR #2045: N 768, 2,048 and 4,096 rows an expert
    assert multi_stream_relative(2048 * 768) == pytest.approx(553.9 / 636.9)
    assert multi_stream_relative(4096 * 768) == pytest.approx(627.9 / 650.6)
    assert multi_stream_relative(512 * 768) == multi_stream_relative(2048 * 768)
    assert multi_stream_relative(65536 * 768) == multi_stream_relative(4096 * 768)
    between = multi_stream_relative(2896 * 768)  # about 2^11.5 rows
    assert MULTI_STREAM_POINTS[0][1] < between < MULTI_STREAM_POINTS[1][1]


def test_multi_stream_experts_run_at_the_grouped_rate_times_the_ratio_at_their_rows() -> None:
    s = _scenario(moe_expert_gemm="multi_stream")
    # 32 ranks x 4096 tokens x top-8 over 64 experts: 16,384 rows per expert of 1,024 outputs (gate/up: 2 x
    # 512; down: hidden 1024), beyond the measured 4,096 x 768
    (rate,) = _rates(s)
    assert rate == pytest.approx(GROUPED_GEMM_RELATIVE_RATE * MULTI_STREAM_POINTS[1][1])
    assert _rates(_scenario(moe_expert_gemm="grouped")) == {GROUPED_GEMM_RELATIVE_RATE}


def test_multi_stream_is_slower_and_more_so_with_smaller_expert_gemms() -> None:
    few = {"expert_parallel_degree": 2}  # 2 ranks x 4096 x 8 / 64: 1,024 rows x 1,024 outputs an expert
    gap = {}
    for name, plan in (("few", few), ("many", {})):
        times = {}
        for mode in ("multi_stream", "grouped"):
            data = {
                **MOE,
                "training": {**MOE["training"], "moe_expert_gemm": mode},
                "parallelism": {**MOE["parallelism"], **plan},
            }
            times[mode] = _step_s(parse_scenario(data, "x").scenario)
        gap[name] = times["multi_stream"] / times["grouped"] - 1
    assert gap["many"] > 0
    assert gap["few"] > 2 * gap["many"]


@pytest.mark.parametrize(
    ("framework", "training", "cluster", "expected"),
    [
        ("megatron-lm", {}, None, True),  # TE GroupedLinear's default path
        ("torchtitan", {}, None, False),  # torch._grouped_mm
        ("torchtitan", {"moe_expert_gemm": "multi_stream"}, None, True),  # set, it wins
        ("megatron-lm", {"moe_expert_gemm": "grouped"}, None, False),  # NVTE_USE_CUTLASS_GROUPED_GEMM=1
        ("megatron-lm", {}, {"preset": "local-cpu"}, False),  # CPU ranks keep their calibrated rate
    ],
)
def test_unset_it_follows_the_framework_on_a_gpu(
    framework: str, training: dict[str, Any], cluster: Any, expected: bool
) -> None:
    if cluster is not None:  # two CPU ranks: ep 2
        data = {
            **MOE,
            "training": {**MOE["training"], **training},
            "parallelism": {**MOE["parallelism"], "framework": framework, "expert_parallel_degree": 2},
            "cluster": cluster,
        }
        s = parse_scenario(data, "x").scenario
    else:
        s = _scenario(framework, **training)
    assert Shape.of(s).multi_stream_experts is expected


def test_setting_it_on_a_dense_model_warns() -> None:
    moe_keys = ("num_local_experts", "num_experts_per_tok", "moe_intermediate_size")
    data = {
        **MOE,
        "model": {k: v for k, v in MOE["model"].items() if k not in moe_keys},
        "training": {**MOE["training"], "moe_expert_gemm": "grouped"},
        "parallelism": {"framework": "megatron-lm"},
    }
    warnings = parse_scenario(data, "x").warnings
    assert any("training.moe_expert_gemm is ignored" in w for w in warnings)


def test_plancast_run_refuses_multi_stream_naming_the_key() -> None:
    from plancast.runtime.plan import PlanError, check_runtime_support

    data = {
        **MOE,
        "model": {**MOE["model"], "num_hidden_layers": 2},
        "training": {**MOE["training"], "moe_expert_gemm": "multi_stream", "elementwise": "eager"},
        "parallelism": {"framework": "torchtitan", "expert_parallel_degree": 2},
        "cluster": {"preset": "local-cpu"},
    }
    with pytest.raises(PlanError, match=r"training\.moe_expert_gemm = 'multi_stream'"):
        check_runtime_support(parse_scenario(data, "x").scenario, 2)
