"""`plancast import` (HF, Megatron-LM, DeepSpeed configs -> scenario) and `plancast import-kineto`."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from plancast.app import (
    UserError,
    app,
    check_output_dir,
    check_output_file,
    err,
    load,
    out,
    user_errors,
    write_predicted,
)
from plancast.commands.calibrate import measured_local


@app.command("import")
def import_(
    kind: Annotated[str, typer.Argument(help="hf | megatron | deepspeed")],
    path: Annotated[
        Path, typer.Argument(help="config.json, a file of Megatron-LM arguments, or a DeepSpeed JSON")
    ],
    output: Annotated[
        Path | None, typer.Option("--out", "-o", help="Scenario TOML to write (default: stdout)")
    ] = None,
    cluster: Annotated[
        str, typer.Option(help="Cluster preset (`plancast catalog clusters`) or calibrated profile TOML")
    ] = "dgx-a100-80gb",
    model: Annotated[
        str | None,
        typer.Option(help="deepspeed only: the model, as a Hugging Face config.json or a model preset"),
    ] = None,
    num_nodes: Annotated[
        int | None,
        typer.Option(
            "--num-nodes", min=1, help="Nodes of the cluster (default: just enough for tp * pp * dp GPUs)"
        ),
    ] = None,
    force: Annotated[bool, typer.Option("--force", help="Replace the --out file if it exists.")] = False,
) -> None:
    """Turn another tool's configuration into a plancast scenario TOML that `simulate` accepts.

    What the file sets that plancast does not model is listed on stderr as warnings."""
    import tomli_w

    from plancast.simulator.importers import ConfigImportError, imported_scenario
    from plancast.simulator.loader import parse_scenario

    with user_errors():
        check_output_file(output, "--out", force)
        if kind not in ("hf", "megatron", "deepspeed"):
            raise UserError(f"unknown import kind {kind!r}; choose hf, megatron or deepspeed")
        try:
            imported = imported_scenario(
                kind,  # type: ignore[arg-type]
                path,
                cluster=cluster,
                model=model,
                num_nodes=num_nodes,
            )
        except ConfigImportError as e:
            raise UserError(str(e)) from None
        loaded = parse_scenario(imported.scenario, f"the scenario imported from {path}")
    for note in (*imported.warnings, *loaded.warnings):  # after validation: an error comes alone
        err.print(f"warning: {note}", markup=False)
    text = f"# imported from {path.name} by `plancast import {kind}`\n" + tomli_w.dumps(imported.scenario)
    if output is None:
        sys.stdout.write(text)
    else:
        output.write_text(text, encoding="utf-8")
        err.print(f"wrote {output}", markup=False)


@app.command("import-kineto")
def import_kineto(
    trace_dir: Annotated[Path, typer.Argument(help="Folder of PyTorch-profiler JSON traces (one per rank).")],
    out_dir: Annotated[Path, typer.Option("--out", "-o", help="Run directory to create.")],
    scenario: Annotated[
        Path | None, typer.Option(help="Scenario of the job, to predict it alongside.")
    ] = None,
    force: Annotated[
        bool,
        typer.Option(
            "--force",
            help="Replace measured/ of a run that holds one (the previous one is kept as "
            "measured.replaced-TIME/, nothing is deleted).",
        ),
    ] = False,
) -> None:
    """Import traces of a job plancast did not launch as RUN/measured/, ready for `plancast compare`."""
    from plancast.traces.kineto import import_kineto as read_traces
    from plancast.traces.lock import claim

    with user_errors():
        check_output_dir(out_dir, "--out")
        frame = read_traces(trace_dir, say=lambda line: err.print(f"note: {line}", markup=False))
        if frame.empty:
            raise UserError(f"no profiler steps found in {trace_dir}")
        # as `simulate` predicts it: a local-cpu scenario on this machine's measured cluster
        s = measured_local(scenario, load(scenario)) if scenario is not None else None
        lock = claim(out_dir, "plancast import-kineto", "measured/", force)
    with lock:
        kept = write_measured(out_dir, frame, f"kineto import of {trace_dir}")
        if s is not None:
            from plancast.simulator.predict import simulate as run_simulation

            write_predicted(out_dir, run_simulation(s))
    if kept is not None:
        err.print(f"the previous measured/ is kept as {kept}", markup=False)
    world = int(frame["rank"].max()) + 1
    out.print(
        f"imported {len(frame)} events of {frame['rank'].nunique()} rank(s) (world size {world}), "
        f"{frame['step'].nunique()} step(s) into {out_dir}"
    )


def write_measured(out_dir: Path, frame: Any, source: str) -> Path | None:
    """RUN/measured/ holding exactly `frame`'s ranks and their env.json: built in a hidden folder
    beside it, then renamed into place, so a reader sees the old measured/ or the new one, never a
    mix. A measured/ already there is renamed to measured.replaced-TIME/ (kept, returned)."""
    import os
    import tempfile
    import time

    from plancast.traces.store import UMASK, RunDir, write_events, write_json

    run = RunDir(out_dir)
    run.path.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(dir=run.path, prefix=".measured.", suffix=".tmp"))
    try:
        os.chmod(staging, 0o777 & ~UMASK)  # mkdtemp's 0700 would hide a shared run from its readers
        for rank, events in frame.groupby("rank"):  # the names RunDir gives them
            write_events(staging / run.rank_events(int(rank)).name, events.reset_index(drop=True))
        world = int(frame["rank"].max()) + 1
        write_json(staging / "env.json", {"world_size": world, "source": source})
        kept = None
        if run.measured_dir.exists():
            kept = run.path / f"measured.replaced-{time.strftime('%Y%m%dT%H%M%S', time.gmtime())}"
            os.rename(run.measured_dir, kept)
        os.rename(staging, run.measured_dir)
    except BaseException:
        import shutil

        shutil.rmtree(staging, ignore_errors=True)  # our own hidden folder, never the user's files
        raise
    return kept
