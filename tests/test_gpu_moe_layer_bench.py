"""benchmarks/gpu_moe_layer.py (issue 31: where a real MoE layer's time goes) through its command line
on the CPU (fp32, the tiny MoE example): the layer is measured, profiled by kernel kind and priced by the
simulator."""

from __future__ import annotations

import json
from pathlib import Path

from benchmarks.gpu_moe_layer import kind_of
from tests.cli_runner import REPO, module_subprocess


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


def test_host_sync_hooks_copy_every_routed_assignment_to_the_host() -> None:
    """The counts the host waits for are the block's T * k routed assignments, one list per forward."""
    import torch

    from benchmarks.gpu_moe_layer import host_sync_hooks
    from plancast.runtime.model import Block, ModelConfig
    from plancast.simulator.loader import load_scenario

    s = load_scenario(str(REPO / "examples/tiny-moe-cpu.toml")).scenario
    cfg = ModelConfig.from_scenario(s)
    assert cfg.moe is not None
    block = Block(cfg, layer=cfg.moe.first_dense)
    record: list[list[int]] = []
    hooks = host_sync_hooks(block, record)
    tokens = 2 * 16
    block(torch.randn(2, 16, cfg.hidden_size))
    (counts,) = record
    assert len(counts) == cfg.moe.num_experts and sum(counts) == tokens * cfg.moe.top_k
    for hook in hooks:
        hook.remove()
    block(torch.randn(2, 16, cfg.hidden_size))
    assert len(record) == 1


def test_cli_times_the_block_again_with_the_host_sync(tmp_path: Path) -> None:
    out = tmp_path / "moe.json"
    args = ["examples/tiny-moe-cpu.toml", "--device", "cpu", "--repeat", "2", "--host-sync"]
    args += ["--json", str(out)]
    proc = module_subprocess("benchmarks.gpu_moe_layer", *args, timeout_s=300)
    assert proc.returncode == 0, proc.stderr
    assert "with the counts to the host each forward" in proc.stdout
    (result,) = json.loads(out.read_text())["results"]
    sync = result["measured"]["host_sync"]
    assert sync["fwd_bwd_s"] >= sync["fwd_s"] > 0
