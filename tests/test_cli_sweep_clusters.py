"""`plancast sweep --cluster dgx-h100-80gb,dgx-b200,gb200-nvl72,mi300x --rank-by cost` on 1,024 GPUs: the
2026 presets answer "which cluster" (issue 32)."""

from __future__ import annotations

import json
from pathlib import Path

from tests.cli_runner import cli_main

SCENARIO = """
[model]
preset = "llama3-8b"
[training]
seq_len = 8192
global_batch_size = 1024
flash_attention = true
total_tokens = 1e12
[parallelism]
framework = "megatron-lm"
[cluster]
preset = "dgx-h100-80gb"
"""
CLUSTERS = ("dgx-h100-80gb", "dgx-b200", "gb200-nvl72", "mi300x")


def test_sweep_ranks_the_2026_clusters_by_cost(tmp_path: Path) -> None:
    path = tmp_path / "S.toml"
    path.write_text(SCENARIO)
    args = ["sweep", str(path), "--gpus", "1024", "--cluster", ",".join(CLUSTERS), "--rank-by", "cost"]
    code, out, err = cli_main(*args, "--workers", "1", "--top", "40", "--json")
    assert code == 0, err
    rows = json.loads(out)["plans"]
    assert {r["cluster"] for r in rows} == set(CLUSTERS)
    costs = [r["cost_usd"] for r in rows]
    assert all(c is not None for c in costs) and costs == sorted(costs)
    fastest = {c: min(r["step_time_s"] for r in rows if r["cluster"] == c) for c in CLUSTERS}
    assert fastest["dgx-b200"] < fastest["dgx-h100-80gb"]  # 2.3x the BF16 peak at 0.96x the efficiency
