"""`plancast simulate`'s table: peak memory next to usable memory (capacity less the catalog's per-GPU
headroom), and a plan that does not fit says so (issue 9, defect 5)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import tomli_w

from plancast.app import sig
from tests.cli_runner import REPO, cli_main

GPT3 = REPO / "examples" / "gpt3-175b-dgx-a100.toml"


def _simulate(path: Path) -> tuple[str, dict[str, object]]:
    code, table, err = cli_main("simulate", str(path))
    assert code == 0, err
    code, text, err = cli_main("simulate", str(path), "--json")
    assert code == 0, err
    return table, json.loads(text)


def test_table_shows_usable_memory_beside_the_peak() -> None:
    table, summary = _simulate(GPT3)
    usable, capacity = float(summary["usable_memory_gib"]), float(summary["gpu_memory_gib"])  # type: ignore[arg-type]
    assert usable < capacity  # the A100's headroom (simulator/catalog/gpus.py)
    line = next(row for row in table.splitlines() if row.startswith("peak memory"))
    match = re.search(r"usable ([\d.]+) of ([\d.]+) GiB \(([\d.]+) GiB headroom\)", line)
    assert match, line
    assert match[1] == sig(usable)
    assert float(match[2]) == capacity
    assert "(fits)" in line


def test_a_plan_over_usable_memory_says_it_does_not_fit(tmp_path: Path) -> None:
    """tp1 pp1 for GPT-3 175B cannot fit in 80 GiB: the table says so and by how much."""
    import tomllib

    data = tomllib.loads(GPT3.read_text())
    data["parallelism"] = {"tensor_parallel_degree": 8, "pipeline_parallel_degree": 1}
    data["training"]["recompute"] = "none"
    path = tmp_path / "big.toml"
    path.write_text(tomli_w.dumps(data))
    table, summary = _simulate(path)
    assert summary["fits_in_memory"] is False
    line = next(row for row in table.splitlines() if row.startswith("peak memory"))
    over = float(summary["peak_memory_gib"]) - float(summary["usable_memory_gib"])  # type: ignore[arg-type]
    assert re.search(rf"does NOT fit: {over:.3g} GiB over usable", line), line
