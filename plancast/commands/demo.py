"""`plancast demo`: the whole loop on this machine (calibrate, simulate, run, compare, dashboard)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Annotated

import typer

from plancast.app import (
    UserError,
    app,
    check_output_dir,
    example_path,
    load,
    out,
    require_extra,
    user_errors,
    write_predicted,
)
from plancast.commands.calibrate import measured_local, write_scenario_file
from plancast.commands.dashboard import dashboard
from plancast.commands.runs import calibration_share, print_conditions, print_core_wait, reconcile_run
from plancast.commands.simulate import print_breakdown
from plancast.traces.contention import BUSY_LABEL

DEMO_SCENARIO = "tiny-local-cpu.toml"
"""The demo plan, shipped as package data (examples/ installs as `plancast.examples`)."""
CALIBRATION_MICRO_BATCHES = (1, 4)
"""The calibration runs' micro-batch sizes; the scored (held-out) run uses the plan's own, 2."""
DEMO_OUTPUTS = frozenset(
    {"run", "scenario.toml", "local-cpu-calibrated.toml"}
    | {f"calibration-mb{m}{suffix}" for m in CALIBRATION_MICRO_BATCHES for suffix in ("", ".toml")}
)
"""What one demo writes in its --out folder."""


def set_aside_previous(out_dir: Path) -> Path | None:
    """A previous demo in `out_dir` moves to a dated sibling folder (a run folder never takes a second
    measured run, and nothing is deleted); returns where it went. A folder holding anything a demo
    does not write is refused: the demo will not move a user's files."""
    from datetime import datetime

    if not out_dir.is_dir() or not any(out_dir.iterdir()):
        return None
    foreign = sorted(p.name for p in out_dir.iterdir() if p.name not in DEMO_OUTPUTS)
    if foreign:
        raise UserError(
            f"{out_dir} holds files a demo did not write ({', '.join(foreign[:3])}); "
            "pass an empty or new folder with --out"
        )
    stamp = datetime.fromtimestamp(out_dir.stat().st_mtime).strftime("%Y%m%d-%H%M%S")
    target = out_dir.with_name(f"{out_dir.name}-{stamp}")
    n = 1
    while target.exists():
        n += 1
        target = out_dir.with_name(f"{out_dir.name}-{stamp}-{n}")
    with _runs_held(out_dir):  # never move a run another process is writing
        out_dir.rename(target)
    return target


@contextmanager
def _runs_held(out_dir: Path) -> Iterator[None]:
    """The write guard (traces/lock.py ``claim``) of every run folder of a previous demo in `out_dir`,
    held together; RunLockedError (exit 2) names a writer that holds one."""
    from plancast.traces.lock import claim

    with ExitStack() as held:
        for name in sorted(DEMO_OUTPUTS):
            if (out_dir / name).is_dir() and not (out_dir / name).is_symlink():
                held.enter_context(claim(out_dir / name, "plancast demo"))
        yield


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
    """The whole loop on this machine: calibrate on two runs, then simulate, run and compare a third
    (held out), and open the dashboard."""
    import time

    with user_errors():
        check_output_dir(out_dir, "--out")
        if steps < 1:
            raise UserError(f"--steps must be at least 1, got {steps}")
        if serve_dashboard:
            require_extra("runtime,dashboard", "plancast demo (or pass --no-dashboard)")
        require_extra("runtime", "plancast demo")
    from plancast.runtime.launch import launch
    from plancast.simulator.predict import simulate as run_simulation
    from plancast.traces.lock import claim

    started = time.perf_counter()
    with user_errors():
        previous = set_aside_previous(out_dir)
    if previous is not None:
        out.print(f"the previous demo in {out_dir} moved to {previous} (nothing deleted)", markup=False)
    out_dir.mkdir(parents=True, exist_ok=True)
    profile = out_dir / "local-cpu-calibrated.toml"
    plan = example_path(DEMO_SCENARIO)
    reference_share = _calibrate(plan, out_dir, profile)
    # 2. simulate the demo plan on the calibrated cluster
    out.rule("2/5 simulate")
    scenario_path = _demo_scenario(plan, out_dir / "scenario.toml", str(profile.resolve()))
    run_dir = out_dir / "run"
    with user_errors():
        prediction = run_simulation(load(scenario_path))
        with claim(run_dir, "plancast demo"):  # the write guard of every verb that writes a run
            write_predicted(run_dir, prediction)
    print_breakdown(prediction.summary)
    # 3. run it for real
    out.rule("3/5 run with torchrun (gloo, 2 ranks)")
    # a 1-core machine still runs the demo's 2 ranks, warned: compare scores the time at the core
    # share the ranks got and flags a busy machine (traces/contention.py)
    if launch(scenario_path, run_dir, steps=steps, oversubscribe=True) != 0:
        raise typer.Exit(1)
    # 4. compare
    _compare(run_dir, reference_share)
    out.print(f"non-interactive part took {time.perf_counter() - started:.0f} s", markup=False)
    # 5. dashboard
    out.rule("5/5 dashboard")
    if serve_dashboard:
        dashboard([run_dir], port=port, browser=False)
    else:
        out.print(f"open it with: plancast dashboard {run_dir}", markup=False)


def _calibrate(plan: Path, out_dir: Path, profile: Path) -> float:
    """Step 1: this machine measured at the demo plan's shapes (cached), then two short runs of the plan
    at other micro-batch sizes (1 and 4; the scored run uses 2), fitted into `profile`, so the scored run
    is held out. Returns the core share the calibration runs got (the profile's reference:
    traces/contention.py)."""
    from plancast.runtime.calibrate import calibrate as fit_profile
    from plancast.runtime.calibrate import write_profile
    from plancast.runtime.launch import launch
    from plancast.simulator.calibration.runs import score_table

    out.rule("1/5 calibrate this machine")
    with user_errors():
        machine = measured_local(plan, load(plan)).cluster
    calib_runs = []
    for micro_batch in CALIBRATION_MICRO_BATCHES:
        source = _demo_scenario(plan, out_dir / f"calibration-mb{micro_batch}.toml", "local-cpu", micro_batch)
        with user_errors():
            s = load(source).model_copy(update={"cluster": machine})
        calib_run = out_dir / f"calibration-mb{micro_batch}"
        if launch(write_scenario_file(source, s), calib_run, steps=8, oversubscribe=True) != 0:
            raise typer.Exit(1)
        calib_runs.append(calib_run)
    with user_errors():
        try:
            result = fit_profile(calib_runs, microbench=False)
        except ValueError as e:
            raise UserError(str(e)) from None
    write_profile(result.cluster, profile, result.notes)
    for line in [*result.notes, *score_table(result.scores)]:
        out.print(f"  {line}", markup=False)
    return calibration_share(calib_runs)


def _compare(run_dir: Path, reference_share: float) -> None:
    """Step 4: the run against its prediction; the held-out error is the demo's headline, beside the
    machine's load (a busy machine is said to be one, not scored as the model's error)."""
    out.rule("4/5 compare")
    with user_errors():
        summary = reconcile_run(run_dir, reference_share)
    predicted_s, measured_s = summary["step_time_predicted_s"], summary["step_time_measured_s"]
    out.print(
        f"predicted {predicted_s:.4f} s, measured {measured_s:.4f} s; events {summary['events_matched']} "
        f"matched, {summary['events_missing']} missing, {summary['events_extra']} extra",
        markup=False,
    )
    busy = f"; {BUSY_LABEL}, see below" if summary.get("machine_busy") else ""
    out.print(
        f"held-out error: {summary['step_time_error']:+.1%} (this plan, micro-batch 2, was not among the "
        f"calibration runs{busy})",
        markup=False,
    )
    print_conditions(summary)
    print_core_wait(summary.get("measured_core_wait_s"))  # part of what the prediction leaves out
