"""What `plancast sweep` writes beside its ranked plans: what was searched (`searched`, in --json and above
the table), and with `--save-best PATH` the best plan found as a scenario file to simulate, run or submit
as it is (docs/running-on-a-cluster.md: sweep, then `simulate best.toml`, then `submit best.toml`).

The saved file is the user's own scenario with what the plan changes written over it (simulator/loader.py
`plan_tables`): the same model, training and cluster keys, presets kept, so that `plancast simulate
PATH` predicts the very step time the sweep ranked it by (tests/test_cli_sweep_save.py).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from plancast.app import UserError, err

SaveBestOpt = Annotated[
    Path | None,
    typer.Option(
        "--save-best",
        help="Write the best plan as a scenario file (this scenario with the plan's keys written over it) "
        "to simulate, run or submit as it is; never replaces an existing file. Over several sizes or "
        "clusters: the first plan of the ranking, on its cluster and size.",
    ),
]


def check_save_best(path: Path | None) -> None:
    """Bad input before any search: a path that exists (it may be the user's scenario), a folder, or one
    in a missing folder."""
    from plancast.app import check_output_file

    if path is None:
        return
    if path.exists() and not path.is_dir():
        raise UserError(f"--save-best {path} exists; sweep never replaces a file: choose another path")
    check_output_file(path, "--save-best")


def save_best(
    path: Path, scenario_path: Path, planned: Any, label: str, step_time_s: float, preset: str | None = None
) -> None:
    """`planned` (the scenario the sweep simulated for its best plan) as a scenario file at `path`, the
    tables of `scenario_path` kept where the plan leaves them (loader.plan_tables), said on stderr.
    `preset`: the plan was searched on that catalog cluster (sweep --cluster), whose table replaces the
    file's, the site keys the search carried over kept (cluster_search.RUN_SETTINGS)."""
    import tomli_w

    from plancast.commands.calibrate import wants_measuring
    from plancast.simulator.cluster_search import RUN_SETTINGS
    from plancast.simulator.loader import ScenarioError, plan_tables, resolve, to_toml_dict

    data = scenario_tables(scenario_path, "--save-best")
    if preset is not None:
        own = data.get("cluster")
        site = {k: own[k] for k in RUN_SETTINGS if k in own} if isinstance(own, dict) else {}
        data["cluster"] = {"preset": preset, **site}
    try:
        tables, kept = plan_tables(data, planned, str(scenario_path))
    except ScenarioError as e:
        raise UserError(f"--save-best: {e}; nothing written") from None
    measured = kept and preset is None and wants_measuring(scenario_path)
    if (
        measured
    ):  # `simulate` would measure this machine for the plan's own shape: the sweep priced with these
        tables["cluster"] = to_toml_dict(resolve(planned))["cluster"]
    header = (
        f"# written by plancast sweep --save-best from {scenario_path.name}: the best plan found,\n"
        f"# {label}, predicted at {step_time_s:.3f} s a step\n"
    )
    try:
        with path.open("x", encoding="utf-8") as f:  # "x": a file that appeared since the check is kept
            f.write(header + tomli_w.dumps(tables))
    except FileExistsError:
        raise UserError(
            f"--save-best {path} appeared during the search; it was kept, nothing written"
        ) from None
    how = (
        f"over {scenario_path.name}'s keys" + (f", on cluster {preset}" if preset is not None else "")
        if kept
        else "resolved in full (its own tables did not load as it)"
    )
    if measured:
        how += ", its local-cpu cluster spelled out as the sweep priced it (simulate measures it otherwise)"
    err.print(
        f"wrote {path}: the best plan {how}; `plancast simulate {path}` predicts {step_time_s:.3f} s",
        markup=False,
    )


def searched(s: Any, pins: Any, max_memory_gib: float | None) -> dict[str, Any]:
    """What `sweep --json` says the search was given beside its sizes: the scenario's framework, the
    axes pinned as searched (under `--runnable` the schedule axis kept to what the framework ships,
    sweep_axes.Pins.for_framework), whether only plans it runs were kept, and the memory cap."""
    from plancast.simulator.sweep_space import NO_PINS

    framework = s.parallelism.framework
    searched_pins = (pins or NO_PINS).for_framework(framework)
    return {
        "framework": framework,
        "runnable": searched_pins.runnable,
        "pins": {axis: list(values) for axis, values in searched_pins.values},
        "max_memory_gib": max_memory_gib,
    }


def searched_line(s: Any, pins: Any) -> str | None:
    """The line above a sweep's table naming its pinned axes and --runnable (None when neither)."""
    given = searched(s, pins, None)
    if not given["pins"] and not given["runnable"]:
        return None
    axes = " ".join(f"{axis}={','.join(map(str, values))}" for axis, values in given["pins"].items())
    runnable = f" (--runnable: only plans {given['framework']} runs as given)" if given["runnable"] else ""
    return f"searched with {axes or 'no axis pinned'}{runnable}"


def scenario_tables(scenario_path: Path, what: str) -> dict[str, Any]:
    """The scenario file's tables as written (read bounded, as the loader reads it), for `what`."""
    import tomllib

    from plancast.traces import bounded

    try:
        text = bounded.read_text(scenario_path, bounded.MAX_SCENARIO_BYTES, "a scenario")
        return bounded.load_toml(text, str(scenario_path))
    except (OSError, bounded.BoundedReadError, tomllib.TOMLDecodeError) as e:
        raise UserError(f"{what}: {scenario_path} could not be read again ({e}); nothing written") from None
