"""A fused attention kernel's rate against head dim (simulator/costs/attention.py head_dim_rate): both rates
were measured at head dim 128; narrower heads run slower, by the FlashAttention-3 paper's fwd+bwd ratio of
the kernel family (cuDNN as Transformer Engine runs it, FlashAttention-2 / SDPA); 128 and wider (MLA's
192 / 128) keep the measured rate."""

from __future__ import annotations

from typing import Any

import pytest

from plancast.runtime.plan import PlanError, check_framework_behaviour
from plancast.simulator.costs.attention import HEAD_DIM_64_RATE, head_dim_rate
from plancast.simulator.costs.efficiency import op_seconds
from plancast.simulator.costs.ops import Shape, layer_forward
from plancast.simulator.loader import parse_scenario
from plancast.simulator.predict import simulate
from plancast.simulator.scenario import Scenario


@pytest.mark.parametrize(
    ("qk", "v", "family", "expected"),
    [
        (128, 128, "te", 1.0),
        (256, 256, "sdpa", 1.0),
        (192, 128, "te", 1.0),  # MLA: keeps the measured rate
        (64, 64, "te", HEAD_DIM_64_RATE["te"]),
        (32, 32, "sdpa", HEAD_DIM_64_RATE["sdpa"]),  # no narrower point published: the 64 ratio
        (96, 96, "te", (1 + HEAD_DIM_64_RATE["te"]) / 2),
        (64, 128, "sdpa", (1 + HEAD_DIM_64_RATE["sdpa"]) / 2),  # the FLOP-weighted width, 96
    ],
)
def test_the_rule_over_head_widths(qk: int, v: int, family: str, expected: float) -> None:
    assert head_dim_rate(qk, v, family) == pytest.approx(expected)


def test_the_papers_ratios_put_cudnn_below_flashattention_2() -> None:
    """FA3 paper figs. 5-6 on H100: cuDNN loses about a fifth at head dim 64, FlashAttention-2 a tenth."""
    assert HEAD_DIM_64_RATE["te"] == pytest.approx(0.788, abs=1e-3)
    assert HEAD_DIM_64_RATE["sdpa"] == pytest.approx(0.893, abs=1e-3)


def _scenario(framework: str, heads: int, head_dim: int, flash: bool = True) -> Scenario:
    """Llama 3 8B with its 4096 query and 1024 key/value features as `heads` x `head_dim` (the same
    FLOPs and bytes everywhere)."""
    model = {"preset": "llama3-8b", "num_attention_heads": heads, "head_dim": head_dim}
    data: dict[str, Any] = {
        "model": {**model, "num_key_value_heads": 1024 // head_dim},
        "training": {
            "seq_len": 4096,
            "micro_batch_size": 1,
            "global_batch_size": 8,
            "flash_attention": flash,
        },
        "parallelism": {"framework": framework},
        "cluster": {"preset": "dgx-h100-80gb"},
    }
    return parse_scenario(data, framework).scenario


def _attention_s(s: Scenario) -> float:
    (op,) = (op for op in layer_forward(Shape.of(s)) if op.name == "attention")
    return op_seconds(op, s.cluster.gpu, s.cluster.compute, s.training.dtype)


@pytest.mark.parametrize(("framework", "family"), [("megatron-lm", "te"), ("torchtitan", "sdpa")])
def test_64_wide_heads_take_the_same_flops_longer_by_the_familys_ratio(framework: str, family: str) -> None:
    wide, narrow = _scenario(framework, 32, 128), _scenario(framework, 64, 64)
    overhead_s = wide.cluster.compute.op_overhead_us * 1e-6
    ratio = (_attention_s(narrow) - overhead_s) / (_attention_s(wide) - overhead_s)
    assert ratio == pytest.approx(1 / HEAD_DIM_64_RATE[family], rel=1e-6)
    assert (
        simulate(narrow, events=False).summary["step_time_s"]
        > simulate(wide, events=False).summary["step_time_s"]
    )


def test_unfused_attention_is_not_a_fused_kernel_and_keeps_its_rate() -> None:
    (op,) = (
        op
        for op in layer_forward(Shape.of(_scenario("megatron-lm", 64, 64, flash=False)))
        if op.name == "scores"
    )
    assert op.relative_rate == 1.0


def test_mla_keeps_the_measured_rate() -> None:
    data: dict[str, Any] = {
        "model": {"preset": "deepseek-v2-lite"},
        "training": {"seq_len": 4096, "micro_batch_size": 1, "global_batch_size": 8, "flash_attention": True},
        "parallelism": {"framework": "megatron-lm"},
        "cluster": {"preset": "dgx-h100-80gb"},
    }
    s = parse_scenario(data, "mla").scenario
    (op,) = (op for op in layer_forward(Shape.of(s)) if op.name == "attention")
    assert op.relative_rate == 1.0 and op.rate is not None


def _backend_scenario(backend: str | None, cluster: str = "dgx-h100-80gb") -> Scenario:
    training: dict[str, Any] = {"seq_len": 4096, "micro_batch_size": 1, "global_batch_size": 8}
    training["flash_attention"] = True
    if backend is not None:
        training["attention_backend"] = backend
    data: dict[str, Any] = {
        # the kernel alone: without the sinks, whose rescale after FlexAttention is priced apart
        # (tests/simulator/test_attention_sinks.py)
        "model": {
            "preset": "gpt-oss-120b",
            "num_hidden_layers": 2,
            "layer_types": ["full_attention"] * 2,
            "attention_sinks": False,
        },
        "training": training,
        "parallelism": {"framework": "torchtitan"},
        "cluster": {"preset": cluster},
    }
    return parse_scenario(data, "flex").scenario


@pytest.mark.parametrize(("cluster", "faster"), [("dgx-h100-80gb", True), ("dgx-a100-80gb", False)])
def test_flex_is_flashattention_2_at_the_measured_ratio(cluster: str, faster: bool) -> None:
    """FlexAttention: FA2's count at the cluster's flex_attention_relative (H100: ~25% faster forward, ~3%
    backward, GTC 2025; A100: 90% / 85%, PyTorch blog), head-dim ratio included."""
    sdpa, flex = _backend_scenario("sdpa", cluster), _backend_scenario("flex", cluster)
    overhead_s = sdpa.cluster.compute.op_overhead_us * 1e-6
    ratio = (_attention_s(sdpa) - overhead_s) / (_attention_s(flex) - overhead_s)
    assert ratio == pytest.approx(flex.cluster.compute.flex_attention_relative, rel=1e-6)
    step_sdpa = simulate(sdpa, events=False).summary["step_time_s"]
    step_flex = simulate(flex, events=False).summary["step_time_s"]
    assert (step_flex < step_sdpa) is faster and step_flex != step_sdpa


def test_flex_is_refused_by_the_runtime_naming_the_key() -> None:
    with pytest.raises(PlanError, match=r"training\.attention_backend = 'flex'"):
        check_framework_behaviour(_backend_scenario("flex"))
