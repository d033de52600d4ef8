"""`plancast sweep` across GPU counts and cluster types (`--gpus 512,1024 --cluster a,b --rank-by cost`).

Not a verb of its own: `sweep` (plancast/commands/simulate.py) hands over here when it is asked for
more than one size, another cluster or a run-level ranking.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer

from plancast.app import UserError, err, out, print_json, user_errors
from plancast.commands.sweep_output import searched, searched_line


def parse_gpus(text: str) -> list[int]:
    """`--gpus 512,1024,2048` -> [512, 1024, 2048]; a UserError naming the bad entry otherwise."""
    sizes = []
    for part in text.split(","):
        try:
            n = int(part.strip())
        except ValueError:
            raise UserError(f"--gpus {text}: {part.strip()!r} is not a whole number of GPUs") from None
        if n <= 0:
            raise UserError(f"--gpus {text}: {n} must be positive")
        sizes.append(n)
    return sizes


def _fmt(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def cluster_sweep(
    s: Any,
    sizes: list[int],
    clusters: str | None,
    rank_by: str,
    *,
    finalists: int,
    top: int,
    json_: bool,
    table: Path | None,
    max_memory_gib: float | None = None,
    workers: int | None = None,
    pins: Any = None,
    save: tuple[Path, Path] | None = None,
    source: Path | None = None,
) -> None:
    """Search every (cluster, size), rank all finalists together, print them and the Pareto front;
    `pins` (sweep_axes.Pins, sweep --pin) fix axes in every search; `save`: (--save-best's path, the
    scenario's file) to write the first plan of the ranking to; `source`: the scenario's file, whose
    [cluster] preset keeps the keys the file sets over it when --cluster names it."""
    import time

    from rich.progress import Progress

    from plancast.pool import worker_pool
    from plancast.simulator.cluster_search import search
    from plancast.simulator.sweep_space import NO_PINS

    started = time.perf_counter()
    with user_errors():
        names = parse_clusters(clusters)
        own = file_preset(source)
        _say_own_keys(s, names, own)
        with worker_pool(workers) as map_fn, Progress(console=err.console, transient=True) as bar:
            task = bar.add_task("searching", total=len(names) * len(sizes))

            def progress(done: int, total: int, label: str) -> None:
                bar.update(task, description=f"searching plans on {label}", completed=done, total=total)

            try:
                result = search(
                    s, sizes, names, rank_by=rank_by, finalists=finalists, progress=progress,
                    max_memory_gib=max_memory_gib, map_fn=map_fn, pins=pins or NO_PINS, own=own,
                )  # fmt: skip
            except ValueError as e:
                raise UserError(str(e)) from None
    for why in result.skipped:
        err.print(f"skipped {why}", markup=False)
    if table is not None:
        _write_table(result.rows, table)
    if json_:
        given = {"gpus": sizes, "clusters": names, **searched(s, pins, max_memory_gib)}
        print_json({**given, **_json(result, top, time.perf_counter() - started)})
    if not result.rows:  # after the JSON too: a script sees the empty list and exit code 1
        err.print("no plan fits on any of the clusters and sizes searched", markup=False)
        raise typer.Exit(1)
    if save is not None:
        _save_first(save, s, result.rows[0], names, own)
    if not json_:
        _print_ranked(result, top, rank_by, searched_line(s, pins))


def _write_table(rows: list[dict[str, Any]], table: Path) -> None:
    """--table: every ranked row as CSV, its warnings joined."""
    import pandas as pd

    joined = [{**r, "warnings": "; ".join(r["warnings"])} for r in rows]
    pd.DataFrame(joined).to_csv(table, index=False)
    err.print(f"wrote {table}", markup=False)


def file_preset(source: Path | None) -> str | None:
    """The catalog cluster preset the scenario file's [cluster] table is written over (None: none, or
    no file); the loader resolves it away (loader.resolve)."""
    from plancast.commands.sweep_output import scenario_tables
    from plancast.simulator.catalog import CLUSTERS

    if source is None:
        return None
    cluster = scenario_tables(source, "sweep --cluster").get("cluster")
    preset = cluster.get("preset") if isinstance(cluster, dict) else None
    return preset if isinstance(preset, str) and preset in CLUSTERS else None


def _say_own_keys(s: Any, names: list[str | None], own: str | None) -> None:
    """One stderr line when the scenario sets [cluster] keys over its preset and the search tries other
    presets, which take their catalog values (cluster_search.with_cluster): no plan is priced without
    the user seeing which of their keys it left out."""
    from plancast.simulator.calibration.microbench import is_measured
    from plancast.simulator.cluster_search import own_cluster_keys

    others = [n for n in names if n is not None and n != own]
    if not others or own is None:
        return
    uses = f"{', '.join(others)} {'use their' if len(others) > 1 else 'uses its'} catalog values"
    if is_measured(s.cluster):  # local-cpu as measured on this machine
        # every value that differs from the preset's came from the microbenchmarks: a [cluster] key
        # written by hand turns the measurement off (plancast/commands/calibrate.py measured_local)
        err.print(
            f"the scenario's cluster is {own} as measured on this machine: the measured values hold there; "
            f"{uses}",
            markup=False,
        )
        return
    keys = own_cluster_keys(s, own)
    if keys:
        shown = ", ".join(sorted(keys)[:6]) + (f" and {len(keys) - 6} more" if len(keys) > 6 else "")
        err.print(
            f"the scenario sets {shown} over its cluster preset {own}: they describe that cluster and "
            f"hold there; {uses}",
            markup=False,
        )


def _save_first(
    save: tuple[Path, Path], s: Any, row: dict[str, Any], names: list[str | None], own: str | None
) -> None:
    """The ranking's first plan as --save-best writes a plan, on its own cluster and size: a --cluster
    preset's row was searched on that preset (cluster_search.with_cluster), the others (and the rows of
    the scenario's own preset, `own`) on the scenario's cluster, whose table the file keeps."""
    from dataclasses import fields

    from plancast.commands.sweep_output import save_best
    from plancast.simulator.cluster_search import with_cluster
    from plancast.simulator.sweep import planned_scenario
    from plancast.simulator.sweep_axes import Plan

    preset = None if names == [None] or row["cluster"] == own else row["cluster"]
    base = s if preset is None else with_cluster(s, preset)
    plan = Plan(**{f.name: row[f.name] for f in fields(Plan)})
    planned = planned_scenario(base, row["gpus"], plan)
    label = f"{plan.label()} on {row['gpus']:,} GPUs"
    save_best(save[0], save[1], planned, label, row["step_time_s"], preset)


def _print_ranked(result: Any, top: int, rank_by: str, searched_with: str | None) -> None:
    """The finalists of every search ranked together, with what `validate` warns about each."""
    from plancast.simulator.sweep_inputs import warning_lines

    if searched_with is not None:
        out.print(searched_with, markup=False)
    out.print(f"{len(result.rows)} finalists of {result.enumerated:,} plans, ranked by {rank_by}")
    out.print(ranked_table(result.rows[:top]))
    for line in warning_lines([row["warnings"] for row in result.rows[:top]]):  # docs/sweep.md
        out.print(line, markup=False)


def _json(result: Any, top: int, seconds: float) -> dict[str, Any]:
    """`sweep --json` over several sizes or clusters: the single-size object's keys, plus the ranking key
    and the time-to-train vs cost Pareto front (docs/cli.md)."""
    return {
        "rank_by": result.rank_by,
        "plans_enumerated": result.enumerated,
        "plans_fitting": result.fits,
        "seconds": seconds,
        "plans": result.rows[:top],
        "pareto": [r for r in result.rows if r["pareto"]],
    }


def parse_clusters(text: str | None) -> list[str | None]:
    """`--cluster a,b` -> ["a", "b"] (catalog presets); None -> [None], the scenario's own cluster."""
    from plancast.simulator.catalog import CLUSTERS

    if text is None:
        return [None]
    names = [c.strip() for c in text.split(",") if c.strip()]
    unknown = [c for c in names if c not in CLUSTERS]
    if unknown or not names:
        raise UserError(
            f"--cluster: unknown preset(s) {', '.join(unknown) or '(none given)'}; "
            f"choose from {', '.join(CLUSTERS)}"
        )
    return list(names)


def ranked_table(rows: list[dict[str, Any]]) -> Any:
    """The rich table of ranked plans across clusters and sizes (Pareto-front plans starred)."""
    from rich.table import Table

    view = Table("#", "cluster", "GPUs", "plan", "step s", "goodput", "days", "cost USD", "MWh", "Pareto")
    for i, r in enumerate(rows, 1):
        view.add_row(
            str(i),
            r["cluster"],
            str(r["gpus"]),
            r["plan"],
            _fmt(r["step_time_s"], ".3f"),
            _fmt(r["goodput_fraction"], ".1%"),
            _fmt(r["time_to_train_days"], ".3g"),
            _fmt(r["cost_usd"], ",.0f"),
            _fmt(r["energy_MWh"], ",.4g"),
            "*" if r["pareto"] else "",
        )
    return view
