"""``plancast submit``: one SLURM batch job that runs a scenario on N nodes into one run directory.

The job script is written by submitit (github.com/facebookincubator/submitit, ``slurm._make_sbatch_string``),
the library Meta's research teams submit SLURM jobs with: its ``#SBATCH`` lines, output paths and the
signal it asks for before the time limit. plancast hands it a plain command line, not a pickled
function: the job runs ``srun --ntasks-per-node=1 python -m plancast run S --out RUN``, which any user
can read, and nothing in RUN is ever unpickled (submitit's own ``submit`` would pickle a callable into
the job folder and load it on the nodes). Each node's ``plancast run`` reads its place from SLURM
(``runtime/slurm.py``) and starts its ranks; global rank = node x ranks per node + local rank.
"""

from __future__ import annotations

import json
import re
import shlex
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from plancast.traces.store import RunDir, write_json

JOB_FOLDER = "slurm"
"""RUN/slurm/: the job script, submitit's per-job output files, job.json."""
TERMINAL_STATES = frozenset(
    {
        "COMPLETED",
        "FAILED",
        "CANCELLED",
        "TIMEOUT",
        "NODE_FAIL",
        "OUT_OF_MEMORY",
        "PREEMPTED",
        "BOOT_FAIL",
        "DEADLINE",
    }
)
"""SLURM job states after which the job does not run again (squeue(1), JOB STATE CODES)."""
SIGNAL_BEFORE_LIMIT_S = 90
"""Seconds before the time limit at which SLURM sends SIGTERM (sbatch --signal; submitit's default delay)."""
POLL_S = 2.0
COMMAND_TIMEOUT_S = 60


class SubmitError(ValueError):
    """The job cannot be written or submitted as asked; the message says what to change."""


@dataclass(frozen=True)
class JobRequest:
    """What to ask SLURM for and what to run (pure data; ``sbatch_script`` turns it into the job)."""

    scenario: Path | None
    """The scenario file; None with ``resume``."""
    run_dir: Path
    nodes: int
    ranks_per_node: int
    gpus: bool
    """Ask for ``--gpus-per-node`` (a GPU cluster); CPU ranks ask for cores instead."""
    steps: int | None = None
    timeout_s: float = 600.0
    partition: str | None = None
    time_min: int = 60
    account: str | None = None
    job_name: str = "plancast"
    resume: bool = False
    setup: tuple[str, ...] = ()
    """Shell lines run before srun (``module load``, ``source venv/bin/activate``)."""


def parse_time(value: str) -> int:
    """SLURM's time formats used for a limit, in whole minutes: ``MM``, ``HH:MM:SS``, ``D-HH[:MM]``."""
    text = value.strip()
    match = re.fullmatch(r"(?:(\d+)-)?(\d+)(?::(\d+))?(?::(\d+))?", text)
    if not match or len(text) > 16:
        raise SubmitError(f"--time {value!r}: give minutes (90) or HH:MM:SS (01:30:00) or D-HH:MM (1-00:00)")
    days, a, b, c = (int(g) if g else None for g in match.groups())
    if days is not None:  # D-HH[:MM[:SS]]
        minutes = days * 1440 + (a or 0) * 60 + (b or 0) + (1 if c else 0)
    elif b is None:  # MM
        minutes = a or 0
    elif c is None:  # MM:SS
        minutes = (a or 0) + (1 if b else 0)
    else:  # HH:MM:SS
        minutes = (a or 0) * 60 + b + (1 if c else 0)
    if minutes < 1:
        raise SubmitError(f"--time {value!r} is under a minute; SLURM limits are in minutes")
    return minutes


def run_command(req: JobRequest, python: str = sys.executable) -> list[str]:
    """The ``plancast run`` each node's task executes (absolute paths: the job starts elsewhere)."""
    cmd = [python, "-m", "plancast", "run"]
    if req.resume:
        cmd += ["--resume", str(req.run_dir.resolve())]
    else:
        assert req.scenario is not None
        cmd += [str(req.scenario.resolve()), "--out", str(req.run_dir.resolve())]
    if req.steps is not None:
        cmd += ["--steps", str(req.steps)]
    cmd += ["--nproc-per-node", str(req.ranks_per_node), "--timeout", f"{req.timeout_s:g}"]
    return cmd


def sbatch_script(req: JobRequest, python: str = sys.executable) -> str:
    """The job script, as submitit writes it for this command (``#SBATCH`` lines, then srun)."""
    from submitit.slurm.slurm import _make_sbatch_string

    folder = req.run_dir.resolve() / JOB_FOLDER
    return _make_sbatch_string(
        command=shlex.join(run_command(req, python)),
        folder=folder,
        job_name=req.job_name,
        partition=req.partition,
        time=req.time_min,
        nodes=req.nodes,
        ntasks_per_node=1,  # one launcher per node; it starts the node's ranks (torchrun's model)
        gpus_per_node=req.ranks_per_node if req.gpus else None,
        cpus_per_task=None if req.gpus else req.ranks_per_node,
        account=req.account,
        setup=list(req.setup) or None,
        # SIGTERM before the time limit (submitit asks for USR2, which would end plancast unrecorded):
        # plancast stops the ranks and records the run as interrupted, keeping every finished step
        additional_parameters={"signal": f"TERM@{SIGNAL_BEFORE_LIMIT_S}"},
        wckey="plancast",
    )


def submit(req: JobRequest, script: str) -> str:
    """Write ``RUN/slurm/job.sbatch`` and ``sbatch`` it; the job id."""
    sbatch = shutil.which("sbatch")
    if sbatch is None:
        raise SubmitError(
            "sbatch is not on PATH: run `plancast submit` on a SLURM login node, or use --dry-run"
        )
    folder = req.run_dir.resolve() / JOB_FOLDER
    folder.mkdir(parents=True, exist_ok=True)
    folder.chmod(0o700)
    path = folder / "job.sbatch"
    path.write_text(script)
    done = _call([sbatch, "--parsable", str(path)])
    if done.returncode != 0:
        raise SubmitError(f"sbatch refused the job: {done.stderr.strip() or done.stdout.strip()}")
    job_id = done.stdout.strip().split(";")[0]
    if not job_id.isdigit():
        raise SubmitError(f"sbatch printed {done.stdout.strip()!r}, not a job id")
    record = {"job_id": job_id, "script": str(path), "nodes": req.nodes, "ranks_per_node": req.ranks_per_node}
    write_json(folder / f"job-{job_id}.json", record)
    return job_id


def job_state(job_id: str) -> tuple[str, int | None]:
    """(state, exit code) of a job from ``scontrol show job`` (works without SLURM accounting)."""
    done = _call(["scontrol", "show", "job", "-o", job_id])
    if done.returncode != 0:
        return "UNKNOWN", None
    state = re.search(r"\bJobState=(\S+)", done.stdout)
    code = re.search(r"\bExitCode=(\d+):(\d+)", done.stdout)
    exit_code = None
    if code is not None:  # ExitCode=EXIT:SIGNAL; a signal is reported as a shell would, 128 + signal
        status, signal = int(code.group(1)), int(code.group(2))
        exit_code = status or (128 + signal if signal else 0)
    return (state.group(1) if state else "UNKNOWN"), exit_code


def wait_for(
    job_id: str, run: RunDir, timeout_s: float, say: Callable[[str], object] = print
) -> tuple[str, int]:
    """Poll until the job ends; (final state, exit code). A job SLURM forgot is judged by its summary."""
    deadline, last = time.monotonic() + timeout_s, ""
    while time.monotonic() < deadline:
        state, code = job_state(job_id)
        if state != last:
            say(f"plancast: job {job_id}: {state}")
            last = state
        if state in TERMINAL_STATES:
            return state, code if code is not None else (0 if state == "COMPLETED" else 1)
        if state == "UNKNOWN" and run.measured_summary.exists():
            status = json.loads(run.measured_summary.read_text()).get("status")
            return "UNKNOWN", 0 if status == "ok" else 2
        time.sleep(POLL_S)
    raise SubmitError(f"job {job_id} still {last} after {timeout_s:g} s; it keeps running (scancel {job_id})")


def _call(cmd: list[str]) -> subprocess.CompletedProcess[str]:
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=COMMAND_TIMEOUT_S, check=False)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise SubmitError(f"{cmd[0]} did not run: {e}") from None


def lost_nodes(run: RunDir, job_id: str, nodes: int, ranks_per_node: int) -> list[dict[str, object]]:
    """The nodes whose launcher ended without its report for job ``job_id`` (``launch.write_node_report``;
    a report of an earlier job of the same run does not count): killed with their ranks, or their host
    went down. Named by ``env.json`` (the node of each rank) where it exists."""
    from plancast.runtime.launch import node_report_path
    from plancast.traces.store import TraceReadError, read_json_object

    names: dict[int, str] = {}
    if run.env_json.is_file():
        try:
            for entry in read_json_object(run.env_json).get("ranks") or []:
                if isinstance(entry, dict) and isinstance(entry.get("rank"), int):
                    names[entry["rank"]] = str(entry.get("node_name") or entry.get("hostname") or "?")
        except (TraceReadError, OSError, ValueError):
            pass
    lost = []
    for node in range(nodes):
        if _reported(node_report_path(run, node), job_id):
            continue
        ranks = list(range(node * ranks_per_node, (node + 1) * ranks_per_node))
        lost.append({"node_rank": node, "node_name": names.get(ranks[0], "?"), "ranks": ranks})
    return lost


def record_lost_nodes(run: RunDir, lost: list[dict[str, object]]) -> str:
    """One sentence naming the lost nodes; also added to ``measured/summary.json`` (``lost_nodes``)."""
    from plancast.traces.store import TraceReadError, read_json_object

    said = "; ".join(f"node {n['node_rank']} ({n['node_name']}, ranks {n['ranks']})" for n in lost)
    sentence = f"lost {said}: its launcher ended without a word (killed, or its host went down)"
    summary: dict[str, Any] = {"status": "failed"}
    try:
        if run.measured_summary.is_file():
            summary = read_json_object(run.measured_summary)
    except (TraceReadError, OSError, ValueError):
        pass
    summary["lost_nodes"] = lost
    summary["reason"] = sentence + (f"; {summary['reason']}" if summary.get("reason") else "")
    write_json(run.measured_summary, summary)
    return sentence


def _reported(path: Path, job_id: str) -> bool:
    from plancast.traces.store import TraceReadError, read_json_object

    try:
        return path.is_file() and read_json_object(path).get("slurm_job_id") == job_id
    except (TraceReadError, OSError, ValueError):
        return False
