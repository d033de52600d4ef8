"""Spans -> trace rows: one measured event per predicted event (traces/schema.py conventions).

Compute spans, pipeline send/recv and the collectives plancast issues or hooks are timed by a
``Timer``: ``time.perf_counter_ns`` on CPU, CUDA events on GPU (resolved once per step, after a
synchronize). DDP gradient buckets are timed by a communication hook (runtime/parallel/dp.py) and
ZeRO-1's parameter broadcasts around their issue: issue mark, then a mark in the completion callback
of the collective's future. Collectives issued deep inside library code (DTensor for tensor
parallelism, FSDP2) are invisible to plancast's own code, so those plans capture them:

- on CPU with ``CollectiveSpy``, a dispatch mode that sees every ``c10d::`` and functional-collective
  op as it is issued, attributes it to the innermost open plancast span or ``comm_scope`` and times
  it from its issue to its completion (about 15% of a tiny TP or FSDP2 step on CPU, against ~65%
  with the profiler, benchmarks/instrument_overhead.py);
- on GPU under ``torch.profiler``: every ``c10d::`` op the main thread issues is attributed to the
  innermost plancast range open at that moment and timed by the matching NCCL kernel, paired in issue
  order (``collective_events``).

Gloo runs reduce-scatter as an all-reduce; the event keeps the issued op's kind.

A step's events are kept as ``[key, start mark, end mark]`` rows and become a table once, in
``end_step`` (``rows_frame``), so the per-event cost inside the step is two marks and an append.
"""
from __future__ import annotations

import os
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Protocol

import numpy as np
import pandas as pd
import pyarrow as pa
import torch
from torch.profiler import ProfilerActivity, profile, record_function
from torch.utils._python_dispatch import TorchDispatchMode

from plancast.traces.schema import COLUMNS, Event

# c10d op (as the profiler names it) -> trace kind. Point-to-point ops are timed by spans instead.
C10D_KINDS: dict[str, str] = {
    "c10d::allreduce_": "all_reduce",
    "c10d::allreduce_coalesced_": "all_reduce",
    "c10d::_allgather_base_": "all_gather",
    "c10d::allgather_": "all_gather",
    "c10d::allgather_into_tensor_coalesced_": "all_gather",
    "c10d::_reduce_scatter_base_": "reduce_scatter",
    "c10d::reduce_scatter_": "reduce_scatter",
    "c10d::reduce_scatter_tensor_coalesced_": "reduce_scatter",
    "c10d::broadcast_": "broadcast",
    "c10d::alltoall_base_": "all_to_all",
}
SPAN_PREFIX = "plancast|"
STEP_MARKER = "plancast-step"


class Timer(Protocol):
    """Marks points in time on the device that does the work; resolves them after the step."""

    def mark(self) -> Any:
        """A point in time (an int on CPU, a recorded ``torch.cuda.Event`` on GPU)."""

    def elapsed_us(self, start: Any, end: Any) -> float:
        """Microseconds from mark ``start`` to mark ``end`` (call after ``synchronize``)."""

    def synchronize(self) -> None:
        """Wait until every marked point has happened."""


class CpuTimer:
    """``time.perf_counter_ns`` marks: the work happens on the calling thread."""

    def mark(self) -> int:
        return time.perf_counter_ns()

    def elapsed_us(self, start: Any, end: Any) -> float:
        return (int(end) - int(start)) / 1e3

    def synchronize(self) -> None:
        return None


class CudaTimer:
    """CUDA events recorded on the current stream: they time kernels, not the Python that queues them.

    A mark taken in a future's completion callback lands on the stream the callback runs on, which
    waits for the collective, so it times the collective's end on the device.
    """

    def mark(self) -> torch.cuda.Event:
        event = torch.cuda.Event(enable_timing=True)
        event.record()
        return event

    def elapsed_us(self, start: Any, end: Any) -> float:
        return float(start.elapsed_time(end)) * 1e3

    def synchronize(self) -> None:
        torch.cuda.synchronize()


def default_timer(device: torch.device) -> Timer:
    """The timer for ``device``: CUDA events on GPU, perf_counter on CPU."""
    return CudaTimer() if device.type == "cuda" else CpuTimer()


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
    assert list(columns) == list(COLUMNS)
    return pd.DataFrame(columns, copy=False)


def events_frame(events: list[Event]) -> pd.DataFrame:
    """Measured ``Event``s (flops 0, one rank and step) -> a table equal to ``traces.schema.to_frame``."""
    if not events:
        return rows_frame(0, 0, [], [], [])
    keys = [
        SpanKey(e.kind, e.stage, e.chunk, e.microbatch, e.stream, e.peer, e.bytes, e.index) for e in events
    ]
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


@dataclass(frozen=True, slots=True)
class SpanKey:
    """What a span is: trace kind and the (stage, chunk, microbatch) it belongs to."""

    kind: str
    stage: int = -1
    chunk: int = -1
    microbatch: int = -1
    stream: str = "compute"
    peer: int = -1
    bytes: int = 0
    index: int = 0

    def label(self) -> str:
        return f"{SPAN_PREFIX}{self.kind}|{self.stage}|{self.chunk}|{self.microbatch}"


Row = list[Any]
"""One event of the step being recorded: ``[SpanKey, start mark, end mark or None]``."""


class _Span:
    """Context manager of ``StepRecorder.span``: two marks and one append, no generator."""

    __slots__ = ("_key", "_label", "_recorder", "_start")

    def __init__(self, recorder: StepRecorder, key: SpanKey) -> None:
        self._recorder, self._key = recorder, key
        self._label: Any = None

    def __enter__(self) -> None:
        rec = self._recorder
        if rec._prof is not None:  # the profiler attributes collectives to the enclosing span
            self._label = record_function(self._key.label())
            self._label.__enter__()
        elif rec._spy is not None:  # so does the dispatch spy, from the stack of open spans
            rec._scopes.append(self._key)
        self._start = rec._mark()

    def __exit__(self, *exc: object) -> None:
        rec = self._recorder
        end = rec._mark()
        if self._label is not None:
            self._label.__exit__(*exc)
        elif rec._spy is not None and rec._scopes:
            rec._scopes.pop()
        rec._rows.append([self._key, self._start, end])


class _CommScope:
    """Context manager of ``StepRecorder.comm_scope``: collectives issued inside belong to its owner."""

    __slots__ = ("_label", "_owner", "_recorder")

    def __init__(self, recorder: StepRecorder, owner: _Owner) -> None:
        self._recorder, self._owner = recorder, owner
        self._label: Any = None

    def __enter__(self) -> None:
        rec, o = self._recorder, self._owner
        if rec._prof is not None:
            label = f"{COMM_MARKER}{o.stream}|{o.stage}|{o.chunk}|{o.microbatch}"
            self._label = record_function(label + (f"|{o.peer}" if o.peer >= 0 else ""))
            self._label.__enter__()
        elif rec._spy is not None:
            rec._scopes.append(o)

    def __exit__(self, *exc: object) -> None:
        rec = self._recorder
        if self._label is not None:
            self._label.__exit__(*exc)
        elif rec._spy is not None and rec._scopes:
            rec._scopes.pop()


_PROFILER_ON_CPU = os.environ.get("PLANCAST_CPU_CAPTURE", "dispatch") == "profiler"
"""``PLANCAST_CPU_CAPTURE=profiler``: capture library collectives on CPU with torch.profiler, as on GPU,
instead of ``CollectiveSpy`` (slower: ~65% of a tiny TP step against ~15%; the fallback should the
dispatch mode misbehave with some torch version)."""

# c10d op (as the dispatcher names it) -> trace kind, for the functional collectives DTensor issues
FUNCOL_KINDS: dict[str, str] = {
    "_c10d_functional::all_reduce": "all_reduce",
    "_c10d_functional::all_reduce_coalesced": "all_reduce",
    "_c10d_functional::all_gather_into_tensor": "all_gather",
    "_c10d_functional::all_gather_into_tensor_coalesced": "all_gather",
    "_c10d_functional::reduce_scatter_tensor": "reduce_scatter",
    "_c10d_functional::reduce_scatter_tensor_coalesced": "reduce_scatter",
    "_c10d_functional::all_to_all_single": "all_to_all",
    "_c10d_functional::broadcast": "broadcast",
}


class CollectiveSpy(TorchDispatchMode):
    """Times the collectives library code issues, without the profiler (CPU): a dispatch mode sees
    every op of the step; it lets all pass but the collectives, which it records.

    - ``c10d::`` ops (FSDP2's gathers and scatters, plancast's own labelled collectives) return a
      ``Work``: issue mark, then a mark in its future's completion callback, as DDP buckets are timed.
    - ``_c10d_functional::`` ops (DTensor's redistributes) return a tensor still being filled; the spy
      waits for it at once and marks the end. DTensor's eager path waits at the next op that reads the
      tensor anyway, so timing stays that of the collective (waiting for the peer included, as a gloo
      event shows it).

    Attribution follows the profiler path's rules (``_owner``): the innermost ``comm_scope`` names
    stream and key; else the innermost compute span gives the key, and the op the stream (functional
    collectives come from DTensor: ``tp``; ``c10d::`` ones from FSDP2: ``dp``); inside a send/recv
    span the op is that span's and is not recorded again.
    """

    def __init__(self, recorder: StepRecorder) -> None:
        super().__init__()
        self._recorder = recorder
        self._pending: list[tuple[Any, Completion]] = []  # works without a future, polled

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        if self._pending:
            self._poll()
        name = func._schema.name
        functional = name in FUNCOL_KINDS
        if not functional and name not in C10D_KINDS:
            return func(*args, **kwargs)
        rec = self._recorder
        owner = rec.collective_owner("tp" if functional else "dp")
        if owner is None:
            return func(*args, **kwargs)
        kind = FUNCOL_KINDS[name] if functional else C10D_KINDS[name]
        done = rec.open_collective(owner.stream, kind, owner.stage, owner.chunk, owner.microbatch, owner.peer)
        out = func(*args, **kwargs)
        if functional:
            for tensor in out if isinstance(out, (list, tuple)) else [out]:
                torch.ops._c10d_functional.wait_tensor(tensor)
            done.done(None)
        else:
            work = _unboxed(out[-1] if isinstance(out, (list, tuple)) else out)
            try:
                work.get_future().add_done_callback(done.done)
            except RuntimeError:  # no future (gloo's reduce-scatter, an all-reduce underneath)
                if _async_op(func, args, kwargs):
                    self._pending.append((work, done))  # polled; at worst ended when the step ends
                else:  # the caller waits for it as soon as this returns: waiting here changes nothing
                    work.wait()
                    done.done(None)
        return out

    def _poll(self) -> None:
        """End the pending collectives that have completed (checked at every op the step issues)."""
        still = []
        for work, done in self._pending:
            if work.is_completed():
                done.done(None)
            else:
                still.append((work, done))
        self._pending = still

    def flush(self) -> None:
        """At the end of the step: wait for what is still pending (the step has waited for it already)."""
        for work, done in self._pending:
            work.wait()
            done.done(None)
        self._pending = []


def _async_op(func: Any, args: Any, kwargs: Any) -> bool:
    """The ``async_op`` argument of a ``c10d::`` op (True when the op has none)."""
    for i, argument in enumerate(func._schema.arguments):
        if argument.name == "async_op":
            return bool(kwargs["async_op"] if "async_op" in kwargs else args[i] if i < len(args) else True)
    return True


def _unboxed(work: Any) -> Any:
    """A ``Work`` as the dispatcher returns it (a TorchScript object) as the Python ``Work``."""
    if isinstance(work, torch._C._distributed_c10d.Work):
        return work
    return torch._C._distributed_c10d.Work.unbox(work)


class Completion:
    """The end of one asynchronous collective: its callbacks mark the row's end (any thread)."""

    __slots__ = ("_mark", "_row")

    def __init__(self, mark: Any, row: Row) -> None:
        self._mark, self._row = mark, row

    def done(self, _fut: Any) -> None:
        """``Future.add_done_callback`` target."""
        self._row[2] = self._mark()

    def value(self, fut: Any) -> Any:
        """``Future.then`` target for a DDP comm hook: mark the end, pass the bucket tensor on."""
        self._row[2] = self._mark()
        return fut.value()[0]


@dataclass
class StepRecorder:
    """Records one step's spans and collectives on one rank and turns them into schema rows."""

    rank: int
    timer: Timer
    profile_collectives: bool = True
    device_type: str = "cpu"
    enabled: ClassVar[bool] = True
    """False for a recorder that records nothing: library hooks are then not installed at all."""
    _rows: list[Row] = field(default_factory=list)
    _counts: dict[tuple[str, str, int, int, int], int] = field(default_factory=dict)
    _origin: Any = None
    _prof: Any = None
    _marker: Any = None
    _spy: Any = None
    _scopes: list[Any] = field(default_factory=list)
    _p2p_futures: bool = True  # until a backend says point-to-point work has no future
    work_end_s: float = 0.0
    """``time.perf_counter()`` when the last step's work was done (set by ``finish``)."""

    def __post_init__(self) -> None:
        # perf_counter_ns itself on CPU: one C call per mark, no Python frame
        self._mark: Any = time.perf_counter_ns if isinstance(self.timer, CpuTimer) else self.timer.mark

    @property
    def profiling(self) -> bool:
        """Whether the step's collectives are captured by the recorder (the profiler on GPU, the dispatch
        spy on CPU): code that issues one then attributes it with ``comm_scope`` instead of timing it."""
        return self._prof is not None or self._spy is not None

    def begin_step(self) -> None:
        self._rows = []
        self._counts = {}
        self._scopes = []
        if self.profile_collectives and self.device_type == "cpu" and not _PROFILER_ON_CPU:
            self._spy = CollectiveSpy(self)
            self._spy.__enter__()
        elif self.profile_collectives:  # GPU: NCCL kernels are timed on the device by the profiler
            cuda = [ProfilerActivity.CUDA] if self.device_type == "cuda" else []
            self._prof = profile(activities=[ProfilerActivity.CPU, *cuda])
            self._prof.__enter__()
            self._marker = record_function(STEP_MARKER)
            self._marker.__enter__()
        self._origin = self._mark()

    def comm_scope(
        self, stream: str, stage: int, chunk: int, microbatch: int = -1, peer: int = -1
    ) -> _CommScope:
        """Attribute the collectives issued inside to (stream, stage, chunk, microbatch[, peer]) when the
        recorder captures them (``profiling``); a no-op otherwise."""
        return _CommScope(self, _Owner(stream, stage, chunk, microbatch, peer))

    def collective_owner(self, default_stream: str) -> _Owner | None:
        """The owner of a collective issued now (``CollectiveSpy``), None for one a send/recv span owns."""
        for scope in reversed(self._scopes):
            if isinstance(scope, _Owner):
                return scope
            if scope.kind in COMPUTE_KINDS:
                return _Owner(default_stream, scope.stage, scope.chunk, scope.microbatch)
            if scope.kind in ("send", "recv"):
                return None
        return _Owner(default_stream, -1, -1, -1)

    def span(self, key: SpanKey) -> _Span:
        """Time the enclosed work as one event; collectives issued inside are attributed to ``key``."""
        return _Span(self, key)

    def open_async(self, key: SpanKey) -> Row:
        """Start a span whose end is observed later (``watch`` / ``close_async``), e.g. an isend's."""
        row = [key, self._mark(), None]
        self._rows.append(row)
        return row

    def watch(self, span: Row, work: Any) -> None:
        """End ``span`` when the asynchronous ``work`` completes (never, without a future).

        Gloo's point-to-point work has no future and reports completion only once waited on, so
        its sends keep ``dur_us = 0``; the first such work switches the lookup off for the run.
        """
        if not self._p2p_futures:
            return
        try:
            fut = work.get_future()
        except RuntimeError:  # backends without futures for point-to-point work
            self._p2p_futures = False
            return
        fut.add_done_callback(Completion(self._mark, span).done)

    def close_async(self, span: Row) -> None:
        """End ``span`` now; safe to call from a communication thread."""
        span[2] = self._mark()

    def open_collective(
        self, stream: str, kind: str, stage: int = -1, chunk: int = -1, microbatch: int = -1, peer: int = -1
    ) -> Completion:
        """A collective issued now; ``index`` counts its key's collectives in issue order this step.

        Hand the returned ``Completion``'s ``done`` / ``value`` to the collective's future.
        """
        ident = (stream, kind, stage, chunk, microbatch)
        index = self._counts.get(ident, 0)
        self._counts[ident] = index + 1
        row = [SpanKey(kind, stage, chunk, microbatch, stream, peer, 0, index), self._mark(), None]
        self._rows.append(row)
        return Completion(self._mark, row)

    def end_step(self, step: int) -> pd.DataFrame:
        """Stop recording and return the step's events (schema rows, ``source = measured``)."""
        return self.finish(step).frame()

    def finish(self, step: int) -> StepEvents:
        """Stop recording and return the step's events, their table not built yet (``frame``).

        Resolves every mark (after the timer's synchronize) and reads the profiler, so the
        recorder is free for the next step; the table is left to whoever writes it, outside the step.
        """
        self.timer.synchronize()
        # the step's work ends here; stopping and reading the profiler is the recorder's bookkeeping
        self.work_end_s = time.perf_counter()
        if self._spy is not None:
            self._spy.__exit__(None, None, None)
            self._spy.flush()
            self._spy = None
        rows, self._rows = self._rows, []
        keys = [r[0] for r in rows]
        if isinstance(self.timer, CpuTimer):
            starts = np.array([r[1] for r in rows], dtype=np.int64)
            # an asynchronous span whose completion was not observed lasts 0
            ends = np.array(
                [s if r[2] is None else r[2] for r, s in zip(rows, starts.tolist(), strict=True)],
                dtype=np.int64,
            )
            start_us: Any = (starts - int(self._origin)) / 1e3
            dur_us: Any = np.maximum((ends - starts) / 1e3, 0.0)
        else:
            el = self.timer.elapsed_us
            start_us = [el(self._origin, r[1]) for r in rows]
            dur_us = [0.0 if r[2] is None else max(el(r[1], r[2]), 0.0) for r in rows]
        if self._prof is not None:
            self._marker.__exit__(None, None, None)
            self._prof.__exit__(None, None, None)
            profiled = collective_events(profiled_events(self._prof), self.rank, step)
            self._prof = None
            keys += [
                SpanKey(e.kind, e.stage, e.chunk, e.microbatch, e.stream, e.peer, e.bytes, e.index)
                for e in profiled
            ]
            start_us = [*start_us, *(e.start_us for e in profiled)]
            dur_us = [*dur_us, *(e.dur_us for e in profiled)]
        return StepEvents(self.rank, step, keys, start_us, dur_us)


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


COMM_MARKER = "plancast-comm|"
"""Prefix of profiler ranges attributing the collectives inside them (``StepRecorder.comm_scope``, GPU)."""
COMPUTE_KINDS = ("forward", "backward", "backward_input", "backward_weight", "recompute", "optimizer")


@dataclass(frozen=True, slots=True)
class _Owner:
    stream: str
    stage: int
    chunk: int
    microbatch: int
    peer: int = -1


def _owner(ranges: list[Any], op: Any) -> _Owner | None:
    """Attribution of collective ``op`` from the ranges enclosing it on its thread (None: skip it).

    Innermost wins: a plancast comm marker names stream and key; an ``FSDP::`` range makes it a
    data-parallel op of the enclosing compute span; a compute span alone makes it tensor-parallel;
    a send/recv span means the op is already recorded as that span.
    """
    enclosing = sorted(
        (
            r
            for r in ranges
            if r.thread == op.thread and r.time_range.start <= op.time_range.start <= r.time_range.end
        ),
        key=lambda r: r.time_range.start,
        reverse=True,
    )
    fsdp = False
    for r in enclosing:
        if r.name.startswith(COMM_MARKER):
            stream, stage, chunk, mb, *peer = r.name[len(COMM_MARKER) :].split("|")
            return _Owner(stream, int(stage), int(chunk), int(mb), int(peer[0]) if peer else -1)
        if r.name.startswith("FSDP::"):
            fsdp = True
        elif r.name.startswith(SPAN_PREFIX):
            _, kind, stage, chunk, mb = r.name.split("|")
            if kind not in COMPUTE_KINDS:
                return None
            return _Owner("dp" if fsdp else "tp", int(stage), int(chunk), int(mb))
    return _Owner("dp" if fsdp else "other", -1, -1, -1)


@dataclass(frozen=True, slots=True)
class _Interval:
    start: float
    end: float


@dataclass(frozen=True, slots=True)
class ProfiledEvent:
    """A profiler event with the fields of a ``FunctionEvent`` that ``collective_events`` reads."""

    name: str
    thread: int
    time_range: _Interval


def _wanted(name: str) -> bool:
    return (
        name == STEP_MARKER
        or name in C10D_KINDS
        or name.startswith((SPAN_PREFIX, COMM_MARKER, "FSDP::"))
        or _is_backend(name)
    )


def profiled_events(prof: Any) -> list[ProfiledEvent]:
    """The events ``collective_events`` needs, read straight from the Kineto result (µs from trace start).

    ``prof.events()`` would build a ``FunctionEvent`` tree of every op first: ~0.75 s per step of the
    tiny pipeline plan on CPU, about six times the step itself (benchmarks/instrument_overhead.py).
    """
    result = prof.profiler.kineto_results
    origin_ns = result.trace_start_ns()
    out = []
    for e in result.events():
        name = e.name()
        if _wanted(name):
            span = _Interval((e.start_ns() - origin_ns) / 1e3, (e.end_ns() - origin_ns) / 1e3)
            out.append(ProfiledEvent(name, e.start_thread_id(), span))
    return out


def collective_events(fn_events: Any, rank: int, step: int) -> list[Event]:
    """Collectives from profiler events, attributed to their enclosing ranges, ``index`` in issue order.

    Each issued ``c10d::`` op is timed by the first unused backend event (``gloo:*`` / NCCL kernel)
    that starts after it: backends run a process group's work in issue order.
    """
    evs = sorted(fn_events, key=lambda e: e.time_range.start)
    marker = next((e for e in evs if e.name == STEP_MARKER), None)
    origin = marker.time_range.start if marker is not None else 0.0
    ranges = [e for e in evs if e.name.startswith((SPAN_PREFIX, COMM_MARKER, "FSDP::"))]
    issued = [e for e in evs if e.name in C10D_KINDS]
    backend = [e for e in evs if _is_backend(e.name)]
    used = [False] * len(backend)
    counts: dict[tuple[str, str, int, int, int], int] = {}
    out: list[Event] = []
    for op in issued:
        owner = _owner(ranges, op)
        if owner is None:
            continue
        start, end = op.time_range.start, op.time_range.end
        for i, ex in enumerate(backend):
            if not used[i] and ex.time_range.start >= start - 1.0:
                used[i] = True
                start, end = ex.time_range.start, ex.time_range.end
                break
        kind = C10D_KINDS[op.name]
        key = (owner.stream, kind, owner.stage, owner.chunk, owner.microbatch)
        index = counts.get(key, 0)
        counts[key] = index + 1
        out.append(
            Event(
                source="measured",
                rank=rank,
                step=step,
                stream=owner.stream,
                kind=kind,
                start_us=start - origin,
                dur_us=max(end - start, 0.0),
                stage=owner.stage,
                chunk=owner.chunk,
                microbatch=owner.microbatch,
                index=index,
                peer=owner.peer,
            )
        )
    return out


def _is_backend(name: str) -> bool:
    if name.startswith("gloo:"):
        return not name.endswith(("send", "recv"))
    lower = name.lower()
    return lower.startswith("nccl") and "kernel" in lower and "send" not in lower and "recv" not in lower
