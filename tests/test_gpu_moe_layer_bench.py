"""benchmarks/gpu_moe_layer.py (issue 31: where a real MoE layer's time goes) through its command line
on the CPU (fp32, the tiny MoE example): the layer is measured, profiled by kernel kind and priced by the
simulator."""

from __future__ import annotations

import json
from pathlib import Path

from benchmarks.gpu_moe_layer import kind_of
from tests.cli_runner import module_subprocess


def test_kernel_kinds_by_name() -> None:
    assert kind_of("void cutlass::device_kernel<GroupProblemShape<...>>") == "grouped_gemm"
    assert kind_of("nvjet_tst_128x256_64x4_1x2_h_bz_coopA_NNT") == "gemm"
    assert kind_of("sm90_xmma_gemm_bf16bf16_bf16f32") == "gemm"
    assert kind_of("flash_fwd_kernel<Flash_fwd_kernel_traits<128>>") == "attention"
    assert kind_of("void at::native::sbtopk::gatherTopK<float>") == "routing"
    assert kind_of("cub::DeviceRadixSortOnesweepKernel") == "routing"
    assert kind_of("void at::native::vectorized_elementwise_kernel<4, silu>") == "other"


def test_cli_on_the_tiny_moe_example(tmp_path: Path) -> None:
    out = tmp_path / "moe.json"
    proc = module_subprocess(
        "benchmarks.gpu_moe_layer",
        *("examples/tiny-moe-cpu.toml", "--device", "cpu", "--repeat", "2", "--json", str(out)),
        timeout_s=300,
    )
    assert proc.returncode == 0, proc.stderr
    assert "forward+backward measured" in proc.stdout
    (result,) = json.loads(out.read_text())["results"]
    meas, pred = result["measured"], result["predicted"]
    assert meas["fwd_bwd_s"] >= meas["fwd_s"] > 0  # backward is a difference of noisy CPU timings: >= 0
    assert pred["fwd_bwd_s"] > pred["fwd_s"] > 0
    assert {"matmul", "memory"} <= set(pred["by_category_s"])
    assert sum(meas["by_kind_s"].values()) > 0


def test_a_dense_model_is_refused(tmp_path: Path) -> None:
    proc = module_subprocess(
        "benchmarks.gpu_moe_layer", "examples/tiny-local-cpu.toml", "--device", "cpu", timeout_s=300
    )
    assert proc.returncode == 2 and "not a mixture-of-experts model" in proc.stderr
