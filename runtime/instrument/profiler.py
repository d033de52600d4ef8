"""The profiler capture path (GPU; on CPU with ``PLANCAST_CPU_CAPTURE=profiler``).

Under ``torch.profiler`` every ``c10d::`` op the main thread issues is attributed to the innermost
plancast range open at that moment and timed by the matching backend event (NCCL kernel, ``gloo:*``),
paired in issue order (``collective_events``). A plancast range is labelled with the position of its
typed key in the capture's scope list (``plancast|17``), so attribution reads the key back instead of
splitting a packed label.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from torch.profiler import ProfilerActivity, profile, record_function

from plancast.runtime.instrument.keys import C10D_KINDS, Owner, Scope, owner_of
from plancast.traces.schema import Event

SCOPE_PREFIX = "plancast|"
"""Profiler range of an open span or ``comm_scope``: the prefix, then the scope's position in the list."""
STEP_MARKER = "plancast-step"
FSDP_PREFIX = "FSDP::"


class ProfilerCapture:
    """``capture = "profiler"``: one profiler session per step, one labelled range per open scope."""

    captures_collectives = True

    def __init__(self, prof: Any, marker: Any) -> None:
        self._prof, self._marker = prof, marker
        self._scopes: list[Scope] = []
        self._open: list[Any] = []

    @classmethod
    def start(cls, cuda: bool) -> ProfilerCapture:
        """Start the profiler (CUDA activity too on GPU: NCCL kernels are timed on the device)."""
        prof = profile(activities=[ProfilerActivity.CPU, *([ProfilerActivity.CUDA] if cuda else [])])
        prof.__enter__()
        marker = record_function(STEP_MARKER)
        marker.__enter__()
        return cls(prof, marker)

    def enter(self, scope: Scope) -> None:
        label = record_function(f"{SCOPE_PREFIX}{len(self._scopes)}")
        self._scopes.append(scope)
        label.__enter__()
        self._open.append(label)

    def exit(self) -> None:
        if self._open:
            self._open.pop().__exit__(None, None, None)

    def finish(self, rank: int, step: int) -> list[Event]:
        """Stop the profiler and read the step's collectives from it."""
        self._marker.__exit__(None, None, None)
        self._prof.__exit__(None, None, None)
        return collective_events(profiled_events(self._prof), rank, step, self._scopes)


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

    @classmethod
    def of(cls, name: str, thread: int, start_us: float, end_us: float) -> ProfiledEvent:
        return cls(name, thread, _Interval(start_us, end_us))


def _is_range(name: str) -> bool:
    return name.startswith((SCOPE_PREFIX, FSDP_PREFIX))


def _is_backend(name: str) -> bool:
    if name.startswith("gloo:"):
        return not name.endswith(("send", "recv"))
    lower = name.lower()
    return lower.startswith("nccl") and "kernel" in lower and "send" not in lower and "recv" not in lower


def _runs(backend: str, op: str) -> bool:
    """Whether backend event ``backend`` (``gloo:all_to_all``, ``ncclDevKernel_AllGather_RING_LL``) runs
    a collective of ``c10d::`` op ``op``'s kind."""
    kind = C10D_KINDS[op].replace("_", "")
    return kind in backend.lower().replace("_", "")


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
        if name == STEP_MARKER or name in C10D_KINDS or _is_range(name) or _is_backend(name):
            start_us, end_us = (e.start_ns() - origin_ns) / 1e3, (e.end_ns() - origin_ns) / 1e3
            out.append(ProfiledEvent.of(name, e.start_thread_id(), start_us, end_us))
    return out


def _owner(ranges: Iterable[Any], op: Any, scopes: Sequence[Scope]) -> Owner | None:
    """Attribution of collective ``op`` from the ranges enclosing it on its thread (None: skip it).

    The innermost plancast range decides (``keys.owner_of``); an ``FSDP::`` range inside it makes
    the op a data-parallel one, else a compute span's op is tensor-parallel.
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
        if r.name.startswith(FSDP_PREFIX):
            fsdp = True
        else:
            return owner_of(scopes[int(r.name[len(SCOPE_PREFIX) :])], "dp" if fsdp else "tp")
    return Owner("dp" if fsdp else "other", -1, -1, -1)


def collective_events(fn_events: Any, rank: int, step: int, scopes: Sequence[Scope]) -> list[Event]:
    """Collectives from profiler events, attributed to their enclosing ranges, ``index`` in issue order.

    ``scopes`` are the keys the ``plancast|i`` ranges stand for. Each issued ``c10d::`` op is timed by
    the first unused backend event of its collective (``gloo:all_reduce`` / an NCCL ``AllReduce``
    kernel) that starts after it: backends run a process group's work in issue order. Pairing by
    collective keeps two groups apart whose workers start out of issue order on a loaded CPU (an
    expert all-to-all's ``gloo:`` event before the data-parallel all-reduce issued ahead of it), and an
    op with no backend event of its own (gloo's reduce-scatter, NCCL's all-to-all as send/recv kernels)
    keeps its own range instead of taking the next op's.
    """
    evs = sorted(fn_events, key=lambda e: e.time_range.start)
    marker = next((e for e in evs if e.name == STEP_MARKER), None)
    origin = marker.time_range.start if marker is not None else 0.0
    ranges = [e for e in evs if _is_range(e.name)]
    backend = [e for e in evs if _is_backend(e.name)]
    used = [False] * len(backend)
    counts: dict[tuple[str, str, int, int, int], int] = {}
    out: list[Event] = []
    for op in (e for e in evs if e.name in C10D_KINDS):
        owner = _owner(ranges, op, scopes)
        if owner is None:
            continue
        start, end = op.time_range.start, op.time_range.end
        for i, ex in enumerate(backend):
            if not used[i] and ex.time_range.start >= start - 1.0 and _runs(ex.name, op.name):
                used[i] = True
                start, end = ex.time_range.start, ex.time_range.end
                break
        kind = owner.kind or C10D_KINDS[op.name]
        key = (owner.stream, kind, owner.stage, owner.chunk, owner.microbatch)
        index = counts[key] = counts.get(key, -1) + 1
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
                bytes=owner.bytes,
            )
        )
    return out
