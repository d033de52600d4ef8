"""Start a measured run of a scenario with torchrun and report how it ended.

``launch`` checks the plan against the ranks it will start and against this machine (GPUs, cores,
memory), takes the run directory's lock (one writer), writes ``RUN/scenario.toml`` (node 0), then
runs the real launcher, ``python -m torch.distributed.run ... -m plancast.runtime.worker``, as a
subprocess (``runtime.process``): one node through a c10d store on loopback, several through the static
rendezvous (start ``launch`` once per node with the same ``rdzv_endpoint`` and its own ``node_rank``;
under SLURM both come from the allocation, ``runtime.slurm``), so global ranks follow node order.
Each rank logs to ``RUN/logs/rank-NNNNN.log``, torchrun to ``RUN/logs/torchrun.log`` (node 0; node
k to ``torchrun-nodeK.log``). When the job fails, runs past ``timeout_s`` or is stopped, ``launch``
prints one paragraph naming the rank that failed first, its error and its log, and writes
``measured/summary.json`` with ``status = "failed"`` (or ``"interrupted"``) and the steps each rank
finished; the rank files are left as they are.

Importing this module does not import torch, so the CLI stays quick.
"""

from __future__ import annotations

import argparse
import re
import sys
import uuid
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from plancast.runtime.checkpoint import checkpoint_arguments
from plancast.runtime.failures import (
    RankFailure,
    first_failure,
    is_collateral,
    last_error_line,
    parse_failures,
    read_rank_errors,
)
from plancast.runtime.machine import Machine, check_machine, oversubscribed, this_machine
from plancast.runtime.plan import PlanError, check_runtime_support
from plancast.runtime.process import TIMEOUT_EXIT_CODE, Stopped, run_streaming, stop_on_signals
from plancast.simulator.loader import ScenarioError, load_scenario, to_toml_dict
from plancast.simulator.scenario import Scenario
from plancast.traces.lock import LOCK_NAME, RunLock, RunLockedError
from plancast.traces.rank_stream import finalize_streams
from plancast.traces.store import RunDir, atomic_open, read_measured, write_json

MONITOR_INTERVAL_S = 0.5
"""How often torchrun checks its workers: a dead rank stops the job within about this long."""
FAILED_EXIT_CODE = 2
"""Exit code of a run in which a rank failed (``plancast``'s code for "fix something and re-run")."""
INTERRUPTED_EXIT_CODE = 130
"""Exit code of a run stopped by Ctrl-C or SIGTERM (128 + SIGINT, as shells report it)."""


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
    world = scenario.tp * scenario.pp * scenario.dp * scenario.cp
    need = f"tp*pp*dp = {scenario.tp}*{scenario.pp}*{scenario.dp} = {world}"
    if scenario.cp > 1:
        need = f"tp*pp*dp*cp = {scenario.tp}*{scenario.pp}*{scenario.dp}*{scenario.cp} = {world}"
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
        # What --standalone does (a c10d store on a free port, a fresh job id), but bound to loopback
        # rather than every interface: a single-node job is nobody else's business.
        cmd += ["--rdzv-backend", "c10d", "--rdzv-endpoint", "127.0.0.1:0", "--rdzv-id", rdzv_id]
    else:
        if plan.rdzv_endpoint is None:
            raise LaunchError(f"--nnodes {plan.nnodes} needs --rdzv-endpoint HOST:PORT")
        # The static rendezvous: global rank = node_rank x nproc_per_node + local_rank, the order the
        # mesh (simulator/mesh.py) assumes, so tensor parallel lands inside a node. c10d would assign
        # node ranks in join order and ignore --node-rank (torch/distributed/run.py, get_rdzv_endpoint and
        # the rank config it sets only for "static"). Node 0's agent hosts the store at the endpoint.
        cmd += ["--rdzv-backend", "static", "--rdzv-endpoint", plan.rdzv_endpoint, "--rdzv-id", rdzv_id]
        cmd += ["--node-rank", str(plan.node_rank)]
    # torchrun's own per-attempt folders (its workers' error files) inside the run's logs, not a fresh
    # torchelastic_* folder in the system's temporary directory that nothing removes (torch/distributed/
    # elastic/multiprocessing/api.py: a mkdtemp when no log dir is given)
    cmd += ["--log-dir", str(out_dir / "logs" / "torchelastic")]
    cmd += ["--max-restarts", "0", "--monitor-interval", str(MONITOR_INTERVAL_S)]
    cmd += ["-m", "plancast.runtime.worker", "--scenario", str(scenario_path), "--out", str(out_dir)]
    cmd += ["--steps", str(plan.steps), "--timeout-s", str(timeout_s)]
    return cmd


def finished_steps(run: RunDir, world_size: int) -> tuple[dict[int, list[int]], list[float]]:
    """The steps whose events each rank wrote (read back from its rank file; none when unreadable), and
    the seconds of each step from the first that every rank finished, read from the events: the end of
    the step's last event on its slowest rank (events start at the rank's step start, so this is the
    step start to the end of its work, as the worker's step_times_s of a finished run)."""
    events = read_measured(run, world_size).events
    steps = {
        rank: sorted({int(s) for s in events.loc[events["rank"] == rank, "step"]})
        for rank in range(world_size)
    }
    everyone = set.intersection(*(set(done) for done in steps.values())) if steps else set()
    leading = next((k for k in range(len(everyone) + 1) if k not in everyone), 0)
    ends_us = (events["start_us"] + events["dur_us"]).groupby(events["step"]).max()
    return steps, [float(ends_us[k]) / 1e6 for k in range(leading)]


def failure_summary(
    plan: LaunchPlan,
    exit_code: int,
    failures: Sequence[RankFailure],
    steps: dict[int, list[int]],
    reason: str,
    status: str = "failed",
    first_failed_rank: int | None = None,
    step_times_s: Sequence[float] = (),
) -> dict[str, Any]:
    """The content of ``measured/summary.json`` for a run that did not finish (pure).

    ``status`` is ``failed``, or ``interrupted`` when the run was stopped (Ctrl-C, SIGTERM);
    ``first_failed_rank`` the rank that failed first (``runtime.failures.first_failure``).
    ``failed_ranks`` are the ranks torchrun reports as failed (not the ones it stopped because of
    them); when it reports none (a timeout, a lost node, an interrupt), the ranks that did not
    finish every step.
    """
    failed = sorted({f.rank for f in failures if not is_collateral(f)})
    if not failed:
        failed = [r for r, done in steps.items() if len(done) < plan.steps]
    return {
        "status": status,
        "reason": reason,
        "exit_code": exit_code,
        "world_size": plan.world_size,
        "steps": plan.steps,
        "failed_ranks": failed,
        "first_failed_rank": first_failed_rank,
        "failures": [asdict(f) for f in failures],
        "steps_finished": {str(r): done for r, done in steps.items()},
        "step_times_s": list(step_times_s),  # of the steps every rank finished, from their events
    }


def write_scenario(run: RunDir, scenario: Scenario) -> None:
    """``RUN/scenario.toml``: the resolved scenario, every default filled in."""
    import tomli_w

    with atomic_open(run.scenario_toml, "wb") as handle:
        handle.write(tomli_w.dumps(to_toml_dict(scenario)).encode())


def report_failure(run: RunDir, plan: LaunchPlan, exit_code: int, output: str, ended: str | None) -> str:
    """Print one paragraph on why the run ended early and, on node 0, write ``measured/summary.json``.

    ``ended`` is None for a failed job, else how it was stopped (a timeout, Ctrl-C, SIGTERM)."""
    failures = parse_failures(output)
    steps, step_times_s = finished_steps(run, plan.world_size)
    first = first_failure(failures, read_rank_errors(run, plan.world_size))
    log_hint = f"full logs: {run.logs_dir}/rank-NNNNN.log and torchrun.log"
    if ended is not None:
        reason = ended
    elif first is not None:
        rank, how = first
        error = last_error_line(run.rank_log(rank))
        reason = f"rank {rank} failed first ({how})" + (f"; its last error: {error}" if error else "")
        log_hint = f"its full log: {run.rank_log(rank)} (every rank's and torchrun's in {run.logs_dir})"
    else:
        missing = [r for r, done in steps.items() if len(done) < plan.steps]
        reason = f"torchrun exited with code {exit_code}; ranks without every step's results: {missing}"
    status = "interrupted" if ended is not None and not ended.startswith("timed out") else "failed"
    if plan.node_rank == 0:
        first_rank = first[0] if first is not None and ended is None else None
        summary = failure_summary(plan, exit_code, failures, steps, reason, status, first_rank, step_times_s)
        write_json(run.measured_summary, summary)
    done = ", ".join(f"rank {r}: {len(s)}/{plan.steps}" for r, s in list(steps.items())[:8])
    more = f" and {len(steps) - 8} more ranks" if len(steps) > 8 else ""
    print(
        f"plancast: run {status}: {reason}. Finished steps are kept in {run.measured_dir} ({done}{more}); "
        f"{log_hint}.",
        file=sys.stderr,
    )
    return reason


def check_this_machine(
    scenario: Scenario, plan: LaunchPlan, machine: Machine | None = None, *, oversubscribe: bool = False
) -> None:
    """LaunchError when this node cannot hold its ranks (GPUs, cores, memory); see ``runtime.machine``.
    ``oversubscribe``: more CPU ranks than cores may start (said on stderr: their timings mean nothing)."""
    from plancast.simulator.costs.memory import peak_memory

    machine = machine or this_machine()
    fix = (
        "run a smaller scenario (fewer ranks: cluster.num_nodes x cluster.gpus_per_node; a smaller "
        "model), or spread the ranks over more machines with --nnodes N --node-rank I"
    )
    ranks = plan.nproc_per_node
    why = check_machine(machine, ranks, 0.0, fix, oversubscribe=oversubscribe)  # before any simulation
    if why is None and not machine.gpus:
        rank_GiB = peak_memory(scenario)[1].total / 1024**3
        why = check_machine(machine, ranks, rank_GiB, fix, oversubscribe=oversubscribe)
    if why is not None:
        raise LaunchError(f"this run cannot start on this machine: {why}")
    if oversubscribed(machine, ranks):
        _say(
            f"plancast: warning: {ranks} ranks share this machine's {machine.cpu_cores} core(s) "
            "(--oversubscribe): the measured times are not meaningful; the events and losses are"
        )


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
    rdzv_id: str | None = None,
    checkpoint_every: int | None = None,
    resume: bool = False,
    oversubscribe: bool = False,
) -> int:
    """Run ``scenario_path`` with torchrun into ``out_dir``; the job's exit code (0: every rank finished).

    Raises LaunchError, ScenarioError or RunLockedError before starting anything when the options
    do not fit the scenario or this machine, or another process writes ``out_dir``. A failed job
    returns ``FAILED_EXIT_CODE``, a timeout ``TIMEOUT_EXIT_CODE``, Ctrl-C/SIGTERM
    ``INTERRUPTED_EXIT_CODE``: each after one paragraph on stderr and, on node 0, a summary.
    ``rdzv_id``: the same on every node of one run; ``oversubscribe``: more CPU ranks than cores."""
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
    check_this_machine(scenario, plan, oversubscribe=oversubscribe)  # first: the bigger problem
    try:
        check_runtime_support(scenario, plan.world_size)
    except PlanError as err:
        raise LaunchError(str(err)) from err
    run = RunDir(out_dir)
    try:
        cmd_extra = checkpoint_arguments(scenario, run, checkpoint_every, resume, say=_say)
    except ValueError as e:
        raise LaunchError(str(e)) from None
    lock = LOCK_NAME if node_rank == 0 else f".plancast-node{node_rank}.lock"
    with RunLock(out_dir, "plancast run", lock), stop_on_signals():
        if node_rank == 0 and not resume:
            if run.measured_dir.is_dir() and any(run.measured_dir.iterdir()):
                raise LaunchError(
                    f"{run.measured_dir} already holds a measured run; pass another --out or delete "
                    "that folder"
                )
            write_scenario(run, scenario)
        job_id = rdzv_id or ("plancast" if nnodes > 1 else f"plancast-{uuid.uuid4().hex[:12]}")
        cmd = torchrun_command(plan, scenario_path, out_dir, timeout_s=timeout_s, rdzv_id=job_id) + cmd_extra
        print(
            f"plancast: node {node_rank}/{nnodes}: {plan.nproc_per_node} ranks x {plan.steps} steps "
            f"-> {out_dir}",
            file=sys.stderr,
        )
        return write_node_report(run, plan, _run_job(run, plan, cmd, timeout_s))


def node_report_path(run: RunDir, node_rank: int) -> Path:
    """``RUN/logs/node-K.json``: how node K's launcher ended; a node without one was lost."""
    return run.logs_dir / f"node-{node_rank}.json"


def write_node_report(run: RunDir, plan: LaunchPlan, exit_code: int) -> int:
    """This node's launcher's last word: its exit code and ranks. A node killed with its launcher (or
    whose host went down) leaves none, which is how a multi-node job names the node it lost. Returns
    ``exit_code``."""
    import os
    import socket

    first = plan.node_rank * plan.nproc_per_node
    write_json(
        node_report_path(run, plan.node_rank),
        {
            "node_rank": plan.node_rank,
            "node_name": os.environ.get("SLURMD_NODENAME") or socket.gethostname(),
            "hostname": socket.gethostname(),
            "ranks": list(range(first, first + plan.nproc_per_node)),
            "exit_code": exit_code,
            "slurm_job_id": os.environ.get("SLURM_JOB_ID"),
        },
    )
    return exit_code


def _say(line: str) -> None:
    print(line, file=sys.stderr)


def _run_job(run: RunDir, plan: LaunchPlan, cmd: Sequence[str], timeout_s: float) -> int:
    try:
        log = "torchrun.log" if plan.node_rank == 0 else f"torchrun-node{plan.node_rank}.log"
        exit_code, output, timed_out = run_streaming(cmd, timeout_s, run.logs_dir / log)
    except (KeyboardInterrupt, Stopped) as stop:
        _finalize(run)
        how = "Ctrl-C" if isinstance(stop, KeyboardInterrupt) else str(stop)
        report_failure(run, plan, INTERRUPTED_EXIT_CODE, "", f"stopped by {how}; every rank was stopped")
        return INTERRUPTED_EXIT_CODE
    _finalize(run)
    if exit_code == 0:
        print(f"plancast: run finished: {run.path}", file=sys.stderr)
        return 0
    ended = f"timed out after {timeout_s:g} s; every rank was stopped" if timed_out else None
    report_failure(run, plan, exit_code, output, ended)
    return TIMEOUT_EXIT_CODE if timed_out else FAILED_EXIT_CODE


def _finalize(run: RunDir) -> None:
    """The streams of ranks that never closed them (killed, crashed, stopped) become their parquet
    files: a failed run keeps every finished step in the usual place (traces/rank_stream.py)."""
    for problem in finalize_streams(run):
        print(f"plancast: warning: {problem}", file=sys.stderr)


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
    p.add_argument(
        "--oversubscribe", action="store_true", help="start more CPU ranks than cores (timings meaningless)"
    )
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
            oversubscribe=args.oversubscribe,
        )
    except (LaunchError, ScenarioError, RunLockedError) as err:
        print(f"plancast: error: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
