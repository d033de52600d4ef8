"""The scenario's reference, generated from the pydantic models (so it cannot drift from them).

- `scenario_json_schema`: the JSON Schema that `plancast schema` prints; editors (Even Better TOML,
  taplo) validate and complete scenario files with it.
- `scenario_markdown`: docs/scenario.md, one table per TOML section with type, default and the
  field's docstring.

Both start from `Scenario.model_json_schema()` and relax what presets supply: a `[model]` or
`[cluster]` with a `preset` needs none of its other keys, and a `[cluster.gpu]` over a preset may set
only some keys, so the schema requires none of them (`plancast validate` checks the resolved plan).
"""

from __future__ import annotations

import json
import types
import typing
from typing import Any

from pydantic import BaseModel
from pydantic_core import PydanticUndefined

from plancast.simulator.cluster import GPU
from plancast.simulator.scenario import Scenario

SCHEMA_DRAFT = "https://json-schema.org/draft/2020-12/schema"
_PRESET_FILLED = ("Model", "Cluster", "GPU")


def scenario_json_schema() -> dict[str, Any]:
    """The scenario file's JSON Schema (draft 2020-12)."""
    schema = Scenario.model_json_schema(mode="validation")
    defs = schema["$defs"]
    for name in _PRESET_FILLED:
        defs[name].pop("required", None)
    gpu = defs["Cluster"]["properties"]["gpu"]
    gpu_ref = {k: v for k, v in gpu.items() if k == "$ref"} or {"$ref": "#/$defs/GPU"}
    defs["Cluster"]["properties"]["gpu"] = {
        "description": gpu.get("description", ""),
        "anyOf": [{"type": "string", "description": "a catalog GPU name (`plancast catalog gpus`)"}, gpu_ref],
    }
    peak = defs["GPU"]["properties"]["peak_tflops"]
    defs["GPU"]["properties"]["peak_tflops"] = {
        "description": peak.get("description", ""),
        "anyOf": [
            {"type": "number", "exclusiveMinimum": 0},
            {k: v for k, v in peak.items() if k != "description"},
        ],
    }
    return {"$schema": SCHEMA_DRAFT, "title": "plancast scenario", **schema}


def _sections(model: type[BaseModel], path: str) -> list[tuple[str, type[BaseModel]]]:
    """(TOML header, model) for `model` and every table nested in it, depth first."""
    found = [(path, model)]
    for name, field in model.model_fields.items():
        nested, is_list = _nested_model(field.annotation)
        if nested is not None:
            header = f"{path}.{name}" if path else name
            found += _sections(nested, f"[{header}]" if is_list else header)
    return found


def _nested_model(annotation: Any) -> tuple[type[BaseModel] | None, bool]:
    """The BaseModel inside `annotation` (X, X | None, list[X]) and whether it is a list."""
    origin = typing.get_origin(annotation)
    if origin in (list, tuple):
        inner, _ = _nested_model(typing.get_args(annotation)[0])
        return inner, True
    if origin in (typing.Union, types.UnionType):
        for arg in typing.get_args(annotation):
            inner, is_list = _nested_model(arg)
            if inner is not None:
                return inner, is_list
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation, False
    return None, False


def _type_text(prop: dict[str, Any]) -> str:
    if "enum" in prop:
        return " \\| ".join(json.dumps(v) for v in prop["enum"])
    if "const" in prop:
        return json.dumps(prop["const"])
    if "anyOf" in prop:
        parts = [_type_text(p) for p in prop["anyOf"] if p.get("type") != "null"]
        return " or ".join(parts) + (" (optional)" if len(parts) < len(prop["anyOf"]) else "")
    if "$ref" in prop:
        return "table"
    kind = str(prop.get("type", "any"))
    if kind == "array":
        kind = f"list of {_type_text(prop.get('items', {}))}"
    elif kind == "object" and isinstance(prop.get("additionalProperties"), dict):
        kind = f"table of {_type_text(prop['additionalProperties'])}"
    bounds = [
        f"{op} {prop[key]:g}"
        for key, op in (
            ("exclusiveMinimum", ">"),
            ("minimum", ">="),
            ("exclusiveMaximum", "<"),
            ("maximum", "<="),
        )
        if key in prop
    ]
    return kind + (f" ({', '.join(bounds)})" if bounds else "")


def _default_text(model: type[BaseModel], name: str) -> str:
    field = model.model_fields[name]
    if field.default is PydanticUndefined and field.default_factory is None:
        return "from the preset" if model.__name__ in _PRESET_FILLED else "required"
    default = field.get_default(call_default_factory=True)
    if isinstance(default, BaseModel):
        return "see its table"
    return "-" if default is None else f"`{json.dumps(default)}`"


def _one_line(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def scenario_markdown() -> str:
    """docs/scenario.md: every section and key of a scenario file."""
    schema = scenario_json_schema()
    lines = [
        "# Scenario reference",
        "",
        "<!-- Generated from simulator/scenario.py by `plancast schema --markdown` "
        "(scripts/gen_scenario_docs.py); do not edit by hand. -->",
        "",
        "A scenario is a TOML file with four tables: `[model]`, `[training]`, `[parallelism]` and "
        "`[cluster]`. Unknown keys are errors. `preset` in `[model]` or `[cluster]` fills that table from "
        "the catalog (`plancast catalog`) and explicit keys override the preset's; `[cluster.gpu]` over a "
        "preset may set only some keys. Every default below is filled in by `plancast validate`.",
    ]
    for header, model in _sections(Scenario, "")[1:]:
        props = schema["$defs"][model.__name__]["properties"]
        if model is GPU:
            props = {
                **props,
                "peak_tflops": scenario_json_schema()["$defs"]["GPU"]["properties"]["peak_tflops"],
            }
        lines += ["", f"## `[{header}]`", "", _one_line(model.__doc__ or ""), ""]
        lines += ["| key | type | default | meaning |", "|---|---|---|---|"]
        for name, field in model.model_fields.items():
            lines.append(
                f"| `{name}` | {_type_text(props[name])} | {_default_text(model, name)} | "
                f"{_one_line(field.description or '')} |"
            )
    return "\n".join(lines) + "\n"
