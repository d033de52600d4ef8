"""`plancast import` (HF, Megatron-LM, DeepSpeed configs -> scenario) and `plancast import-kineto`."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from plancast.app import UserError, app, err, load, out, user_errors, write_predicted


@app.command("import")
def import_(
    kind: Annotated[str, typer.Argument(help="hf | megatron | deepspeed")],
    path: Annotated[
        Path, typer.Argument(help="config.json, a file of Megatron-LM arguments, or a DeepSpeed JSON")
    ],
    output: Annotated[
        Path | None, typer.Option("--out", "-o", help="Scenario TOML to write (default: stdout)")
    ] = None,
    cluster: Annotated[str, typer.Option(help="Cluster preset for the scenario")] = "dgx-a100-80gb",
) -> None:
    """Turn another tool's configuration into a plancast scenario TOML."""
    import tomli_w

    from plancast.simulator import importers
    from plancast.simulator.loader import parse_scenario, to_toml_dict

    with user_errors():
        if kind not in ("hf", "megatron", "deepspeed"):
            raise UserError(f"unknown import kind {kind!r}; choose hf, megatron or deepspeed")
        try:
            data = importers.import_file(kind, path)  # type: ignore[arg-type]
        except (ValueError, OSError) as e:
            raise UserError(str(e)) from None
        data.setdefault("cluster", {"preset": cluster})
        if data["cluster"] == {"preset": "local-cpu"}:
            data["cluster"] = {"preset": cluster}
        loaded = parse_scenario(data, str(path))
    text = tomli_w.dumps(to_toml_dict(loaded.scenario))
    if output is None:
        sys.stdout.write(text)
    else:
        output.write_text(text)
        err.print(f"wrote {output}", markup=False)


@app.command("import-kineto")
def import_kineto(
    trace_dir: Annotated[Path, typer.Argument(help="Folder of PyTorch-profiler JSON traces (one per rank).")],
    out_dir: Annotated[Path, typer.Option("--out", "-o", help="Run directory to create.")],
    scenario: Annotated[
        Path | None, typer.Option(help="Scenario of the job, to predict it alongside.")
    ] = None,
) -> None:
    """Import traces of a job plancast did not launch as RUN/measured/, ready for `plancast compare`."""
    from plancast.traces.kineto import import_kineto as read_traces
    from plancast.traces.store import RankEventWriter, RunDir, write_json

    with user_errors():
        frame = read_traces(trace_dir)
        if frame.empty:
            raise UserError(f"no profiler steps found in {trace_dir}")
        s = load(scenario) if scenario is not None else None
    run = RunDir(out_dir)
    run.measured_dir.mkdir(parents=True, exist_ok=True)
    for rank, events in frame.groupby("rank"):
        writer = RankEventWriter(run, int(rank))
        for _, step in events.groupby("step"):
            writer.append_step(step)
    world = int(frame["rank"].max()) + 1
    write_json(run.env_json, {"world_size": world, "source": f"kineto import of {trace_dir}"})
    if s is not None:
        from plancast.simulator.predict import simulate as run_simulation

        write_predicted(out_dir, run_simulation(s))
    out.print(
        f"imported {len(frame)} events of {world} rank(s), {frame['step'].nunique()} step(s) into {out_dir}"
    )
