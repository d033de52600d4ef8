"""A real two-node SLURM cluster on this machine, for the tests of `plancast submit`.

One munged, one slurmctld and two slurmd (``slurmd -N n1`` and ``-N n2``, both NodeAddr=127.0.0.1, one
CPU each), every file in a temporary folder: the Debian packages slurm-wlm and munge, configured here,
started as root and stopped by PID. ``scripts/setup_test_deps.sh`` installs the packages; where they
are missing or this is not root, ``start`` says why and the tests skip with that reason.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

NODES = ("n1", "n2")
BINARIES = ("munged", "slurmctld", "slurmd", "sbatch", "srun", "scontrol", "sinfo")
START_TIMEOUT_S = 30


class SlurmUnavailableError(RuntimeError):
    """SLURM cannot run here; the message says why (the tests skip with it)."""


@dataclass(frozen=True)
class SlurmCluster:
    folder: Path
    env: dict[str, str]
    """The environment that reaches this cluster: SLURM_CONF pointing at its slurm.conf."""


def _free_ports(count: int) -> list[int]:
    sockets = [socket.socket() for _ in range(count)]
    try:
        for s in sockets:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


def _config(folder: Path, ports: list[int]) -> str:
    host = socket.gethostname()
    nodes = "\n".join(
        f"NodeName={name} NodeAddr=127.0.0.1 NodeHostname={host} Port={port} CPUs=1 State=UNKNOWN"
        for name, port in zip(NODES, ports[1:], strict=True)
    )
    return f"""ClusterName=plancast-test
SlurmctldHost=localhost(127.0.0.1)
SlurmctldPort={ports[0]}
AuthType=auth/munge
AuthInfo=socket={folder}/munge/munge.socket
CredType=cred/munge
SlurmUser=root
SlurmdUser=root
StateSaveLocation={folder}/state
SlurmdSpoolDir={folder}/spool/%n
SlurmctldPidFile={folder}/slurmctld.pid
SlurmdPidFile={folder}/slurmd-%n.pid
SlurmctldLogFile={folder}/log/slurmctld.log
SlurmdLogFile={folder}/log/slurmd-%n.log
ProctrackType=proctrack/pgid
TaskPlugin=task/none
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
ReturnToService=2
MpiDefault=none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
{nodes}
PartitionName=debug Nodes={",".join(NODES)} Default=YES MaxTime=INFINITE State=UP
"""


def _pids(folder: Path) -> list[int]:
    pids = []
    for path in [folder / "munge" / "munged.pid", folder / "slurmctld.pid"] + [
        folder / f"slurmd-{n}.pid" for n in NODES
    ]:
        try:
            pids.append(int(path.read_text().split()[0]))
        except (OSError, ValueError, IndexError):
            continue
    return pids


def _stop(folder: Path) -> None:
    pids = _pids(folder)
    for pid in pids:
        try:
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            continue
    deadline = time.monotonic() + 10
    for pid in pids:
        while time.monotonic() < deadline:
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                break
            time.sleep(0.1)
        else:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


def _run(cmd: list[str], env: dict[str, str]) -> None:
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=START_TIMEOUT_S, check=False)
    if done.returncode != 0:
        raise SlurmUnavailableError(f"{' '.join(cmd)} failed: {(done.stderr or done.stdout).strip()[-300:]}")


def _wait_idle(env: dict[str, str], folder: Path) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    out = ""
    while time.monotonic() < deadline:
        done = subprocess.run(
            ["sinfo", "-h", "-o", "%T %D"], env=env, capture_output=True, text=True, check=False
        )
        out = done.stdout.strip()
        if out.split()[:2] == ["idle", str(len(NODES))]:
            return
        time.sleep(0.5)
    logs = "".join(p.read_text()[-400:] for p in sorted((folder / "log").glob("*.log")))
    raise SlurmUnavailableError(
        f"the test cluster did not come up in {START_TIMEOUT_S} s (sinfo: {out!r}); logs: {logs}"
    )


@contextmanager
def slurm_cluster(folder: Path) -> Iterator[SlurmCluster]:
    """Start the cluster in ``folder``; stop every daemon by PID on the way out."""
    missing = [b for b in BINARIES if shutil.which(b) is None]
    if missing:
        raise SlurmUnavailableError(
            f"SLURM is not installed ({', '.join(missing)} missing): apt-get install slurm-wlm munge "
            "(scripts/setup_test_deps.sh does it as root)"
        )
    if os.geteuid() != 0:
        raise SlurmUnavailableError("the test cluster's slurmd must run as root (it starts jobs as users)")
    for sub in ("munge", "state", "log", *(f"spool/{n}" for n in NODES)):
        (folder / sub).mkdir(parents=True, exist_ok=True)
    (folder / "munge").chmod(0o700)
    key = folder / "munge" / "munge.key"
    key.write_bytes(os.urandom(1024))
    key.chmod(0o400)
    conf = folder / "slurm.conf"
    conf.write_text(_config(folder, _free_ports(1 + len(NODES))))
    env = {**os.environ, "SLURM_CONF": str(conf)}
    try:
        m = folder / "munge"
        _run(
            [
                "munged", "--force", f"--socket={m}/munge.socket", f"--key-file={key}",
                f"--pid-file={m}/munged.pid", f"--log-file={m}/munged.log", f"--seed-file={m}/seed",
            ],
            env,
        )  # fmt: skip
        _run(["slurmctld", "-f", str(conf)], env)
        for name in NODES:
            _run(["slurmd", "-f", str(conf), "-N", name], env)
        _wait_idle(env, folder)
        yield SlurmCluster(folder, env)
    finally:
        _stop(folder)
