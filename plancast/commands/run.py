"""`plancast run`: the scenario under torchrun, instrumented, into RUN/measured/."""

from __future__ import annotations

import math
import tempfile
from contextlib import ExitStack
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from plancast.app import UserError, app, check_output_dir, err, load, out, require_extra, user_errors
from plancast.commands.calibrate import NoCacheOpt, measured_local, write_scenario_file

if TYPE_CHECKING:
    from plancast.simulator.scenario import Scenario


def _inputs(
    scenario: Path | None, out_dir: Path | None, steps: int | None, resume: Path | None
) -> tuple[Path, Path, int | None]:
    """(scenario, run directory, steps): as given (`--out` checked), or those of the run `--resume RUN`
    continues."""
    check_output_dir(out_dir, "--out")
    if resume is None:
        if scenario is None or out_dir is None:
            raise UserError("give a SCENARIO and --out RUN (or --resume RUN to continue a killed run)")
        return scenario, out_dir, steps
    if scenario is not None or (out_dir is not None and out_dir.resolve() != resume.resolve()):
        raise UserError("--resume RUN takes the scenario and run directory from RUN: drop SCENARIO and --out")
    from plancast.traces.store import RunDir, read_json_object

    run = RunDir(resume)
    if not run.scenario_toml.exists():
        raise UserError(f"--resume {resume}: no scenario.toml there; pass the directory of a `plancast run`")
    if steps is None and run.measured_summary.exists():  # the killed run's step count
        found = read_json_object(run.measured_summary).get("steps")
        if found is not None and (not isinstance(found, int) or isinstance(found, bool) or found < 1):
            raise UserError(f"{run.measured_summary} has steps {found!r}, not a step count; pass --steps K")
        steps = found
    return run.scenario_toml, resume, steps


def _checked(scenario: Path, timeout: float, no_cache: bool, scratch: ExitStack) -> Path:
    """The scenario file to launch, after every check that needs no process: the scenario itself (key
    paths), the runtime extra, the timeout; local-cpu measured on this machine (written into a temporary
    folder `scratch` removes when the command ends; made only then: a launcher killed with SIGKILL, as
    tests/runtime/test_run_control.py kills one, cannot remove it, and every such kill left an empty
    folder in the system's temporary directory)."""
    loaded = load(scenario)  # bad scenarios fail here with key paths, before any process starts
    require_extra("runtime", "plancast run")
    if timeout <= 0 or not math.isfinite(timeout):
        raise UserError(f"--timeout must be a positive number of seconds, got {timeout:g}")
    _runnable(loaded)
    measured = measured_local(scenario, loaded, no_cache=no_cache)
    if measured is not loaded:  # the run (and RUN/scenario.toml) on this machine's measured cluster
        tmp = Path(scratch.enter_context(tempfile.TemporaryDirectory(prefix="plancast-run-")))
        return write_scenario_file(tmp / scenario.name, measured)
    return scenario


def _runnable(s: Scenario) -> None:
    """On CPU cores, a plan the runtime cannot execute is refused from the scenario alone, before the
    local-cpu microbenchmarks (launch checks it again, after whether this machine can hold the launch);
    a GPU cluster's plan on a machine without CUDA runs on CPU cores over gloo, and says so."""
    from plancast.runtime.plan import PlanError, check_runtime_support

    if s.cluster.gpu.name == "cpu-core":
        try:
            check_runtime_support(s, s.tp * s.pp * s.dp * s.cp)
        except PlanError as e:
            raise UserError(str(e)) from None
        return
    import torch

    if not torch.cuda.is_available():
        err.print(
            f"warning: this machine has no CUDA GPU: the {s.cluster.gpu.name} plan runs on CPU cores over "
            "gloo, so its measured times are this machine's, not the cluster's the prediction is for",
            markup=False,
        )


RdzvEndpointOpt = Annotated[
    str | None, typer.Option("--rdzv-endpoint", help="HOST:PORT of node 0's rendezvous (multi-node).")
]
CheckpointEveryOpt = Annotated[
    int | None,
    typer.Option(
        "--checkpoint-every",
        help="Save model and optimizer (torch.distributed.checkpoint) every K steps into "
        "RUN/checkpoints/, timings and sizes into RUN/measured/checkpoints.json "
        "(default: training.checkpoint_every_steps).",
    ),
]
OversubscribeOpt = Annotated[
    bool,
    typer.Option(
        "--oversubscribe",
        help="Start more CPU ranks than this machine has cores (refused otherwise): ranks share cores, "
        "so the measured times are not meaningful; events, losses and memory still are.",
    ),
]
ResumeOpt = Annotated[
    Path | None,
    typer.Option(
        "--resume", help="Resume the killed run RUN from its newest checkpoint (no SCENARIO or --out)."
    ),
]


@app.command("run")
def run(
    scenario: Annotated[
        Path | None,
        typer.Argument(help="Scenario TOML file (see examples/); omitted with --resume.", show_default=False),
    ] = None,
    out_dir: Annotated[
        Path | None, typer.Option("--out", "-o", help="Run directory to write (measured/ and scenario.toml).")
    ] = None,
    steps: Annotated[int | None, typer.Option(help="Optimizer steps (default: training.steps).")] = None,
    nproc_per_node: Annotated[
        int | None,
        typer.Option("--nproc-per-node", help="Ranks on this node (default: world size / nnodes)."),
    ] = None,
    nnodes: Annotated[int, typer.Option(help="Nodes in the job; run the same command on each node.")] = 1,
    node_rank: Annotated[int, typer.Option("--node-rank", help="This node's index, 0..nnodes-1.")] = 0,
    rdzv_endpoint: RdzvEndpointOpt = None,
    rdzv_id: Annotated[str, typer.Option("--rdzv-id", help="Job id, the same on every node.")] = "plancast",
    timeout: Annotated[float, typer.Option(help="Seconds before the whole job is stopped.")] = 600.0,
    checkpoint_every: CheckpointEveryOpt = None,
    resume: ResumeOpt = None,
    oversubscribe: OversubscribeOpt = False,
    no_cache: NoCacheOpt = False,
) -> None:
    """Run the scenario with torchrun (gloo on CPU, NCCL on GPU), instrumented; writes RUN/measured/.

    Exit codes: 0 every rank finished; 2 bad input, a launch this machine cannot hold, another
    writer on RUN, or a failed rank (the paragraph names the first and its log, RUN/logs/); 124 timed
    out; 130 stopped by Ctrl-C or SIGTERM (measured/summary.json says "interrupted").

    Multi-node: `srun --ntasks-per-node=1 plancast run S --out RUN` in a SLURM job, else --nnodes,
    --node-rank, --rdzv-endpoint on every node (docs/running-on-a-cluster.md)."""
    from plancast.runtime.launch import LaunchError, launch

    with user_errors(), ExitStack() as scratch:
        scenario, out_dir, steps = _inputs(scenario, out_dir, steps, resume)
        scenario = _checked(scenario, timeout, no_cache, scratch)
        if nnodes == 1 and rdzv_endpoint is None:  # inside a SLURM job: its nodes, unless told otherwise
            nnodes, node_rank, rdzv_endpoint, rdzv_id = _slurm_launch(nnodes, node_rank, None, rdzv_id)
        try:
            code = launch(
                scenario,
                out_dir,
                nproc_per_node=nproc_per_node,
                steps=steps,
                nnodes=nnodes,
                node_rank=node_rank,
                rdzv_endpoint=rdzv_endpoint,
                timeout_s=timeout,
                rdzv_id=rdzv_id,
                checkpoint_every=checkpoint_every,
                resume=resume is not None,
                oversubscribe=oversubscribe,
            )
        except LaunchError as e:  # RunLockedError: user_errors() (plancast/app.py)
            raise UserError(str(e)) from None
    if code != 0:  # the launcher has printed why (one paragraph) and written measured/summary.json
        raise typer.Exit(code)
    out.print(
        f"measured run written to {out_dir}; compare it with `plancast compare {out_dir}`", markup=False
    )


def _slurm_launch(
    nnodes: int, node_rank: int, endpoint: str | None, rdzv_id: str
) -> tuple[int, int, str | None, str]:
    """(nnodes, node_rank, rendezvous endpoint, rendezvous id) from the SLURM job this runs in, if any.

    In the batch script of a multi-node job this process does not launch ranks: it starts itself once per
    node under srun and exits with srun's code (runtime/slurm.py)."""
    import os
    import subprocess
    import sys

    from plancast.runtime.slurm import (
        SlurmError,
        check_one_task_per_node,
        rendezvous_endpoint,
        slurm_node,
        srun_command,
    )

    try:
        node = slurm_node(os.environ)
        if node is None or node.nnodes == 1:
            return nnodes, node_rank, endpoint, rdzv_id
        if not node.in_step:
            cmd = srun_command(node, [sys.executable, "-m", "plancast", *sys.argv[1:]])
            err.print(f"plancast: SLURM job {node.job_id}: starting one launcher per node: {' '.join(cmd)}")
            raise typer.Exit(subprocess.call(cmd))
        check_one_task_per_node(node)
        endpoint = rendezvous_endpoint(node, os.environ)
    except SlurmError as e:
        raise UserError(str(e)) from None
    err.print(
        f"plancast: SLURM job {node.job_id}: node {node.node_rank} of {node.nnodes}, rendezvous {endpoint}",
        markup=False,
    )
    return node.nnodes, node.node_rank, endpoint, node.rdzv_id
