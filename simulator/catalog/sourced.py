"""Presets whose every number names its source: read from a TOML file beside this module.

In the file each number is written `{ value = 2250.0, source = "NVIDIA DGX B200 datasheet ..." }`;
strings (names) stand as they are. `load` returns the presets as the plain tables the rest of the catalog
uses and, apart, each preset's sources keyed by the number's path (`tiers[0].bandwidth_GBps`). A number
without a source is refused when the file is read, so a preset cannot ship one.
"""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

MAX_BYTES = 1 << 20
"""The catalog files are a few KiB; a larger one is refused unread."""

Sources = dict[str, str]
"""Path of a number inside its preset (`peak_tflops.bf16`, `tiers[1].efficiency`) -> its source."""


class UnsourcedNumberError(ValueError):
    """A number in a sourced catalog file without a source beside it."""


def _is_sourced(node: Any) -> bool:
    return isinstance(node, dict) and set(node) == {"value", "source"}


def _plain(node: Any, path: str, sources: Sources) -> Any:
    """`node` with each {value, source} replaced by its value; the sources collected by path."""
    if _is_sourced(node):
        value, source = node["value"], node["source"]
        if not isinstance(value, int | float) or isinstance(value, bool):
            raise UnsourcedNumberError(f"{path}: value must be a number, got {value!r}")
        if not isinstance(source, str) or not source.strip():
            raise UnsourcedNumberError(f"{path}: source must name a datasheet or a measurement")
        sources[path] = source
        return value
    if isinstance(node, dict):
        return {k: _plain(v, f"{path}.{k}" if path else k, sources) for k, v in node.items()}
    if isinstance(node, list):
        return [_plain(v, f"{path}[{i}]", sources) for i, v in enumerate(node)]
    if isinstance(node, int | float) and not isinstance(node, bool):
        raise UnsourcedNumberError(f"{path} = {node}: write it as {{ value = {node}, source = \"...\" }}")
    return node


def load(path: Path) -> tuple[dict[str, dict[str, Any]], dict[str, Sources]]:
    """(presets by name, sources by preset name) of the sourced catalog file `path`."""
    if path.stat().st_size > MAX_BYTES:
        raise ValueError(f"{path}: larger than {MAX_BYTES} bytes, not a catalog file")
    data = tomllib.loads(path.read_text(encoding="utf-8"))
    presets: dict[str, dict[str, Any]] = {}
    sources: dict[str, Sources] = {}
    for name, table in data.items():
        found: Sources = {}
        presets[name] = _plain(table, "", found)
        sources[name] = found
    return presets, sources


def numbers(node: Any, path: str = "") -> list[str]:
    """The paths of every number in a plain preset table (what a source must cover)."""
    if isinstance(node, dict):
        return [p for k, v in node.items() for p in numbers(v, f"{path}.{k}" if path else k)]
    if isinstance(node, list):
        return [p for i, v in enumerate(node) for p in numbers(v, f"{path}[{i}]")]
    return [path] if isinstance(node, int | float) and not isinstance(node, bool) else []
