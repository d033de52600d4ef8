"""benchmarks/gpu_kernels.py (issue 32's kernel table) through gpu_ops's command line on the CPU, and the FP8
quantization it feeds torch's scaled GEMMs, checked against the tensor it encodes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from benchmarks.gpu_kernels import E4M3_MAX, quantize
from tests.cli_runner import module_subprocess


def test_cli_measures_gemms_and_causal_attention_beside_the_model(tmp_path: Path) -> None:
    out = tmp_path / "kernels.json"
    # --kernels: gpu_ops's entry to the kernel table
    proc = module_subprocess(
        *("benchmarks.gpu_ops", "--kernels", "--device", "cpu", "--repeat", "2", "--json", str(out)),
        timeout_s=300,
    )
    assert proc.returncode == 0, proc.stderr
    rows = json.loads(out.read_text())["rows"]
    gemms = [r for r in rows if r["kind"] == "gemm"]
    attention = [r for r in rows if r["kind"] == "attention"]
    assert {r["variant"] for r in gemms} == {"fp32"} and len(gemms) == 2
    assert {r["op"] for r in attention} == {
        "causal attention s=128 d=128/128",
        "causal attention s=128 d=192/128",
        "causal attention s=128 d=64/64",  # gpt-oss's head width, at twice the heads
    }
    for r in gemms:
        assert r["seconds"] > 0 and r["predicted_s"] > 0
        assert r["tflops"] == pytest.approx(
            2 * r["shape"][0] * r["shape"][1] * r["shape"][2] / r["seconds"] / 1e12
        )
    for r in attention:  # the causal count is half the full one, so the full-count model prices 2x the FLOPs
        assert r["predicted_full_count_s"] > 0 and r["fwd_s"] > 0
    assert "causal attention s=128" in proc.stdout


def test_parts_runs_one_table_alone(tmp_path: Path) -> None:
    out = tmp_path / "kernels.json"
    cmd = ("benchmarks.gpu_kernels", "--device", "cpu", "--repeat", "1")
    proc = module_subprocess(*cmd, "--parts", "attention", "--json", str(out), timeout_s=300)
    assert proc.returncode == 0, proc.stderr
    assert {r["kind"] for r in json.loads(out.read_text())["rows"]} == {"attention"}
    bad = module_subprocess(*cmd, "--parts", "gemms", timeout_s=300)
    assert bad.returncode == 2 and "choose from gemm, cast, attention" in bad.stderr


@pytest.mark.parametrize("layout", ["tensor", "row", "1x128", "128x128"])
def test_quantize_decodes_back_within_e4m3_precision(layout: str) -> None:
    torch.manual_seed(0)
    x = torch.randn(256, 384) * torch.logspace(-2, 2, 384)  # columns of very different magnitude
    q, scale = quantize(x, layout)
    assert q.dtype == torch.float8_e4m3fn
    shapes = {"tensor": (), "row": (256, 1), "1x128": (256, 3), "128x128": (2, 3)}
    assert tuple(scale.shape) == shapes[layout]
    if layout == "1x128":
        scale = scale.repeat_interleave(128, dim=1)
    elif layout == "128x128":
        scale = scale.repeat_interleave(128, dim=0).repeat_interleave(128, dim=1)
    decoded = q.float() * scale
    assert q.float().abs().max() <= E4M3_MAX
    # e4m3 keeps 3 mantissa bits: relative error <= 2^-4 on values near each block's amax
    big = x.abs() >= 0.5 * x.abs().max()
    assert torch.allclose(decoded[big], x[big], rtol=2**-4, atol=0)
