"""Reading a run's tables with limits: rank event files and GPU telemetry (Parquet, Arrow streams).

A run folder may come from elsewhere (`gather`, a colleague's tarball, `import-kineto --out`), so its
tables are inputs like any other (traces/bounded.py): a regular file of at most ``MAX_TABLE_BYTES``
on disk, and, before any column is read, a Parquet footer declaring at most ``MAX_TABLE_ROWS`` rows and
``MAX_TABLE_BYTES`` unpacked (Parquet's dictionary and run-length pages let a few KiB declare a
billion rows). A rank stream (``.arrows``, traces/rank_stream.py) is counted batch by batch as it is
read. Each is refused with a message naming the file, the limit and the fix. The caps are read at
call time, so tests lower them.
"""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from plancast.traces.bounded import BoundedReadError, MiB, regular_file_size

MAX_TABLE_BYTES = 2 * 1024 * MiB
"""A rank's event table or the telemetry table, on disk and unpacked: an event row is about 100 bytes
(traces/schema.py's 13 columns), so 2 GiB holds 20 million events."""
MAX_TABLE_ROWS = 20_000_000
"""Rows of one table: a rank of a 1,000-step run of a 64-micro-batch, 61-layer MoE pipeline records
about 10 million events (4 all-to-alls per layer and micro-batch); `export` writes at most 2 million."""


def _over(path: Path, what: str, found: str, limit: str) -> BoundedReadError:
    return BoundedReadError(
        f"{path} holds {found}, more than the {limit} plancast reads from {what}: it is not a table "
        "plancast wrote for one rank; remove it from the run folder (see docs/cli.md, Input limits)"
    )


def _check_size(path: Path, what: str) -> None:
    size = regular_file_size(path)
    if size > MAX_TABLE_BYTES:
        raise _over(path, what, f"{size / MiB:.0f} MiB", f"{MAX_TABLE_BYTES / MiB:g} MiB")


def read_parquet(path: str | Path, what: str) -> pa.Table:
    """The Parquet table at `path` after the size checks; BoundedReadError names a broken limit, pyarrow's
    own errors (a truncated or foreign file) pass through for the caller to word."""
    path = Path(path)
    _check_size(path, what)
    meta = pq.read_metadata(path)  # the footer only
    if meta.num_rows > MAX_TABLE_ROWS:
        raise _over(path, what, f"{meta.num_rows} rows", f"{MAX_TABLE_ROWS} rows")
    unpacked = sum(meta.row_group(i).total_byte_size for i in range(meta.num_row_groups))
    if unpacked > MAX_TABLE_BYTES:
        raise _over(path, what, f"{unpacked / MiB:.0f} MiB unpacked", f"{MAX_TABLE_BYTES / MiB:g} MiB")
    return pq.read_table(path)


def read_stream_batches(path: str | Path, what: str) -> tuple[pa.Schema, list[pa.RecordBatch]]:
    """Every whole batch of the Arrow stream at `path` (a batch cut short by a kill is left out), within the
    caps; BoundedReadError names a broken limit."""
    path = Path(path)
    _check_size(path, what)
    batches, rows = [], 0
    with pa.OSFile(str(path), "rb") as source:
        reader = pa.ipc.open_stream(source)
        while True:
            try:
                batch = reader.read_next_batch()
            except StopIteration:
                break
            except (pa.ArrowException, OSError):  # the last batch, written when the rank died
                break
            rows += batch.num_rows
            if rows > MAX_TABLE_ROWS:
                raise _over(path, what, f"more than {MAX_TABLE_ROWS} rows", f"{MAX_TABLE_ROWS} rows")
            batches.append(batch)
        return reader.schema, batches
