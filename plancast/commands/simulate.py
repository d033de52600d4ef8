"""`plancast simulate` and `plancast sweep`: predict one plan, or search every plan.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from plancast.app import (
    OutArg,
    ScenarioArg,
    UserError,
    app,
    err,
    load,
    out,
    print_json,
    user_errors,
    write_predicted,
)
from plancast.commands.calibrate import NoCacheOpt, measured_local


def print_breakdown(summary: dict[str, Any]) -> None:
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


@app.command("simulate")
def simulate(
    scenario: ScenarioArg,
    json_: Annotated[bool, typer.Option("--json", help="Print the summary as one JSON object.")] = False,
    out_dir: OutArg = None,
    full_fidelity: Annotated[
        bool, typer.Option("--full-fidelity", help="Simulate every rank, not one per symmetric class.")
    ] = False,
    no_cache: NoCacheOpt = False,
) -> None:
    """Predict one training step: time breakdown, memory, MFU; optionally write RUN/predicted/."""
    from plancast.simulator.predict import simulate as run_simulation

    with user_errors():
        s = measured_local(scenario, load(scenario), no_cache=no_cache)
    prediction = run_simulation(s, full_fidelity=full_fidelity, events=out_dir is not None)
    if out_dir is not None:
        files = write_predicted(out_dir, prediction)
        err.print(
            f"wrote {out_dir}/predicted/ and {len(files)} Chrome trace file(s) in {out_dir}/chrome/predicted "
            f"(open in https://ui.perfetto.dev)",
            markup=False,
        )
    if json_:
        print_json(prediction.summary)
    else:
        print_breakdown(prediction.summary)


@app.command("sweep")
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
    import time

    from rich.progress import Progress
    from rich.table import Table

    from plancast.simulator.sweep import sweep as run_sweep

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
    rows = [r.row() for r in result.finalists]
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
