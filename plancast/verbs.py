"""The verbs beyond validate/catalog: simulate, sweep, import, run, compare, calibrate, export, dashboard.

Each is a thin wrapper: parse arguments, call one package function, print. Registered on cli.app.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from plancast.cli import ScenarioArg, UserError, app, err, load, out, print_json, user_errors

OutArg = Annotated[
    Path | None, typer.Option("--out", "-o", help="Run directory to write (created if needed).")
]


def _write_predicted(run_path: Path, prediction: Any) -> list[Path]:
    """RUN/scenario.toml, RUN/predicted/{events.parquet, summary.json} and a Chrome trace per rank."""
    import tomli_w

    from simulator.scenario import to_toml_dict
    from traces.chrome import export_chrome
    from traces.store import RunDir, atomic_open, write_events, write_json

    run = RunDir(run_path)
    run.predicted_dir.mkdir(parents=True, exist_ok=True)
    with atomic_open(run.scenario_toml, "wb") as f:
        f.write(tomli_w.dumps(to_toml_dict(prediction.scenario)).encode())
    write_events(run.predicted_events, prediction.events)
    write_json(run.predicted_summary, prediction.summary)
    backend = "gloo" if prediction.scenario.cluster.gpu.name.startswith("cpu") else "nccl"
    return export_chrome(
        prediction.events, run.path / "chrome" / "predicted", prediction.scenario.world_size, backend=backend
    )


def _print_breakdown(summary: dict[str, Any]) -> None:
    from rich.table import Table

    step = summary["step_time_s"]
    table = Table("", "seconds", "share", title=f"Predicted step: {step:.4g} s", title_justify="left")
    rows = [("compute", summary["compute_time_s"])]
    rows += [(f"exposed {k} comm", v) for k, v in summary["exposed_comm_s"].items()]
    rows += [("optimizer", summary["optimizer_time_s"]), ("pipeline bubble", summary["bubble_time_s"])]
    for name, seconds in rows:
        table.add_row(name, f"{seconds:.4g}", f"{seconds / step:.1%}" if step else "-")
    out.print(table)
    mem = summary["memory_gib"]
    fit = "fits" if summary["fits_in_memory"] else "[bold red]does NOT fit[/]"
    out.print(
        f"peak memory {summary['peak_memory_gib']:.2f} GiB of {summary['gpu_memory_gib']:g} GiB ({fit}): "
        + ", ".join(f"{k} {v:.2f}" for k, v in mem.items())
    )
    out.print(
        f"MFU {summary['mfu']:.1%}  model {summary['model_tflops_per_gpu']:.1f} TFLOP/s/GPU  "
        f"hardware {summary['hardware_tflops_per_gpu']:.1f}  tokens/s {summary['tokens_per_s']:.4g}  "
        f"bubble {summary['bubble_fraction']:.1%}  micro-batches {summary['num_microbatches']}"
    )


@app.command()
def simulate(
    scenario: ScenarioArg,
    json_: Annotated[bool, typer.Option("--json", help="Print the summary as one JSON object.")] = False,
    out_dir: OutArg = None,
    full_fidelity: Annotated[
        bool, typer.Option("--full-fidelity", help="Simulate every rank, not one per symmetric class.")
    ] = False,
) -> None:
    """Predict one training step: time breakdown, memory, MFU; optionally write RUN/predicted/."""
    from simulator.predict import simulate as run_simulation

    with user_errors():
        s = load(scenario)
    prediction = run_simulation(s, full_fidelity=full_fidelity, events=out_dir is not None)
    if out_dir is not None:
        files = _write_predicted(out_dir, prediction)
        err.print(
            f"wrote {out_dir}/predicted/ and {len(files)} Chrome trace file(s) in {out_dir}/chrome/predicted "
            f"(open in https://ui.perfetto.dev)",
            markup=False,
        )
    if json_:
        print_json(prediction.summary)
    else:
        _print_breakdown(prediction.summary)


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

    from simulator import importers
    from simulator.scenario import parse_scenario, to_toml_dict

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


@app.command()
def sweep(
    scenario: ScenarioArg,
    gpus: Annotated[
        int, typer.Option("--gpus", help="GPUs to plan for (a multiple of cluster.gpus_per_node).")
    ],
    top: Annotated[int, typer.Option(help="Plans to print.")] = 10,
    finalists: Annotated[int, typer.Option(help="Best estimated plans to run through the full engine.")] = 24,
    json_: Annotated[bool, typer.Option("--json", help="Print the ranked plans as JSON.")] = False,
    table: Annotated[
        Path | None, typer.Option("--table", help="Write every simulated plan to this CSV.")
    ] = None,
) -> None:
    """Search every valid plan (tp, pp, dp, micro-batch, schedule, virtual stages, recompute, SP, ZeRO)."""
    import dataclasses
    import time

    from rich.progress import Progress
    from rich.table import Table

    from simulator.sweep import sweep as run_sweep

    with user_errors():
        s = load(scenario)
        if gpus <= 0:
            raise UserError("--gpus must be positive")
    started = time.perf_counter()
    with Progress(console=err, transient=True) as bar:
        task = bar.add_task("enumerating and ranking plans", total=None)

        def progress(done: int, total: int) -> None:
            bar.update(task, description="simulating finalists", completed=done, total=total)

        try:
            result = run_sweep(s, gpus, finalists=finalists, progress=progress)
        except ValueError as e:
            raise UserError(str(e)) from None
    elapsed = time.perf_counter() - started
    rows = [
        {
            **dataclasses.asdict(r.plan),
            "step_time_s": r.step_time_s,
            "estimate_s": r.estimate_s,
            "peak_memory_gib": r.memory_gib,
            "mfu": (r.summary or {}).get("mfu"),
            "tokens_per_s": (r.summary or {}).get("tokens_per_s"),
        }
        for r in result.finalists
    ]
    if table is not None:
        import pandas as pd

        pd.DataFrame(rows).to_csv(table, index=False)
        err.print(f"wrote {table}", markup=False)
    if json_:
        print_json(
            {
                "plans_enumerated": result.enumerated,
                "plans_fitting": result.fits,
                "seconds": elapsed,
                "plans": rows[:top],
            }
        )
        return
    if not result.finalists:
        err.print(
            f"no plan of {result.enumerated} fits in {s.cluster.gpu.memory_GiB:g} GiB per GPU", markup=False
        )
        raise typer.Exit(1)
    out.print(
        f"{result.enumerated:,} plans enumerated, {result.fits:,} fit in memory, "
        f"{len(result.finalists)} simulated in full ({elapsed:.1f} s)"
    )
    view = Table("#", "plan", "step s", "MFU", "memory GiB", "tokens/s")
    for i, r in enumerate(result.finalists[:top], 1):
        view.add_row(
            str(i),
            r.plan.label(),
            f"{r.step_time_s:.3f}",
            f"{(r.summary or {}).get('mfu', 0):.1%}",
            f"{r.memory_gib:.1f}",
            f"{(r.summary or {}).get('tokens_per_s', 0):,.0f}",
        )
    out.print(view)
