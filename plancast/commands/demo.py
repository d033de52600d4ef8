"""`plancast demo`: the whole loop on this machine (calibrate, simulate, run, compare, dashboard)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from plancast.app import app, err, example_path, load, out, require_extra, user_errors, write_predicted
from plancast.commands.dashboard import dashboard
from plancast.commands.runs import reconcile_run
from plancast.commands.simulate import print_breakdown

DEMO_SCENARIO = "tiny-local-cpu.toml"
"""The demo plan, shipped as package data (examples/ installs as `plancast.examples`)."""


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


@app.command("demo")
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

    with user_errors():
        require_extra("runtime", "plancast demo")
        if serve_dashboard:
            require_extra("dashboard", "plancast demo (or pass --no-dashboard)")
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
    plan = example_path(DEMO_SCENARIO)
    base = _demo_scenario(plan, out_dir / "calibration.toml", "local-cpu", micro_batch=1)
    if launch(base, calib_run, steps=6) != 0:
        raise typer.Exit(1)
    try:
        cluster, notes = fit_profile([calib_run], microbench=True)
    except ValueError as e:  # timings a busy machine made unusable: say so, no traceback
        err.print(f"error: calibrating this machine failed: {e}; rerun the demo when it is less busy")
        raise typer.Exit(1) from None
    write_profile(cluster, profile, notes)
    for note in notes:
        out.print(f"  {note}", markup=False)
    # 2. simulate the demo plan on the calibrated cluster
    out.rule("2/5 simulate")
    scenario_path = _demo_scenario(plan, out_dir / "scenario.toml", str(profile.resolve()))
    run_dir = out_dir / "run"
    with user_errors():
        prediction = run_simulation(load(scenario_path))
    write_predicted(run_dir, prediction)
    print_breakdown(prediction.summary)
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
