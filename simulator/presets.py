"""Presets inside a scenario: a catalog name (or a calibrated profile file) whose keys explicit keys override.

Used by the pydantic models' "before" validators (`scenario.py`); errors are pydantic errors located at
the key that named the preset, so the loader reports them with their key path.
"""

from __future__ import annotations

import tomllib
from collections.abc import Mapping
from typing import Any

from pydantic_core import PydanticCustomError

from plancast.simulator import catalog
from plancast.traces import bounded
from plancast.traces.bounded import BoundedReadError, load_toml, read_text


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
        table = load_toml(read_text(path, bounded.MAX_SCENARIO_BYTES, "a cluster profile"), path).get(
            "cluster"
        )
    except (BoundedReadError, tomllib.TOMLDecodeError) as err:
        raise _profile_error(f"cannot read profile {path}: {err}") from None
    if not isinstance(table, dict):
        raise _profile_error(f"{path} has no [cluster] table")
    named = table.pop("preset", None)
    if isinstance(named, str) and named.endswith(".toml"):  # calibrate writes its catalog base, never a file
        raise _profile_error(
            f"{path} names another profile (preset = {named!r}); profiles do not chain: copy that "
            f"profile's keys into {path}, or point the scenario at {named} itself"
        )
    return table


def _profile_error(message: str) -> PydanticCustomError:
    return PydanticCustomError("unknown_preset", "{message}", {"message": message, "key": "preset"})


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
