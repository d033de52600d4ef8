"""`plancast validate` and `plancast catalog`: what a scenario resolves to, and what it can name."""

from __future__ import annotations

import sys
from typing import Annotated, Any

import typer

from plancast.app import ScenarioArg, UserError, app, load, out, user_errors


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
