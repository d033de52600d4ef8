"""Where a rank ran: host, node index, local rank, GPU and network interface, for ``measured/env.json``.

``compare`` checks these against the plan (``simulator/placement.py``): the mesh assumes global rank =
node x ranks_per_node + local_rank, so that tensor and expert parallel stay inside a node.
Reads only this process's environment, ``/proc/net/route`` and the GPU's properties; imports torch lazily.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Mapping
from pathlib import Path
from typing import Any

ROUTE_TABLE = Path("/proc/net/route")
MAX_ROUTE_BYTES = 1 << 20
"""/proc/net/route of a host with many interfaces stays far below 1 MiB; more is not a route table."""


def node_name(environ: Mapping[str, str]) -> str:
    """The scheduler's name of this node (SLURM's ``SLURMD_NODENAME``), else the host name.

    Two SLURM nodes may share one host (a test cluster: ``slurmd -N n1`` and ``-N n2``), so the node
    name, not the host name, says which node a rank ran on."""
    return environ.get("SLURMD_NODENAME") or socket.gethostname()


def interface_names(environ: Mapping[str, str]) -> list[str]:
    """The network interface(s) the collectives use: NCCL's or gloo's ``*_SOCKET_IFNAME`` when set
    (what the user pinned), else the interface of the default route in ``/proc/net/route``."""
    for key in ("NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME"):
        if environ.get(key):
            return [name for name in environ[key].split(",") if name]
    try:
        if not ROUTE_TABLE.is_file():
            return []
        with ROUTE_TABLE.open(encoding="ascii", errors="replace") as handle:
            lines = handle.read(MAX_ROUTE_BYTES).splitlines()[1:]
    except OSError:
        return []
    return sorted(
        {
            fields[0]
            for fields in (line.split() for line in lines)
            if len(fields) > 2 and fields[1] == "00000000"
        }
    )


def gpu_uuid(local_rank: int) -> str | None:
    """This rank's GPU UUID (``torch.cuda.get_device_properties(i).uuid``), None without CUDA."""
    import torch

    if not torch.cuda.is_available():
        return None
    uuid = getattr(torch.cuda.get_device_properties(local_rank), "uuid", None)
    return None if uuid is None else f"GPU-{uuid}"


def rank_placement(
    rank: int, node: int, local_rank: int, environ: Mapping[str, str] | None = None
) -> dict[str, Any]:
    """One rank's entry in ``env.json``'s ``ranks`` list (the device is added by the worker)."""
    environ = os.environ if environ is None else environ
    return {
        "rank": rank,
        "node": node,
        "local_rank": local_rank,
        "hostname": socket.gethostname(),
        "node_name": node_name(environ),
        "gpu_uuid": gpu_uuid(local_rank),
        "nics": interface_names(environ),
        "slurm_job_id": environ.get("SLURM_JOB_ID"),
    }
