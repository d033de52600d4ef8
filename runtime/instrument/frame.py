"""Measured rows -> the trace table (traces/schema.py), built once per step, outside the step.

Building a pandas table costs more than recording a small step's events, so a step's events stay
keys and times (``StepEvents``) until whoever writes them asks for the table.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa

from plancast.runtime.instrument.keys import SpanKey
from plancast.traces.schema import COLUMNS, Event

_STRING = pd.StringDtype()


def _strings(values: Sequence[str]) -> Any:
    """A ``string`` column; straight from Arrow when that is pandas' storage (a quarter of the cost)."""
    if _STRING.storage == "pyarrow" and _STRING.na_value is pd.NA:
        return pd.arrays.ArrowStringArray(pa.array(values, type=pa.large_string()))
    return pd.array(values, dtype="string")


def rows_frame(
    rank: int,
    step: int,
    keys: Sequence[SpanKey],
    start_us: Sequence[float] | np.ndarray,
    dur_us: Sequence[float] | np.ndarray,
) -> pd.DataFrame:
    """Measured rows -> a table in the schema's column order and dtypes, built column by column.

    Equal to ``traces.schema.to_frame`` of the same events (the rank writer validates it before
    writing) at a small fraction of its cost.
    """
    n = len(keys)
    columns: dict[str, Any] = {
        "source": _strings(["measured"] * n),
        "rank": np.full(n, rank, dtype="int32"),
        "step": np.full(n, step, dtype="int32"),
        "stream": _strings([k.stream for k in keys]),
        "kind": _strings([k.kind for k in keys]),
        "stage": np.array([k.stage for k in keys], dtype="int16"),
        "chunk": np.array([k.chunk for k in keys], dtype="int16"),
        "microbatch": np.array([k.microbatch for k in keys], dtype="int32"),
        "index": np.array([k.index for k in keys], dtype="int32"),
        "peer": np.array([k.peer for k in keys], dtype="int32"),
        "start_us": np.asarray(start_us, dtype="float64"),
        "dur_us": np.asarray(dur_us, dtype="float64"),
        "bytes": np.array([k.bytes for k in keys], dtype="int64"),
        "flops": np.zeros(n, dtype="float64"),
    }
    if list(columns) != list(COLUMNS):
        raise RuntimeError(f"rows_frame builds {list(columns)}; traces.schema.COLUMNS is {list(COLUMNS)}")
    return pd.DataFrame(columns, copy=False)


def events_frame(events: list[Event]) -> pd.DataFrame:
    """Measured ``Event``s (flops 0, one rank and step) -> a table equal to ``traces.schema.to_frame``."""
    if not events:
        return rows_frame(0, 0, [], [], [])
    keys = [SpanKey.of(e) for e in events]
    frame = rows_frame(
        events[0].rank, events[0].step, keys, [e.start_us for e in events], [e.dur_us for e in events]
    )
    if any(e.rank != events[0].rank or e.step != events[0].step or e.source != "measured" for e in events):
        frame["rank"] = np.array([e.rank for e in events], dtype="int32")
        frame["step"] = np.array([e.step for e in events], dtype="int32")
        frame["source"] = _strings([e.source for e in events])
    if any(e.flops for e in events):
        frame["flops"] = np.array([e.flops for e in events], dtype="float64")
    return frame


class StepEvents:
    """One step's measured events on one rank, resolved; ``frame()`` builds their table once.

    Building a pandas table costs more than recording a small step's events, so it happens where
    the table is needed (the rank writer, after the step), not inside the measured step.
    """

    __slots__ = ("_frame", "dur_us", "keys", "rank", "start_us", "step")

    def __init__(
        self,
        rank: int,
        step: int,
        keys: list[SpanKey],
        start_us: Sequence[float] | np.ndarray,
        dur_us: Sequence[float] | np.ndarray,
    ) -> None:
        self.rank, self.step, self.keys, self.start_us, self.dur_us = rank, step, keys, start_us, dur_us
        self._frame: pd.DataFrame | None = None

    def __len__(self) -> int:
        return len(self.keys)

    def frame(self) -> pd.DataFrame:
        """The events as a schema table (``traces.schema.COLUMNS``), built on first use."""
        if self._frame is None:
            self._frame = rows_frame(self.rank, self.step, self.keys, self.start_us, self.dur_us)
        return self._frame
