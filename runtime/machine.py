"""What this machine can run: CPU cores, available memory, visible GPUs (read without importing torch).

``check_machine`` compares a launch with it before anything starts, so an impossible launch (1,536
ranks on a laptop, a 175B model in 24 GiB) is refused in a second with what to change, instead of
exhausting the machine's memory.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

RANK_BASE_GiB = 0.5
"""Resident memory of one CPU rank before its model: Python + torch + gloo (about 0.35-0.45 GiB
measured with `ps -o rss` on this project's 2-rank runs), rounded up."""
MAX_RANKS_PER_CORE = 8
"""CPU ranks per core beyond which a run only thrashes, even with ``--oversubscribe`` (one thread per
rank)."""
OVERSUBSCRIBE_FLAG = "--oversubscribe"
"""The ``plancast run`` flag that lets more CPU ranks than cores start (``check_machine``)."""
MEMORY_HEADROOM = 0.8
"""Fraction of the available memory a CPU run may plan to use; the rest stays for everything else."""


@dataclass(frozen=True)
class Machine:
    """This node as a launch sees it."""

    cpu_cores: int
    memory_available_GiB: float | None  # None where /proc/meminfo is absent
    gpus: int  # CUDA devices the workers would see


def _meminfo_available_GiB(meminfo: Path = Path("/proc/meminfo")) -> float | None:
    try:
        for line in meminfo.read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) / 1024**2  # kB -> GiB
    except (OSError, ValueError, IndexError):
        return None
    return None


def visible_gpus(environ: Mapping[str, str], driver_dir: Path = Path("/proc/driver/nvidia/gpus")) -> int:
    """NVIDIA GPUs the workers would use: the driver's devices, narrowed by CUDA_VISIBLE_DEVICES."""
    try:
        present = len(list(driver_dir.iterdir()))
    except OSError:
        return 0
    visible = environ.get("CUDA_VISIBLE_DEVICES")
    if visible is None:
        return present
    ids = [v for v in visible.split(",") if v.strip() and v.strip() != "-1"]
    return min(present, len(ids))


def this_machine() -> Machine:
    """Cores this process may use, memory available now, GPUs visible."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    return Machine(cores, _meminfo_available_GiB(), visible_gpus(os.environ))


def oversubscribed(machine: Machine, ranks_per_node: int) -> bool:
    """Whether CPU ranks would share cores (more ranks than cores on a machine without GPUs)."""
    return not machine.gpus and ranks_per_node > machine.cpu_cores


def check_machine(
    machine: Machine,
    ranks_per_node: int,
    rank_memory_GiB: float,
    what_to_change: str,
    *,
    oversubscribe: bool = False,
) -> str | None:
    """Why ``ranks_per_node`` ranks of ``rank_memory_GiB`` each cannot start here, or None (pure).

    On a GPU machine each rank needs its own GPU; on CPU the ranks share the memory (``RANK_BASE_GiB``
    + model state per rank) and at most one rank per core runs unless ``oversubscribe`` (then at most
    ``MAX_RANKS_PER_CORE`` per core): ranks that share a core wait for it, so their timings describe
    the machine's scheduler, not the plan, while events and losses keep their meaning.
    """
    if machine.gpus:
        if ranks_per_node > machine.gpus:
            return (
                f"{ranks_per_node} ranks per node but this machine has {machine.gpus} visible GPU(s); "
                f"{what_to_change}"
            )
        return None
    max_ranks = MAX_RANKS_PER_CORE * machine.cpu_cores
    if ranks_per_node > max_ranks:
        return (
            f"{ranks_per_node} CPU ranks on this machine's {machine.cpu_cores} core(s) (at most "
            f"{max_ranks}, {MAX_RANKS_PER_CORE} per core); {what_to_change}"
        )
    if oversubscribed(machine, ranks_per_node) and not oversubscribe:
        return (
            f"{ranks_per_node} CPU ranks on this machine's {machine.cpu_cores} core(s): ranks would share "
            f"cores, so their timings would mean nothing (events and losses still would); pass "
            f"{OVERSUBSCRIBE_FLAG} to run it anyway, or {what_to_change}"
        )
    need_GiB = ranks_per_node * (RANK_BASE_GiB + rank_memory_GiB)
    have = machine.memory_available_GiB
    if have is not None and need_GiB > MEMORY_HEADROOM * have:
        return (
            f"{ranks_per_node} ranks x ({RANK_BASE_GiB:g} GiB per process + {rank_memory_GiB:.3g} GiB "
            f"predicted model state) = {need_GiB:.3g} GiB, more than {MEMORY_HEADROOM:.0%} of the "
            f"{have:.3g} GiB this machine has available; {what_to_change}"
        )
    return None
