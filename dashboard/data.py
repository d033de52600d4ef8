"""Reading runs for the dashboard: find them, load them forgivingly, cache them, accept uploads.

`load_run` never raises for a damaged run: every file that cannot be read becomes one sentence in
`RunData.problems` (naming the file) and the rest of the run is still returned. The `cached_*`
functions are the only Streamlit-aware code here; their cache key is a run's path plus the size and
modification time of every file in it, so a run that changes on disk is read again. A run without
`predicted/` but with a readable `scenario.toml` (e.g. one `plancast run` wrote for a scenario never
simulated into it) is simulated in memory, as `plancast compare` does on disk.
"""

from __future__ import annotations

import atexit
import hashlib
import io
import math
import os
import shutil
import tempfile
import zipfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any, TypeVar

import pandas as pd
import streamlit as st

from plancast.dashboard.serve import ROOT_ENV, RUNS_ENV, measured_run_inside
from plancast.pool import collector_paused
from plancast.simulator.loader import ScenarioError, load_scenario
from plancast.simulator.predict import simulate
from plancast.simulator.scenario import Scenario
from plancast.simulator.sweep import sweep
from plancast.simulator.sweep_axes import Plan
from plancast.traces import schema
from plancast.traces.reconcile import Reconciliation, reconcile
from plancast.traces.store import RANK_FILE_RE, RunDir, TraceReadError, read_events, read_json, read_measured
from plancast.traces.telemetry import read_telemetry

MAX_EXTRACTED_BYTES = 2 * 1024**3
"""Largest total size a run upload may expand to (a zip of a big measured run is a few hundred MB)."""
MAX_ZIP_MEMBERS = 100_000
"""Most files a run upload may hold (a run has a few per rank)."""
MAX_CSV_BYTES = 64 * 1024**2
"""Largest sweep CSV read (`plancast sweep --table` writes about 200 bytes per plan)."""

T = TypeVar("T")
Stamp = tuple[tuple[str, int, int], ...]


@dataclass(frozen=True)
class RunData:
    """Everything the pages show about one run; absent or unreadable parts are empty or None."""

    path: Path
    scenario: Scenario | None = None
    predicted: pd.DataFrame = field(default_factory=schema.empty_frame)
    predicted_summary: dict[str, Any] | None = None
    measured: pd.DataFrame = field(default_factory=schema.empty_frame)
    measured_summary: dict[str, Any] | None = None
    telemetry: pd.DataFrame | None = None  # None when measured/telemetry.parquet is absent
    problems: tuple[str, ...] = ()  # one sentence per file that could not be read

    @property
    def name(self) -> str:
        return self.path.name

    @property
    def has_predicted(self) -> bool:
        return len(self.predicted) > 0

    @property
    def has_measured(self) -> bool:
        return len(self.measured) > 0


# ------------------------------------------------------------------------------------------ loading
def _read(path: Path, reader: Callable[[Path], T], problems: list[str]) -> T | None:
    """``reader(path)``, or None when the file is absent; an unreadable file adds a problem."""
    if not path.exists():
        return None
    try:
        return reader(path)
    except (TraceReadError, ScenarioError, schema.SchemaError) as err:
        problems.append(str(err))
        return None


def _read_summary(path: Path, problems: list[str]) -> dict[str, Any] | None:
    summary = _read(path, read_json, problems)
    if summary is None:
        return None
    if not isinstance(summary, dict):
        problems.append(f"{path} should hold a JSON object, found {type(summary).__name__}; it is ignored")
        return None
    version = summary.get("schema_version")
    if version is not None and version != schema.SCHEMA_VERSION:
        problems.append(
            f"{path} was written with trace schema v{version}, this dashboard reads "
            f"v{schema.SCHEMA_VERSION}: its numbers may be misread"
        )
    return summary


def load_run(path: Path) -> RunData:
    """Read every part of a run directory that can be read (see the module docstring)."""
    run = RunDir(Path(path))
    problems: list[str] = []
    loaded = _read(run.scenario_toml, load_scenario, problems)
    predicted = _read(run.predicted_events, read_events, problems)
    predicted_summary = _read_summary(run.predicted_summary, problems)
    if loaded is not None and not run.predicted_events.exists() and not run.predicted_summary.exists():
        prediction = simulate(loaded.scenario)
        predicted, predicted_summary = prediction.events, prediction.summary
    measured = read_measured(run)
    problems.extend(measured.problems)
    measured_summary = _read_summary(run.measured_summary, problems)
    telemetry = _read(run.telemetry, read_telemetry, problems)
    return RunData(
        path=run.path,
        scenario=loaded.scenario if loaded is not None else None,
        predicted=predicted if predicted is not None else schema.empty_frame(),
        predicted_summary=predicted_summary,
        measured=measured.events,
        measured_summary=measured_summary,
        telemetry=telemetry,
        problems=tuple(problems),
    )


def compare_run(run: RunData) -> Reconciliation:
    """Reconcile the run's predicted and measured events; ValueError says why it cannot."""
    return reconcile(
        run.predicted,
        run.measured,
        predicted_summary=run.predicted_summary,
        measured_summary=run.measured_summary,
    )


# ---------------------------------------------------------------------------------------- discovery
def looks_like_run(path: Path) -> bool:
    """A folder holding a scenario.toml, predicted/ or measured/."""
    run = RunDir(path)
    return path.is_dir() and (
        run.scenario_toml.is_file() or run.predicted_dir.is_dir() or run.measured_dir.is_dir()
    )


def runs_in_folder(folder: Path, roots: Sequence[Path] | None = None) -> list[Path]:
    """The folder itself if it is a run, else its sub-folders that are runs, by name. With `roots`, each
    sub-folder is resolved first (symbolic links followed) and kept only when it lies inside one of
    them: a link in the runs folder that points outside is not listed, as `confined` refuses it typed."""
    if looks_like_run(folder):
        return [measured_run_inside(folder)]
    if not folder.is_dir():
        return []
    found = []
    for child in sorted(folder.iterdir()):
        path = child if roots is None else _resolved(child)
        if path is None or (roots is not None and not any(path.is_relative_to(r) for r in roots)):
            continue
        if looks_like_run(path):
            found.append(path)
    return list(dict.fromkeys(found))  # a link to a run listed once, as the run


def _resolved(path: Path) -> Path | None:
    try:
        return path.resolve()
    except (OSError, RuntimeError):  # a link loop
        return None


def command_line_runs(argv: Sequence[str], script: Path, environ: Mapping[str, str]) -> list[Path]:
    """Runs named on the command line (``streamlit run app.py -- RUN...``) and in ``$RUNS_ENV``.

    ``argv`` counts only when ``argv[0]`` is the app script itself, as under ``streamlit run``; a test
    runner's own arguments are not runs.
    """
    args = list(argv[1:]) if argv and Path(argv[0]).resolve() == script.resolve() else []
    args += [p for p in environ.get(RUNS_ENV, "").split(os.pathsep) if p]
    return list(dict.fromkeys(measured_run_inside(Path(a).resolve()) for a in args))


# ------------------------------------------------------------------------------------------ uploads
class UploadError(ValueError):
    """Uploaded files that do not form a run, or a path the browser may not open; the message says why."""


def allowed_root(environ: Mapping[str, str]) -> Path:
    """The folder the browser may name (``$PLANCAST_DASHBOARD_ROOT``, else ``./runs``), resolved."""
    return Path(environ.get(ROOT_ENV) or "runs").resolve()


MAX_TYPED_CHARS = 4096
"""Longest path the runs-folder box takes: Linux's PATH_MAX (linux/limits.h)."""


def confined(typed: str, roots: Sequence[Path]) -> Path:
    """``typed`` (relative paths are taken inside the first root) if it lies inside one of ``roots``
    once resolved (symbolic links and ``..`` followed); else UploadError naming the allowed folder, as
    for text that is no path at all (a NUL or other control character, longer than PATH_MAX)."""
    first = roots[0]
    bad = next((c for c in typed if ord(c) < 32 or ord(c) == 127), None)
    if bad is not None or len(typed) > MAX_TYPED_CHARS:
        why = f"is over {MAX_TYPED_CHARS} characters" if bad is None else f"holds the character {bad!r}"
        raise UploadError(f"the path typed {why}: type a path under {first}")
    path = _resolved(first / typed)  # an absolute `typed` replaces `first`
    if path is not None and any(path.is_relative_to(root) for root in roots):
        return path
    raise UploadError(
        f"{typed} is outside {first}: the dashboard only opens what lies under the runs folder it was "
        "started with (`plancast dashboard --runs-folder DIR`)"
    )


def _safe_member(name: str) -> PurePosixPath:
    member = PurePosixPath(name)
    if member.is_absolute() or ".." in member.parts:
        raise UploadError(f"zip member {name!r} points outside the archive; refusing to extract it")
    return member


def _extract_zip(name: str, content: bytes, target: Path) -> None:
    try:
        archive = zipfile.ZipFile(io.BytesIO(content))
    except zipfile.BadZipFile as err:
        raise UploadError(f"{name} is not a valid zip file ({err})") from err
    with archive:
        members = archive.infolist()
        if len(members) > MAX_ZIP_MEMBERS:
            raise UploadError(f"{name} holds {len(members):,} files, more than a run ({MAX_ZIP_MEMBERS:,})")
        budget = MAX_EXTRACTED_BYTES
        for info in members:
            member = _safe_member(info.filename)
            if info.is_dir() or member.name.startswith("."):
                continue
            out = target.joinpath(*member.parts)
            out.parent.mkdir(parents=True, exist_ok=True)
            budget = _extract_member(archive, info, out, budget, name)


def _extract_member(
    archive: zipfile.ZipFile, info: zipfile.ZipInfo, out: Path, budget: int, name: str
) -> int:
    """Copy one member in chunks, counting what it really expands to (the sizes a zip declares can
    lie); UploadError once the upload passes ``MAX_EXTRACTED_BYTES``. Returns the budget left."""
    limit = f"{name} expands to more than {MAX_EXTRACTED_BYTES / 1024**3:g} GiB; upload a smaller run"
    if info.file_size > budget:
        raise UploadError(limit)
    with archive.open(info) as source, out.open("wb") as sink:
        while chunk := source.read(1024**2):
            budget -= len(chunk)
            if budget < 0:
                raise UploadError(limit)
            sink.write(chunk)
    return budget


def _upload_destination(name: str, run: RunDir) -> Path:
    base = Path(name).name
    if RANK_FILE_RE.match(base):
        return run.measured_dir / base
    if base == "telemetry.parquet":
        return run.telemetry
    if base.endswith(".parquet"):
        return run.predicted_events
    if base.endswith(".toml"):
        return run.scenario_toml
    raise UploadError(
        f"{name}: upload a .zip of a run directory, or parquet files (rank-NNNNN.parquet and "
        "telemetry.parquet go to measured/, any other .parquet is the predicted events) and a scenario .toml"
    )


def materialize_upload(files: Sequence[tuple[str, bytes]], root: Path) -> Path:
    """Write uploaded files as a run directory under ``root`` (one folder per distinct upload).

    A zip is extracted; if it holds one run folder (e.g. ``myrun/predicted/...``) that folder is the run.
    Loose parquet/toml files are placed where a run directory keeps them.
    """
    if not files:
        raise UploadError("nothing was uploaded")
    digest = hashlib.sha256()
    for name, content in files:
        digest.update(name.encode() + b"\0" + hashlib.sha256(content).digest())
    target = root / f"upload-{digest.hexdigest()[:16]}"
    try:
        return _materialize(files, target)
    except (UploadError, OSError):
        shutil.rmtree(target, ignore_errors=True)  # a refused upload leaves nothing behind (disk fill)
        raise


def _materialize(files: Sequence[tuple[str, bytes]], target: Path) -> Path:
    run = RunDir(target)
    for name, content in files:
        if name.endswith(".zip"):
            _extract_zip(name, content, target)
        else:
            destination = _upload_destination(name, run)
            destination.parent.mkdir(parents=True, exist_ok=True)
            destination.write_bytes(content)
    if looks_like_run(target):
        return target
    inner = runs_in_folder(target)
    if len(inner) == 1:
        return inner[0]
    raise UploadError(
        f"the upload ({', '.join(n for n, _ in files)}) holds {len(inner)} run folders; "
        "expected one folder with scenario.toml, predicted/ or measured/"
    )


# ---------------------------------------------------------------------------------------- sweeps
def sweep_table(base: Scenario, gpus: int, finalists: int) -> pd.DataFrame:
    """One row per simulated plan: the columns of ``plancast sweep --table`` plus a ``plan`` label; the
    garbage collector paused for the search, as the CLI runs it (plancast/pool.py collector_paused)."""
    with collector_paused():
        found = sweep(base, gpus, finalists=finalists)
    return pd.DataFrame([r.row() for r in found.finalists])


PLAN_FIELDS = tuple(Plan.__dataclass_fields__)


def read_sweep_csv(source: Path | io.BytesIO, name: str) -> pd.DataFrame:
    """A ``plancast sweep --table`` CSV, with a ``plan`` label column; UploadError says what is wrong."""
    if isinstance(source, Path):
        if not source.is_file():
            raise UploadError(f"{name} is not a regular file")
        if source.stat().st_size > MAX_CSV_BYTES:
            raise UploadError(f"{name} is larger than {MAX_CSV_BYTES // 1024**2} MiB: not a sweep table")
    elif source.getbuffer().nbytes > MAX_CSV_BYTES:
        raise UploadError(f"{name} is larger than {MAX_CSV_BYTES // 1024**2} MiB: not a sweep table")
    try:
        frame = pd.read_csv(source)
    except (OSError, ValueError, pd.errors.ParserError) as err:
        raise UploadError(f"{name} is not a readable CSV ({err})") from err
    needed = ["step_time_s", "peak_memory_gib"]
    missing = [c for c in needed if c not in frame.columns]
    if missing:
        raise UploadError(f"{name} lacks column(s) {missing}: write it with `plancast sweep --table FILE`")
    frame = frame.dropna(subset=needed).reset_index(drop=True)
    if all(c in frame.columns for c in PLAN_FIELDS):
        frame["plan"] = [
            Plan(**_plan_fields(row)).label() for row in frame[list(PLAN_FIELDS)].to_dict("records")
        ]
    else:
        frame["plan"] = [f"plan {i}" for i in range(len(frame))]
    return frame


def _plan_fields(row: Mapping[str, Any]) -> dict[str, Any]:
    """CSV values back to Plan's field types (pandas reads ints as numpy scalars, bools as bools)."""
    out: dict[str, Any] = {}
    for name, value in row.items():
        if isinstance(value, str) or (isinstance(value, float) and math.isnan(value)):
            out[name] = value
        elif name == "sequence_parallel":
            out[name] = bool(value)
        else:
            out[name] = int(value)
    return out


# ---------------------------------------------------------------------------------------- caching
def run_stamp(path: Path) -> Stamp:
    """(relative path, size, mtime_ns) of every file of the run: the cache key's freshness part."""
    if not path.is_dir():
        return ()
    files = (p for p in path.rglob("*") if p.is_file() and not p.name.startswith("."))
    return tuple(
        sorted((p.relative_to(path).as_posix(), p.stat().st_size, p.stat().st_mtime_ns) for p in files)
    )


@st.cache_data(show_spinner="Reading the run…", max_entries=16)
def cached_run(path: str, stamp: Stamp) -> RunData:
    """`load_run`, cached by path and `run_stamp` (the stamp is part of the key, unused in the body)."""
    del stamp
    return load_run(Path(path))


@st.cache_data(show_spinner="Reconciling predicted and measured…", max_entries=16)
def cached_reconciliation(path: str, stamp: Stamp) -> Reconciliation:
    """`compare_run` of the cached run; ValueError (not cached) when the run cannot be reconciled."""
    return compare_run(cached_run(path, stamp))


def get_run(path: Path) -> RunData:
    """The run at ``path``, read once per change on disk."""
    path = Path(path).resolve()
    return cached_run(str(path), run_stamp(path))


def get_reconciliation(run: RunData) -> Reconciliation:
    return cached_reconciliation(str(run.path), run_stamp(run.path))


@st.cache_data(show_spinner="Simulating…", max_entries=64)
def cached_summary(scenario_json: str) -> dict[str, Any]:
    """The simulator's summary of a scenario (given as its JSON dump)."""
    return simulate(Scenario.model_validate_json(scenario_json), events=False).summary


@st.cache_data(show_spinner="Sweeping plans…", max_entries=8)
def cached_sweep(scenario_json: str, gpus: int, finalists: int) -> pd.DataFrame:
    return sweep_table(Scenario.model_validate_json(scenario_json), gpus, finalists)


UPLOADS_KEY = "plancast_uploads"  # session state: this browser session's upload folder


def session_upload_root() -> Path | None:
    """This browser session's upload folder if it made one (an upload), else None: listing runs must not
    make a folder per page view (a server stopped by a signal never runs the atexit that removes it)."""
    known = st.session_state.get(UPLOADS_KEY)
    return Path(known) if known and Path(known).is_dir() else None


def upload_root() -> Path:
    """Where this browser session's uploads are written: its own ``tempfile.mkdtemp`` (mode 0700, a name
    no other user can guess and plant a link at), made at its first upload, removed when the server exits."""
    known = session_upload_root()
    if known is not None:
        return known
    path = Path(tempfile.mkdtemp(prefix="plancast-dashboard-"))
    atexit.register(shutil.rmtree, path, ignore_errors=True)
    st.session_state[UPLOADS_KEY] = str(path)
    return path
