"""`plancast validate`, `plancast catalog` and `plancast schema`: what a scenario resolves to, what it
can name, and the schema editors check it against.
"""

from __future__ import annotations

import sys
from typing import Annotated, Any

import typer

from plancast.app import ScenarioArg, UserError, app, load, out, print_json, user_errors


@app.command("validate")
def validate(scenario: ScenarioArg) -> None:
    """Check a scenario; print it resolved (every default filled in) as TOML, or the errors."""
    import tomli_w

    from plancast.simulator.loader import to_toml_dict

    with user_errors():
        s = load(scenario)
    sys.stdout.write(tomli_w.dumps(to_toml_dict(s)))


@app.command("catalog")
def catalog(
    kind: Annotated[str, typer.Argument(help="gpus | clusters | models | all")] = "all",
    json_: Annotated[
        bool,
        typer.Option("--json", help='One JSON object: {"gpus": {NAME: {...}}, "clusters": ..., ...}'),
    ] = False,
) -> None:
    """List the GPU, cluster and model presets a scenario can name."""
    kinds = {"gpus", "clusters", "models", "all"}
    with user_errors():
        if kind not in kinds:
            raise UserError(f"unknown catalog {kind!r}; choose one of {sorted(kinds)}")
    if json_:
        print_json(_catalog_json(kind))
        return
    for name, table in (("gpus", _gpu_table), ("clusters", _cluster_table), ("models", _model_table)):
        if kind in (name, "all"):
            out.print(table())


def _gpu_table() -> Any:
    from rich.table import Column, Table

    from plancast.simulator import catalog as cat

    table = Table(
        Column("GPU", no_wrap=True), "bf16 TFLOP/s", "fp32 TFLOP/s", "HBM GB/s", "memory GiB", title="GPUs"
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
    return table


def _cluster_table() -> Any:
    from rich.table import Column, Table

    from plancast.simulator import catalog as cat

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
            f"{t['name']}{' x' + str(t['size']) if 'size' in t else ''} {t['bandwidth_GBps']:g} GB/s "
            f"{t['latency_us']:g} us"
            for t in tiers
        )
        table.add_row(name, str(c["gpu"]), str(c["gpus_per_node"]), desc)
    return table


def _model_table() -> Any:
    from rich.table import Table

    from plancast.simulator import catalog as cat
    from plancast.simulator.costs.params import count_parameters
    from plancast.simulator.scenario import Model

    table = Table("model", "params", "hidden", "layers", "heads/kv", "ffn", "vocab", "mlp", title="Models")
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
    return table


def _sources(found: dict[str, str] | None) -> dict[str, Any]:
    """`{"sources": {path: source}}` for a preset whose every number is cited, else nothing."""
    return {"sources": dict(found)} if found else {}


def _cluster_sources(name: str, cluster: dict[str, Any]) -> dict[str, Any]:
    """A sourced cluster's sources with its GPU's, the latter under `gpu.` (the numbers it runs on)."""
    from plancast.simulator import catalog as cat

    own = cat.CLUSTER_SOURCES.get(name)
    if not own:
        return {}
    gpu = cat.GPU_SOURCES.get(str(cluster["gpu"]), {})
    return {"sources": {**own, **{f"gpu.{path}": src for path, src in gpu.items()}}}


def _catalog_json(kind: str) -> dict[str, Any]:
    """The presets as they appear in scenario tables; models resolved, with their parameter count."""
    from plancast.simulator import catalog as cat
    from plancast.simulator.costs.params import count_parameters
    from plancast.simulator.scenario import Model

    result: dict[str, Any] = {}
    if kind in ("gpus", "all"):
        result["gpus"] = {name: {**g, **_sources(cat.GPU_SOURCES.get(name))} for name, g in cat.GPUS.items()}
    if kind in ("clusters", "all"):
        result["clusters"] = {name: {**c, **_cluster_sources(name, c)} for name, c in cat.CLUSTERS.items()}
    if kind in ("models", "all"):
        result["models"] = {}
        for name in cat.MODELS:
            m = Model.model_validate({"preset": name})
            result["models"][name] = {**m.model_dump(), "num_parameters": count_parameters(m)}
    return result


@app.command("schema")
def schema(
    markdown: Annotated[
        bool, typer.Option("--markdown", help="Print the scenario reference (docs/scenario.md) instead.")
    ] = False,
) -> None:
    """Print the scenario file's JSON Schema, for editors: save it (`plancast schema > scenario.schema.json`)
    and point Even Better TOML / taplo at it with a first line `#:schema ./scenario.schema.json`."""
    import json

    from plancast.simulator.scenario_docs import scenario_json_schema, scenario_markdown

    if markdown:
        sys.stdout.write(scenario_markdown())
    else:
        sys.stdout.write(json.dumps(scenario_json_schema(), indent=2) + "\n")


def _human(n: float) -> str:
    for unit, size in (("T", 1e12), ("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if n >= size:
            return f"{n / size:.3g}{unit}"
    return f"{n:.0f}"
