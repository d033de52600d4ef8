"""`plancast`: one command, many verbs. The front door only: every verb imports its package lazily.

Bad input never shows a traceback: `UserError` (and the packages' own error types) become a message
naming what is wrong and how to fix it, and exit code 2.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any, TypeVar

import typer
from rich.console import Console

app = typer.Typer(
    name="plancast",
    help="Simulate a parallel training plan, run it, and compare the two.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,  # help texts show [cluster] and friends literally
)
# Piped output (a file, grep) gets a wide console so tables are never cut to 80 columns.
out = Console(highlight=False, soft_wrap=True, width=None if sys.stdout.isatty() else 200)
err = Console(stderr=True, highlight=False, soft_wrap=True)

EXIT_BAD_INPUT = 2
F = TypeVar("F", bound=Callable[..., Any])


class UserError(Exception):
    """Bad input from the user: printed without a traceback, exit code 2."""


def _user_error_types() -> tuple[type[BaseException], ...]:
    from plancast.simulator.scenario import ScenarioError

    types: list[type[BaseException]] = [UserError, ScenarioError]
    try:
        from plancast.traces.schema import SchemaError

        types.append(SchemaError)
        from plancast.traces.store import TraceReadError

        types.append(TraceReadError)
    except ImportError:  # pragma: no cover - traces.store lands with the compare issue
        pass
    return tuple(types)


@contextmanager
def user_errors() -> Iterator[None]:
    """Turn known bad-input errors into a message and exit 2."""
    try:
        yield
    except _user_error_types() as e:
        err.print(f"error: {e}", markup=False)
        raise typer.Exit(EXIT_BAD_INPUT) from None


def print_json(obj: Any) -> None:
    """Machine-readable output on stdout, one object."""
    sys.stdout.write(json.dumps(obj, indent=2, sort_keys=False, default=str) + "\n")


ScenarioArg = Annotated[Path, typer.Argument(help="Scenario TOML file (see examples/).", show_default=False)]


def load(path: Path) -> Any:
    """Load and resolve a scenario, printing its warnings to stderr."""
    from plancast.simulator.scenario import load_scenario

    loaded = load_scenario(path)
    for warning in loaded.warnings:
        err.print(f"warning: {warning}", markup=False)
    return loaded.scenario


@app.command()
def validate(scenario: ScenarioArg) -> None:
    """Check a scenario; print it resolved (every default filled in) as TOML, or the errors."""
    import tomli_w

    from plancast.simulator.scenario import to_toml_dict

    with user_errors():
        s = load(scenario)
    sys.stdout.write(tomli_w.dumps(to_toml_dict(s)))


@app.command()
def catalog(
    kind: Annotated[str, typer.Argument(help="gpus | clusters | models | all")] = "all",
) -> None:
    """List the GPU, cluster and model presets a scenario can name."""
    from rich.table import Column, Table

    from plancast.simulator import catalog as cat

    kinds = {"gpus", "clusters", "models", "all"}
    with user_errors():
        if kind not in kinds:
            raise UserError(f"unknown catalog {kind!r}; choose one of {sorted(kinds)}")
    if kind in ("gpus", "all"):
        table = Table(
            Column("GPU", no_wrap=True),
            "bf16 TFLOP/s",
            "fp32 TFLOP/s",
            "HBM GB/s",
            "memory GiB",
            title="GPUs",
        )
        for name, g in cat.GPUS.items():
            peak: Any = g["peak_tflops"]
            table.add_row(
                name,
                f"{peak.get('bf16', 0):g}",
                f"{peak.get('fp32', 0):g}",
                f"{g['hbm_GBps']:g}",
                f"{g['memory_GiB']:g}",
            )
        out.print(table)
    if kind in ("clusters", "all"):
        table = Table(
            Column("cluster", no_wrap=True),
            Column("GPU", no_wrap=True),
            "GPUs/node",
            "tiers (GB/s per GPU, latency us)",
            title="Clusters",
        )
        for name, c in cat.CLUSTERS.items():
            tiers: Any = c["tiers"]
            desc = ", ".join(
                f"{t['name']} {t['bandwidth_GBps']:g} GB/s {t['latency_us']:g} us" for t in tiers
            )
            table.add_row(name, str(c["gpu"]), str(c["gpus_per_node"]), desc)
        out.print(table)
    if kind in ("models", "all"):
        from plancast.simulator.costs.params import count_parameters
        from plancast.simulator.scenario import Model

        table = Table(
            "model", "params", "hidden", "layers", "heads/kv", "ffn", "vocab", "mlp", title="Models"
        )
        for name in cat.MODELS:
            m = Model.model_validate({"preset": name})
            table.add_row(
                name,
                _human(count_parameters(m)),
                str(m.hidden_size),
                str(m.num_hidden_layers),
                f"{m.num_attention_heads}/{m.kv_heads}",
                str(m.ffn_size),
                str(m.vocab_size),
                m.activation,
            )
        out.print(table)


def _human(n: float) -> str:
    for unit, size in (("T", 1e12), ("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if n >= size:
            return f"{n / size:.3g}{unit}"
    return f"{n:.0f}"


def main() -> None:
    """Console entry point."""
    _register_verbs()
    try:
        app(standalone_mode=True)
    except _user_error_types() as e:  # any verb: bad input is a message and exit 2, never a traceback
        err.print(f"error: {e}", markup=False)
        sys.exit(EXIT_BAD_INPUT)


def _register_verbs() -> None:
    """Verbs that live in their own modules (kept out of this file so each stays small)."""
    from plancast import verbs  # noqa: F401  (registers its commands on `app`)
