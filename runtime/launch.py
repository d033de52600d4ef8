"""Start a measured run of a scenario with torchrun and report how it ended.

``launch`` checks the plan against the ranks it will start, writes ``RUN/scenario.toml`` (node 0),
then runs the real launcher, ``python -m torch.distributed.run ... -m plancast.runtime.worker``, as a
subprocess: one node with ``--standalone``, several through the c10d rendezvous (start ``launch``
once per node with the same ``rdzv_endpoint``). The launcher's output is streamed to stderr. When
the job fails or runs past ``timeout_s``, ``launch`` names the failed ranks from torchrun's failure
summary (or from the ranks whose results are missing) and writes ``measured/summary.json`` with
``status = "failed"`` and the steps each rank finished; the rank files are left as they are.

Importing this module does not import torch, so the CLI stays quick.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import signal
import subprocess
import sys
import threading
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import IO, Any

import plancast
from plancast.runtime.plan import PlanError, check_runtime_support
from plancast.simulator.loader import ScenarioError, load_scenario, to_toml_dict
from plancast.simulator.scenario import Scenario
from plancast.traces.store import RunDir, atomic_open, read_measured, write_json

IMPORT_ROOT = Path(plancast.__file__).resolve().parent.parent
"""The folder holding the ``plancast`` package (the source tree or site-packages): the workers' PYTHONPATH."""
MONITOR_INTERVAL_S = 0.5
"""How often torchrun checks its workers: a dead rank stops the job within about this long."""
TERMINATE_GRACE_S = 10.0
"""After a timeout, how long torchrun gets to stop its workers before everything is killed."""
TIMEOUT_EXIT_CODE = 124
"""Exit code of a run stopped at ``timeout_s`` (as coreutils ``timeout``)."""


class LaunchError(ValueError):
    """A launch that cannot start as asked; the message names the option or key to change."""


@dataclass(frozen=True)
class LaunchPlan:
    """How many ranks to start where: the part of a launch that can be checked without starting it."""

    world_size: int
    nnodes: int
    nproc_per_node: int
    node_rank: int
    steps: int
    rdzv_endpoint: str | None


@dataclass(frozen=True)
class RankFailure:
    """One entry of torchrun's failure summary."""

    rank: int
    local_rank: int
    host: str
    exitcode: int
    signal: str | None
    root_cause: bool

    def describe(self) -> str:
        how = f"killed by {self.signal}" if self.signal else f"exit code {self.exitcode}"
        return f"{how}, on {self.host}"


def plan_launch(
    scenario: Scenario,
    *,
    nproc_per_node: int | None,
    steps: int | None,
    nnodes: int,
    node_rank: int,
    rdzv_endpoint: str | None,
) -> LaunchPlan:
    """Check the launch options against the scenario (pure); LaunchError says what to change."""
    world = scenario.tp * scenario.pp * scenario.dp
    need = f"tp*pp*dp = {scenario.tp}*{scenario.pp}*{scenario.dp} = {world}"
    if nnodes < 1:
        raise LaunchError(f"--nnodes must be at least 1, got {nnodes}")
    if not 0 <= node_rank < nnodes:
        raise LaunchError(f"--node-rank must be in 0..{nnodes - 1} for --nnodes {nnodes}, got {node_rank}")
    if nnodes > 1 and not _is_endpoint(rdzv_endpoint):
        raise LaunchError(
            f"--nnodes {nnodes} needs --rdzv-endpoint HOST:PORT (the same on every node, reachable from all)"
        )
    if nproc_per_node is None:
        if world % nnodes:
            raise LaunchError(
                f"the scenario needs {need} ranks, which {nnodes} nodes cannot share evenly; "
                "change --nnodes or the parallelism degrees"
            )
        nproc_per_node = world // nnodes
    if nproc_per_node < 1 or nnodes * nproc_per_node != world:
        raise LaunchError(
            f"the scenario needs {need} ranks, but --nnodes {nnodes} x --nproc-per-node {nproc_per_node} "
            f"= {nnodes * nproc_per_node} would start; pass --nproc-per-node {world // nnodes or 1}"
            f"{'' if world % nnodes == 0 else ' with another --nnodes'}, or change "
            "parallelism.data_parallel_degree / cluster.gpus_per_node in the scenario"
        )
    try:
        check_runtime_support(scenario, world)
    except PlanError as err:
        raise LaunchError(str(err)) from err
    steps = scenario.training.steps if steps is None else steps
    if steps < 1:
        raise LaunchError(f"--steps must be at least 1, got {steps}")
    return LaunchPlan(world, nnodes, nproc_per_node, node_rank, steps, rdzv_endpoint)


def _is_endpoint(value: str | None) -> bool:
    return value is not None and re.fullmatch(r"[^:\s]+:\d+", value) is not None


def torchrun_command(
    plan: LaunchPlan, scenario_path: Path, out_dir: Path, *, timeout_s: float, rdzv_id: str
) -> list[str]:
    """The torchrun command line of this node (pure): ``--standalone`` on one node, else c10d."""
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nnodes", str(plan.nnodes)]
    cmd += ["--nproc-per-node", str(plan.nproc_per_node)]
    if plan.nnodes == 1:
        cmd += ["--standalone"]
    else:
        if plan.rdzv_endpoint is None:
            raise LaunchError(f"--nnodes {plan.nnodes} needs --rdzv-endpoint HOST:PORT")
        # c10d assigns node and global ranks in join order (torchrun ignores --node-rank with it);
        # node_rank only decides which launcher writes scenario.toml and a failed summary.
        cmd += ["--rdzv-backend", "c10d", "--rdzv-endpoint", plan.rdzv_endpoint, "--rdzv-id", rdzv_id]
        cmd += ["--rdzv-conf", f"join_timeout={int(timeout_s)}"]
    cmd += ["--max-restarts", "0", "--monitor-interval", str(MONITOR_INTERVAL_S)]
    cmd += ["-m", "plancast.runtime.worker", "--scenario", str(scenario_path), "--out", str(out_dir)]
    cmd += ["--steps", str(plan.steps), "--timeout-s", str(timeout_s)]
    return cmd


_FAILURE_RE = re.compile(
    r"host\s*:\s*(?P<host>\S+)\s*\n"
    r"\s*rank\s*:\s*(?P<rank>\d+) \(local_rank: (?P<local_rank>\d+)\)\s*\n"
    r"\s*exitcode\s*:\s*(?P<exitcode>-?\d+) \(pid: \d+\)[ \t]*(?:\((?P<signal>SIG\w+)\))?"
)
_ROOT_CAUSE = "Root Cause (first observed failure):"


def parse_failures(output: str) -> list[RankFailure]:
    """The ranks torchrun's failure summary (``ChildFailedError``) lists, root cause first (pure)."""
    root_at = output.rfind(_ROOT_CAUSE)
    failures = [
        RankFailure(
            rank=int(m["rank"]),
            local_rank=int(m["local_rank"]),
            host=m["host"],
            exitcode=int(m["exitcode"]),
            signal=m["signal"],
            root_cause=root_at >= 0 and m.start() > root_at,
        )
        for m in _FAILURE_RE.finditer(output)
    ]
    return sorted(failures, key=lambda f: (not f.root_cause, f.rank))


def is_collateral(failure: RankFailure) -> bool:
    """A rank torchrun itself stopped (SIGTERM) because another rank failed first."""
    return not failure.root_cause and failure.signal == "SIGTERM"


def finished_steps(run: RunDir, world_size: int) -> dict[int, list[int]]:
    """The steps whose events each rank wrote (read back from its rank file; none when unreadable)."""
    events = read_measured(run, world_size).events
    return {
        rank: sorted({int(s) for s in events.loc[events["rank"] == rank, "step"]})
        for rank in range(world_size)
    }


def failure_summary(
    plan: LaunchPlan,
    exit_code: int,
    failures: Sequence[RankFailure],
    steps: dict[int, list[int]],
    reason: str,
) -> dict[str, Any]:
    """The content of ``measured/summary.json`` for a run that did not finish (pure).

    ``failed_ranks`` are the ranks torchrun reports as failed (not the ones it stopped because of
    them); when it reports none (a timeout, a lost node), the ranks that did not finish every step.
    """
    failed = sorted({f.rank for f in failures if not is_collateral(f)})
    if not failed:
        failed = [r for r, done in steps.items() if len(done) < plan.steps]
    return {
        "status": "failed",
        "reason": reason,
        "exit_code": exit_code,
        "world_size": plan.world_size,
        "steps": plan.steps,
        "failed_ranks": failed,
        "failures": [asdict(f) for f in failures],
        "steps_finished": {str(r): done for r, done in steps.items()},
    }


def _forward(stream: IO[str], lines: list[str]) -> None:
    """Copy the launcher's output to our stderr line by line, keeping it for the failure summary."""
    for line in stream:
        lines.append(line)
        sys.stderr.write(line)
        sys.stderr.flush()


def _children(pid: int) -> list[int]:
    """Direct children of ``pid`` (Linux /proc; empty elsewhere): torchrun's workers."""
    try:
        text = Path(f"/proc/{pid}/task/{pid}/children").read_text()
    except OSError:
        return []
    return [int(p) for p in text.split()]


def _kill_job(proc: subprocess.Popen[str]) -> None:
    """Stop torchrun (SIGTERM lets it stop its workers), then SIGKILL what is left.

    torchrun starts each worker in its own session, so the workers' process groups are killed too.
    """
    workers = _children(proc.pid)
    os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(TERMINATE_GRACE_S)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    for pid in workers:
        with contextlib.suppress(ProcessLookupError):  # already gone with torchrun
            os.killpg(pid, signal.SIGKILL)


def run_streaming(cmd: Sequence[str], timeout_s: float) -> tuple[int, str, bool]:
    """Run ``cmd`` in its own process group, streaming its output; ``(exit code, output, timed out)``."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(IMPORT_ROOT), env.get("PYTHONPATH")) if p)
    proc = subprocess.Popen(
        list(cmd),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        errors="replace",
        start_new_session=True,
        env=env,
    )
    assert proc.stdout is not None
    lines: list[str] = []
    reader = threading.Thread(target=_forward, args=(proc.stdout, lines), daemon=True)
    reader.start()
    timed_out = False
    try:
        proc.wait(timeout_s)
    except subprocess.TimeoutExpired:
        timed_out = True
        _kill_job(proc)
    except BaseException:  # Ctrl-C while waiting: never leave the job running
        _kill_job(proc)
        raise
    reader.join(TERMINATE_GRACE_S)
    return (TIMEOUT_EXIT_CODE if timed_out else proc.returncode), "".join(lines), timed_out


def write_scenario(run: RunDir, scenario: Scenario) -> None:
    """``RUN/scenario.toml``: the resolved scenario, every default filled in."""
    import tomli_w

    with atomic_open(run.scenario_toml, "wb") as handle:
        handle.write(tomli_w.dumps(to_toml_dict(scenario)).encode())


def report_failure(
    run: RunDir, plan: LaunchPlan, exit_code: int, output: str, timed_out_after_s: float | None
) -> str:
    """Print which ranks failed and, on node 0, write the failed ``measured/summary.json``; the reason."""
    failures = parse_failures(output)
    for f in failures:
        if is_collateral(f):
            print(
                f"plancast: rank {f.rank} stopped by torchrun ({f.signal}) after the failure", file=sys.stderr
            )
        else:
            print(f"plancast: rank {f.rank} failed ({f.describe()})", file=sys.stderr)
    steps = finished_steps(run, plan.world_size)
    if timed_out_after_s is not None:
        reason = f"timed out after {timed_out_after_s:g} s; every rank was stopped"
    elif any(not is_collateral(f) for f in failures):
        reason = "; ".join(f"rank {f.rank} failed ({f.describe()})" for f in failures if not is_collateral(f))
    else:
        missing = [r for r, done in steps.items() if len(done) < plan.steps]
        reason = f"torchrun exited with code {exit_code}; ranks without every step's results: {missing}"
    if plan.node_rank == 0:
        write_json(run.measured_summary, failure_summary(plan, exit_code, failures, steps, reason))
    done = ", ".join(f"rank {r}: {len(s)}/{plan.steps}" for r, s in steps.items())
    print(f"plancast: run failed: {reason}. Steps written: {done} (in {run.measured_dir})", file=sys.stderr)
    return reason


def launch(
    scenario_path: Path,
    out_dir: Path,
    *,
    nproc_per_node: int | None = None,
    steps: int | None = None,
    nnodes: int = 1,
    node_rank: int = 0,
    rdzv_endpoint: str | None = None,
    timeout_s: float = 600,
    rdzv_id: str = "plancast",
) -> int:
    """Run ``scenario_path`` with torchrun into ``out_dir``; the job's exit code (0: every rank finished).

    Raises LaunchError (or ScenarioError) before starting anything when the options do not fit the
    scenario. On failure the reasons are printed on stderr and node 0 writes a failed summary.
    ``rdzv_id`` must be the same on every node of one multi-node run.
    """
    scenario_path, out_dir = Path(scenario_path).resolve(), Path(out_dir).resolve()
    scenario = load_scenario(scenario_path).scenario
    plan = plan_launch(
        scenario,
        nproc_per_node=nproc_per_node,
        steps=steps,
        nnodes=nnodes,
        node_rank=node_rank,
        rdzv_endpoint=rdzv_endpoint,
    )
    run = RunDir(out_dir)
    if node_rank == 0:
        if run.measured_dir.is_dir() and any(run.measured_dir.iterdir()):
            raise LaunchError(
                f"{run.measured_dir} already holds a measured run; pass another --out or delete that folder"
            )
        write_scenario(run, scenario)
    cmd = torchrun_command(plan, scenario_path, out_dir, timeout_s=timeout_s, rdzv_id=rdzv_id)
    print(
        f"plancast: node {node_rank}/{nnodes}: {plan.nproc_per_node} ranks x {plan.steps} steps -> {out_dir}",
        file=sys.stderr,
    )
    exit_code, output, timed_out = run_streaming(cmd, timeout_s)
    if exit_code == 0:
        print(f"plancast: run finished: {out_dir}", file=sys.stderr)
    else:
        report_failure(run, plan, exit_code, output, timeout_s if timed_out else None)
    return exit_code


def build_parser() -> argparse.ArgumentParser:
    """Options of ``python -m plancast.runtime.launch`` (the same as ``plancast run``)."""
    p = argparse.ArgumentParser(prog="python -m plancast.runtime.launch", description=__doc__.splitlines()[0])
    p.add_argument("scenario", type=Path, help="scenario TOML file")
    p.add_argument("--out", type=Path, required=True, help="run directory (measured/ is written inside)")
    p.add_argument("--steps", type=int, default=None, help="steps to run (default: training.steps)")
    p.add_argument(
        "--nproc-per-node", type=int, default=None, help="ranks per node (default: world size / nnodes)"
    )
    p.add_argument("--nnodes", type=int, default=1, help="nodes taking part (start one launch per node)")
    p.add_argument("--node-rank", type=int, default=0, help="this node's index, 0..nnodes-1")
    p.add_argument("--rdzv-endpoint", default=None, help="HOST:PORT of the rendezvous (nnodes > 1)")
    p.add_argument("--timeout", type=float, default=600.0, help="seconds before the whole job is stopped")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m plancast.runtime.launch``: exit 2 on bad input, else the job's exit code."""
    args = build_parser().parse_args(argv)
    try:
        return launch(
            args.scenario,
            args.out,
            nproc_per_node=args.nproc_per_node,
            steps=args.steps,
            nnodes=args.nnodes,
            node_rank=args.node_rank,
            rdzv_endpoint=args.rdzv_endpoint,
            timeout_s=args.timeout,
        )
    except (LaunchError, ScenarioError) as err:
        print(f"plancast: error: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
