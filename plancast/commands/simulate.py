"""`plancast simulate` and `plancast sweep`: predict one plan, or search every plan."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from plancast.app import (
    OutArg,
    ScenarioArg,
    UserError,
    app,
    check_output_dir,
    check_output_file,
    err,
    load,
    out,
    pct,
    print_json,
    sig,
    user_errors,
    write_predicted,
)
from plancast.commands.calibrate import NoCacheOpt, measured_for_sweep, measured_local
from plancast.commands.sweep_output import SaveBestOpt, check_save_best

if TYPE_CHECKING:
    from plancast.simulator.sweep import SweepResult
    from plancast.traces.lock import RunLock


def print_breakdown(summary: dict[str, Any]) -> None:
    from rich.table import Table

    step = summary["step_time_s"]
    table = Table("", "seconds", "share", title=f"Predicted step: {step:.4g} s", title_justify="left")
    rows = [("compute", summary["compute_time_s"])]
    rows += [(f"exposed {k} comm", v) for k, v in summary["exposed_comm_s"].items()]
    rows += [("optimizer", summary["optimizer_time_s"]), ("pipeline bubble", summary["bubble_time_s"])]
    for name, seconds in rows:
        table.add_row(name, f"{seconds:.4g}", pct(seconds / step) if step else "-")
    out.print(table)
    print_memory(summary)
    out.print(
        f"MFU {pct(summary['mfu'])}  model {sig(summary['model_tflops_per_gpu'])} TFLOP/s/GPU  "
        f"hardware {sig(summary['hardware_tflops_per_gpu'])}  tokens/s {sig(summary['tokens_per_s'])}  "
        f"bubble {pct(summary['bubble_fraction'])}  micro-batches {summary['num_microbatches']}"
    )


def print_memory(summary: dict[str, Any]) -> None:
    """Peak memory (allocated and reserved) against usable memory: the GPU's capacity less what is kept
    for the CUDA context, communication buffers and the allocator (simulator/costs/memory_fit.py)."""
    from plancast.simulator.costs.memory_fit import memory_line

    fit = "fits" if summary["fits_in_memory"] else "[bold red]does NOT fit[/]"
    parts = ", ".join(f"{k} {sig(v)}" for k, v in summary["memory_gib"].items())
    out.print(f"{memory_line(summary)} ({fit}): {parts}")


def claim_out(out_dir: Path, force: bool) -> RunLock:
    """The lock of RUN for writing a prediction (traces/lock.py claim): refused while another process
    writes RUN, or when RUN holds a measured run (whose scenario.toml and prediction would be replaced)
    without --force."""
    from plancast.traces.lock import claim

    what = "scenario.toml and predicted/ (compare would then judge the new scenario)"
    return claim(out_dir, "plancast simulate --out", what, force)


def print_goodput(g: dict[str, Any]) -> None:
    """The whole run (training.total_tokens): checkpoints, failures, time, money, energy."""

    def maybe(value: float | None, fmt: str) -> str:
        return "n/a (no catalog value; set it in [cluster.gpu])" if value is None else format(value, fmt)

    days = g["time_to_train_days"]
    out.print(
        f"checkpoint {g['checkpoint_bytes'] / 1e9:.4g} GB, write {g['checkpoint_write_s']:.3g} s, every "
        f"{g['checkpoint_interval_s']:.4g} s ({g['checkpoint_interval_source']}); job MTBF "
        f"{g['job_mtbf_hours']:.3g} h, restart {g['restart_s']:.3g} s",
        markup=False,
    )
    out.print(
        f"goodput {g['goodput_fraction']:.1%}  time to train "
        f"{'never (failures outpace checkpoints)' if days is None else format(days, '.4g') + ' days'}  "
        f"GPU-hours {maybe(g['gpu_hours'], ',.0f')}  cost USD {maybe(g['cost_usd'], ',.0f')}  "
        f"energy MWh {maybe(g['energy_MWh'], ',.4g')}",
        markup=False,
    )


EngineOpt = Annotated[
    str | None,
    typer.Option(
        "--engine",
        help="auto (default: the event-free path where it applies, else SimPy), simpy (always SimPy, the "
        "reference) or event-free (refuse a plan it cannot run); also $PLANCAST_ENGINE (docs/engine.md).",
    ),
]


@app.command("simulate")
def simulate(
    scenario: ScenarioArg,
    json_: Annotated[bool, typer.Option("--json", help="Print the summary as one JSON object.")] = False,
    out_dir: OutArg = None,
    full_fidelity: Annotated[
        bool, typer.Option("--full-fidelity", help="Simulate every rank, not one per symmetric class.")
    ] = False,
    force: Annotated[
        bool,
        typer.Option(
            "--force",
            help="With --out: replace scenario.toml and predicted/ of a run that holds a measured run.",
        ),
    ] = False,
    no_cache: NoCacheOpt = False,
    engine: EngineOpt = None,
) -> None:
    """Predict one training step: time breakdown, memory, MFU; optionally write RUN/predicted/."""
    from contextlib import ExitStack

    from plancast.simulator.goodput import plan_run
    from plancast.simulator.predict import EngineRefusedError, engine_choice
    from plancast.simulator.predict import simulate as run_simulation

    with user_errors():
        try:
            engine = engine_choice(engine)
        except ValueError as e:
            raise UserError(str(e)) from None
        check_output_dir(out_dir, "--out")
        s = measured_local(scenario, load(scenario), no_cache=no_cache)
    with ExitStack() as held:
        if out_dir is not None:
            with user_errors():
                held.callback(claim_out(out_dir, force).release)
        with user_errors():
            try:
                prediction = run_simulation(
                    s, full_fidelity=full_fidelity, events=out_dir is not None, engine=engine
                )
            except EngineRefusedError as e:  # --engine event-free on a plan it does not apply to
                raise UserError(str(e)) from None
        files = write_predicted(out_dir, prediction) if out_dir is not None else []
    if out_dir is not None:
        err.print(
            f"wrote {out_dir}/predicted/ and {len(files)} Chrome trace file(s) in {out_dir}/chrome/predicted "
            f"(open in https://ui.perfetto.dev)",
            markup=False,
        )
    goodput = plan_run(s, prediction.summary["step_time_s"])
    if json_:
        print_json(prediction.summary if goodput is None else {**prediction.summary, "goodput": goodput})
    else:
        print_breakdown(prediction.summary)
        if goodput is not None:
            print_goodput(goodput)


WorkersOpt = Annotated[
    int | None,
    typer.Option(
        "--workers",
        min=1,
        help="Processes to search with (default: every core this process may use); the ranking is the same "
        "for any number.",
    ),
]


FinalistsOpt = Annotated[
    int | None,
    typer.Option(
        min=1,
        help="How many best plans to find exactly (default: --top; 4 per size and cluster when searching "
        "several). The search simulates every plan whose lower bound could beat the last of them.",
    ),
]
ClusterOpt = Annotated[
    str | None,
    typer.Option(
        "--cluster", help="Catalog cluster presets to compare, comma-separated (dgx-a100-80gb,dgx-h100-80gb)."
    ),
]


PinOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--pin",
        help="Fix an axis instead of searching it, AXIS=VALUE[,VALUE...] (repeatable): tp, pp, dp, cp, "
        "ep, etp (0: unfolded; N: folded expert grid with expert tensor parallel N), mb, schedule (1F1B, "
        "Interleaved1F1B, ZeroBubble, GPipe, ZBH2, ZBV, DualPipeV), v, recompute, sp, zero, dispatcher "
        "(alltoall, allgather, deepep, hybridep), overlap (true/false). E.g. --pin schedule=DualPipeV "
        "--pin dispatcher=deepep.",
    ),
]


RankByOpt = Annotated[
    str,
    typer.Option(
        "--rank-by", help="step | time-to-train | cost | energy (the last three need training.total_tokens)."
    ),
]


RunnableOpt = Annotated[
    bool,
    typer.Option(
        "--runnable",
        help="Only plans the scenario's framework runs as given: the pipeline schedules it ships, none of "
        "the settings it refuses (Megatron-Core's EP-overlap rules); the top K is exact over them.",
    ),
]


def _pins(pin: list[str] | None, runnable: bool, framework: str) -> Any:
    """`--pin` values parsed (simulator/sweep_axes.py Pins) with `--runnable`; a bad one, or pinned
    schedules none of which `framework` runs under `--runnable`, is bad input, exit code 2."""
    from plancast.simulator.sweep_axes import Pins

    try:
        pins = replace(Pins.parse(pin or []), runnable=runnable)
        pins.for_framework(framework)
    except ValueError as e:
        raise UserError(str(e)) from None
    return pins


@app.command("sweep")
def sweep(
    scenario: ScenarioArg,
    gpus: Annotated[
        str | None,
        typer.Option(
            "--gpus",
            help="GPUs to plan for (a multiple of cluster.gpus_per_node); a comma list (512,1024,2048) "
            "searches each size. Default: the scenario's cluster (num_nodes x gpus_per_node).",
        ),
    ] = None,
    top: Annotated[int, typer.Option(min=1, help="Plans to print.")] = 10,
    finalists: FinalistsOpt = None,
    cluster: ClusterOpt = None,
    rank_by: RankByOpt = "step",
    json_: Annotated[bool, typer.Option("--json", help="Print the ranked plans as JSON.")] = False,
    table: Annotated[
        Path | None,
        typer.Option("--table", help="Write the exact best plans (--finalists, default --top) to this CSV."),
    ] = None,
    max_memory_gib: Annotated[
        float | None,
        typer.Option("--max-memory-gib", min=0.001, help="Only plans needing at most this many GiB per GPU."),
    ] = None,
    workers: WorkersOpt = None,
    pin: PinOpt = None,
    runnable: RunnableOpt = False,
    save_best: SaveBestOpt = None,
) -> None:
    """Find the exact --top fastest of every valid plan (tp, pp, dp, ep, cp, micro-batch, schedule, virtual
    stages, recompute, SP, ZeRO, layer split, folded etp, dispatcher, EP overlap) for the batch (sweep.md).

    With several --gpus sizes, --cluster presets or a run-level --rank-by, every (cluster, size) is
    searched and all finalists are ranked together, with the time-to-train vs cost Pareto front."""
    from plancast.commands.cluster_sweep import cluster_sweep, parse_gpus
    from plancast.simulator.memory_key_checks import unswept_copies
    from plancast.simulator.sweep_inputs import missing_batch

    with user_errors():
        check_output_file(table, "--table")
        s = load(scenario)
        pins = _pins(pin, runnable, s.parallelism.framework)
        sizes = parse_gpus(_scenario_gpus(s) if gpus is None else gpus)
        check_save_best(save_best)
        problem = missing_batch(s) or unswept_copies(s)
        if problem is not None:
            raise UserError(f"{scenario}: {problem}")
        s = measured_for_sweep(scenario, s)
    if len(sizes) > 1 or cluster is not None or rank_by != "step":
        cluster_sweep(
            s, sizes, cluster, rank_by, finalists=finalists or 4, top=top, json_=json_, table=table,
            max_memory_gib=max_memory_gib, workers=workers, pins=pins, source=scenario,
            save=(save_best, scenario) if save_best is not None else None,
        )
        return
    _single_sweep(
        s, sizes[0], max(finalists or top, top), top=top, json_=json_, table=table,
        max_memory_gib=max_memory_gib, workers=workers, pins=pins,
        save=(save_best, scenario) if save_best is not None else None,
    )


def _scenario_gpus(s: Any) -> str:
    """`sweep`'s --gpus when none is given: the cluster the scenario describes, said so on stderr."""
    world, nodes = s.cluster.world_size, s.cluster.num_nodes
    err.print(
        f"--gpus not given: the scenario's cluster, {world:,} GPU{'s' * (world != 1)} ({nodes:,} "
        f"node{'s' * (nodes != 1)} x {s.cluster.gpus_per_node}); --gpus N plans for another size",
        markup=False,
    )
    return str(world)


def _single_sweep(
    s: Any,
    n_gpus: int,
    finalists: int,
    *,
    top: int,
    json_: bool,
    table: Path | None,
    max_memory_gib: float | None,
    workers: int | None,
    pins: Any,
    save: tuple[Path, Path] | None = None,
) -> None:
    """One cluster, one size: enumerate, rank, simulate the finalists, print (or write) them; `save`:
    (--save-best's path, the scenario's file) to write the best plan to."""
    import time

    from rich.progress import Progress

    from plancast.pool import worker_pool
    from plancast.simulator.sweep import sweep as run_sweep

    started = time.perf_counter()
    with worker_pool(workers) as map_fn, Progress(console=err.console, transient=True) as bar:
        task = bar.add_task("enumerating and ranking plans", total=None)

        def progress(done: int, total: int) -> None:
            bar.update(task, description="simulating plans best bound first", completed=done, total=total)

        try:
            result = run_sweep(
                s, n_gpus, finalists=finalists, progress=progress, max_memory_gib=max_memory_gib,
                map_fn=map_fn, pins=pins,
            )
        except ValueError as e:
            raise UserError(str(e)) from None
    elapsed = time.perf_counter() - started
    _report(s, n_gpus, result, elapsed, top=top, json_=json_, table=table, max_memory_gib=max_memory_gib,
            pins=pins, save=save)  # fmt: skip


def _report(
    s: Any,
    n_gpus: int,
    result: SweepResult,
    elapsed: float,
    *,
    top: int,
    json_: bool,
    table: Path | None,
    max_memory_gib: float | None,
    pins: Any,
    save: tuple[Path, Path] | None,
) -> None:
    """A single-size sweep's output: its CSV table, JSON or printed table, the best plan saved."""
    from plancast.commands.sweep_output import save_best, searched, searched_line
    from plancast.simulator.sweep import planned_scenario

    rows, warned = _rows(s, n_gpus, result)
    if table is not None:
        import pandas as pd

        pd.DataFrame([{**r, "warnings": "; ".join(r["warnings"])} for r in rows]).to_csv(table, index=False)
        err.print(f"wrote {table}", markup=False)
    if json_:
        given = {"gpus": n_gpus, **searched(s, pins, max_memory_gib)}
        print_json({**given, **_sweep_json(result, elapsed, rows[:top])})
    if not result.finalists:  # after the JSON too: a script sees the empty list and exit code 1
        from plancast.simulator.sweep_inputs import why_empty

        limit_gib = min(s.cluster.gpu.memory_GiB, max_memory_gib or s.cluster.gpu.memory_GiB)
        err.print(why_empty(s, n_gpus, result.enumerated, limit_gib, pins), markup=False)
        raise typer.Exit(1)
    if save is not None:
        best = result.finalists[0]
        planned = planned_scenario(s, n_gpus, best.plan)
        save_best(save[0], save[1], planned, best.plan.label(), best.step_time_s or 0.0)
    if not json_:
        if (line := searched_line(s, pins)) is not None:
            out.print(line, markup=False)
        _print_plans(result, top, elapsed, warned)


def _sweep_json(result: SweepResult, elapsed_s: float, rows: list[dict[str, Any]]) -> dict[str, Any]:
    """`sweep --json`: the search's counts (fitting: in the tp degrees grouped) and its ranked plans."""
    return {
        "plans_enumerated": result.enumerated,
        "plans_fitting": result.fits,
        "tp_degrees_not_grouped": [{"tp": d.tp, "floor_s": d.floor_s} for d in result.ungrouped],
        "plans_simulated": result.simulated,
        "plans_refused_exact": result.refused,
        "exact_top": len(result.finalists),
        "seconds": elapsed_s,
        "plans": rows,
    }


def _rows(s: Any, n_gpus: int, result: SweepResult) -> tuple[list[dict[str, Any]], list[list[str]]]:
    """Each finalist's row with what `validate` warns about it (sweep_inputs.plan_warnings), and those."""
    from plancast.simulator.sweep_inputs import plan_warnings

    warned = plan_warnings(s, n_gpus, [r.plan for r in result.finalists])
    return [{**r.row(), "warnings": w} for r, w in zip(result.finalists, warned, strict=True)], warned


def _print_plans(result: SweepResult, top: int, elapsed_s: float, warned: list[list[str]]) -> None:
    """The search's counts, then its ``top`` ranked plans as a table, then what `validate` warns about
    each of them (a plan the framework refuses is still ranked by its predicted time)."""
    from rich.table import Table

    from plancast.simulator.sweep_inputs import warning_lines

    skipped = ""
    if result.ungrouped:  # their floors beat no finalist: their plans were never checked for memory
        tps = ", ".join(str(d.tp) for d in sorted(result.ungrouped, key=lambda d: d.tp))
        skipped = (
            f" (tp {tps} not checked: no plan of theirs can be faster than "
            f"{min(d.floor_s for d in result.ungrouped):.2f} s)"
        )
    # the exact checks before a simulation: the plan's rules, every pipeline rank's peak memory
    refused = f", {result.refused:,} more refused by the exact checks" if result.refused else ""
    out.print(
        f"{result.enumerated:,} plans enumerated, {result.fits:,} fit on the first pipeline rank{skipped}, "
        f"{result.simulated:,} simulated in full{refused} ({elapsed_s:.1f} s): "
        f"the top {len(result.finalists)} are "
        "exact (every other plan's lower bound is slower, docs/sweep.md)"
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
    for line in warning_lines(warned[:top]):
        out.print(line, markup=False)
