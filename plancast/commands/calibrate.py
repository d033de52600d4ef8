"""`plancast calibrate`: fit a cluster profile from measured runs and/or microbenchmarks."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from plancast.app import UserError, app, out, require_extra, user_errors


@app.command("calibrate")
def calibrate(
    runs: Annotated[
        list[Path] | None, typer.Argument(help="Measured run(s) to fit the compute model and links on.")
    ] = None,
    output: Annotated[Path, typer.Option("--output", "-o", help="Cluster profile TOML to write.")] = Path(
        "cluster.toml"
    ),
    microbench: Annotated[
        bool, typer.Option(help="Also measure this machine (FLOP/s, memory, gloo links).")
    ] = False,
    world: Annotated[int, typer.Option(help="Processes for the link microbenchmark / the base profile.")] = 2,
) -> None:
    """Fit a cluster profile; use it with `[cluster] preset = "PROFILE.toml"` in a scenario."""
    from plancast.runtime.calibrate import calibrate as fit_profile
    from plancast.runtime.calibrate import write_profile

    with user_errors():
        runs = runs or []
        if not runs and not microbench:
            raise UserError("give measured RUNs to fit, or --microbench to measure this machine (or both)")
        if microbench:
            require_extra("runtime", "plancast calibrate --microbench")
        for run in runs:
            if not (run / "scenario.toml").is_file():
                raise UserError(
                    f"{run}/scenario.toml not found: is {run} a run directory from `plancast run`?"
                )
        try:
            cluster, notes = fit_profile(runs, microbench=microbench, world=world)
        except ValueError as e:
            raise UserError(str(e)) from None
    write_profile(cluster, output, notes)
    for note in notes:
        out.print(note)
    out.print(f'wrote {output}: use it with  [cluster] preset = "{output}"')
