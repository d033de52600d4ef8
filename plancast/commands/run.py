"""`plancast run`: the scenario under torchrun, instrumented, into RUN/measured/."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Annotated

import typer

from plancast.app import ScenarioArg, UserError, app, load, out, user_errors


@app.command("run")
def run(
    scenario: ScenarioArg,
    out_dir: Annotated[
        Path, typer.Option("--out", "-o", help="Run directory to write (measured/ and scenario.toml).")
    ],
    steps: Annotated[int | None, typer.Option(help="Optimizer steps (default: training.steps).")] = None,
    nproc_per_node: Annotated[
        int | None,
        typer.Option("--nproc-per-node", help="Ranks on this node (default: world size / nnodes)."),
    ] = None,
    nnodes: Annotated[int, typer.Option(help="Nodes in the job; run the same command on each node.")] = 1,
    node_rank: Annotated[int, typer.Option("--node-rank", help="This node's index, 0..nnodes-1.")] = 0,
    rdzv_endpoint: Annotated[
        str | None, typer.Option("--rdzv-endpoint", help="HOST:PORT of node 0's rendezvous (multi-node).")
    ] = None,
    rdzv_id: Annotated[str, typer.Option("--rdzv-id", help="Job id, the same on every node.")] = "plancast",
    timeout: Annotated[float, typer.Option(help="Seconds before the whole job is stopped.")] = 600.0,
) -> None:
    """Run the scenario with torchrun (gloo on CPU, NCCL on GPU), instrumented; writes RUN/measured/.

    Exit codes: 0 every rank finished; 2 bad input, a launch this machine cannot hold, another
    writer on RUN, or a failed rank (the paragraph names the first and its log, RUN/logs/); 124 timed
    out; 130 stopped by Ctrl-C or SIGTERM (measured/summary.json says "interrupted").

    Multi-node: on every node run `plancast run S --out RUN --nnodes N --node-rank I --rdzv-endpoint
    NODE0:29500`; each node writes its ranks' files into its own RUN (gather them before comparing)."""
    from plancast.runtime.launch import LaunchError, launch
    from plancast.traces.lock import RunLockedError

    with user_errors():
        load(scenario)  # bad scenarios fail here with key paths, before any process starts
        if timeout <= 0 or not math.isfinite(timeout):
            raise UserError(f"--timeout must be a positive number of seconds, got {timeout:g}")
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
            )
        except (LaunchError, RunLockedError) as e:
            raise UserError(str(e)) from None
    if code != 0:  # the launcher has printed why (one paragraph) and written measured/summary.json
        raise typer.Exit(code)
    out.print(
        f"measured run written to {out_dir}; compare it with `plancast compare {out_dir}`", markup=False
    )
