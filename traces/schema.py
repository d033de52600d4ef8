"""The trace contract: one row per span, shared by the simulator, the runtime and the dashboard.

Units live in column names (``start_us``, ``dur_us``, ``bytes``). Predicted and measured events of
the same plan share the alignment key, so reconciliation is a join, not a heuristic.

Conventions every producer follows (simulator, runtime, Kineto importer):

- ``stage`` is the global (virtual) pipeline stage, ``chunk * pp + pp_rank`` (Megatron/torch
  pipelining "loop" placement); ``chunk`` is the local model chunk (0 without interleaving).
  Without pipeline parallelism every model event has stage 0, chunk 0.
- forward / backward / recompute / backward_input / backward_weight: one event per
  (stage, chunk, microbatch). ``backward`` is the full backward; schedules that split it
  (zero bubble) emit ``backward_input`` + ``backward_weight`` instead.
- ``index`` counts events in issue order within (rank, step, stream, kind, stage, chunk, microbatch);
  the stream is part of the alignment key so tp, dp and pp traffic of the same kind never collide.
- tensor-parallel collectives (stream ``tp``): stage/chunk/microbatch of the computation they
  belong to (forward, then recompute, then backward); the sequence-parallel norm-gradient
  all-reduce per chunk and step has microbatch -1.
- pipeline send/recv (stream ``pp``): the sending/receiving stage and microbatch; ``peer`` set.
- data-parallel gradient and parameter collectives (stream ``dp``): stage/chunk of the model
  chunk, microbatch -1 (microbatch of the gathered layer's forward for ZeRO-3 gathers), ``index``
  counts buckets/layers in issue order.
- tied embeddings split over pipeline stages: one ``all_reduce`` (stream ``pp``) per step on the
  first and last stage, microbatch -1, ``peer`` the other holder.
- ZeRO-1 parameter broadcasts (stream ``dp``): stage/chunk of the chunk, one per owner (``index``).
- optimizer: stage -1, chunk -1, microbatch -1.
- ``start_us`` is relative to the rank's start of the step: the simulator starts every rank's step
  at 0, a measured rank at its own step start (runtime/instrument/recorder.py), so measured ranks'
  origins differ by how far apart the ranks began the step.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # imported where a table is built: `plancast simulate --json` never loads pandas
    import pandas as pd

SCHEMA_VERSION = 1

# Column name -> pandas dtype. Order is the on-disk order.
COLUMNS: dict[str, str] = {
    "source": "string",  # predicted | measured
    "rank": "int32",  # global rank
    "step": "int32",  # optimizer step, 0-based
    "stream": "string",  # compute | tp | dp | pp | cp | ep | ...
    "kind": "string",  # one of KINDS
    "stage": "int16",  # pipeline stage (virtual stage = chunk * pp + pp_rank for interleaved); -1 if none
    "chunk": "int16",  # virtual-stage chunk on this rank; 0 without interleaving; -1 if none
    "microbatch": "int32",  # -1 for per-step events (optimizer, gradient reduction)
    "index": "int32",  # n-th event with the same key (per-layer collectives, DDP buckets); 0 otherwise
    "peer": "int32",  # other rank of a send/recv; -1 otherwise
    "start_us": "float64",  # from the start of the step on this rank
    "dur_us": "float64",
    "bytes": "int64",  # payload of a collective or transfer; 0 for compute
    "flops": "float64",  # model FLOPs of a compute span; 0 for communication
}

ALIGNMENT_KEY: tuple[str, ...] = ("rank", "step", "stream", "kind", "stage", "chunk", "microbatch", "index")

SOURCES = frozenset({"predicted", "measured"})

COMPUTE_KINDS = frozenset(
    {"forward", "backward", "backward_input", "backward_weight", "recompute", "optimizer"}
)
COMM_KINDS = frozenset(
    {"all_reduce", "all_gather", "reduce_scatter", "broadcast", "all_to_all", "send", "recv", "barrier"}
)
KINDS = COMPUTE_KINDS | COMM_KINDS


class SchemaError(ValueError):
    """A trace table that does not follow the contract. The message says what is wrong and how to fix it."""


@dataclass(frozen=True, slots=True)
class Event:
    """One span, as produced by the simulator or the runtime before it becomes a table row."""

    source: str
    rank: int
    step: int
    stream: str
    kind: str
    start_us: float
    dur_us: float
    stage: int = -1
    chunk: int = -1
    microbatch: int = -1
    index: int = 0
    peer: int = -1
    bytes: int = 0
    flops: float = 0.0


def empty_frame() -> pd.DataFrame:
    """A table with every column and no rows."""
    import pandas as pd

    return pd.DataFrame({name: pd.Series(dtype=dtype) for name, dtype in COLUMNS.items()})


def to_frame(events: Iterable[Event | Mapping[str, Any]]) -> pd.DataFrame:
    """Events (dataclasses or dicts with the schema's keys) -> a validated table in schema order."""
    rows = [{name: getattr(e, name) for name in COLUMNS} if isinstance(e, Event) else dict(e) for e in events]
    if not rows:
        return empty_frame()
    import pandas as pd

    frame = pd.DataFrame.from_records(rows)
    return validate(frame)


def validate(frame: pd.DataFrame) -> pd.DataFrame:
    """Check columns, values and dtypes; return the table cast to the schema's dtypes and order.

    Raises SchemaError naming the first problem and how to fix it.
    """
    import numpy as np

    missing = [c for c in COLUMNS if c not in frame.columns]
    if missing:
        raise SchemaError(
            f"trace table is missing column(s) {missing}; expected the schema v{SCHEMA_VERSION} "
            f"columns {list(COLUMNS)}"
        )
    extra = [c for c in frame.columns if c not in COLUMNS]
    if extra:
        raise SchemaError(f"trace table has unknown column(s) {extra}; remove them or bump SCHEMA_VERSION")
    try:
        out = frame[list(COLUMNS)].astype(COLUMNS)
    except (TypeError, ValueError) as err:
        raise SchemaError(f"trace table has a column of the wrong type: {err}") from err
    bad_source = set(out["source"].dropna().unique()) - SOURCES
    if bad_source:
        raise SchemaError(f"column 'source' has {sorted(bad_source)}; expected one of {sorted(SOURCES)}")
    bad_kind = set(out["kind"].dropna().unique()) - KINDS
    if bad_kind:
        raise SchemaError(
            f"column 'kind' has unknown kind(s) {sorted(bad_kind)}; expected one of {sorted(KINDS)}"
        )
    if out[["source", "stream", "kind"]].isna().any().any():
        raise SchemaError("columns 'source', 'stream' and 'kind' must not be empty")
    for column in ("start_us", "dur_us", "flops"):
        finite = np.isfinite(out[column].to_numpy(dtype="float64", na_value=np.nan))
        if not finite.all():
            raise SchemaError(
                f"column {column!r} has {int((~finite).sum())} non-finite value(s) (NaN or infinity); "
                "every span needs a finite time: re-create the table"
            )
    if (out["dur_us"] < 0).any():
        raise SchemaError("column 'dur_us' has negative durations")
    return out.reset_index(drop=True)
