"""Golden summaries: what `simulate` and `plancast simulate --json` print for every example scenario and
every published run, stored as data (tests/data/golden/) so that a refactor or a speed change that moves
any number is caught.

One source of cases for the test (tests/simulator/test_golden_summaries.py) and for the script that
rewrites the data (scripts/update_golden.py). Per case the data holds `summary`
(`simulate(s, events=False).summary`) and, where the case goes through the CLI, `json` (the object
`plancast simulate FILE --json` prints). The CLI runs in-process with the shipped local-cpu
constants (PLANCAST_LOCAL_CPU=shipped), so the data does not depend on the machine that wrote it.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import tomli_w

from benchmarks.published_data import FP8_RUNS, MOE_AND_LONG_CONTEXT_RUNS, RUNS, PublishedRun, scenario_dict
from plancast.commands.calibrate import LOCAL_CPU_ENV
from plancast.simulator.loader import ScenarioError, load_scenario, parse_scenario
from plancast.simulator.predict import simulate
from plancast.simulator.scenario import Scenario
from tests.cli_runner import REPO, cli_main

GOLDEN_DIR = REPO / "tests" / "data" / "golden"
REL = 1e-9
"""Relative tolerance of a float: the same arithmetic in another order may move the last bits."""
ABS = 1e-12
"""Below this a summary value is the rounding noise of a zero (a bubble of 2e-14 s), whose relative
error means nothing."""
SAMPLE_MAX_ACTIONS = 3840
"""The test compares every example and every published run up to this many pipeline passes per step
(every source has such rows: the DeepSeek-V3 report's one row, DualPipeV's 16 x 2 chunks x 120
micro-batches, sets the bound); the data holds every run. Larger runs take seconds each."""
FRAMEWORKS_MODELLED = ("megatron-lm", "torchtitan", "deepspeed")
"""A published run's framework is named in its scenario where plancast models it (as
benchmarks/fit_published.py `run_scenario` does; that module needs scipy, so it is not imported)."""


@dataclass(frozen=True)
class Case:
    """One scenario whose outputs are stored: `group` names the data file, `name` its key there."""

    group: str
    name: str
    source: str
    """The published source (benchmarks/published_data.py), or "examples"."""
    data: dict[str, Any]
    """The TOML tables of the scenario."""
    through_cli: bool
    """Also store what `plancast simulate --json` prints (slower: every example, one row per source)."""
    actions: int
    """Pipeline passes of one step per pipeline replica (p x v x m): what a simulation's time grows with."""

    @property
    def sampled(self) -> bool:
        """Whether the test compares this case (every example; runs up to SAMPLE_MAX_ACTIONS)."""
        return self.group == "examples" or self.actions <= SAMPLE_MAX_ACTIONS

    def scenario(self) -> Scenario:
        return parse_scenario(self.data, self.name).scenario


def _example_cases() -> list[Case]:
    import tomllib

    cases = []
    for path in sorted((REPO / "examples").glob("*.toml")):
        data = tomllib.loads(path.read_text(encoding="utf-8"))
        cases.append(Case("examples", path.name, "examples", data, through_cli=True, actions=_actions(data)))
    return cases


def _run_data(run: PublishedRun) -> dict[str, Any]:
    data = scenario_dict(run)
    if run.framework in FRAMEWORKS_MODELLED:
        data["parallelism"]["framework"] = run.framework
    return data


def _parses(data: dict[str, Any]) -> bool:
    """Whether the simulator of this tree accepts the scenario (the MoE / long-context rows need
    issue 13's keys; once they parse they join the golden set, and the test asks for a rewrite)."""
    try:
        parse_scenario(data)
    except ScenarioError:
        return False
    return True


def _actions(data: dict[str, Any]) -> int:
    s = parse_scenario(data).scenario
    return s.pp * s.vpp * s.num_microbatches


def _run_cases() -> list[Case]:
    """Every published run that parses; of each source, the run with the fewest pipeline passes also goes
    through the CLI."""
    cases = []
    for run in (*RUNS, *MOE_AND_LONG_CONTEXT_RUNS, *FP8_RUNS):
        data = _run_data(run)
        if run in MOE_AND_LONG_CONTEXT_RUNS and not _parses(data):
            continue
        cases.append(
            Case("published_runs", run.name, run.source, data, through_cli=False, actions=_actions(data))
        )
    smallest: dict[str, Case] = {}
    for case in cases:
        if case.source not in smallest or case.actions < smallest[case.source].actions:
            smallest[case.source] = case
    return [replace(c, through_cli=True) if smallest[c.source] is c else c for c in cases]


def cases() -> list[Case]:
    """Every example and every published run that parses."""
    return _example_cases() + _run_cases()


@contextmanager
def _shipped_local_cpu() -> Iterator[None]:
    old = os.environ.get(LOCAL_CPU_ENV)
    os.environ[LOCAL_CPU_ENV] = "shipped"
    try:
        yield
    finally:
        if old is None:
            del os.environ[LOCAL_CPU_ENV]
        else:
            os.environ[LOCAL_CPU_ENV] = old


def cli_json(case: Case, folder: Path) -> dict[str, Any]:
    """What `plancast simulate FILE --json` prints for the case (examples: the file in examples/)."""
    path = REPO / "examples" / case.name if case.group == "examples" else folder / f"{case.name}.toml"
    if case.group != "examples":
        path.write_bytes(tomli_w.dumps(case.data).encode())
    with _shipped_local_cpu():
        code, stdout, stderr = cli_main("simulate", str(path), "--json")
    if code != 0:
        raise RuntimeError(f"plancast simulate {path} --json exited {code}: {stderr}")
    result: dict[str, Any] = json.loads(stdout)
    return result


def outputs(case: Case, folder: Path) -> dict[str, Any]:
    """The stored outputs of one case (`folder`: where a row's TOML file is written for the CLI)."""
    if case.group == "examples":
        scenario = load_scenario(REPO / "examples" / case.name).scenario
    else:
        scenario = case.scenario()
    out: dict[str, Any] = {"summary": simulate(scenario, events=False).summary}
    if case.through_cli:
        out["json"] = cli_json(case, folder)
    return out


def read_group(group: str) -> dict[str, dict[str, Any]]:
    path = GOLDEN_DIR / f"{group}.json"
    if not path.exists():
        return {}
    data: dict[str, dict[str, Any]] = json.loads(path.read_text(encoding="utf-8"))
    return data


def write_group(group: str, by_name: dict[str, dict[str, Any]]) -> Path:
    """Compact JSON, one case per line (a changed number shows as a one-line diff)."""
    GOLDEN_DIR.mkdir(parents=True, exist_ok=True)
    lines = [
        f"{json.dumps(name)}:{json.dumps(value, separators=(',', ':'), sort_keys=True, allow_nan=False)}"
        for name, value in sorted(by_name.items())
    ]
    path = GOLDEN_DIR / f"{group}.json"
    path.write_text("{\n" + ",\n".join(lines) + "\n}\n", encoding="utf-8")
    return path


def differences(expected: Any, actual: Any, where: str = "") -> list[str]:
    """Every place where `actual` differs from `expected` (floats: relative REL, or ABS near zero; the
    rest exactly)."""
    if isinstance(expected, dict) and isinstance(actual, dict):
        found = [f"{where}.{k}: missing" for k in expected if k not in actual]
        found += [f"{where}.{k}: not in the golden data" for k in actual if k not in expected]
        for k in expected.keys() & actual.keys():
            found += differences(expected[k], actual[k], f"{where}.{k}")
        return found
    if isinstance(expected, list) and isinstance(actual, list) and len(expected) == len(actual):
        return [
            d
            for i, (e, a) in enumerate(zip(expected, actual, strict=True))
            for d in differences(e, a, f"{where}[{i}]")
        ]
    numbers = (int, float)
    if (
        isinstance(expected, numbers)
        and isinstance(actual, numbers)
        and not isinstance(expected, bool)
        and not isinstance(actual, bool)
        and (isinstance(expected, float) or isinstance(actual, float))
    ):
        if math.isclose(expected, actual, rel_tol=REL, abs_tol=ABS):
            return []
        return [f"{where}: {actual!r}, golden {expected!r}"]
    if type(expected) is not type(actual) or expected != actual:
        return [f"{where}: {actual!r}, golden {expected!r}"]
    return []
