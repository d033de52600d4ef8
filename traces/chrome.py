"""Export trace tables as Chrome-trace JSON shaped like PyTorch-profiler (Kineto) output.

One file per rank (``rank-R.json``), so the folder opens in Perfetto (ui.perfetto.dev) and in
HolisticTraceAnalysis (``TraceAnalysis(trace_dir=...)``). What HTA needs (hta/common/trace_parser.py,
hta/utils/utils.py in facebookresearch/HolisticTraceAnalysis):

- ``distributedInfo.rank`` in each file (found with the regex ``"rank":\\s+(\\d+)``, hence the
  default ``json`` separators with a space);
- GPU work as ``cat: "kernel"`` complete events with an integer ``args.stream`` >= 0;
- a host ``cudaLaunchKernel`` per kernel with the same ``args.correlation``, inside a
  ``ProfilerStep#N`` span (HTA drops kernels it cannot tie to a step, and by default the last step);
- communication kernels named ``nccl...Kernel...`` (``NCCL_KERNEL_RE = ^nccl.*Kernel``); every
  other kernel name counts as computation.

Steps are laid end to end: step s starts where the slowest rank finished step s-1, so every rank
shares one time origin, as ``start_us`` does within a step. Each step gets a ``ProfilerStep#s``
span on a host thread (tid 0), as the profiler writes it.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pandas as pd

from plancast.traces import schema
from plancast.traces.store import atomic_open

HOST_TID = 0
KINETO_SCHEMA_VERSION = 1

# schema kind -> NCCL kernel operation name, as in ncclDevKernel_AllReduce_Sum_f32_RING_LL
NCCL_OPS: dict[str, str] = {
    "all_reduce": "AllReduce",
    "all_gather": "AllGather",
    "reduce_scatter": "ReduceScatter",
    "broadcast": "Broadcast",
    "all_to_all": "SendRecv",
    "send": "SendRecv",
    "recv": "SendRecv",
    "barrier": "AllReduce",
}


def stream_ids(streams: list[str]) -> dict[str, int]:
    """Stream name -> positive integer id: ``compute`` first, then the others alphabetically."""
    ordered = sorted(set(streams), key=lambda name: (name != "compute", name))
    return {name: number for number, name in enumerate(ordered, start=1)}


def step_origins_us(frame: pd.DataFrame) -> dict[int, float]:
    """Absolute start of each step when steps are laid end to end (slowest rank sets the length)."""
    origins: dict[int, float] = {}
    cursor_us = 0.0
    for step, events in frame.groupby("step", sort=True):
        first_us = min(float(events["start_us"].min()), 0.0)
        last_us = float((events["start_us"] + events["dur_us"]).max())
        origins[int(step)] = cursor_us - first_us
        cursor_us += last_us - first_us
    return origins


def kernel_name(row: Mapping[str, Any]) -> str:
    """A kernel name HTA classifies right: ``nccl...Kernel`` for communication, plain for compute."""
    where = f"stage={row['stage']} chunk={row['chunk']} mb={row['microbatch']} index={row['index']}"
    if row["kind"] in schema.COMM_KINDS:
        return f"ncclDevKernel_{NCCL_OPS[row['kind']]} {row['kind']} {row['stream']} {where}"
    return f"{row['kind']} {where}"


def kernel_event(row: Mapping[str, Any], origin_us: float, tid: int, correlation: int) -> dict[str, Any]:
    """One table row as a Chrome ``X`` event on its rank's stream."""
    return {
        "ph": "X",
        "cat": "kernel",
        "name": kernel_name(row),
        "pid": int(row["rank"]),
        "tid": tid,
        "ts": origin_us + float(row["start_us"]),
        "dur": float(row["dur_us"]),
        "args": {
            "device": int(row["rank"]),
            "stream": tid,
            "stream_name": str(row["stream"]),  # what `import-kineto` reads back (exported_rows)
            "start_us": float(row["start_us"]),
            "correlation": correlation,
            "step": int(row["step"]),
            "kind": str(row["kind"]),
            "stage": int(row["stage"]),
            "chunk": int(row["chunk"]),
            "microbatch": int(row["microbatch"]),
            "index": int(row["index"]),
            "peer": int(row["peer"]),
            "bytes": int(row["bytes"]),
            "flops": float(row["flops"]),
        },
    }


def launch_event(kernel: Mapping[str, Any]) -> dict[str, Any]:
    """The host-side ``cudaLaunchKernel`` of a kernel, linked by ``correlation``.

    HTA keeps only kernels whose launch lies inside a profiler step (Trace._filter_irrelevant_gpu_kernels).
    """
    return {
        "ph": "X",
        "cat": "cuda_runtime",
        "name": "cudaLaunchKernel",
        "pid": kernel["pid"],
        "tid": HOST_TID,
        "ts": kernel["ts"],
        "dur": 0.0,
        "args": {"correlation": kernel["args"]["correlation"]},
    }


def step_events(
    rows: list[dict[str, Any]], rank: int, origins_us: Mapping[int, float]
) -> list[dict[str, Any]]:
    """``ProfilerStep#s`` spans of one rank (its table rows), from the step origin to its last event end."""
    spans: dict[int, tuple[float, float]] = {}
    for row in rows:
        step, start_us = int(row["step"]), float(row["start_us"])
        first_us, last_us = spans.get(step, (0.0, -math.inf))
        spans[step] = (min(first_us, start_us), max(last_us, start_us + float(row["dur_us"])))
    return [
        {
            "ph": "X",
            "cat": "user_annotation",
            "name": f"ProfilerStep#{step}",
            "pid": rank,
            "tid": HOST_TID,
            "ts": origins_us[step] + first_us,
            "dur": last_us - first_us,
            "args": {},
        }
        for step, (first_us, last_us) in sorted(spans.items())
    ]


def metadata_events(rank: int, source: str, ids: Mapping[str, int]) -> list[dict[str, Any]]:
    """Process and thread names so Perfetto labels the tracks."""
    events: list[dict[str, Any]] = [
        {
            "ph": "M",
            "ts": 0.0,
            "name": "process_name",
            "pid": rank,
            "tid": 0,
            "args": {"name": f"rank {rank} {source}"},
        },
        {
            "ph": "M",
            "ts": 0.0,
            "name": "thread_name",
            "pid": rank,
            "tid": HOST_TID,
            "args": {"name": "steps"},
        },
    ]
    events += [
        {
            "ph": "M",
            "ts": 0.0,
            "name": "thread_name",
            "pid": rank,
            "tid": tid,
            "args": {"name": f"stream {name}"},
        }
        for name, tid in ids.items()
    ]
    return events


def chrome_trace(frame: pd.DataFrame, rank: int, world_size: int, backend: str = "nccl") -> dict[str, Any]:
    """The Kineto-shaped trace object of one rank of a single-source table (pure; writes nothing)."""
    frame = schema.validate(frame)
    return _Export(frame, world_size, backend, only=rank).trace(rank)


def export_chrome(frame: pd.DataFrame, out_dir: Path, world_size: int, backend: str = "nccl") -> list[Path]:
    """Write ``out_dir/rank-R.json`` for every rank in ``[0, world_size)``; return the paths.

    ``frame`` must hold one source (predicted or measured): put each source in its own folder
    (e.g. ``RUN/export/predicted``), since HTA reads every JSON file of a folder as one rank.
    """
    frame = schema.validate(frame)
    outside = sorted(set(frame["rank"].tolist()) - set(range(world_size)))
    if outside:
        raise ValueError(f"rank(s) {outside} are outside world size {world_size}: pass the run's world size")
    out_dir = Path(out_dir)
    export = _Export(frame, world_size, backend)
    paths = []
    for rank in range(world_size):
        path = out_dir / f"rank-{rank}.json"
        with atomic_open(path, "w", durable=False) as handle:  # derived from the events: written again
            handle.write(json.dumps(export.trace(rank)))  # json.dump encodes in Python, dumps in C: same text
        paths.append(path)
    return paths


class _Export:
    """What every rank's trace of one table shares, worked out once: its rows per rank in (step, start)
    order, stream ids, step origins (a 1,536-rank prediction's export took 30 s when each rank's file
    read the whole table again)."""

    def __init__(self, frame: pd.DataFrame, world_size: int, backend: str, only: int | None = None) -> None:
        self.world_size, self.backend = world_size, backend
        self.source = _single_source(frame)
        self.ids = stream_ids(frame["stream"].tolist())  # stream ids and step origins: the whole table's
        self.origins_us = step_origins_us(frame)
        self.rows: dict[int, list[dict[str, Any]]] = {}
        mine = frame if only is None else frame[frame["rank"] == only]  # `only`: that rank's rows alone
        # a stable sort of the whole table keeps each rank's rows in the order sorting them alone gives
        for row in mine.sort_values(["step", "start_us"], kind="stable").to_dict("records"):
            self.rows.setdefault(int(row["rank"]), []).append(row)

    def trace(self, rank: int) -> dict[str, Any]:
        """The Kineto-shaped trace of `rank`."""
        rows, origins_us, ids = self.rows.get(rank, []), self.origins_us, self.ids
        kernels = [
            kernel_event(row, origins_us[int(row["step"])], ids[str(row["stream"])], correlation)
            for correlation, row in enumerate(rows, start=1)
        ]
        launches = [launch_event(kernel) for kernel in kernels]
        steps = step_events(rows, rank, origins_us)
        events = metadata_events(rank, self.source, ids) + steps + launches + kernels
        return {
            "schemaVersion": KINETO_SCHEMA_VERSION,
            "distributedInfo": {"rank": rank, "world_size": self.world_size, "backend": self.backend},
            "deviceProperties": [],
            "traceName": f"{EXPORT_TRACE_NAME}{self.source} rank {rank}",
            "displayTimeUnit": "ms",
            "traceEvents": events,
        }


EXPORT_TRACE_NAME = "plancast "
"""How an exported file's ``traceName`` begins (``plancast SOURCE rank R``)."""
_ROW_ARGS = ("step", "kind", "stage", "chunk", "microbatch", "index", "peer", "bytes", "flops", "start_us")


def exported_rows(trace: Mapping[str, Any]) -> list[dict[str, Any]] | None:
    """The table rows of a file this module wrote (its kernels carry every column in ``args``), so that
    `plancast import-kineto` of an export gives back the events exported; None for any other trace."""
    name = trace.get("traceName")
    if not (isinstance(name, str) and name.startswith(EXPORT_TRACE_NAME)):
        return None
    rows = []
    for event in trace.get("traceEvents", []):
        args = event.get("args") if isinstance(event, Mapping) else None
        if event.get("cat") != "kernel" or not isinstance(args, Mapping) or "stream_name" not in args:
            continue
        rows.append(
            {
                "stream": str(args["stream_name"]),
                "dur_us": float(event["dur"]),
                **{k: args[k] for k in _ROW_ARGS},
            }
        )
    return rows


def _single_source(frame: pd.DataFrame) -> str:
    sources = sorted(set(frame["source"].tolist()))
    if len(sources) > 1:
        raise ValueError(
            f"trace table mixes sources {sources}: export each source to its own folder, "
            "e.g. frame[frame['source'] == 'measured']"
        )
    return sources[0] if sources else "empty"
