"""The microbenchmarks of library-collective blocks run under the capture their runs are measured with."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torch.utils._python_dispatch import _get_current_dispatch_mode

from plancast.runtime.microbench_host import instrumented

REPO = Path(__file__).resolve().parents[2]


def test_library_collective_blocks_are_measured_under_the_runs_dispatch_capture() -> None:
    seen = []

    def fn() -> None:
        seen.append(type(_get_current_dispatch_mode()).__name__)
        torch.ones(2).sum()

    assert _get_current_dispatch_mode() is None
    instrumented(fn)()
    assert seen == ["CollectiveSpy"]
    assert _get_current_dispatch_mode() is None  # left again after the sample


@pytest.mark.parametrize("example", ["tiny-local-cpu", "tiny-mla-moe-cpu"])
def test_every_host_block_variant_runs_on_each_cpu_examples_model(example: str) -> None:
    """The host costs' block steps (plain, tp, sp, fsdp: runtime/microbench_host.py `_block_step`) build and
    run one forward and backward on the example's model. The runtime splits neither MoE nor multi-head
    latent attention over tensor parallel, so the steps time dense grouped-query blocks of its width; on
    MLA they raised "mixed torch.Tensor and DTensor" and `simulate` fell back to the shipped defaults."""
    from plancast.runtime.microbench_host import _block_step
    from plancast.simulator.loader import load_scenario

    s = load_scenario(REPO / "examples" / f"{example}.toml").scenario
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        mesh = init_device_mesh("cpu", (1,))
        for variant in ("plain", "tp", "sp", "fsdp"):
            _block_step(s, mesh, variant, 1)()
    finally:
        dist.destroy_process_group()
