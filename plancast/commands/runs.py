"""`plancast compare` and `plancast export`: read a run directory back."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from plancast.app import (
    RunArg,
    UserError,
    app,
    ensure_predicted,
    err,
    out,
    pct,
    print_json,
    user_errors,
)


def reconcile_run(run_path: Path, reference_share: float | None = None) -> dict[str, Any]:
    """Compare RUN (simulating its scenario first when it has no prediction); RUN/compare/summary.json.
    `reference_share`: the core share the prediction's constants were measured at (default: this
    machine's microbenchmarks' for a local-cpu run, else 1; traces/contention.py)."""
    from plancast.traces.compare import CompareError, compare_run_dir
    from plancast.traces.lock import claim

    if not Path(run_path).is_dir():  # before the lock, which would create the folder
        raise UserError(f"run directory not found: {run_path}")
    # one writer: compare writes compare/ (and predicted/ when missing) into a run no one else may write
    with claim(run_path, "plancast compare"):
        try:
            ensure_predicted(run_path)  # first: a local-cpu prediction may measure the machine (its record)
            share = profile_share(run_path) if reference_share is None else reference_share
            summary = compare_run_dir(run_path, ensure_predicted, share, profile_probe(run_path))
        except CompareError as e:
            raise UserError(str(e)) from None
        summary["placement"] = _placement(run_path)
        if summary["placement"] is not None:
            from plancast.traces.store import RunDir, write_json

            write_json(RunDir(run_path).compare_summary, summary)
    return summary


def _placement(run_path: Path) -> dict[str, Any] | None:
    """Where each rank ran against where the plan puts it (simulator/placement.py); None when the run
    does not say (env.json without per-rank nodes, as from an import-kineto)."""
    from plancast.simulator.loader import ScenarioError, load_scenario
    from plancast.simulator.placement import check_placement
    from plancast.traces.store import RunDir, TraceReadError, read_json_object

    run = RunDir(run_path)
    try:
        ranks = read_json_object(run.env_json).get("ranks") if run.env_json.is_file() else None
        scenario = load_scenario(run.scenario_toml).scenario if run.scenario_toml.is_file() else None
    except (TraceReadError, ScenarioError, OSError, ValueError):
        return None
    if not isinstance(ranks, list) or scenario is None or not all(isinstance(r, dict) for r in ranks):
        return None
    placement = check_placement(scenario, ranks, scenario.cluster.gpus_per_node)
    return {
        "matches_plan": placement.matches,
        "ranks_per_node_planned": scenario.cluster.gpus_per_node,
        "nodes": {str(rank): node for rank, node in sorted(placement.nodes.items())},
        "problems": placement.problems,
    }


def calibration_share(runs: list[Path]) -> float:
    """The median core share of calibration runs (measured/summary.json), 1.0 where none recorded one:
    the load a profile fitted on them was measured under."""
    import statistics

    from plancast.traces.compare import measured_share, optional_json
    from plancast.traces.store import RunDir

    shares = []
    for run in runs:
        path = RunDir(run).measured_summary
        share = measured_share(optional_json(path, []), path, [])
        if share is not None:
            shares.append(share)
    return statistics.median(shares) if shares else 1.0


def profile_probe(run_path: Path) -> dict[str, Any] | None:
    """The speed probe the prediction's constants were measured at (``probe_s``, ``workload``;
    traces/contention.py): a demo's scored run its calibration runs'; another CPU run the probe of the
    microbenchmark record its prediction is read from (runtime/local_profile.host_record_for); None for
    a GPU run or a machine never probed."""
    calibrations = sorted(run_path.parent.glob("calibration-mb*/measured")) if run_path.name == "run" else []
    if calibrations:  # the speed a profile fitted on them is normalised to (runtime/calibrate.py)
        from plancast.runtime.calibrate import runs_probe

        return runs_probe([c.parent for c in calibrations])
    record = _cpu_record(run_path)
    if record is None:
        return None
    from plancast.runtime.local_profile import record_reference

    return record_reference(record)[1]


def _cpu_record(run_path: Path) -> dict[str, Any] | None:
    """The microbenchmark record RUN's prediction is read from where its scenario runs on this machine's
    CPU (runtime/local_profile.host_record_for); None for another cluster, an unreadable scenario or a
    machine never measured."""
    from plancast.simulator.loader import ScenarioError, load_scenario
    from plancast.traces.store import RunDir

    toml = RunDir(run_path).scenario_toml
    try:
        scenario = load_scenario(toml).scenario if toml.is_file() else None
    except (ScenarioError, OSError):
        return None  # compare reports a scenario it cannot read where it needs it
    if scenario is None or not scenario.cluster.gpu.name.startswith("cpu"):
        return None
    from plancast.runtime.local_profile import host_record_for

    return host_record_for(scenario)


def profile_share(run_path: Path) -> float:
    """The core share the prediction's constants were measured at: a demo's scored run (RUN/../run
    beside calibration-mb*/) its calibration runs'; another CPU run its microbenchmark record's
    (`_cpu_record`); 1.0 (a core of its own) for a GPU run or a machine never measured."""
    calibrations = sorted(run_path.parent.glob("calibration-mb*/measured")) if run_path.name == "run" else []
    if calibrations:
        return calibration_share([c.parent for c in calibrations])
    record = _cpu_record(run_path)
    if record is None:
        return 1.0
    from plancast.runtime.local_profile import record_reference

    try:
        return record_reference(record)[0]
    except (TypeError, ValueError, AttributeError):
        return 1.0


def print_conditions(summary: dict[str, Any]) -> None:
    """The machine's load beside the error (traces/contention.py) and warnings about the measurement."""
    from plancast.traces.contention import speed_verdict, verdict

    line = verdict(summary)
    if line:
        out.print(line, markup=False, style="bold yellow" if summary.get("machine_busy") else None)
    speed = speed_verdict(summary)
    if speed:
        out.print(speed, markup=False, style="bold yellow" if summary.get("machine_speed_changed") else None)
    for warning in summary.get("warnings", []):
        err.print(f"warning: {warning}", markup=False)


def _exit_on_problems(problems: list[str]) -> None:
    """Damaged inputs: the rest of the run was compared and shown; say what was left out, exit 2."""
    for problem in problems:
        err.print(f"error: {problem}", markup=False)
    if problems:
        raise typer.Exit(2)


@app.command("compare")
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
    status = summary.get("measured_status", "unknown")
    if status != "ok":
        reason = summary.get("measured_reason")
        err.print(
            f"warning: the measured run's status is {status}"
            + (f": {reason}" if reason else " (measured/summary.json is absent: still running, or killed)")
            + "; only the steps it finished are compared",
            markup=False,
        )
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
    out.print(f"measured run status: {status}")
    print_machine(summary)
    out.print(
        f"bubble: predicted {pct(summary['bubble_fraction_predicted'])}, "
        f"measured {pct(summary['bubble_fraction_measured'])}"
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


def print_machine(summary: dict[str, Any]) -> None:
    """Where the ranks ran and how busy the machine was: what the error has to be read against."""
    print_placement(summary.get("placement"))
    print_conditions(summary)
    print_core_wait(summary.get("measured_core_wait_s"))
    print_gpu(summary.get("measured_gpu"))


def print_placement(placement: dict[str, Any] | None) -> None:
    """Which node each rank ran on, and every way that differs from the plan's layout."""
    if not placement:
        return
    nodes: dict[str, list[str]] = {}
    for rank, node in placement["nodes"].items():
        nodes.setdefault(node, []).append(rank)
    where = "; ".join(f"{node}: ranks {', '.join(ranks)}" for node, ranks in nodes.items())
    if placement["matches_plan"]:
        out.print(f"placement: as planned ({where})", markup=False)
        return
    out.print(f"placement: differs from the plan ({where}):", markup=False)
    for problem in placement["problems"]:
        out.print(f"  - {problem}", markup=False)


def print_core_wait(wait_s: float | None) -> None:
    """The measured ranks' wait for a CPU core a step (measured/summary.json), where recorded."""
    if wait_s is not None:
        out.print(
            f"measured core wait: {wait_s * 1e3:.3g} ms a step (a rank's threads ready to run with no "
            "core free, Linux schedstat; the prediction has it only where ranks share cores by design)"
        )


def print_gpu(gpu: dict[str, Any] | None) -> None:
    """What the GPUs ran at while busy (measured/telemetry.parquet), where a GPU was sampled."""
    if not gpu:
        return
    clock, peak = gpu.get("sm_clock_MHz"), gpu.get("sm_clock_max_MHz")
    which = f"slowest of {gpu['gpus']} GPUs, " if gpu["gpus"] > 1 else ""
    parts = [
        f"SM clock {clock:.0f} MHz ({which}median of {gpu['busy_samples']} busy samples"
        + (f", up to {peak:.0f} MHz)" if peak is not None else ")")
        if clock is not None
        else "SM clock not read",
    ]
    if gpu.get("power_W") is not None:
        parts.append(f"{gpu['power_W']:.0f} W")
    if gpu.get("temperature_max_C") is not None:
        parts.append(f"up to {gpu['temperature_max_C']:.0f} °C")
    out.print(
        "measured GPU while busy: " + ", ".join(parts) + " (a long job at the power limit settles at a "
        "lower clock than a short check: docs/calibration.md)",
        markup=False,
    )


MAX_EXPORT_EVENTS = 2_000_000
"""Events one `export` writes: ~250 bytes of Chrome JSON each, so ~500 MB. ui.perfetto.dev holds a trace
in the browser tab's memory, "2gb is typical", at 2-4x the file's size (perfetto.dev/docs/visualization/
large-traces); json.dump also builds each rank's list in memory here (~1 KiB an event)."""


def _export_world(rd: Any, source: str, frame: Any, problems: list[str]) -> int:
    """The ranks RUN's `source` traces are exported over. Predicted: the plan's world size (scenario.toml),
    as `simulate --out` writes them: a prediction holds one rank per symmetric class, so its highest
    rank + 1 fell short (1,345 of GPT-3's 1,536). Measured: the highest rank + 1 (a rank whose file is
    missing is named by read_measured, not exported as one without events)."""
    from plancast.simulator.loader import ScenarioError, load_scenario

    size = 0
    if source == "predicted" and rd.scenario_toml.is_file():
        try:
            size = load_scenario(rd.scenario_toml).scenario.world_size
        except (ScenarioError, OSError, ValueError) as e:
            where = rd.relative(rd.scenario_toml)
            problems.append(f"{where} could not be read ({e}): the predicted ranks counted from its events")
    return max(size, int(frame["rank"].max()) + 1)


@app.command("export")
def export(
    run: RunArg,
    format_: Annotated[
        str, typer.Option("--format", help="chrome (Perfetto / HolisticTraceAnalysis JSON)")
    ] = "chrome",
    source: Annotated[str, typer.Option(help="predicted | measured | both")] = "both",
) -> None:
    """Write RUN's events as Chrome-trace/Kineto JSON, one file per rank, under RUN/chrome/SOURCE/.

    Damaged files are named and left out, the rest is exported, and the exit code is then 2 (as for
    `compare`)."""
    from plancast.traces.chrome import export_chrome
    from plancast.traces.compare import optional_json
    from plancast.traces.lock import claim
    from plancast.traces.store import RunDir, TraceReadError, read_measured, read_predicted

    problems: list[str] = []
    with user_errors():
        if format_ != "chrome":
            raise UserError(f"unknown format {format_!r}; only 'chrome' is supported")
        if source not in ("predicted", "measured", "both"):
            raise UserError("--source must be predicted, measured or both")
        rd = RunDir(run)
        if not rd.path.is_dir():
            raise UserError(f"run directory not found: {run}")
        frames = {}
        if source in ("predicted", "both") and rd.predicted_events.exists():
            try:
                frames["predicted"] = read_predicted(rd)
            except TraceReadError as e:
                problems.append(f"{e} (predicted events not exported)")
        if source in ("measured", "both"):
            measured = read_measured(rd)
            problems += measured.problems
            if not measured.events.empty:
                frames["measured"] = measured.events
        for summary in (rd.predicted_summary, rd.measured_summary):  # as compare reads them
            optional_json(summary, problems, "the run is damaged; its events were exported")
        if not frames:
            _exit_on_problems(problems)
            raise UserError(f"{run} has no {source} events to export")
        if (count := sum(len(f) for f in frames.values())) > MAX_EXPORT_EVENTS:
            raise UserError(
                f"{run} has {count} {source} events, more than the {MAX_EXPORT_EVENTS} `export` writes "
                "(a Chrome trace that size does not open in a browser); export --source predicted or "
                "measured alone, or run fewer steps"
            )
        lock = claim(rd.path, "plancast export")  # chrome/ is derived: no --force needed, but one writer
        worlds = {name: _export_world(rd, name, frame, problems) for name, frame in frames.items()}
    with lock:
        for name, frame in frames.items():
            files = export_chrome(frame, rd.path / "chrome" / name, worlds[name])
            out.print(f"{name}: {len(files)} file(s) in {rd.path / 'chrome' / name}")
    _exit_on_problems(problems)
