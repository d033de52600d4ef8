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

    from plancast.simulator.scenario import to_toml_dict
    from plancast.traces.chrome import export_chrome
    from plancast.traces.store import RunDir, atomic_open, write_events, write_json

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
    from plancast.simulator.predict import simulate as run_simulation

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

    from plancast.simulator import importers
    from plancast.simulator.scenario import parse_scenario, to_toml_dict

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


RunArg = Annotated[Path, typer.Argument(help="Run directory (from `plancast run` or `simulate --out`).")]


def _ensure_predicted(run_path: Path) -> None:
    """Simulate RUN/scenario.toml into RUN/predicted/ when the run has no prediction yet."""
    from plancast.simulator.predict import simulate as run_simulation
    from plancast.traces.store import RunDir

    run = RunDir(run_path)
    if run.predicted_events.exists():
        return
    if not run.scenario_toml.exists():
        raise UserError(
            f"{run_path} has neither predicted/events.parquet nor scenario.toml; "
            f"run `plancast simulate SCENARIO --out {run_path}` first"
        )
    err.print(f"{run_path}/predicted/ is missing: simulating {run.scenario_toml}", markup=False)
    _write_predicted(run_path, run_simulation(load(run.scenario_toml)))


def reconcile_run(run_path: Path) -> dict[str, Any]:
    """Reconcile RUN's predicted and measured events; writes RUN/compare/summary.json and returns it.

    Damaged inputs (an unreadable or missing rank file, a cut summary) are left out and listed under
    "problems"; everything else is still compared."""
    from plancast.traces.reconcile import reconcile, to_summary
    from plancast.traces.store import RunDir, read_measured, read_predicted, write_json

    run = RunDir(run_path)
    if not run.path.is_dir():
        raise UserError(f"run directory not found: {run_path}")
    _ensure_predicted(run_path)
    measured = read_measured(run)
    problems = list(measured.problems)
    if measured.events.empty:
        reasons = "; ".join(problems) or "no rank files"
        raise UserError(
            f"{run_path}/measured/ has no readable events ({reasons}); "
            f"run `plancast run SCENARIO --out {run_path}`"
        )
    predicted_summary = _optional_json(run.predicted_summary, problems)
    measured_summary = _optional_json(run.measured_summary, problems)
    rec = reconcile(
        read_predicted(run),
        measured.events,
        predicted_summary=predicted_summary,
        measured_summary=measured_summary,
    )
    summary = {**to_summary(rec), "problems": problems}
    run.compare_dir.mkdir(parents=True, exist_ok=True)
    write_json(run.compare_summary, summary)
    return summary


def _optional_json(path: Path, problems: list[str]) -> Any:
    """A summary file, or None with a problem noted when it is unreadable (missing is fine)."""
    from plancast.traces.store import TraceReadError, read_json

    if not path.exists():
        return None
    try:
        return read_json(path)
    except TraceReadError as e:
        problems.append(f"{e} (compared without it)")
        return None


def _exit_on_problems(problems: list[str]) -> None:
    """Damaged inputs: the rest of the run was compared and shown; say what was left out, exit 2."""
    for problem in problems:
        err.print(f"error: {problem}", markup=False)
    if problems:
        raise typer.Exit(2)


@app.command()
def compare(
    run: RunArg,
    json_: Annotated[
        bool, typer.Option("--json", help="Print the reconciliation as one JSON object.")
    ] = False,
) -> None:
    """Align predicted and measured events one to one; step-time and per-component errors."""
    from rich.table import Table

    with user_errors():
        summary = reconcile_run(run)
    if json_:
        print_json(summary)
        _exit_on_problems(summary["problems"])
        return
    error = summary["step_time_error"]
    out.print(
        f"step time: predicted {summary['step_time_predicted_s']:.4g} s, measured "
        f"{summary['step_time_measured_s']:.4g} s (error {error:+.1%})"
        if error is not None
        else "step time: no measured step"
    )
    out.print(
        f"events: {summary['events_matched']} matched, {summary['events_missing']} missing, "
        f"{summary['events_extra']} extra (step {summary['step']})"
    )
    table = Table("component", "predicted", "measured", "error")
    for c in summary["components"]:
        unit = "GiB" if "predicted_gib" in c else "s"
        pred, meas = (
            c.get(f"predicted_{'gib' if unit == 'GiB' else 's'}"),
            c.get(f"measured_{'gib' if unit == 'GiB' else 's'}"),
        )
        err_text = f"{c['error']:+.1%}" if c.get("error") is not None else "-"
        table.add_row(
            c["component"],
            f"{pred:.4g} {unit}" if pred is not None else "-",
            f"{meas:.4g} {unit}" if meas is not None else "-",
            err_text,
        )
    out.print(table)
    err.print(f"wrote {run}/compare/summary.json", markup=False)
    _exit_on_problems(summary["problems"])


@app.command()
def export(
    run: RunArg,
    format_: Annotated[
        str, typer.Option("--format", help="chrome (Perfetto / HolisticTraceAnalysis JSON)")
    ] = "chrome",
    source: Annotated[str, typer.Option(help="predicted | measured | both")] = "both",
) -> None:
    """Write RUN's events as Chrome-trace/Kineto JSON, one file per rank, under RUN/chrome/SOURCE/."""
    from plancast.traces.chrome import export_chrome
    from plancast.traces.store import RunDir, read_measured, read_predicted

    with user_errors():
        if format_ != "chrome":
            raise UserError(f"unknown format {format_!r}; only 'chrome' is supported")
        if source not in ("predicted", "measured", "both"):
            raise UserError("--source must be predicted, measured or both")
        rd = RunDir(run)
        frames = {}
        if source in ("predicted", "both") and rd.predicted_events.exists():
            frames["predicted"] = read_predicted(rd)
        if source in ("measured", "both"):
            measured = read_measured(rd)
            for problem in measured.problems:
                err.print(f"warning: {problem}", markup=False)
            if not measured.events.empty:
                frames["measured"] = measured.events
        if not frames:
            raise UserError(f"{run} has no {source} events to export")
    for name, frame in frames.items():
        world = int(frame["rank"].max()) + 1
        files = export_chrome(frame, rd.path / "chrome" / name, world)
        out.print(f"{name}: {len(files)} file(s) in {rd.path / 'chrome' / name}")


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

        _write_predicted(out_dir, run_simulation(s))
    out.print(
        f"imported {len(frame)} events of {world} rank(s), {frame['step'].nunique()} step(s) into {out_dir}"
    )


@app.command()
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


@app.command()
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

    Multi-node: on every node run `plancast run S --out RUN --nnodes N --node-rank I --rdzv-endpoint
    NODE0:29500`; each node writes its ranks' files into its own RUN (gather them before comparing)."""
    from plancast.runtime.launch import LaunchError, launch

    with user_errors():
        load(scenario)  # bad scenarios fail here with key paths, before any process starts
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


@app.command()
def dashboard(
    runs: Annotated[list[Path] | None, typer.Argument(help="Run directories to open.")] = None,
    port: Annotated[int, typer.Option(help="Port to serve on.")] = 8501,
    browser: Annotated[
        bool, typer.Option(help="Open a browser tab (default: headless; the URL is printed).")
    ] = False,
) -> None:
    """Open the dashboard: Overview, Timeline, Breakdown, Memory, Telemetry, Sweep and What-if.

    RUN directories come from `plancast simulate --out` or `plancast run --out`; without RUN, pick a
    run in the sidebar from a folder (default runs/) or upload a zipped run directory."""
    from plancast.dashboard.serve import serve, url, wait_until_ready

    with user_errors():
        try:
            process = serve(list(runs or []), port=port, headless=not browser)
        except FileNotFoundError as e:
            raise UserError(str(e)) from None
    try:
        wait_until_ready(process, port, timeout_s=60)
        out.print(f"dashboard: {url(port)}  (Ctrl-C to stop)", markup=False)
        process.wait()
    except KeyboardInterrupt:
        process.terminate()
        process.wait(timeout=10)


DEMO_SCENARIO = Path(__file__).resolve().parent.parent / "examples" / "tiny-local-cpu.toml"


def _demo_scenario(source: Path, target: Path, cluster: str, micro_batch: int | None = None) -> Path:
    """`source` with another cluster preset (a catalog name or a profile file) and micro-batch."""
    import tomllib

    import tomli_w

    data = tomllib.loads(source.read_text(encoding="utf-8"))
    data["cluster"] = {"preset": cluster}
    if micro_batch is not None:
        data.setdefault("training", {})["micro_batch_size"] = micro_batch
    target.write_text(tomli_w.dumps(data), encoding="utf-8")
    return target


@app.command()
def demo(
    out_dir: Annotated[Path, typer.Option("--out", "-o", help="Where the demo's runs go.")] = Path(
        "runs/demo"
    ),
    steps: Annotated[int, typer.Option(help="Measured steps of the demo run.")] = 20,
    serve_dashboard: Annotated[
        bool, typer.Option("--dashboard/--no-dashboard", help="Serve the dashboard.")
    ] = True,
    port: Annotated[int, typer.Option(help="Dashboard port.")] = 8501,
) -> None:
    """The whole loop on this machine: calibrate, simulate, run, compare, and open the dashboard."""
    import time

    from plancast.runtime.calibrate import calibrate as fit_profile
    from plancast.runtime.calibrate import write_profile
    from plancast.runtime.launch import launch
    from plancast.simulator.predict import simulate as run_simulation

    started = time.perf_counter()
    out_dir.mkdir(parents=True, exist_ok=True)
    profile = out_dir / "local-cpu-calibrated.toml"
    calib_run = out_dir / "calibration-run"
    # 1. calibrate: this machine's microbenchmarks + a short run of another shape (not the scored one)
    out.rule("1/5 calibrate this machine")
    base = _demo_scenario(DEMO_SCENARIO, out_dir / "calibration.toml", "local-cpu", micro_batch=1)
    if launch(base, calib_run, steps=6) != 0:
        raise typer.Exit(1)
    cluster, notes = fit_profile([calib_run], microbench=True)
    write_profile(cluster, profile, notes)
    for note in notes:
        out.print(f"  {note}", markup=False)
    # 2. simulate the demo plan on the calibrated cluster
    out.rule("2/5 simulate")
    scenario_path = _demo_scenario(DEMO_SCENARIO, out_dir / "scenario.toml", str(profile.resolve()))
    run_dir = out_dir / "run"
    with user_errors():
        prediction = run_simulation(load(scenario_path))
    _write_predicted(run_dir, prediction)
    _print_breakdown(prediction.summary)
    # 3. run it for real
    out.rule("3/5 run with torchrun (gloo, 2 ranks)")
    if launch(scenario_path, run_dir, steps=steps) != 0:
        raise typer.Exit(1)
    # 4. compare
    out.rule("4/5 compare")
    with user_errors():
        summary = reconcile_run(run_dir)
    predicted_s, measured_s = summary["step_time_predicted_s"], summary["step_time_measured_s"]
    out.print(
        f"predicted {predicted_s:.4f} s, measured {measured_s:.4f} s, "
        f"error {summary['step_time_error']:+.1%}; events {summary['events_matched']} matched, "
        f"{summary['events_missing']} missing, {summary['events_extra']} extra",
        markup=False,
    )
    out.print(f"non-interactive part took {time.perf_counter() - started:.0f} s", markup=False)
    # 5. dashboard
    out.rule("5/5 dashboard")
    if serve_dashboard:
        dashboard([run_dir], port=port, browser=False)
    else:
        out.print(f"open it with: plancast dashboard {run_dir}", markup=False)
