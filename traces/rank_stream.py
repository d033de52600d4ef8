"""One rank's measured events while its run goes on: appended step by step, made a parquet file at the end.

Rewriting the whole rank file after every step cost a rank ~8-12 ms of CPU per step at 24 steps of a
PP 4 plan (97 events a step) and grew with the steps (~47 ms at step 500), between the ranks' steps on
cores the other ranks share. Each step is now one Arrow IPC record batch appended to
``measured/rank-NNNNN.arrows`` and flushed to the OS (~1.2 ms at any step): a rank killed at any
moment leaves every finished step in it, readable up to the last whole batch (Arrow columnar format,
"IPC Streaming Format": a stream is a sequence of self-delimited messages). The writer's ``close``
turns the stream into ``rank-NNNNN.parquet`` (validated, atomic) and deletes it; ``finalize_streams``
does the same for ranks that never closed (killed, crashed), and the launcher runs it when the job
ends. Readers take the stream over the parquet while both exist (traces/store.py, ``rank_files``).
"""

from __future__ import annotations

from pathlib import Path
from typing import IO, Any

import pandas as pd
import pyarrow as pa

from plancast.traces import schema
from plancast.traces.store import RunDir, read_events, write_events

ARROW_SCHEMA = pa.Schema.from_pandas(schema.empty_frame(), preserve_index=False)
"""The trace schema as Arrow types: every step's batch is cast to it, so the stream has one schema."""


class RankEventWriter:
    """Appends one rank's measured events step by step; ``close`` writes the rank's parquet file."""

    def __init__(self, run: RunDir, rank: int) -> None:
        self.run = run
        self.rank = rank
        self.path = run.rank_events(rank)
        self.stream_path = run.rank_stream(rank)
        self._sink: IO[Any] | None = None
        self._writer: pa.ipc.RecordBatchStreamWriter | None = None
        self._tables: list[pa.Table] = []

    def append_step(self, frame: pd.DataFrame) -> None:
        """Add one step's events (all of this rank's): one batch appended to the stream and flushed.
        Types are checked here (cast to the schema); values when the stream becomes parquet."""
        if len(frame) and (frame["rank"] != self.rank).any():
            others = sorted(set(frame["rank"].tolist()) - {self.rank})
            raise ValueError(f"RankEventWriter for rank {self.rank} got events of rank(s) {others}")
        try:
            table = pa.Table.from_pandas(
                frame[list(schema.COLUMNS)], schema=ARROW_SCHEMA, preserve_index=False
            )
        except (KeyError, pa.ArrowException) as err:
            raise schema.SchemaError(f"a step's events do not fit the trace schema: {err}") from err
        if self._writer is None:  # opened on the first step: a resumed run rewrites the stream from here
            self.stream_path.parent.mkdir(parents=True, exist_ok=True)
            self._sink = open(self.stream_path, "wb")  # noqa: SIM115 - kept open across steps
            self._writer = pa.ipc.new_stream(self._sink, ARROW_SCHEMA)
        self._writer.write_table(table)
        assert self._sink is not None
        self._sink.flush()  # in the OS's hands: a killed process loses nothing written
        self._tables.append(table)

    def close(self) -> None:
        """Write every step appended as the rank's parquet file (validated, atomic), then drop the
        stream. Nothing appended: nothing written."""
        if self._writer is None or self._sink is None:
            return
        self._writer.close()
        self._sink.close()
        self._writer = self._sink = None
        table = pa.concat_tables(self._tables)
        write_events(self.path, table.to_pandas())
        self.stream_path.unlink(missing_ok=True)


def finalize_streams(run: RunDir) -> list[str]:
    """Turn every rank stream left in ``run`` (a rank killed or crashed before ``close``) into its
    parquet file, and drop it; returns a sentence per stream that could not be read, which is kept."""
    problems = []
    for rank, stream in run.rank_files().items():
        if stream.suffix != ".arrows":
            continue
        try:
            events = read_events(stream)
        except ValueError as err:
            problems.append(f"{run.relative(stream)} kept: {err}")
            continue
        write_events(run.rank_events(rank), events)
        Path(stream).unlink(missing_ok=True)
    return problems
