"""Import PyTorch-profiler (Kineto) JSON traces of jobs plancast did not launch, as measured events.

One trace file per rank; the rank is ``distributedInfo.rank`` (else ``rank<N>`` in the file name).
Steps are the ``ProfilerStep#N`` spans that ``prof.step()`` writes, renumbered from 0. Within a step:

- forward / backward: spans named exactly ``forward`` / ``backward`` (``record_function("forward")``)
  when the job annotates them, one per microbatch in order. Otherwise the step is read as runs of
  top-level host ops: a run of autograd ops (``autograd::engine::evaluate_function: ...``, on any
  thread of the process) is a backward, the run of other ops just before it is its forward.
- optimizer: spans named ``optimizer``, else ``Optimizer.step#...`` (what torch.optim records).
- collectives (stream ``dp``, microbatch -1): from the most precise family the file has, in order:
  NCCL GPU kernels (``ncclDevKernel_AllReduce...``), backend spans (``gloo:all_reduce``,
  ``nccl:all_gather``), ``record_param_comms`` (``Collective name`` arg), ``c10d::allreduce_``-style
  ops. ``index`` counts each kind in issue order within the step; ``bytes`` comes from the
  message-size args or the input shape and dtype when the profiler recorded them (else 0).

Times are relative to the step's ``ProfilerStep`` start on that rank. Send/recv, barriers and FLOPs
are not imported (Kineto does not record the peer of a point-to-point transfer in a portable way).
"""

from __future__ import annotations

import bisect
import math
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from plancast.traces import schema
from plancast.traces.chrome import exported_rows
from plancast.traces.kineto_files import load_trace, trace_paths, trace_rank
from plancast.traces.store import TraceReadError

STEP_RE = re.compile(r"^ProfilerStep#(\d+)$")
NCCL_KERNEL_RE = re.compile(r"^nccl(?:Dev)?Kernel_([A-Za-z]+)")
BACKEND_SPAN_RE = re.compile(r"^(?:nccl|gloo|mpi|ucc|xccl):([A-Za-z_]+)$")
AUTOGRAD_PREFIX = "autograd::engine::evaluate_function"
OPTIMIZER_STEP_PREFIX = "Optimizer.step#"
OPTIMIZER_PREFIX = "Optimizer."

# normalized op name prefix (letters only, lower case) -> schema kind
COLLECTIVE_PREFIXES: tuple[tuple[str, str], ...] = (
    ("allreduce", "all_reduce"),
    ("allgather", "all_gather"),
    ("reducescatter", "reduce_scatter"),
    ("broadcast", "broadcast"),
    ("alltoall", "all_to_all"),
)

# element size in bytes of the dtype names the profiler writes ("Float", "float", "c10::BFloat16", ...)
DTYPE_BYTES: dict[str, int] = {
    "float": 4, "float32": 4, "double": 8, "float64": 8, "half": 2, "float16": 2, "bfloat16": 2,
    "long": 8, "long int": 8, "int64": 8, "int": 4, "int32": 4, "short": 2, "int16": 2,
    "char": 1, "signed char": 1, "unsigned char": 1, "byte": 1, "int8": 1, "uint8": 1, "bool": 1,
    "float8_e4m3fn": 1, "float8_e5m2": 1,
}  # fmt: skip


@dataclass(frozen=True)
class Span:
    """One complete (``ph: "X"``) event of a profiler trace; times in microseconds."""

    name: str
    cat: str
    pid: str
    tid: str
    ts_us: float
    dur_us: float
    args: Mapping[str, Any] = field(default_factory=dict)

    @property
    def end_us(self) -> float:
        """End of the span."""
        return self.ts_us + self.dur_us


@dataclass(frozen=True)
class StepWindow:
    """One ``ProfilerStep`` on the main thread, and the window its asynchronous work may fall in."""

    step: int
    span: Span
    until_us: float  # start of the next step (or +inf for the last)

    def holds_host(self, s: Span) -> bool:
        """A host span that started inside the step span."""
        return self.span.ts_us <= s.ts_us < self.span.end_us

    def holds_async(self, s: Span) -> bool:
        """Work that started after this step began and before the next one (GPU kernels)."""
        return self.span.ts_us <= s.ts_us < self.until_us


def import_kineto(trace_dir: Path, say: Callable[[str], None] = print) -> pd.DataFrame:
    """Every ``*.json`` / ``*.json.gz`` profiler trace in ``trace_dir`` (or one file) -> measured events.
    A lone trace that names no rank is rank 0 of a single-process job (`say` tells so)."""
    paths = trace_paths(Path(trace_dir))
    frames: list[pd.DataFrame] = []
    seen: dict[int, Path] = {}
    for path in paths:
        trace = load_trace(path)
        rank = trace_rank(trace, path, alone=len(paths) == 1)
        if rank is None:
            rank = 0
            say(
                f"{path} names no rank (no distributedInfo, no rankN in its name): read as rank 0 of a "
                "single-process job"
            )
        if rank in seen:
            raise TraceReadError(
                f"{seen[rank]} and {path} are both rank {rank}: keep one trace file per rank in {trace_dir}"
            )
        seen[rank] = path
        frames.append(parse_trace(trace, rank, path))
    return schema.validate(pd.concat(frames, ignore_index=True))


def spans_of(trace: Mapping[str, Any]) -> list[Span]:
    """The complete events of a trace with a name and numeric times, sorted by start then longest first."""
    spans = [
        Span(
            name=str(e["name"]),
            cat=str(e.get("cat", "")),
            pid=str(e.get("pid", "")),
            tid=str(e.get("tid", "")),
            ts_us=float(e["ts"]),
            dur_us=float(e["dur"]),
            args=e["args"] if isinstance(e.get("args"), dict) else {},
        )
        for e in trace["traceEvents"]
        if isinstance(e, dict)
        and e.get("ph") == "X"
        and "name" in e
        and _is_number(e.get("ts"))
        and _is_number(e.get("dur"))
    ]
    return sorted(spans, key=lambda s: (s.ts_us, -s.dur_us))


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def step_windows(spans: list[Span], path: Path) -> list[StepWindow]:
    """The ``ProfilerStep#N`` spans in time order, numbered from 0 (N minus the first N)."""
    steps = [s for s in spans if STEP_RE.match(s.name)]
    if not steps:
        raise TraceReadError(
            f"{path} has no ProfilerStep#N spans: call prof.step() at the end of every training step"
        )
    first_n = _step_number(steps[0])
    windows = []
    for position, span in enumerate(steps):
        until_us = steps[position + 1].ts_us if position + 1 < len(steps) else math.inf
        windows.append(StepWindow(step=_step_number(span) - first_n, span=span, until_us=until_us))
    return windows


def _step_number(span: Span) -> int:
    match = STEP_RE.match(span.name)
    return int(match.group(1)) if match else -1


def parse_trace(trace: Mapping[str, Any], rank: int, path: Path) -> pd.DataFrame:
    """One rank's profiler trace -> schema-valid measured events (pure apart from naming ``path``); a
    file `plancast export` wrote gives back its own rows (traces/chrome.py)."""
    exported = exported_rows(trace)
    if exported is not None:
        return schema.to_frame({**row, "source": "measured", "rank": rank} for row in exported)
    spans = spans_of(trace)
    starts_us = [s.ts_us for s in spans]
    windows = step_windows(spans, path)
    collectives, is_async = collective_spans(spans)
    rows: list[dict[str, Any]] = []
    for window in windows:
        main = window.span
        lo = bisect.bisect_left(starts_us, main.ts_us)
        hi = bisect.bisect_left(starts_us, main.end_us)
        host = [s for s in spans[lo:hi] if s is not main and not STEP_RE.match(s.name)]
        main_thread = [s for s in host if (s.pid, s.tid) == (main.pid, main.tid)]
        same_process = [s for s in host if s.pid == main.pid]
        rows += model_rows(main_thread, same_process, window)
        inside = window.holds_async if is_async else window.holds_host
        rows += collective_rows([(kind, s) for kind, s in collectives if inside(s)], window)
    return schema.to_frame({**row, "source": "measured", "rank": rank} for row in rows)


def outermost(spans: Iterable[Span]) -> list[Span]:
    """Spans not nested inside an earlier one (input sorted by start, longest first)."""
    out: list[Span] = []
    end_us = -math.inf
    for s in spans:
        if s.ts_us >= end_us:
            out.append(s)
            end_us = s.end_us
    return out


def model_rows(main_thread: list[Span], same_process: list[Span], window: StepWindow) -> list[dict[str, Any]]:
    """Forward, backward and optimizer rows of one step."""
    explicit = {
        phase: outermost(s for s in main_thread if s.name.lower() == phase)
        for phase in ("forward", "backward", "optimizer")
    }
    if explicit["forward"] or explicit["backward"]:
        passes = [(kind, mb, s) for kind in ("forward", "backward") for mb, s in enumerate(explicit[kind])]
    else:
        passes = heuristic_passes(main_thread, same_process)
    optimizer = explicit["optimizer"] or outermost(
        s for s in main_thread if s.name.startswith(OPTIMIZER_STEP_PREFIX)
    )
    rows = [_row(window, kind, s, stage=0, chunk=0, microbatch=mb) for kind, mb, s in passes]
    rows += [
        _row(window, "optimizer", s, stage=-1, chunk=-1, microbatch=-1, index=i)
        for i, s in enumerate(optimizer)
    ]
    return rows


def heuristic_passes(main_thread: list[Span], same_process: list[Span]) -> list[tuple[str, int, Span]]:
    """Forward/backward spans of an unannotated step: a run of host ops followed by a run of autograd ops.

    Host ops after the last backward (gradient clipping, optimizer, zero_grad) are not a forward
    because no backward follows them.
    """
    autograd = outermost(s for s in same_process if s.name.startswith(AUTOGRAD_PREFIX))
    other = [
        s
        for s in outermost(main_thread)
        if not s.name.startswith((AUTOGRAD_PREFIX, OPTIMIZER_PREFIX)) and op_kind(s) is None
    ]
    labelled = sorted([("B", s) for s in autograd] + [("F", s) for s in other], key=lambda x: x[1].ts_us)
    runs: list[tuple[str, Span]] = []
    for label, s in labelled:
        if runs and runs[-1][0] == label:
            first = runs[-1][1]
            end_us = max(first.end_us, s.end_us)
            runs[-1] = (
                label,
                Span(first.name, first.cat, first.pid, first.tid, first.ts_us, end_us - first.ts_us),
            )
        else:
            runs.append((label, s))
    passes: list[tuple[str, int, Span]] = []
    microbatch = 0
    for position, (label, span) in enumerate(runs):
        if label == "B":
            if position > 0 and runs[position - 1][0] == "F":
                passes.append(("forward", microbatch, runs[position - 1][1]))
            passes.append(("backward", microbatch, span))
            microbatch += 1
    return passes


def _row(
    window: StepWindow,
    kind: str,
    s: Span,
    *,
    stage: int,
    chunk: int,
    microbatch: int,
    index: int = 0,
    **extra: Any,
) -> dict[str, Any]:
    stream = "dp" if kind in schema.COMM_KINDS else "compute"
    return {
        "step": window.step, "stream": stream, "kind": kind, "stage": stage, "chunk": chunk,
        "microbatch": microbatch, "index": index, "peer": -1, "start_us": s.ts_us - window.span.ts_us,
        "dur_us": s.dur_us, "bytes": 0, "flops": 0.0, **extra,
    }  # fmt: skip


def collective_kind(op_name: str) -> str | None:
    """Schema kind of a collective op name (``allreduce``, ``_allgather_base_``, ``ReduceScatter``, ...)."""
    letters = re.sub(r"[^a-z]", "", op_name.lower())
    for prefix, kind in COLLECTIVE_PREFIXES:
        if letters.startswith(prefix):
            return kind
    return None


def kernel_op(s: Span) -> str | None:
    """Collective kind of an NCCL GPU kernel."""
    match = NCCL_KERNEL_RE.match(s.name)
    return collective_kind(match.group(1)) if match and s.cat == "kernel" else None


def backend_op(s: Span) -> str | None:
    """Collective kind of a backend span such as ``gloo:all_reduce``."""
    match = BACKEND_SPAN_RE.match(s.name)
    return collective_kind(match.group(1)) if match else None


def param_comms_op(s: Span) -> str | None:
    """Collective kind of a ``record_param_comms`` span."""
    name = s.args.get("Collective name")
    return collective_kind(str(name)) if s.name == "record_param_comms" and name else None


def c10d_op(s: Span) -> str | None:
    """Collective kind of a ``c10d::allreduce_``-style op."""
    return collective_kind(s.name.removeprefix("c10d::")) if s.name.startswith("c10d::") else None


def op_kind(s: Span) -> str | None:
    """Collective kind of a span in any family, or None for non-collectives."""
    for family in (kernel_op, backend_op, param_comms_op, c10d_op):
        kind = family(s)
        if kind is not None:
            return kind
    return None


COLLECTIVE_FAMILIES: tuple[tuple[Callable[[Span], str | None], bool], ...] = (
    (kernel_op, True),  # GPU kernels run asynchronously, possibly after the host step ended
    (backend_op, False),
    (param_comms_op, False),
    (c10d_op, False),
)


def collective_spans(spans: list[Span]) -> tuple[list[tuple[str, Span]], bool]:
    """(kind, span) of the most precise collective family in the trace, and whether it runs async."""
    for family, is_async in COLLECTIVE_FAMILIES:
        found = [(kind, s) for s in spans if (kind := family(s)) is not None]
        if found:
            return found, is_async
    return [], False


def collective_rows(found: list[tuple[str, Span]], window: StepWindow) -> list[dict[str, Any]]:
    """Collective rows of one step, ``index`` counting each kind in issue order."""
    counts: dict[str, int] = {}
    rows = []
    for kind, s in found:
        index = counts.get(kind, 0)
        counts[kind] = index + 1
        rows.append(
            _row(window, kind, s, stage=0, chunk=0, microbatch=-1, index=index, bytes=payload_bytes(s.args))
        )
    return rows


def dtype_bytes(name: Any) -> int:
    """Element size of a profiler dtype name, 0 when unknown."""
    return DTYPE_BYTES.get(str(name).lower().removeprefix("c10::"), 0)


def _element_count(dims: Any) -> int:
    """Elements of a shape ``[a, b]`` or of a tensor list ``[[a, b], [c]]``."""
    if isinstance(dims, list) and all(isinstance(d, int) for d in dims):
        return math.prod(dims)
    if isinstance(dims, list):
        return sum(_element_count(d) for d in dims)
    return 0


def payload_bytes(args: Mapping[str, Any]) -> int:
    """Message size of a collective: ``In/Out msg nelems`` x ``dtype``, else input shape x input type."""
    nelems = [args[k] for k in ("In msg nelems", "Out msg nelems") if isinstance(args.get(k), int)]
    if nelems and dtype_bytes(args.get("dtype")):
        return max(nelems) * dtype_bytes(args.get("dtype"))
    dims, types = args.get("Input Dims"), args.get("Input type")
    if isinstance(dims, list) and isinstance(types, list) and dims and types:
        return _element_count(dims[0]) * dtype_bytes(types[0])
    return 0
