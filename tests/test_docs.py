"""The docs cannot drift: docs/scenario.md and docs/scenario.schema.json are what the models generate,
every example validates against the schema `plancast schema` prints, and nothing points users at
files they do not have."""

from __future__ import annotations

import json
import subprocess
import tomllib
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from tests.cli_runner import cli_main

REPO = Path(__file__).resolve().parents[1]
EXAMPLES = sorted((REPO / "examples").glob("*.toml"))


def _schema() -> dict[str, Any]:
    code, stdout, stderr = cli_main("schema")
    assert code == 0, stderr
    schema: dict[str, Any] = json.loads(stdout)
    jsonschema.Draft202012Validator.check_schema(schema)
    return schema


def test_committed_scenario_reference_is_the_generated_one() -> None:
    code, stdout, _ = cli_main("schema", "--markdown")
    assert code == 0
    assert (REPO / "docs" / "scenario.md").read_text(encoding="utf-8") == stdout, (
        "docs/scenario.md is stale: run `.venv/bin/python scripts/gen_scenario_docs.py` and commit it"
    )
    committed = json.loads((REPO / "docs" / "scenario.schema.json").read_text(encoding="utf-8"))
    assert committed == _schema(), "docs/scenario.schema.json is stale: run scripts/gen_scenario_docs.py"


def test_reference_documents_every_key() -> None:
    from plancast.simulator.scenario import Scenario
    from plancast.simulator.scenario_docs import _sections

    text = (REPO / "docs" / "scenario.md").read_text(encoding="utf-8")
    for header, model in _sections(Scenario, "")[1:]:
        assert f"## `[{header}]`" in text
        for name, field in model.model_fields.items():
            assert f"| `{name}` |" in text
            assert field.description, f"{model.__name__}.{name} has no docstring"


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.name for p in EXAMPLES])
def test_every_example_validates_against_the_schema(path: Path) -> None:
    jsonschema.validate(tomllib.loads(path.read_text(encoding="utf-8")), _schema())


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        ({"parallelism": {"tp": 2}}, "Additional properties are not allowed ('tp' was unexpected)"),
        ({"training": {"dtype": "fp8"}}, "'fp8' is not one of"),
        ({"cluster": {"preset": "dgx-a100-80gb", "gpu": {"memory_GiB": -1}}}, "-1 is less than or equal to"),
    ],
)
def test_schema_rejects_what_the_loader_rejects(edit: dict[str, Any], message: str) -> None:
    data = {**tomllib.loads(EXAMPLES[0].read_text(encoding="utf-8")), **edit}
    with pytest.raises(jsonschema.ValidationError, match=message.replace("(", r"\(").replace(")", r"\)")):
        jsonschema.validate(data, _schema())


def test_schema_accepts_presets_and_partial_gpu_overrides() -> None:
    data = {
        "model": {"preset": "llama3-8b"},
        "cluster": {"preset": "dgx-a100-80gb", "gpu": {"memory_GiB": 40}},
    }
    jsonschema.validate(data, _schema())
    jsonschema.validate({**data, "cluster": {"preset": "dgx-a100-80gb", "gpu": "H100-SXM5-80GB"}}, _schema())


def test_nothing_points_users_outside_the_project() -> None:
    result = subprocess.run(
        [
            "grep",
            "-rn",
            r"shared/\|DESIGN.md",
            "README.md",
            "docs",
            "plancast",
            "simulator",
            "traces",
            "runtime",
            "dashboard",
            "examples",
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 1, result.stdout  # grep: 1 = no match
