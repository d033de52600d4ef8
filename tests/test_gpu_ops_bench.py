"""benchmarks/gpu_ops.py, the per-op check of the compute model on a GPU, run through its command line on
the CPU (fp32, small shapes): every op it measures is one the simulator prices, with both times."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from benchmarks.gpu_ops import _fraction, fit_saturation, preset_of
from benchmarks.gpu_ops_report import _show
from tests.cli_runner import module_subprocess


@pytest.mark.parametrize(
    ("model", "memory_ops"),
    [("tiny-llama", {"norm1", "rope", "swiglu"}), ("tiny-gpt", {"norm1", "gelu"})],
)
def test_cli_measures_every_priced_op(tmp_path: Path, model: str, memory_ops: set[str]) -> None:
    out = tmp_path / "ops.json"
    cmd = ("benchmarks.gpu_ops", "--device", "cpu", "--model", model, "--seq", "64")
    proc = module_subprocess(*cmd, "--micro-batch", "1", "--repeat", "2", "--json", str(out), timeout_s=300)
    assert proc.returncode == 0, proc.stderr
    assert "implied: isolated GEMM" in proc.stdout
    result = json.loads(out.read_text())
    rows = {r["op"]: r for r in result["rows"]}
    gemms = {"qkv", "out_proj", "fc2", "logits", "gate_up" if model == "tiny-llama" else "fc1"}
    assert gemms | memory_ops | {"attention[default]", "dropout_residual1", "cross_entropy", "block"} <= set(
        rows
    )
    for r in rows.values():
        assert r["fwd_s"] > 0 and r["pred_fwd_s"] > 0 and r["pred_bwd_s"] > 0, r
    for name in gemms:  # backward is two GEMMs of the forward's size: the simulator prices it 2x
        assert rows[name]["pred_bwd_s"] == pytest.approx(2 * rows[name]["pred_fwd_s"])
    assert result["shape"] == {"model": model, "seq_len": 64, "micro_batch": 1, "dtype": "fp32"}


def test_fit_saturation_recovers_a_known_curve() -> None:
    flops = np.logspace(8, 13, 12)
    eff = 0.8 * flops / (flops + 5e9)
    e_max, half = fit_saturation(flops, eff)
    assert e_max == pytest.approx(0.8, rel=0.02)
    assert half == pytest.approx(5.0, rel=0.05)


def test_preset_of_names_the_gpu_cluster() -> None:
    assert preset_of("NVIDIA H100 80GB HBM3") == "dgx-h100-80gb"
    assert preset_of("NVIDIA H200") == "hgx-h200"
    assert preset_of("NVIDIA A100-SXM4-80GB") == "dgx-a100-80gb"


def test_a_backward_lost_in_the_timer_noise_is_reported_not_divided_by() -> None:
    """backward = (forward + backward) - forward can come out 0 for a tiny op on a noisy CPU."""
    assert _fraction(1e-3, 0.0) is None and _show(None) == "n/a"
    assert _fraction(1e-3, 2e-3) == 0.5 and _show(0.5) == "0.50"
