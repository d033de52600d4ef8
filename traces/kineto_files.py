"""The files of a Kineto import: which traces a folder holds, reading one within limits, and its rank.

A rank is ``distributedInfo.rank`` (else ``rank<N>`` in the file name), an integer from 0 to the trace's
``distributedInfo.world_size`` - 1 (traces/bounded.py MAX_RANKS at most); a lone trace naming neither is
rank 0 of a single-process job (traces/kineto.py says so).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from plancast.traces import bounded
from plancast.traces.bounded import BoundedReadError, load_json, read_bytes
from plancast.traces.store import TraceReadError

RANK_IN_NAME_RE = re.compile(r"rank[-_]?(\d+)", re.IGNORECASE)


def trace_paths(trace_dir: Path) -> list[Path]:
    if trace_dir.is_file():
        return [trace_dir]
    if not trace_dir.is_dir():
        raise TraceReadError(f"{trace_dir} does not exist: pass the folder the profiler wrote its traces to")
    paths = sorted(p for p in trace_dir.iterdir() if p.name.endswith((".json", ".json.gz")))
    if not paths:
        raise TraceReadError(f"{trace_dir} has no *.json or *.json.gz profiler traces")
    return paths


MAX_TRACE_EVENTS = 5_000_000
"""Events of one profiler trace: a few steps of a large model are ~10^5-10^6; each costs ~1 KiB parsed."""


def load_trace(path: Path) -> dict[str, Any]:
    """Read one trace file (plain or gzipped JSON, within traces/bounded.py's limits); TraceReadError if
    cut off, too large, or not a profiler trace."""
    try:
        raw = read_bytes(path, bounded.MAX_TRACE_BYTES, "a profiler trace")
        trace = load_json(raw, str(path), scan=False)
    except BoundedReadError as err:
        raise TraceReadError(str(err)) from err
    except (UnicodeDecodeError, ValueError) as err:
        where = f" at line {err.lineno}, column {err.colno}" if isinstance(err, json.JSONDecodeError) else ""
        raise TraceReadError(
            f"{path} is not valid JSON{where} ({err}); the profiler was probably stopped while writing it: "
            "export the trace again"
        ) from err
    if not isinstance(trace, dict) or not isinstance(trace.get("traceEvents"), list):
        raise TraceReadError(
            f"{path} has no 'traceEvents' list, so it is not a PyTorch profiler trace: write one with "
            "torch.profiler.tensorboard_trace_handler(...) or prof.export_chrome_trace(...)"
        )
    if len(trace["traceEvents"]) > MAX_TRACE_EVENTS:
        raise TraceReadError(
            f"{path} holds {len(trace['traceEvents'])} events, more than the {MAX_TRACE_EVENTS} plancast "
            "imports from one trace: profile fewer steps (torch.profiler.schedule(active=...))"
        )
    return trace


def _rank_value(value: Any, path: Path, where: str, world: Any) -> int:
    """`value` as a rank, or TraceReadError: an integer in 0 .. world size - 1 (MAX_RANKS at most)."""
    limit = world if isinstance(world, int) and not isinstance(world, bool) and world > 0 else None
    top = min(limit or bounded.MAX_RANKS, bounded.MAX_RANKS)
    if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value < top:
        raise TraceReadError(
            f"{path}: {where} is {value!r}, not a rank: a rank is an integer from 0 to {top - 1}"
            + (f" (its world size is {limit})" if limit else "")
            + "; fix the trace or its file name"
        )
    return value


def trace_rank(trace: Mapping[str, Any], path: Path, alone: bool = False) -> int | None:
    """``distributedInfo.rank`` of a trace, else the ``rank<N>`` in its file name; None for a lone
    trace (`alone`) that names neither, TraceReadError for one of several, or a rank out of range."""
    info = trace.get("distributedInfo")
    world = info.get("world_size") if isinstance(info, dict) else None
    if isinstance(info, dict) and info.get("rank") is not None:
        return _rank_value(info["rank"], path, "distributedInfo.rank", world)
    match = RANK_IN_NAME_RE.search(path.name)
    if match:
        digits = match.group(1)
        value = int(digits) if len(digits) <= bounded.MAX_INT_DIGITS else digits
        return _rank_value(value, path, f"the rank in its name ({match.group(0)})", world)
    if alone:
        return None
    raise TraceReadError(
        f'{path} names no rank: add "distributedInfo": {{"rank": N}} to it or put rankN in the file name'
    )
