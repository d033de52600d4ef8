"""Grouped expert GEMMs at their measured rate (costs/moe_gemm.py, issue 31): the constant is the
measurement's mean, the expert GEMMs carry it on GPUs in BF16 and under Megatron-LM's FP8 (Transformer
Engine's per-expert cuBLAS GEMMs), not on CPU or under the other stacks' FP8 (DeepGEMM), and it lengthens
their time by exactly its inverse."""

from __future__ import annotations

import json
import statistics
from dataclasses import replace
from pathlib import Path

import pytest

from plancast.simulator.costs.efficiency import op_seconds
from plancast.simulator.costs.moe import moe_block_forward
from plancast.simulator.costs.moe_gemm import GROUPED_GEMM_RELATIVE_RATE
from plancast.simulator.costs.ops import Op, Shape
from plancast.simulator.loader import parse_scenario
from plancast.simulator.scenario import Scenario
from tests.simulator.test_moe_keys import MOE

MEASURED = Path(__file__).parents[2] / "benchmarks" / "results" / "gpu_grouped_gemm_h200.json"
EXPERT_GEMMS = ("expert_gate_up", "expert_down")


def _scenario(cluster: dict[str, object], framework: str = "torchtitan", **training: object) -> Scenario:
    """MOE on `cluster` under `framework`; on this machine's CPU (two ranks) with ep 2."""
    plan = (
        {**MOE["parallelism"], "expert_parallel_degree": 2}
        if cluster["preset"] == "local-cpu"
        else MOE["parallelism"]
    )
    plan = {**plan, "framework": framework}
    data = {**MOE, "cluster": cluster, "training": {**MOE["training"], **training}, "parallelism": plan}
    return parse_scenario(data, "grouped-rate").scenario


def _gemms(s: Scenario) -> list[Op]:
    return [op for op in moe_block_forward(Shape.of(s), s.model, s.ep) if op.name in EXPERT_GEMMS]


def test_the_constant_is_the_mean_of_the_measured_expert_shapes() -> None:
    rows = [r for r in json.loads(MEASURED.read_text()) if r.get("groups", 1) > 1]
    assert len(rows) == 12
    mean = statistics.fmean(r["grouped_frac"] for r in rows)
    assert mean == pytest.approx(GROUPED_GEMM_RELATIVE_RATE, abs=0.005)


def test_bf16_expert_gemms_on_a_gpu_run_at_the_measured_rate_and_take_its_inverse_longer() -> None:
    s = _scenario({"preset": "dgx-h100-80gb", "num_nodes": 4})
    gemms = _gemms(s)
    assert [op.relative_rate for op in gemms] == [GROUPED_GEMM_RELATIVE_RATE] * 2
    gpu, compute = s.cluster.gpu, s.cluster.compute
    for op in gemms:
        plain = op_seconds(replace(op, relative_rate=1.0), gpu, compute, "bf16")
        flop_s = plain - compute.op_overhead_us * 1e-6  # large enough to be compute-bound
        assert op_seconds(op, gpu, compute, "bf16") == pytest.approx(
            flop_s / GROUPED_GEMM_RELATIVE_RATE + compute.op_overhead_us * 1e-6
        )
    shared = [op for op in moe_block_forward(Shape.of(s), s.model, s.ep) if op.category == "matmul"]
    assert {op.relative_rate for op in shared if op.name not in EXPERT_GEMMS} == {1.0}


H100 = {"preset": "dgx-h100-80gb", "num_nodes": 4}


@pytest.mark.parametrize(
    ("cluster", "training"),
    [
        ({"preset": "local-cpu"}, {}),  # the runtime's per-expert loop keeps its calibrated rate
        (H100, {"fp8": True}),  # DeepGEMM: grouped = dense rate
    ],
)
def test_cpu_and_fp8_expert_gemms_keep_the_dense_rate(
    cluster: dict[str, object], training: dict[str, object]
) -> None:
    assert {op.relative_rate for op in _gemms(_scenario(cluster, **training))} == {1.0}


def test_megatron_fp8_expert_gemms_take_the_grouped_rate_and_run_longer() -> None:
    """Transformer Engine's GroupedLinear issues FP8 expert GEMMs as it issues BF16 ones (per-expert
    cuBLAS), not as DeepGEMM's grouped kernel: the measured grouped rate, so a longer forward."""
    # one grouped kernel (moe_expert_gemm "grouped"): the multi-stream path has its own test
    te = _scenario(H100, "megatron-lm", fp8=True, moe_expert_gemm="grouped")
    deepgemm = _scenario(H100, "torchtitan", fp8=True)
    assert {op.relative_rate for op in _gemms(te)} == {GROUPED_GEMM_RELATIVE_RATE}
    gpu, compute = te.cluster.gpu, te.cluster.compute
    for slow, fast in zip(_gemms(te), _gemms(deepgemm), strict=True):
        assert slow.flops == fast.flops and slow.fp8 and fast.fp8
        assert op_seconds(slow, gpu, compute, "bf16") > op_seconds(fast, gpu, compute, "bf16")
