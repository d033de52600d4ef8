"""The run directory on disk: where each table and summary lives, atomic writers, forgiving readers.

Layout (docs/run-directory.md)::

    RUN/scenario.toml
    RUN/predicted/events.parquet, predicted/summary.json
    RUN/measured/rank-00000.parquet (one per rank; rank-00000.arrows while it runs),
    RUN/measured/telemetry.parquet,
    RUN/measured/summary.json, measured/env.json
    RUN/logs/rank-00000.log (one per rank), logs/torchrun.log
    RUN/compare/summary.json

Every write goes to a temporary file in the same directory and is then renamed over the target
(``os.replace`` is atomic on POSIX), so a reader never sees a half-written file: a killed run leaves
the previous complete file plus, at worst, a hidden ``.NAME.*.tmp`` file that readers ignore.
"""

from __future__ import annotations

import json
import os
import re
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from plancast.traces import schema
from plancast.traces.bounded import BoundedReadError, load_json, read_text
from plancast.traces.bounded_tables import read_parquet, read_stream_batches

SCHEMA_VERSION_KEY = b"plancast.schema_version"
RANK_FILE_RE = re.compile(r"^rank-(\d+)\.(parquet|arrows)$")


class TraceReadError(ValueError):
    """A run-directory file that cannot be read. The message names the file and how to fix it."""


@dataclass(frozen=True)
class RunDir:
    """Paths of one run directory. Creating the object touches nothing on disk."""

    path: Path

    def __post_init__(self) -> None:
        object.__setattr__(self, "path", Path(self.path))

    @property
    def scenario_toml(self) -> Path:
        """The resolved scenario the run was predicted and executed with."""
        return self.path / "scenario.toml"

    @property
    def predicted_dir(self) -> Path:
        """Folder of the simulator's output."""
        return self.path / "predicted"

    @property
    def predicted_events(self) -> Path:
        """The simulator's trace table."""
        return self.predicted_dir / "events.parquet"

    @property
    def predicted_summary(self) -> Path:
        """The simulator's summary (step time, memory, MFU, ...)."""
        return self.predicted_dir / "summary.json"

    @property
    def measured_dir(self) -> Path:
        """Folder of the runtime's output."""
        return self.path / "measured"

    def rank_events(self, rank: int) -> Path:
        """The measured trace table of one rank, e.g. ``measured/rank-00003.parquet``."""
        return self.measured_dir / f"rank-{rank:05d}.parquet"

    def rank_stream(self, rank: int) -> Path:
        """One rank's events while its run goes on, a step per batch (traces/rank_stream.py), e.g.
        ``measured/rank-00003.arrows``; gone once the rank's parquet file is written."""
        return self.measured_dir / f"rank-{rank:05d}.arrows"

    @property
    def telemetry(self) -> Path:
        """GPU telemetry samples (an empty table on CPU)."""
        return self.measured_dir / "telemetry.parquet"

    @property
    def measured_summary(self) -> Path:
        """The runtime's summary."""
        return self.measured_dir / "summary.json"

    @property
    def env_json(self) -> Path:
        """Versions, devices, hostnames and ``world_size`` of the measured run."""
        return self.measured_dir / "env.json"

    @property
    def logs_dir(self) -> Path:
        """Per-rank logs of a measured run (each rank's stdout and stderr, tracebacks included)."""
        return self.path / "logs"

    def rank_log(self, rank: int) -> Path:
        """One rank's log, e.g. ``logs/rank-00003.log``."""
        return self.logs_dir / f"rank-{rank:05d}.log"

    def rank_error(self, rank: int) -> Path:
        """What a rank that raised wrote before exiting: ``{"time_s", "error"}`` (JSON)."""
        return self.logs_dir / f"rank-{rank:05d}.error.json"

    @property
    def compare_dir(self) -> Path:
        """Folder of the reconciliation output."""
        return self.path / "compare"

    @property
    def compare_summary(self) -> Path:
        """The reconciliation summary (traces.reconcile.to_summary)."""
        return self.compare_dir / "summary.json"

    def rank_files(self) -> dict[int, Path]:
        """Measured rank files present on disk, by rank (temporary files are ignored): a rank's stream
        while it exists (a run going on, or a rank that never finished: the newer record), else its
        parquet file."""
        if not self.measured_dir.is_dir():
            return {}
        found: dict[int, Path] = {}
        for child in self.measured_dir.iterdir():
            match = RANK_FILE_RE.match(child.name)
            if match and (match.group(2) == "arrows" or int(match.group(1)) not in found):
                found[int(match.group(1))] = child
        return dict(sorted(found.items()))

    def relative(self, path: Path) -> str:
        """``path`` relative to the run directory, for messages (the absolute path if outside it)."""
        try:
            return path.relative_to(self.path).as_posix()
        except ValueError:
            return str(path)


def _umask() -> int:
    """The process's umask (read by setting it, then restoring it: done once, at import, before any
    thread of ours could create a file under the momentary 0)."""
    mask = os.umask(0)
    os.umask(mask)
    return mask


UMASK = _umask()


@contextmanager
def atomic_open(path: Path, mode: str, durable: bool = True) -> Iterator[IO[Any]]:
    """Open a temporary file next to ``path``; on success rename it over ``path``, on error delete it.

    Readers therefore see either the previous complete file or the new one, never a partial one.
    ``durable``: the data reaches the disk before the rename (fsync), so that a power loss leaves the
    old file or the new one; False for files derived from others and written by the thousand (one
    Chrome trace per rank: 2,048 fsyncs took 1.9 s of a 7 s `simulate --out`), where it may leave an
    empty one, which `plancast export` writes again.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    tmp = Path(tmp_name)
    try:
        os.fchmod(fd, 0o666 & ~UMASK)  # mkstemp's 0600 would hide a shared run from its readers
        with os.fdopen(fd, mode) as handle:
            yield handle
            handle.flush()
            if durable:
                os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def write_events(path: Path, frame: pd.DataFrame) -> None:
    """Validate ``frame`` against the schema and write it atomically as parquet.

    The schema version is stored in the parquet key-value metadata under ``plancast.schema_version``.
    """
    table = pa.Table.from_pandas(schema.validate(frame), preserve_index=False)
    metadata = dict(table.schema.metadata or {})
    metadata[SCHEMA_VERSION_KEY] = str(schema.SCHEMA_VERSION).encode()
    table = table.replace_schema_metadata(metadata)
    with atomic_open(Path(path), "wb") as handle:
        pq.write_table(table, handle)


RANK_FILE = "a rank's event file"
"""What a measured rank file is called in the messages of the table caps (traces/bounded_tables.py)."""


def read_events(path: Path, capped_as: str | None = RANK_FILE) -> pd.DataFrame:
    """Read a trace table written by ``write_events`` and return it validated.

    Raises TraceReadError when the file is missing, truncated or corrupt, breaks the table caps of
    traces/bounded_tables.py (``capped_as`` names it in the message; None: a prediction written by this
    plancast, uncapped; rank streams are always capped), was written with another schema version, or
    does not have the schema's columns.
    """
    path = Path(path)
    _require_file(path)
    if path.suffix == ".arrows":
        return _read_stream(path)
    try:
        table = pq.read_table(path) if capped_as is None else read_parquet(path, capped_as)
    except BoundedReadError as err:
        raise TraceReadError(str(err)) from None
    except (pa.ArrowException, OSError, ValueError) as err:
        raise TraceReadError(
            f"{path} is truncated or not a parquet file ({err}); the run was probably killed while "
            "writing it: delete the file and re-run"
        ) from err
    _check_schema_version(path, table.schema.metadata or {})
    try:
        return schema.validate(table.to_pandas())
    except (schema.SchemaError, pa.ArrowException) as err:
        raise TraceReadError(f"{path} does not follow the trace schema: {err}") from err


def _read_stream(path: Path) -> pd.DataFrame:
    """A rank stream (traces/rank_stream.py): every whole batch; a batch cut short by a kill is left out."""
    try:
        stream_schema, batches = read_stream_batches(path, RANK_FILE)
        table = pa.Table.from_batches(batches, schema=stream_schema)
    except BoundedReadError as err:
        raise TraceReadError(str(err)) from None
    except (pa.ArrowException, OSError, ValueError) as err:
        raise TraceReadError(
            f"{path} is not a rank stream ({err}); the rank was probably killed before its first step "
            "was written: delete the file and re-run"
        ) from err
    try:
        return schema.validate(table.to_pandas())
    except (schema.SchemaError, pa.ArrowException) as err:
        raise TraceReadError(f"{path} does not follow the trace schema: {err}") from err


def _require_file(path: Path) -> None:
    """TraceReadError when ``path`` is absent or is not a regular file (a folder in its place)."""
    if path.is_dir():
        raise TraceReadError(
            f"{path} is a directory, not a file: remove it and re-run the step that writes it"
        )
    if not path.is_file():
        raise TraceReadError(f"{path} is missing: run the step that writes it (simulate or run) first")


def _check_schema_version(path: Path, metadata: dict[bytes, bytes]) -> None:
    found = metadata.get(SCHEMA_VERSION_KEY)
    if found is None:
        raise TraceReadError(
            f"{path} has no '{SCHEMA_VERSION_KEY.decode()}' metadata, so it was not written by "
            "plancast.traces.store.write_events: re-create it with plancast"
        )
    if found.decode() != str(schema.SCHEMA_VERSION):
        raise TraceReadError(
            f"{path} was written with trace schema v{found.decode()}, but this plancast reads "
            f"v{schema.SCHEMA_VERSION}: re-create the run with this plancast version, or open it with "
            "the plancast version that wrote it"
        )


def write_json(path: Path, obj: Any) -> None:
    """Write ``obj`` as indented, strict JSON (NaN is refused) atomically."""
    text = json.dumps(obj, indent=2, allow_nan=False) + "\n"
    with atomic_open(Path(path), "w") as handle:
        handle.write(text)


MAX_JSON_BYTES = 64 * 1024**2
"""Largest summary/env JSON read (the ones plancast writes are kilobytes; a bigger one is not ours)."""


def read_json(path: Path) -> Any:
    """Read a JSON file (traces/bounded.py: a regular file of at most MAX_JSON_BYTES, nesting and digits
    capped); TraceReadError names the file when it is missing, damaged, too big or not JSON."""
    path = Path(path)
    _require_file(path)
    redo = "delete it and re-run the step that writes it"
    try:
        text = read_text(path, MAX_JSON_BYTES, "a summary or env JSON")
        return load_json(text, str(path), parse_constant=_reject_constant)
    except BoundedReadError as err:
        raise TraceReadError(f"{err}; {redo}") from err
    except json.JSONDecodeError as err:
        raise TraceReadError(
            f"{path} is not valid JSON ({err.msg} at line {err.lineno}, column {err.colno}); it was "
            f"probably cut off while being written: {redo}"
        ) from err
    except ValueError as err:
        raise TraceReadError(f"{path} is not plancast's JSON ({err}); {redo}") from err


def _reject_constant(name: str) -> Any:
    raise ValueError(f"it holds {name}, which strict JSON does not allow")


def read_json_object(path: Path) -> dict[str, Any]:
    """``read_json`` of a file that must hold one JSON object (a summary, env.json)."""
    value = read_json(path)
    if not isinstance(value, dict):
        raise TraceReadError(
            f"{path} should hold a JSON object, found a {type(value).__name__}: the file is damaged; "
            "delete it and re-run the step that writes it"
        )
    return value


def read_predicted(run: RunDir) -> pd.DataFrame:
    """The predicted trace table of ``run``."""
    return read_events(run.predicted_events, capped_as=None)


def read_rank_events(path: Path, rank: int) -> pd.DataFrame:
    """``read_events`` of rank `rank`'s file, refused (TraceReadError) when its rows contradict the file:
    a row of another rank (that rank would look measured twice, this one missing) or a negative step."""
    frame = read_events(path)
    others = sorted(set(frame["rank"].unique().tolist()) - {rank})
    if others:
        shown = ", ".join(map(str, others[:5])) + (" ..." if len(others) > 5 else "")
        raise TraceReadError(
            f"{path} is rank {rank}'s file but holds rows of rank(s) {shown}: the file is damaged"
        )
    if (frame["step"] < 0).any():
        raise TraceReadError(f"{path} has rows with a negative step: the file is damaged")
    return frame


@dataclass(frozen=True)
class MeasuredRead:
    """The measured events that could be read, and one sentence per rank that could not."""

    events: pd.DataFrame
    problems: list[str] = field(default_factory=list)


def measured_world_size(run: RunDir, problems: list[str] | None = None) -> int | None:
    """``world_size`` from ``measured/env.json``, or None when the file or key is absent or unusable.

    An env.json that cannot be read, or whose world size is not a positive integer, adds a sentence to
    ``problems`` (when given)."""
    if not run.env_json.exists():
        return None
    try:
        value = read_json_object(run.env_json).get("world_size")
    except TraceReadError as err:
        if problems is not None:
            problems.append(f"{err} (world size taken from the rank files)")
        return None
    if isinstance(value, int) and not isinstance(value, bool) and value > 0:
        return value
    if problems is not None and value is not None:
        problems.append(
            f"{run.relative(run.env_json)} has world_size {value!r}, not a positive integer "
            "(world size taken from the rank files)"
        )
    return None


def _missing_ranks(present: list[int], size: int) -> list[tuple[int, int]]:
    """Gaps ``(first, last)`` of ``range(size)`` not in ``present`` (sorted), without listing them all."""
    gaps: list[tuple[int, int]] = []
    expected = 0
    for rank in (r for r in present if r < size):
        if rank > expected:
            gaps.append((expected, rank - 1))
        expected = rank + 1
    if expected < size:
        gaps.append((expected, size - 1))
    return gaps


def read_measured(run: RunDir, world_size: int | None = None) -> MeasuredRead:
    """Read every measured rank file; a missing or unreadable rank is reported, not fatal.

    ``world_size`` comes from the argument, else ``measured/env.json``, else the highest rank file + 1.
    Ranks the world size claims but no file holds are reported as ranges (never read one by one).
    """
    files = run.rank_files()
    problems: list[str] = []
    size = world_size or measured_world_size(run, problems) or (max(files) + 1 if files else 0)
    frames: list[pd.DataFrame] = []
    by_rank: list[tuple[int, str]] = []  # problems in rank order
    for first, last in _missing_ranks(list(files), size):
        count = last - first + 1
        if count == 1:
            what, who = run.relative(run.rank_events(first)), f"rank {first} is"
        else:
            what, who = f"measured/rank-*.parquet of ranks {first}-{last}", f"{count} ranks are"
        by_rank.append((first, f"{what} is missing (world size {size}): {who} left out"))
    for rank, path in files.items():
        if rank >= size:
            by_rank.append(
                (rank, f"{run.relative(path)} is beyond the world size {size}: rank {rank} is left out")
            )
            continue
        try:
            frames.append(read_rank_events(path, rank))
        except TraceReadError as err:
            parquet = run.rank_events(rank)  # a stream that cannot be read: its rank's parquet file, if any
            if path != parquet and parquet.is_file():
                try:
                    frames.append(read_rank_events(parquet, rank))
                except TraceReadError:
                    pass
                else:
                    what = f"{run.relative(path)} could not be read ({err}): {run.relative(parquet)} is used"
                    by_rank.append((rank, what))
                    continue
            by_rank.append((rank, f"{run.relative(path)} could not be read ({err}): rank {rank} is left out"))
    problems += [message for _, message in sorted(by_rank, key=lambda item: item[0])]
    events = pd.concat(frames, ignore_index=True) if frames else schema.empty_frame()
    return MeasuredRead(events=schema.validate(events), problems=problems)
