"""Presets inside a scenario: a catalog name (or a calibrated profile file) whose keys explicit keys override.

Used by the pydantic models' "before" validators (`scenario.py`); errors are pydantic errors located at
the key that named the preset, so the loader reports them with their key path.
"""

from __future__ import annotations

import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic_core import PydanticCustomError

from plancast.simulator import catalog


def lookup_preset(table: dict[str, dict[str, object]], name: str, what: str, key: str) -> dict[str, object]:
    """A preset, or a validation error located at `key` (so the message names the key path)."""
    try:
        return catalog.lookup(table, name, what)
    except KeyError as err:
        message = str(err).strip("'\"")
        raise PydanticCustomError("unknown_preset", "{message}", {"message": message, "key": key}) from None


def _profile(path: str) -> dict[str, object]:
    """The [cluster] table of a calibrated profile file (`plancast calibrate -o FILE`)."""
    try:
        table = tomllib.loads(Path(path).read_text(encoding="utf-8")).get("cluster")
    except (OSError, tomllib.TOMLDecodeError) as err:
        raise PydanticCustomError(
            "unknown_preset", "{message}", {"message": f"cannot read profile {path}: {err}", "key": "preset"}
        ) from None
    if not isinstance(table, dict):
        raise PydanticCustomError(
            "unknown_preset", "{message}", {"message": f"{path} has no [cluster] table", "key": "preset"}
        )
    table.pop("preset", None)
    return table


def merge_preset(data: Any, table: dict[str, dict[str, object]], what: str) -> Any:
    """Explicit keys override the preset's (for [model] and [cluster] alike).

    A cluster preset may also be a path to a calibrated profile (a TOML file with a [cluster] table)."""
    if not isinstance(data, Mapping) or data.get("preset") is None:
        return data
    name = str(data["preset"])
    if what == "cluster" and name.endswith(".toml"):
        return {**_profile(name), **{k: v for k, v in data.items() if k != "preset"}, "preset": name}
    base = lookup_preset(table, name, what, "preset")
    return {**base, **data}
