"""Presets for GPUs, clusters and models; `lookup` gives a clear error for unknown names."""

from __future__ import annotations

import copy
import difflib

from plancast.simulator.catalog.clusters import CLUSTER_SOURCES, CLUSTERS
from plancast.simulator.catalog.gpus import GPU_SOURCES, GPUS
from plancast.simulator.catalog.models import MODELS

__all__ = ["CLUSTERS", "CLUSTER_SOURCES", "GPUS", "GPU_SOURCES", "MODELS", "lookup"]


def lookup(table: dict[str, dict[str, object]], name: str, what: str) -> dict[str, object]:
    """A deep copy of preset `name`, or KeyError naming the closest presets."""
    if name in table:
        return copy.deepcopy(table[name])
    close = difflib.get_close_matches(name, list(table), n=3)
    hint = f"; did you mean {', '.join(repr(c) for c in close)}?" if close else ""
    raise KeyError(f"unknown {what} preset {name!r}{hint} (`plancast catalog` lists them)")
