"""`plancast submit`: run a scenario as one SLURM job on N nodes (runtime/submit.py); `plancast gather`."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from plancast.app import UserError, app, check_output_dir, err, load, out, require_extra, user_errors

if TYPE_CHECKING:
    from plancast.runtime.submit import JobRequest


@app.command("submit")
def submit(
    scenario: Annotated[
        Path | None, typer.Argument(help="Scenario TOML file; omitted with --resume.", show_default=False)
    ] = None,
    out_dir: Annotated[
        Path | None, typer.Option("--out", "-o", help="Run directory, on a file system every node sees.")
    ] = None,
    nodes: Annotated[int, typer.Option(help="Nodes to ask SLURM for.")] = 1,
    gpus_per_node: Annotated[
        int | None,
        typer.Option("--gpus-per-node", help="Ranks (GPUs) per node (default: world size / nodes)."),
    ] = None,
    partition: Annotated[str | None, typer.Option(help="SLURM partition (sbatch --partition).")] = None,
    time_limit: Annotated[
        str, typer.Option("--time", help="Time limit: minutes, HH:MM:SS or D-HH:MM (sbatch --time).")
    ] = "60",
    account: Annotated[str | None, typer.Option(help="SLURM account (sbatch --account).")] = None,
    steps: Annotated[int | None, typer.Option(help="Optimizer steps (default: training.steps).")] = None,
    timeout: Annotated[float, typer.Option(help="Seconds before plancast stops the ranks.")] = 600.0,
    setup: Annotated[
        list[str] | None,
        typer.Option(
            "--setup", help="A shell line run before srun (module load, activate a venv); repeatable."
        ),
    ] = None,
    resume: Annotated[
        Path | None, typer.Option("--resume", help="Resubmit the killed run RUN from its newest checkpoint.")
    ] = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Print the job script; submit nothing.")] = False,
    wait: Annotated[bool, typer.Option("--wait", help="Wait for the job; exit with its exit code.")] = False,
) -> None:
    """Submit SCENARIO as one SLURM job of --nodes nodes, one `plancast run` per node under srun.

    Every node writes its ranks into RUN/measured/ (RUN must be on a shared file system; otherwise run
    `plancast gather` on the nodes' folders afterwards). The script is written by submitit and saved as
    RUN/slurm/job.sbatch; SLURM's output goes to RUN/slurm/. Exit codes: 0 submitted (with --wait: the
    job finished), 2 bad input or sbatch refused the job, else the job's own exit code (--wait)."""
    from plancast.runtime.submit import SubmitError, parse_time, sbatch_script

    with user_errors():
        require_extra("cluster", "plancast submit")
        check_output_dir(out_dir, "--out")
        scenario_path, out_dir = _inputs(scenario, out_dir, resume)
        try:
            req = replace(
                _request(scenario_path, out_dir, nodes, gpus_per_node, resume is not None),
                partition=partition, account=account, steps=steps, timeout_s=timeout,
                time_min=parse_time(time_limit), setup=tuple(setup or ()),
            )  # fmt: skip
            script = sbatch_script(req)
        except SubmitError as e:
            raise UserError(str(e)) from None
        if dry_run:
            out.print(script, markup=False, highlight=False, end="")
            return
        code = _submit(req, script, wait, timeout)
    if code:
        raise typer.Exit(code)


def _inputs(scenario: Path | None, out_dir: Path | None, resume: Path | None) -> tuple[Path, Path]:
    """(scenario file, run directory): as given, or those of the run ``--resume RUN`` continues."""
    from plancast.traces.store import RunDir

    if resume is None:
        if scenario is None or out_dir is None:
            raise UserError("give a SCENARIO and --out RUN (or --resume RUN)")
        return scenario, out_dir
    if scenario is not None:
        raise UserError("--resume RUN takes the scenario from RUN: drop SCENARIO")
    if not RunDir(resume).scenario_toml.is_file():
        raise UserError(f"--resume {resume}: no scenario.toml there; pass the folder of a plancast run")
    return RunDir(resume).scenario_toml, resume


def _request(
    scenario_path: Path, out_dir: Path, nodes: int, per_node: int | None, resume: bool
) -> JobRequest:
    """The job for this scenario: ranks per node checked against the plan's world size."""
    from plancast.runtime.submit import JobRequest
    from plancast.traces.store import RunDir

    s = load(scenario_path)
    world = s.tp * s.pp * s.dp * s.cp
    if nodes < 1:
        raise UserError(f"--nodes must be at least 1, got {nodes}")
    per_node = per_node if per_node is not None else max(world // nodes, 1)
    if per_node < 1 or per_node * nodes != world:
        raise UserError(
            f"the scenario needs tp*pp*dp*cp = {world} ranks, but --nodes {nodes} x --gpus-per-node "
            f"{per_node} = {nodes * per_node}; change --nodes/--gpus-per-node or the parallelism degrees"
        )
    measured = RunDir(out_dir).measured_dir
    if not resume and measured.is_dir() and any(measured.iterdir()):
        raise UserError(
            f"{measured} already holds a measured run; pass another --out (or --resume {out_dir})"
        )
    gpus = s.cluster.gpu.name != "cpu-core"  # CPU ranks ask for cores, not GPUs
    return JobRequest(scenario_path, out_dir, nodes, per_node, gpus, resume=resume)


def _submit(req: JobRequest, script: str, wait: bool, timeout_s: float) -> int:
    """sbatch the job; with ``wait``, follow it to its end. The exit code to leave with."""
    from plancast.runtime.submit import SubmitError, lost_nodes, record_lost_nodes, submit, wait_for
    from plancast.traces.store import RunDir

    try:
        job_id = submit(req, script)
    except SubmitError as e:
        raise UserError(str(e)) from None
    out.print(
        f"submitted SLURM job {job_id}: {req.nodes} nodes x {req.ranks_per_node} ranks -> {req.run_dir}",
        markup=False,
    )
    if not wait:
        out.print(f"follow it with `squeue -j {job_id}`; then `plancast compare {req.run_dir}`", markup=False)
        return 0
    try:
        # the ranks' own timeout, plus time for SLURM to schedule and start the job
        state, code = wait_for(
            job_id, RunDir(req.run_dir), timeout_s + 300, say=lambda m: err.print(m, markup=False)
        )
    except SubmitError as e:
        raise UserError(str(e)) from None
    out.print(f"job {job_id} ended: {state}, exit code {code}", markup=False)
    lost = lost_nodes(RunDir(req.run_dir), job_id, req.nodes, req.ranks_per_node)
    if lost:
        err.print(
            f"plancast: job {job_id}: {record_lost_nodes(RunDir(req.run_dir), lost)}; finished steps "
            f"are kept in {req.run_dir}/measured; continue with `plancast submit --resume {req.run_dir} "
            f"--nodes {req.nodes}`",
            markup=False,
        )
        return code or 2
    return code


@app.command("gather")
def gather(
    run: Annotated[Path, typer.Argument(help="The run folder to complete (node 0's, or a new one).")],
    nodes: Annotated[
        list[Path], typer.Argument(help="The other nodes' run folders (copied or mounted here).")
    ],
) -> None:
    """Merge the run folders of a multi-node run that had no shared file system into RUN.

    Copies each node's rank files, logs and (from node 0) scenario.toml, env.json and summary.json;
    refuses a file two folders hold with different contents (exit 2), never overwrites one."""
    from plancast.traces.gather import GatherError
    from plancast.traces.gather import gather as gather_runs
    from plancast.traces.lock import RunLock, RunLockedError
    from plancast.traces.store import RunDir, measured_world_size

    with user_errors():
        try:
            run.mkdir(parents=True, exist_ok=True)
            with RunLock(run, "plancast gather"):
                report = gather_runs(run, nodes)
        except (GatherError, RunLockedError) as e:
            raise UserError(str(e)) from None
    world = measured_world_size(RunDir(run))
    missing = [] if world is None else [r for r in range(world) if r not in report.ranks]
    out.print(
        f"gathered {len(report.copied)} files into {run} ({len(report.same)} already there); ranks "
        f"{report.ranks[0]}..{report.ranks[-1]}" + (f"; still missing ranks {missing}" if missing else ""),
        markup=False,
    )
    if missing:
        raise typer.Exit(2)
