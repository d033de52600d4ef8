"""`plancast calibrate`: fit a cluster profile from measured runs and/or microbenchmarks; and the
measured local-cpu machine that `simulate` and `run` use (`measured_local`).
"""

from __future__ import annotations

import os
import tomllib
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Annotated, Any

import typer

from plancast.app import UserError, app, check_output_file, err, out, require_extra, user_errors

NO_CACHE_HELP = (
    "local-cpu: measure this machine again instead of reading the cached measurements "
    "($PLANCAST_CACHE_DIR, else the user cache directory; PLANCAST_LOCAL_CPU=shipped measures nothing)."
)
NoCacheOpt = Annotated[bool, typer.Option("--no-cache", help=NO_CACHE_HELP)]

LOCAL_PRESET = "local-cpu"
# PLANCAST_LOCAL_CPU=shipped: use the shipped local-cpu numbers as they are, measure nothing (tests that
# need machine-independent predictions; a machine without a working gloo)
LOCAL_CPU_ENV = "PLANCAST_LOCAL_CPU"
# keys of a [cluster] table that leave the local-cpu preset measured (any other key pins values by hand)
_SHAPE_KEYS = {"preset", "gpus_per_node", "num_nodes"}


def wants_measuring(path: Path) -> bool:
    """Whether the scenario file asks for the `local-cpu` preset without setting any of its values by
    hand (explicit values are used as written)."""
    try:
        table = tomllib.loads(path.read_text(encoding="utf-8")).get("cluster", {})
    except (OSError, tomllib.TOMLDecodeError):
        return False
    return isinstance(table, dict) and table.get("preset") == LOCAL_PRESET and set(table) <= _SHAPE_KEYS


def measured_local(path: Path, s: Any, *, no_cache: bool = False) -> Any:
    """`s` with the local-cpu cluster measured on this machine (the first use runs the microbenchmarks
    and caches them; one line on stderr says so). Other clusters, and local-cpu scenarios that set
    cluster values by hand, are returned unchanged. Without torch: one line, the shipped defaults."""
    if not wants_measuring(path) or os.environ.get(LOCAL_CPU_ENV) == "shipped":
        return s
    try:
        import torch  # noqa: F401  (the microbenchmarks need it)
    except ImportError:
        err.print(
            "local-cpu: torch is not installed, so this machine cannot be measured; using the shipped "
            "local-cpu defaults (install plancast[runtime] for a measured profile)",
            markup=False,
        )
        return s
    from plancast.runtime.local_profile import localize

    try:
        return localize(s, refresh=no_cache, say=lambda line: err.print(line, markup=False))
    except RuntimeError as e:
        err.print(f"local-cpu: the microbenchmarks failed ({e}); using the shipped defaults", markup=False)
        return s


def measured_for_sweep(scenario: Path, s: Any) -> Any:
    """A local-cpu scenario's machine measured as `simulate` measures it (calibrate.measured_local), at the
    scenario's own shapes: every plan of the sweep is priced on it, said on stderr."""
    measured = measured_local(scenario, s)
    if measured is not s:
        err.print(
            f"local-cpu: every plan is priced on this machine as measured at the scenario's own shapes "
            f"(micro-batch {s.training.micro_batch_size}, {s.world_size} ranks); `plancast simulate` of a "
            "plan measures it at the plan's",
            markup=False,
        )
    return measured


@app.command("calibrate")
def calibrate(
    runs: Annotated[
        list[Path] | None,
        typer.Argument(help="Measured runs (two or more, differing e.g. in micro-batch size) to fit on."),
    ] = None,
    output: Annotated[Path, typer.Option("--output", "-o", help="Cluster profile TOML to write.")] = Path(
        "cluster.toml"
    ),
    microbench: Annotated[
        bool,
        typer.Option(
            help="Measure this machine (FLOP/s, memory, links, host costs); refreshes the local-cpu cache."
        ),
    ] = False,
    world: Annotated[int, typer.Option(help="Processes for the microbenchmarks without runs.")] = 2,
    force: Annotated[bool, typer.Option("--force", help="Replace the --output file if it exists.")] = False,
) -> None:
    """Fit a cluster profile; prints in-sample and held-out (leave-one-run-out) error per run.

    Use the profile with `[cluster] preset = "PROFILE.toml"` in a scenario."""
    from plancast.runtime.calibrate import calibrate as fit_profile
    from plancast.runtime.calibrate import write_profile
    from plancast.simulator.calibration.runs import score_table

    with user_errors():
        check_output_file(output, "--output", force)
        guard = output_guard(output)  # held from here: the fit can take minutes
        if world < 1:
            raise UserError(f"--world must be at least 1, got {world}")
        runs = runs or []
        if not runs and not microbench:
            raise UserError("give two or more measured RUNs to fit, or --microbench to measure this machine")
        if microbench:
            require_extra("runtime", "plancast calibrate --microbench")
        for run in runs:
            if not (run / "scenario.toml").is_file():
                raise UserError(
                    f"{run}/scenario.toml not found: is {run} a run directory from `plancast run`?"
                )
        try:
            result = fit_profile(runs, microbench=microbench, world=world)
        except ValueError as e:
            raise UserError(str(e)) from None
    with guard:
        write_profile(result.cluster, output, result.notes)
    for note in result.notes:
        out.print(note, markup=False)
    if result.scores:
        out.print("step time per run: in-sample (fitted on every run) and held out (fitted on the others)")
        for line in score_table(result.scores):
            out.print(line, markup=False)
    out.print(f'wrote {output}: use it with  [cluster] preset = "{output}"', markup=False)


def output_guard(output: Path) -> AbstractContextManager[Any]:
    """The run directory's lock (traces/lock.py claim) when `output` goes into one, else nothing to hold;
    a profile written into RUN/measured/ or RUN/predicted/ would sit among a run's own files: refused."""
    from contextlib import nullcontext

    from plancast.traces.lock import LOCK_NAME, claim

    folder = output.resolve().parent
    if folder.name in ("measured", "predicted") and (folder.parent / "scenario.toml").is_file():
        where = f"inside a run's {folder.name}/ folder"
        raise UserError(f"--output {output} is {where}; write the profile elsewhere")
    marks = (folder / "scenario.toml", folder / "measured", folder / LOCK_NAME)
    if any(mark.exists() for mark in marks):
        return claim(folder, "plancast calibrate -o")
    return nullcontext()


def write_scenario_file(path: Path, s: Any) -> Path:
    """`s` resolved into a scenario TOML at `path` (every value explicit)."""
    import tomli_w

    from plancast.simulator.loader import to_toml_dict

    path.write_text(tomli_w.dumps(to_toml_dict(s)), encoding="utf-8")
    return path
