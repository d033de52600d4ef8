"""`plancast simulate`'s table: the peak (allocated and reserved), what is free of the usable memory and
what is kept for the CUDA context, NCCL and the allocator (issue 36's words), and a plan that does not fit
says so and by how much (issue 9, defect 5)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import tomli_w

from tests.cli_runner import REPO, cli_main

GPT3 = REPO / "examples" / "gpt3-175b-dgx-a100.toml"


def _simulate(path: Path) -> tuple[str, dict[str, object]]:
    code, table, err = cli_main("simulate", str(path))
    assert code == 0, err
    code, text, err = cli_main("simulate", str(path), "--json")
    assert code == 0, err
    return table, json.loads(text)


def _memory_line(table: str) -> str:
    return next(row for row in table.splitlines() if row.startswith("peak "))


def test_table_shows_peak_free_and_kept_memory() -> None:
    table, summary = _simulate(GPT3)
    usable, capacity = float(summary["usable_memory_gib"]), float(summary["gpu_memory_gib"])  # type: ignore[arg-type]
    peak, reserved = float(summary["peak_memory_gib"]), float(summary["peak_reserved_gib"])  # type: ignore[arg-type]
    assert usable < capacity  # the A100's CUDA context, NCCL and allocator share (simulator/catalog/gpus.py)
    assert peak < reserved  # the allocator holds more than the tensors alive
    line = _memory_line(table)
    match = re.search(
        r"peak ([\d.]+) GiB allocated, ([\d.]+) GiB reserved; ([\d.]+) GiB free of ([\d.]+) usable; "
        r"([\d.]+) GiB kept for CUDA context, NCCL and the allocator",
        line,
    )
    assert match, line
    assert [float(g) for g in match.groups()] == pytest.approx(
        [peak, reserved, usable - peak, usable, capacity - usable], rel=5e-3
    )
    assert "headroom" not in line
    assert "(fits)" in line


def test_a_plan_over_usable_memory_says_it_does_not_fit(tmp_path: Path) -> None:
    """tp8 pp1 for GPT-3 175B cannot fit in 80 GiB: the table says so and by how much."""
    import tomllib

    data = tomllib.loads(GPT3.read_text())
    data["parallelism"] = {"tensor_parallel_degree": 8, "pipeline_parallel_degree": 1}
    data["training"]["recompute"] = "none"
    path = tmp_path / "big.toml"
    path.write_text(tomli_w.dumps(data))
    table, summary = _simulate(path)
    assert summary["fits_in_memory"] is False
    line = _memory_line(table)
    over = float(summary["peak_memory_gib"]) - float(summary["usable_memory_gib"])  # type: ignore[arg-type]
    assert f"{over:.3g} GiB over usable" in line, line
    assert "does NOT fit" in line
