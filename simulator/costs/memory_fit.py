"""Will it fit: a rank's peak as the framework's allocator sees it, against the GPU and the host.

Three figures per GPU, as PyTorch reports them (torch.cuda memory statistics):
- allocated: the tensors alive at the peak (`max_memory_allocated`; MemoryBreakdown.total);
- reserved: what the caching allocator holds to serve them (`max_memory_reserved`): allocated over the
  share of its blocks that splitting leaves usable, 1 - cluster.gpu.fragmentation (catalog/gpus.py);
- kept: memory no tensor can use: the CUDA context and NCCL's buffers (cluster.gpu.reserved_GiB) and
  the allocator's share of the rest (`kept_memory_gib` = memory - usable).
A job runs out of memory when the allocator cannot grow its reserve: reserved + kept > the GPU's
memory. That is the check `fits_in_memory` makes (the same as allocated <= usable_memory_GiB).
Offloaded bytes (optimizer states, activations) must fit the host's share of its memory
(catalog/host.py).
"""

from __future__ import annotations

from typing import Any

from plancast.simulator.catalog.host import host_side
from plancast.simulator.costs.memory import GiB, MemoryBreakdown
from plancast.simulator.scenario import Scenario


def memory_fit(s: Scenario, mem: MemoryBreakdown) -> dict[str, Any]:
    """The summary's memory keys for the peak rank's breakdown `mem`."""
    gpu = s.cluster.gpu
    reserved = mem.reserved(gpu.fragmentation) / GiB
    host_capacity = host_side(gpu.name).host_memory_GiB
    fits_gpu = reserved + gpu.reserved_GiB <= gpu.memory_GiB * (1 + 1e-12)
    fits_host = mem.host / GiB <= host_capacity
    return {
        "peak_memory_gib": mem.total / GiB,
        "peak_reserved_gib": reserved,
        "memory_gib": mem.gib(),
        "gpu_memory_gib": gpu.memory_GiB,
        "usable_memory_gib": gpu.usable_memory_GiB,
        "kept_memory_gib": gpu.memory_GiB - gpu.usable_memory_GiB,
        "host_memory_gib": mem.host / GiB,
        "host_capacity_gib": host_capacity,
        "fits_in_memory": fits_gpu and fits_host,
    }


def memory_line(summary: dict[str, Any]) -> str:
    """The memory sentence of `simulate`: peak, what is free of the usable memory, and what is kept
    (issue 36's words), e.g. "peak 16.9 GiB allocated, 17.8 GiB reserved; 57.5 GiB free of 74.4 usable;
    5.6 GiB kept for CUDA context, NCCL and the allocator"."""
    usable, capacity = summary["usable_memory_gib"], summary["gpu_memory_gib"]
    peak = summary["peak_memory_gib"]
    free = usable - peak
    state = f"{free:.3g} GiB free of {usable:.3g} usable" if free >= 0 else f"{-free:.3g} GiB over usable"
    words = (
        f"peak {peak:.3g} GiB allocated, {summary['peak_reserved_gib']:.3g} GiB reserved; {state}; "
        f"{capacity - usable:.3g} GiB kept for CUDA context, NCCL and the allocator"
    )
    if summary.get("host_memory_gib"):
        words += (
            f"; {summary['host_memory_gib']:.3g} GiB offloaded to host memory "
            f"({summary['host_capacity_gib']:.3g} GiB per GPU)"
        )
    return words
