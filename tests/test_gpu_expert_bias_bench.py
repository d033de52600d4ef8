"""benchmarks/gpu_expert_bias.py (issue 31: the per-expert bias loop Megatron-Core 0.15 / 0.16 runs for
gpt-oss) through its command line on the CPU: the loop computes what one bias add a token does, and each
local-expert count is measured and priced with the calls costs/expert_bias.py counts. No timing is
asserted (the machine is shared)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import torch

from benchmarks.gpu_expert_bias import apply_bias

ROOT = Path(__file__).resolve().parents[1]


def test_the_loop_adds_each_tokens_experts_bias_times_its_probability() -> None:
    out, probs = torch.randn(6, 4), torch.rand(6, 1)
    biases = [torch.randn(4) for _ in range(3)]
    expected = out + torch.cat([b.expand(2, 4) for b in biases]) * probs
    assert torch.allclose(apply_bias(out, probs, *biases), expected)


def test_cli_on_the_cpu(tmp_path: Path) -> None:
    path = tmp_path / "bias.json"
    args = ["--device", "cpu", "--hidden", "32", "--rows", "8", "--experts", "2", "4", "--repeat", "1"]
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks.gpu_expert_bias", *args, "--json", str(path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    result = json.loads(path.read_text())
    assert [r["experts"] for r in result["results"]] == [2, 4]
    assert [r["calls"] for r in result["results"]] == [5, 9]  # multiply + add an expert, the cat
    for r in result["results"]:
        assert all(t >= 0 for t in r["measured_s"]) and r["predicted_s"][1] > r["predicted_s"][0] > 0
    assert "after GEMM" in proc.stdout


def test_bad_input_is_a_clear_error_not_a_traceback() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks.gpu_expert_bias", "--device", "cpu", "--rows", "0"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 2
    assert "--rows" in proc.stderr and "Traceback" not in proc.stderr
