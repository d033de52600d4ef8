"""`plancast sweep` through the CLI: the ranked table, the JSON object, and bad input."""

from __future__ import annotations

import json
from pathlib import Path

from tests.cli_runner import cli_main

EXAMPLE = str(Path(__file__).resolve().parent.parent / "examples" / "tiny-local-cpu.toml")


def test_sweep_prints_counts_then_the_ranked_plans() -> None:
    code, out, _ = cli_main("sweep", EXAMPLE, "--gpus", "2", "--top", "3", "--finalists", "4")
    assert code == 0
    lines = out.splitlines()
    assert "plans enumerated" in lines[0] and "simulated in full" in lines[0]
    assert "step s" in out and "MFU" in out
    ranked = [line for line in lines if line.lstrip("│ ").startswith(("1 ", "2 ", "3 "))]
    assert len(ranked) == 3, out


def test_sweep_json_has_the_same_plans() -> None:
    code, out, _ = cli_main("sweep", EXAMPLE, "--gpus", "2", "--top", "3", "--finalists", "4", "--json")
    assert code == 0
    data = json.loads(out)
    assert data["plans_enumerated"] >= data["plans_fitting"] >= len(data["plans"]) > 0
    assert len(data["plans"]) <= 3


def test_sweep_refuses_a_non_positive_gpu_count() -> None:
    code, out, err = cli_main("sweep", EXAMPLE, "--gpus", "0")
    assert code == 2
    assert "--gpus" in err and "must be positive" in err and "Traceback" not in err + out
