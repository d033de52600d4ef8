"""runtime/microbench.measure_fitting_links: a pass whose collectives do not grow with size (a busy
machine) is measured again, every rank together, instead of failing the profile's bandwidth fit."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch.distributed as dist

from plancast.runtime import microbench


def _rows(seconds: tuple[float, float]) -> list[dict[str, Any]]:
    return [
        {"kind": "all_reduce", "ranks": 2, "bytes": b, "seconds": t}
        for b, t in zip((1024, 1024 * 1024), seconds, strict=True)
    ]


def test_links_are_measured_again_until_a_bandwidth_fits(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    passes = iter([_rows((2e-3, 1e-3)), _rows((1e-4, 2e-3))])  # flat (shrinking) first, then growing
    calls = []

    def fake_measure(world: int) -> list[dict[str, Any]]:
        calls.append(world)
        return next(passes)

    monkeypatch.setattr(microbench, "measure_links", fake_measure)
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'init'}", rank=0, world_size=1)
    try:
        samples = microbench.measure_fitting_links(1)
    finally:
        dist.destroy_process_group()
    assert len(calls) == 2 and samples == _rows((1e-4, 2e-3))
