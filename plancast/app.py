"""The `plancast` typer app and what every verb shares: consoles, bad-input errors, scenario loading,
writing a prediction into a run directory.

Verb modules (`plancast/commands/`) import `app` from here and register on it; `plancast.cli` imports
them all, so `plancast.cli.app` always has every command. Nothing here imports a verb module.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

if TYPE_CHECKING:
    from rich.console import Console

app = typer.Typer(
    name="plancast",
    help="Simulate a parallel training plan, run it, and compare the two.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,  # help texts show [cluster] and friends literally
)


class LazyConsole:
    """A rich `Console`, built on its first use: importing rich is about a third of `plancast --help`'s
    start-up, and `--help`, `validate` and `simulate --json` never print through one."""

    def __init__(self, **options: Any) -> None:
        self._options = options
        self._console: Console | None = None

    @property
    def console(self) -> Console:
        """The Console itself (for rich objects that take one, such as `Progress(console=...)`)."""
        if self._console is None:
            from rich.console import Console

            self._console = Console(**self._options)
        return self._console

    def __getattr__(self, name: str) -> Any:  # called only for what the instance itself lacks
        if name.startswith("_"):  # copy/pickle probing an instance without __init__: no Console for that
            raise AttributeError(name)
        return getattr(self.console, name)


# Piped output (a file, grep) gets a wide console so tables are never cut to 80 columns.
out = LazyConsole(highlight=False, soft_wrap=True, width=None if sys.stdout.isatty() else 200)
err = LazyConsole(stderr=True, highlight=False, soft_wrap=True)

EXIT_BAD_INPUT = 2


def _print_version(value: bool) -> None:
    if value:
        sys.stdout.write(f"plancast {version()}\n")
        raise typer.Exit()


@app.callback()
def _root(
    _version: Annotated[
        bool,
        typer.Option(
            "--version", help="Print plancast's version and exit.", is_eager=True, callback=_print_version
        ),
    ] = False,
) -> None:
    pass


class UserError(Exception):
    """Bad input from the user: printed without a traceback, exit code 2."""


# The packages' own bad-input errors: (module, class).
_PACKAGE_USER_ERRORS = (
    ("plancast.simulator.loader", "ScenarioError"),
    ("plancast.traces.schema", "SchemaError"),
    ("plancast.traces.store", "TraceReadError"),
    ("plancast.traces.lock", "RunLockedError"),  # another writer holds the run directory
    ("plancast.traces.lock", "MeasuredRunError"),  # a write would replace measured data without --force
)


def user_error_types() -> tuple[type[BaseException], ...]:
    """UserError and the packages' bad-input errors whose modules are loaded: an error of a module never
    imported cannot have been raised, and importing it here would put pandas on the path of `--help`."""
    types: list[type[BaseException]] = [UserError]
    for module, name in _PACKAGE_USER_ERRORS:
        error = getattr(sys.modules.get(module), name, None)
        if error is not None:
            types.append(error)
    return tuple(types)


@contextmanager
def user_errors() -> Iterator[None]:
    """Turn known bad-input errors into a message and exit 2."""
    try:
        yield
    except user_error_types() as e:
        err.print(f"error: {e}", markup=False)
        raise typer.Exit(EXIT_BAD_INPUT) from None


def check_output_file(path: Path | None, flag: str, force: bool | None = None) -> None:
    """UserError before any work when `path` cannot be written as a file (a folder, or a missing parent
    folder), so a long computation is never lost to a typo in its output path; with `force` False, also
    when it exists (the user's file is replaced only with --force)."""
    if path is None:
        return
    if force is False and path.is_file():
        raise UserError(f"{flag} {path} exists; pass --force to replace it, or choose another path")
    if path.is_dir():
        raise UserError(f"{flag} {path} is a folder; give a file path")
    if not path.parent.is_dir():
        raise UserError(
            f"{flag} {path}: the folder {path.parent} does not exist; create it or choose another path"
        )


def check_output_dir(path: Path | None, flag: str) -> None:
    """UserError before any work when `path` exists and is not a folder (a run directory is created)."""
    if path is not None and path.exists() and not path.is_dir():
        raise UserError(f"{flag} {path} is a file, not a run directory; choose a new folder name")


# The optional parts and what each needs importable (pyproject.toml [project.optional-dependencies]).
EXTRAS: dict[str, tuple[str, ...]] = {
    "runtime": ("torch",),
    "dashboard": ("streamlit", "altair"),
    "cluster": ("torch", "submitit"),
}


def _importable(module: str) -> bool:
    import importlib.util

    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # ValueError: blocked with sys.modules[module] = None
        return False


def require_extra(extra: str, needed_by: str) -> None:
    """UserError (exit 2) naming the install line when an optional part of plancast is missing.

    `extra` is one extra or several, comma-separated ("runtime,dashboard"): the line names every one
    that is missing, so a fresh install learns all it needs at once. Called before anything starts
    (torchrun, streamlit), so a missing part never surfaces as a crashed subprocess or a traceback."""
    wanted = {name: [m for m in EXTRAS[name] if not _importable(m)] for name in extra.split(",")}
    absent = {name: modules for name, modules in wanted.items() if modules}
    if absent:
        modules = [m for names in absent.values() for m in names]
        extras = ",".join(absent)
        raise UserError(
            f"{needed_by} needs {' and '.join(modules)} (not installed); install it from a plancast "
            f"checkout with: pip install '.[{extras}]' (or, where an index has plancast: "
            f"pip install 'plancast[{extras}]')"
        )


def example_path(name: str) -> Path:
    """A scenario shipped in `examples/` (package data `plancast.examples`: there after `pip install`)."""
    from importlib.resources import files

    path = Path(str(files("plancast.examples").joinpath(name)))
    if not path.is_file():
        raise UserError(f"example {name!r} is missing from this installation; reinstall plancast")
    return path


def version() -> str:
    """The installed distribution's version (pyproject.toml [project] version)."""
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as dist_version

    try:
        return dist_version("plancast")
    except PackageNotFoundError:  # a source tree that was never installed
        return "unknown (not installed)"


def sig(value: float, digits: int = 3) -> str:
    """A figure for people: `digits` significant digits, no exponent in the usual range, thousands
    separated (0.000412, 0.0412, 41.2, 4,120); never 0.0 for a small non-zero number."""
    magnitude = abs(value)
    if 0 < magnitude < 1e-4:
        return f"{value:.{digits - 1}e}"
    text = f"{value:.{digits}g}"  # g drops trailing zeros; it turns to an exponent from 10**digits on
    return f"{value:,.0f}" if magnitude >= 10 ** (digits - 1) or "e" in text else text


def pct(fraction: float) -> str:
    """A fraction as a percentage with `sig`'s digits (0.04%, 12.3%, 100%)."""
    return f"{sig(fraction * 100)}%"


def print_json(obj: Any) -> None:
    """Machine-readable output on stdout, one object: strict JSON (NaN or infinity is a bug, refused)."""
    sys.stdout.write(json.dumps(obj, indent=2, sort_keys=False, default=str, allow_nan=False) + "\n")


ScenarioArg = Annotated[Path, typer.Argument(help="Scenario TOML file (see examples/).", show_default=False)]


OutArg = Annotated[
    Path | None, typer.Option("--out", "-o", help="Run directory to write (created if needed).")
]


RunArg = Annotated[Path, typer.Argument(help="Run directory (from `plancast run` or `simulate --out`).")]


def load(path: Path) -> Any:
    """Load and resolve a scenario, printing its warnings to stderr."""
    from plancast.simulator.loader import load_scenario

    loaded = load_scenario(path)
    for warning in loaded.warnings:
        err.print(f"warning: {warning}", markup=False)
    return loaded.scenario


def write_predicted(run_path: Path, prediction: Any) -> list[Path]:
    """RUN/scenario.toml, RUN/predicted/{events.parquet, summary.json} and a Chrome trace per rank."""
    import tomli_w

    from plancast.simulator.costs.memory_timeline import timeline_by_rank
    from plancast.simulator.goodput import checkpoint_prediction
    from plancast.simulator.loader import to_toml_dict
    from plancast.traces.chrome import export_chrome
    from plancast.traces.store import RunDir, atomic_open, write_events, write_json

    run = RunDir(run_path)
    run.predicted_dir.mkdir(parents=True, exist_ok=True)
    with atomic_open(run.scenario_toml, "wb") as f:
        f.write(tomli_w.dumps(to_toml_dict(prediction.scenario)).encode())
    write_events(run.predicted_events, prediction.events)
    checkpoint = checkpoint_prediction(prediction.scenario)  # compare reconciles it with a checkpointed run
    timeline = timeline_by_rank(prediction.scenario)  # compare joins the measured one (traces/reconcile.py)
    summary = {**prediction.summary, "checkpoint": checkpoint, "rank_memory_timeline": timeline}
    write_json(run.predicted_summary, summary)
    backend = "gloo" if prediction.scenario.cluster.gpu.name.startswith("cpu") else "nccl"
    return export_chrome(
        prediction.events, run.path / "chrome" / "predicted", prediction.scenario.world_size, backend=backend
    )


def ensure_predicted(run_path: Path) -> None:
    """Simulate RUN/scenario.toml into RUN/predicted/ when the run has no prediction yet (the caller holds
    the run's write guard, ``traces.lock.claim``)."""
    from plancast.simulator.predict import simulate as run_simulation
    from plancast.traces.store import RunDir

    run = RunDir(run_path)
    if run.predicted_events.exists():
        return
    if not run.scenario_toml.exists():
        held = " --force" if run.measured_dir.is_dir() else ""  # simulate keeps a measured run's files
        raise UserError(
            f"{run_path} has neither predicted/events.parquet nor scenario.toml; "
            f"run `plancast simulate SCENARIO --out {run_path}{held}` first"
        )
    err.print(f"{run_path}/predicted/ is missing: simulating {run.scenario_toml}", markup=False)
    write_predicted(run_path, run_simulation(load(run.scenario_toml)))
