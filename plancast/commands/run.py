"""`plancast run`: the scenario under torchrun, instrumented, into RUN/measured/.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Annotated

import typer

from plancast.app import ScenarioArg, UserError, app, load, out, user_errors
from plancast.commands.calibrate import NoCacheOpt, measured_local, write_scenario_file


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
    no_cache: NoCacheOpt = False,
) -> None:
    """Run the scenario with torchrun (gloo on CPU, NCCL on GPU), instrumented; writes RUN/measured/.

    Multi-node: on every node run `plancast run S --out RUN --nnodes N --node-rank I --rdzv-endpoint
    NODE0:29500`; each node writes its ranks' files into its own RUN (gather them before comparing)."""
    from plancast.runtime.launch import LaunchError, launch

    with user_errors(), tempfile.TemporaryDirectory() as tmp:
        loaded = load(scenario)  # bad scenarios fail here with key paths, before any process starts
        measured = measured_local(scenario, loaded, no_cache=no_cache)
        if measured is not loaded:  # the run (and RUN/scenario.toml) on this machine's measured cluster
            scenario = write_scenario_file(Path(tmp) / scenario.name, measured)
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
        except LaunchError as e:
            raise UserError(str(e)) from None
    if code != 0:
        raise typer.Exit(code)
    out.print(
        f"measured run written to {out_dir}; compare it with `plancast compare {out_dir}`", markup=False
    )
