"""``plancast run`` inside a SLURM allocation: the node count, this node's index and the rendezvous,
read from the variables SLURM sets (slurm.schedmd.com/sbatch.html#SECTION_OUTPUT-ENVIRONMENT-VARIABLES,
srun.html#SECTION_OUTPUT-ENVIRONMENT-VARIABLES).

Two places ``plancast run`` can start in a job:

- a task of ``srun --ntasks-per-node=1`` (``SLURM_STEP_ID`` set): it is node ``SLURM_NODEID`` of
  ``SLURM_STEP_NUM_NODES``, and launches that node's ranks (``launch.launch``);
- the batch script itself (``SLURM_JOB_ID`` set, no step): with more than one node it starts itself
  again under ``srun`` with one task per node (``srun_command``), which then takes the first case.

The rendezvous is the static one (``runtime.launch``) on the step's first node, at the address
``scontrol show node`` gives for it (``NodeAddr``), port ``MASTER_PORT`` or one derived from the job id,
so every node computes the same endpoint without talking to the others.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

PORT_BASE = 20000
PORT_SPAN = 20000
"""Rendezvous ports 20000..39999, below Linux's ephemeral range (32768+ starts inside it; the job id
spreads jobs over the span so that two jobs sharing a first node rarely collide; MASTER_PORT overrides)."""
SCONTROL_TIMEOUT_S = 30


class SlurmError(ValueError):
    """The SLURM environment cannot run this launch as it is; the message says what to change."""


@dataclass(frozen=True)
class SlurmNode:
    """This task's place in the job, read from SLURM's variables (pure)."""

    job_id: str
    step_id: str | None
    nnodes: int
    node_rank: int
    ntasks: int
    nodelist: str

    @property
    def in_step(self) -> bool:
        """Started by srun (a job step), as opposed to the batch script."""
        return self.step_id is not None

    @property
    def rdzv_id(self) -> str:
        return f"slurm-{self.job_id}-{self.step_id or 'batch'}"


def slurm_node(environ: Mapping[str, str]) -> SlurmNode | None:
    """This process's SLURM job and node, or None outside a SLURM job."""
    job_id = environ.get("SLURM_JOB_ID")
    if not job_id:
        return None
    step_id = environ.get("SLURM_STEP_ID")
    nodes_key = "SLURM_STEP_NUM_NODES" if step_id is not None else "SLURM_JOB_NUM_NODES"
    nodelist_key = "SLURM_STEP_NODELIST" if step_id is not None else "SLURM_JOB_NODELIST"
    try:
        nnodes = int(environ.get(nodes_key) or environ.get("SLURM_NNODES") or "1")
        node_rank = int(environ.get("SLURM_NODEID", "0"))
        ntasks = int(environ.get("SLURM_NTASKS") or nnodes)
    except ValueError as e:
        raise SlurmError(f"a SLURM variable is not an integer ({e}); is this a SLURM job?") from None
    nodelist = environ.get(nodelist_key) or environ.get("SLURM_NODELIST") or ""
    return SlurmNode(job_id, step_id, nnodes, node_rank, ntasks, nodelist)


def check_one_task_per_node(node: SlurmNode) -> None:
    """plancast starts one launcher per node, which starts that node's ranks (torchrun's model)."""
    if node.in_step and node.ntasks != node.nnodes:
        raise SlurmError(
            f"this job step runs {node.ntasks} tasks on {node.nnodes} nodes; plancast run needs exactly one "
            "task per node (it starts each node's ranks itself): use `srun --ntasks-per-node=1 plancast run "
            "...`, or `plancast submit`, which writes that line"
        )


def rendezvous_port(job_id: str, environ: Mapping[str, str]) -> int:
    """``MASTER_PORT`` when set, else PORT_BASE + job id mod PORT_SPAN (the same on every node)."""
    if environ.get("MASTER_PORT"):
        try:
            return int(environ["MASTER_PORT"])
        except ValueError:
            raise SlurmError(f"MASTER_PORT={environ['MASTER_PORT']!r} is not a port number") from None
    digits = re.sub(r"\D", "", job_id) or "0"
    return PORT_BASE + int(digits[-9:]) % PORT_SPAN


def first_host(nodelist: str) -> str:
    """The first node of a SLURM node list (``n[1-2]`` -> ``n1``), via ``scontrol show hostnames``."""
    out = _scontrol("show", "hostnames", nodelist)
    hosts = out.split()
    if not hosts:
        raise SlurmError(f"scontrol show hostnames {nodelist!r} named no host")
    return hosts[0]


def node_address(node_name: str) -> str:
    """The address SLURM reaches ``node_name`` at (``NodeAddr``; the name itself when none is set)."""
    out = _scontrol("show", "node", node_name)
    match = re.search(r"\bNodeAddr=(\S+)", out)
    return match.group(1) if match else node_name


def rendezvous_endpoint(node: SlurmNode, environ: Mapping[str, str]) -> str:
    """HOST:PORT of the static rendezvous: ``MASTER_ADDR`` when set, else the step's first node."""
    host = environ.get("MASTER_ADDR") or node_address(first_host(node.nodelist))
    return f"{host}:{rendezvous_port(node.job_id, environ)}"


def srun_command(node: SlurmNode, argv: Sequence[str]) -> list[str]:
    """The batch script's ``plancast run`` again, once per node of the allocation."""
    return ["srun", f"--nodes={node.nnodes}", "--ntasks-per-node=1", *argv]


def _scontrol(*args: str) -> str:
    exe = shutil.which("scontrol")
    if exe is None:
        raise SlurmError("scontrol is not on PATH; run inside a SLURM job, or set MASTER_ADDR")
    try:
        done = subprocess.run(
            [exe, *args], capture_output=True, text=True, timeout=SCONTROL_TIMEOUT_S, check=False
        )
    except subprocess.TimeoutExpired:
        raise SlurmError(f"scontrol {' '.join(args)} did not answer in {SCONTROL_TIMEOUT_S} s") from None
    if done.returncode != 0:
        raise SlurmError(f"scontrol {' '.join(args)} failed: {done.stderr.strip() or done.returncode}")
    return done.stdout
