"""Attention as the kernels run it (simulator/costs/attention.py): Transformer Engine's causal fused kernel
computes the causal half at its measured rate; other stacks keep the model's full count."""

from __future__ import annotations

from typing import Any

import pytest

from plancast.simulator.catalog.clusters import HOPPER_COMPUTE
from plancast.simulator.cluster import ComputeModel
from plancast.simulator.costs.attention import CAUSAL_FRACTION, fused_attention_rate
from plancast.simulator.costs.efficiency import op_seconds
from plancast.simulator.costs.ops import Shape, layer_forward
from plancast.simulator.loader import parse_scenario
from plancast.simulator.scenario import Scenario

HOPPER = ComputeModel(**HOPPER_COMPUTE)  # type: ignore[arg-type]


@pytest.mark.parametrize(("seq", "measured"), [(8192, 0.894), (2048, 0.712)])
def test_the_fused_rate_goes_through_the_h100_measurements(seq: int, measured: float) -> None:
    """benchmarks/results/gpu_ops_h100_*: cuDNN attention fwd + bwd at 0.894 (seq 8192) and 0.712 (2048)
    of peak over the full s x s count, i.e. half that over the causal half it computes."""
    rate = fused_attention_rate(HOPPER, "megatron-lm", True, seq)
    assert rate == pytest.approx(measured / 2, rel=2e-3)


@pytest.mark.parametrize(
    ("framework", "flash", "compute"),
    [("torchtitan", True, HOPPER), ("megatron-lm", False, HOPPER), ("megatron-lm", True, ComputeModel())],
)
def test_other_kernels_keep_the_full_count(framework: str, flash: bool, compute: ComputeModel) -> None:
    """torchtitan's SDPA / FlashAttention-2, unfused attention, and a cluster without a measured fused rate
    (the A100 fit) keep attention_efficiency over the full count."""
    assert fused_attention_rate(compute, framework, flash, 8192) is None


def _scenario(framework: str) -> Scenario:
    data: dict[str, Any] = {
        "model": {"preset": "llama3-8b"},
        "training": {"seq_len": 8192, "micro_batch_size": 2, "global_batch_size": 16,
                     "flash_attention": True},
        "parallelism": {"framework": framework},
        "cluster": {"preset": "dgx-h100-80gb"},
    }
    return parse_scenario(data, framework).scenario


def test_te_attention_is_the_causal_half_at_the_cudnn_rate() -> None:
    te, titan = _scenario("megatron-lm"), _scenario("torchtitan")
    (te_op,) = (op for op in layer_forward(Shape.of(te)) if op.name == "attention")
    (titan_op,) = (op for op in layer_forward(Shape.of(titan)) if op.name == "attention")
    assert te_op.flops == pytest.approx(CAUSAL_FRACTION * titan_op.flops)
    assert te_op.rate == pytest.approx(0.447, rel=2e-3) and titan_op.rate is None
    gpu, compute = te.cluster.gpu, te.cluster.compute
    te_s, titan_s = (op_seconds(op, gpu, compute, "bf16") for op in (te_op, titan_op))
    # half the work at 0.447 against all of it at 0.35: 0.35 / (2 x 0.447) of the time, plus one overhead
    overhead = compute.op_overhead_us * 1e-6
    assert (te_s - overhead) / (titan_s - overhead) == pytest.approx(0.35 / (2 * 0.447), rel=3e-3)


def test_mfu_counts_the_full_scores_whatever_the_kernel_computes() -> None:
    """Model FLOPs (Narayanan et al. 2021 eq. 3) are the same for both stacks; only the time differs."""
    from plancast.simulator.costs.model_flops import model_flops_per_token

    assert model_flops_per_token(_scenario("megatron-lm")) == model_flops_per_token(_scenario("torchtitan"))
