"""Spans -> trace rows: one measured event per predicted event (traces/schema.py conventions).

Compute spans and pipeline send/recv are timed by a ``Timer``: ``time.perf_counter_ns`` on CPU,
CUDA events on the current stream on GPU (resolved once per step, after a synchronize). Collectives
issued inside library code (DTensor, DDP, FSDP2, ZeRO) are invisible to spans, so each step runs
under ``torch.profiler``: every ``c10d::`` op the main thread issues is attributed to the innermost
plancast span open at that moment (its kind/stage/chunk/microbatch) and timed by the matching
backend event (``gloo:*`` on the gloo worker thread, an ``nccl`` kernel on GPU), paired in issue
order. Gloo runs reduce-scatter as an all-reduce; the event keeps the issued op's kind.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np
import pandas as pd
import torch
from torch.profiler import ProfilerActivity, profile, record_function

from traces.schema import COLUMNS, Event

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
    """CUDA events recorded on the current stream: they time kernels, not the Python that queues them."""

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


def events_frame(events: list[Event]) -> pd.DataFrame:
    """Events -> a table in the schema's column order and dtypes, built column by column.

    Equal to ``traces.schema.to_frame`` (the rank writer validates it before writing) at a tenth of
    its cost, which is paid inside every measured step (benchmarks/instrument_overhead.py).
    """
    columns: dict[str, Any] = {}
    for name, dtype in COLUMNS.items():
        values = [getattr(e, name) for e in events]
        columns[name] = pd.array(values, dtype=dtype) if dtype == "string" else np.array(values, dtype=dtype)
    return pd.DataFrame(columns, copy=False)


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


@dataclass
class _Span:
    key: SpanKey
    start: Any
    end: Any = None
    end_us: float | None = None  # set directly when completion is observed on another thread


@dataclass
class StepRecorder:
    """Records one step's spans and collectives on one rank and turns them into schema rows."""

    rank: int
    timer: Timer
    profile_collectives: bool = True
    device_type: str = "cpu"
    _spans: list[_Span] = field(default_factory=list)
    _origin: Any = None
    _origin_ns: int = 0
    _prof: Any = None
    _marker: Any = None

    def begin_step(self) -> None:
        self._spans = []
        if self.profile_collectives:
            acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if self.device_type == "cuda" else [])
            self._prof = profile(activities=acts)
            self._prof.__enter__()
            self._marker = record_function(STEP_MARKER)
            self._marker.__enter__()
        self._origin = self.timer.mark()
        self._origin_ns = time.perf_counter_ns()

    @contextmanager
    def span(self, key: SpanKey) -> Iterator[None]:
        """Time the enclosed work as one event; collectives issued inside are attributed to ``key``."""
        span = _Span(key, self.timer.mark())
        self._spans.append(span)
        with record_function(key.label()):
            yield
        span.end = self.timer.mark()

    def open_async(self, key: SpanKey) -> _Span:
        """Start a span whose end is observed later (``close_async``), e.g. an isend's completion."""
        span = _Span(key, self.timer.mark())
        self._spans.append(span)
        return span

    def watch(self, span: _Span, work: Any) -> None:
        """End ``span`` when the asynchronous ``work`` completes (never, without a future)."""
        try:
            work.get_future().then(lambda _fut: self.close_async(span))
        except RuntimeError:  # backends without futures for point-to-point work
            span.end = None

    def close_async(self, span: _Span) -> None:
        """End ``span`` now; safe to call from a communication thread (CPU wall clock)."""
        span.end_us = (time.perf_counter_ns() - self._origin_ns) / 1e3

    def end_step(self, step: int) -> pd.DataFrame:
        """Stop recording and return the step's events (schema rows, ``source = measured``)."""
        self.timer.synchronize()
        events = [self._span_event(s, step) for s in self._spans]
        if self._prof is not None:
            self._marker.__exit__(None, None, None)
            self._prof.__exit__(None, None, None)
            events += collective_events(profiled_events(self._prof), self.rank, step)
            self._prof = None
        return events_frame(events)

    def _span_event(self, span: _Span, step: int) -> Event:
        start_us = self.timer.elapsed_us(self._origin, span.start)
        if span.end_us is not None:
            dur_us = span.end_us - start_us
        elif span.end is None:  # an asynchronous span whose completion was not observed
            dur_us = 0.0
        else:
            dur_us = self.timer.elapsed_us(span.start, span.end)
        k = span.key
        return Event(
            source="measured",
            rank=self.rank,
            step=step,
            stream=k.stream,
            kind=k.kind,
            start_us=start_us,
            dur_us=max(dur_us, 0.0),
            stage=k.stage,
            chunk=k.chunk,
            microbatch=k.microbatch,
            index=k.index,
            peer=k.peer,
            bytes=k.bytes,
        )


COMM_MARKER = "plancast-comm|"
"""Prefix of profiler ranges that attributing the collectives inside them (``dp.comm_label``)."""
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
