"""Loading a scenario: TOML or a dict -> field validation (pydantic) -> plan checks -> resolved scenario.

The schema lives in `scenario.py`, the cross-field plan checks in `validation.py`; this module imports
both (imports run one way: scenario <- validation <- loader). Errors collect every problem with its key
path and the fix (`ScenarioError`).
"""

from __future__ import annotations

import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from plancast.simulator.scenario import DEPRECATED_KEYS, Scenario
from plancast.simulator.scenario_memory import MemoryParallelismKeys, MemoryTrainingKeys
from plancast.simulator.scenario_moe import MoeParallelismKeys, MoeTrainingKeys
from plancast.simulator.validation import Problem, check_plan
from plancast.traces import bounded
from plancast.traces.bounded import BoundedReadError, load_toml, read_text


class ScenarioError(ValueError):
    """A scenario that cannot be simulated or run; `problems` lists every reason."""

    def __init__(self, problems: list[Problem], source: str = "scenario") -> None:
        self.problems = problems
        self.source = source
        lines = "\n".join(f"  - {p}" for p in problems)
        super().__init__(f"{source} is not valid ({len(problems)} problem(s)):\n{lines}")


def _loc(loc: tuple[int | str, ...]) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def _problems_from_pydantic(err: ValidationError) -> list[Problem]:
    problems = []
    for e in err.errors():
        loc = tuple(p for p in e["loc"] if not (isinstance(p, str) and p.startswith("function-")))
        msg = e["msg"].removeprefix("Value error, ")
        if e["type"] == "unknown_preset":
            loc = (*loc, e["ctx"]["key"])
        elif e["type"] == "extra_forbidden":
            msg = "unknown key; remove it or check its spelling in the scenario reference (docs/scenario.md)"
        elif e["type"] == "missing":
            msg = "required key is missing"
        problems.append(Problem(_loc(loc), msg))
    return problems


@dataclass(frozen=True, slots=True)
class Loaded:
    """A resolved scenario and the warnings about legal but unwise choices."""

    scenario: Scenario
    warnings: tuple[str, ...]


def parse_scenario(data: Mapping[str, Any], source: str = "scenario") -> Loaded:
    """Validate a scenario dict (TOML tables) and resolve it; raises ScenarioError."""
    data, renamed = _renamed(data, source)
    try:
        raw = Scenario.model_validate(data)
    except ValidationError as err:
        raise ScenarioError(_problems_from_pydantic(err), source) from None
    errors, warnings = check_plan(raw)
    if errors:
        raise ScenarioError(errors, source)
    return Loaded(resolve(raw), (*renamed, *warnings))


def _renamed(data: Mapping[str, Any], source: str) -> tuple[Mapping[str, Any], list[str]]:
    """``data`` with deprecated keys under their new names (``DEPRECATED_KEYS``), and a warning for each."""
    out, warnings, problems = dict(data), [], []
    for (table, old), new in DEPRECATED_KEYS.items():
        section = out.get(table)
        if not isinstance(section, Mapping) or old not in section:
            continue
        if new in section:
            message = f"is the old name of {new}, which is also given; keep only {new}"
            problems.append(Problem(f"{table}.{old}", message))
        else:
            out[table] = {(new if k == old else k): v for k, v in section.items()}
            warnings.append(f"{table}.{old} is deprecated: rename it {table}.{new} (same value, same unit)")
    if problems:
        raise ScenarioError(problems, source)
    return out, warnings


def load_scenario(path: str | Path) -> Loaded:
    """Read a TOML scenario file; raises ScenarioError (with the file name) on any problem."""
    path = Path(path)
    try:
        data = load_toml(read_text(path, bounded.MAX_SCENARIO_BYTES, "a scenario"), str(path))
    except BoundedReadError as err:
        raise ScenarioError([Problem("", str(err))], str(path)) from None
    except tomllib.TOMLDecodeError as err:
        raise ScenarioError([Problem("", f"TOML syntax error: {err}")], str(path)) from None
    except RecursionError:  # tomllib recurses once per nested array or inline table
        raise ScenarioError(
            [Problem("", "arrays or tables nested too deeply to read; a scenario needs two levels at most")],
            str(path),
        ) from None
    return parse_scenario(data, str(path))


def resolve(raw: Scenario) -> Scenario:
    """Fill every default: data-parallel degree, layer split, outermost tier size."""
    par = raw.parallelism.model_copy(
        update={"data_parallel_degree": raw.dp, "pipeline_layer_split": list(raw.layer_split)}
    )
    tiers = [
        t.model_copy(update={"size": s})
        for t, s in zip(raw.cluster.tiers, raw.cluster.tier_sizes, strict=True)
    ]
    cluster = raw.cluster.model_copy(update={"tiers": tiers, "preset": None})
    model = raw.model.model_copy(update={"preset": None})
    return raw.model_copy(update={"parallelism": par, "cluster": cluster, "model": model})


def to_toml_dict(scenario: Scenario) -> dict[str, Any]:
    """The scenario as TOML-ready tables (None values dropped; TOML has no null)."""
    tables = scenario.model_dump(mode="json", exclude_none=True)
    # pydantic puts inherited fields first: the MoE and memory keys go after each table's own, so a
    # resolved scenario reads as before with those keys at the end
    inherited = {
        "training": (*MemoryTrainingKeys.model_fields, *MoeTrainingKeys.model_fields),
        "parallelism": (*MemoryParallelismKeys.model_fields, *MoeParallelismKeys.model_fields),
    }
    for name, keys in inherited.items():
        table = tables.get(name)
        if isinstance(table, dict):
            own = {k: v for k, v in table.items() if k not in keys}
            tables[name] = {**own, **{k: table[k] for k in keys if k in table}}
    return tables


PLAN_TABLES = ("parallelism", "training", "cluster")
"""The tables a sweep's plan and size change (sweep_axes.Plan.apply, sweep._base_for)."""


def plan_tables(
    data: Mapping[str, Any], planned: Scenario, source: str = "scenario"
) -> tuple[dict[str, Any], bool]:
    """The tables of a scenario file (`data`, as read) with a plan written over them, and whether they were
    kept: each key of `PLAN_TABLES` whose value in `planned` (the file's scenario with a sweep's plan
    applied, resized to its GPUs) differs from the file's own resolved value is set, or removed where
    `planned` leaves it unset or to its framework (the loader fills it again); then each key the tables
    still load otherwise (a resized cluster's tiers) is set as `planned` has it.
    Every other key stays as written (presets stay presets). Where they still do not load as `planned`,
    the whole resolved scenario instead, and False. ScenarioError as `parse_scenario` raises it for
    `data`."""
    renamed, _ = _renamed(data, source)
    own = parse_scenario(renamed, source).scenario.model_dump(mode="json")
    want = planned.model_dump(mode="json")
    tables = {name: dict(part) if isinstance(part, Mapping) else part for name, part in renamed.items()}
    derived = {"parallelism": planned.derived_keys}  # the loader derives them for the plan again
    for name in PLAN_TABLES:
        table = tables.setdefault(name, {})
        for key, value in want[name].items():
            if value != own[name].get(key) and key != "tiers" and key not in derived.get(name, ()):
                _set(table, key, value)
    target = resolve(planned)
    resolved = target.model_dump(mode="json")
    for _ in range(2):  # what the loader derives differently, set as planned (it may derive more from it)
        try:
            got = parse_scenario(tables, source).scenario
        except ScenarioError:
            break
        if got == target:
            return tables, True
        loaded = got.model_dump(mode="json")
        for name in PLAN_TABLES:
            for key, value in resolved[name].items():
                if value != loaded[name].get(key):
                    _set(tables[name], key, value)
    return to_toml_dict(target), False


def _set(table: dict[str, Any], key: str, value: Any) -> None:
    """`key` set to `value` in a TOML table, or dropped where None (TOML has no null; the loader fills it)."""
    if value is None:
        table.pop(key, None)
    else:
        table[key] = value
