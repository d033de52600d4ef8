"""One step's spans and collectives on one rank: marks while the step runs, schema rows after it.

Compute spans, pipeline send/recv and the collectives plancast issues or hooks are timed by a
``Timer`` (timer.py). DDP gradient buckets are timed by a communication hook (runtime/parallel/dp.py)
and ZeRO-1's parameter broadcasts around their issue: issue mark, then a mark in the completion
callback of the collective's future (``open_collective``). Collectives that library code issues are
left to the step's ``Capture`` (capture.py), which the recorder tells which span is open.

A step's events are kept as ``[key, start mark, end mark]`` rows and become a table once, after the
step (``StepEvents.frame``), so the per-event cost inside the step is two marks and an append.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np

from plancast.runtime.instrument.capture import Capture, CaptureMode
from plancast.runtime.instrument.frame import StepEvents
from plancast.runtime.instrument.keys import Completion, Owner, Row, Scope, SpanKey
from plancast.runtime.instrument.profiler import ProfilerCapture
from plancast.runtime.instrument.spy import SpyCapture
from plancast.runtime.instrument.timer import TIMER_ONLY, CpuTimer, Timer


class _Scoped:
    """Context manager of ``StepRecorder.span`` and ``comm_scope``: the capture sees the scope open;
    a span also gets two marks and one row (no generator: this runs for every span of the step)."""

    __slots__ = ("_recorder", "_scope", "_start")

    def __init__(self, recorder: StepRecorder, scope: Scope) -> None:
        self._recorder, self._scope = recorder, scope

    def __enter__(self) -> None:
        rec = self._recorder
        rec._capture.enter(self._scope)
        rec._open.append(self._scope)
        self._start = rec._mark() if isinstance(self._scope, SpanKey) else None

    def __exit__(self, *exc: object) -> None:
        rec = self._recorder
        rec._open.pop()
        if self._start is not None:
            end = rec._mark()
            rec._capture.exit()
            rec._rows.append([self._scope, self._start, end])
            scope = self._scope
            if rec.memory_probe is not None and isinstance(scope, SpanKey) and scope.stream == "compute":
                rec.memory_points.append((scope, rec.memory_probe()))
        else:
            rec._capture.exit()


class _Blocking:
    """Context manager of ``StepRecorder.collective`` on the timer path: the row ends at exit."""

    __slots__ = ("_done",)

    def __init__(self, done: Completion) -> None:
        self._done = done

    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        self._done.done(None)


@dataclass
class StepRecorder:
    """Records one step's spans and collectives on one rank and turns them into schema rows."""

    rank: int
    timer: Timer
    capture: CaptureMode = "timer"
    """How collectives issued by library code are captured (``capture.choose_capture``)."""
    device_type: str = "cpu"
    enabled: ClassVar[bool] = True
    """False for a recorder that records nothing: library hooks are then not installed at all."""
    memory_probe: Callable[[], float] | None = None
    """Bytes this rank holds now, read at the end of each compute span while set (the trainer sets it
    for the first step: runtime/memory.py); the readings go to ``memory_points``."""
    memory_points: list[tuple[SpanKey, float]] = field(default_factory=list)
    _rows: list[Row] = field(default_factory=list)
    _counts: dict[tuple[str, str, int, int, int], int] = field(default_factory=dict)
    _origin: Any = None
    _capture: Capture = TIMER_ONLY
    _p2p_futures: bool = True  # until a backend says point-to-point work has no future
    _open: list[Scope] = field(default_factory=list)  # open spans and comm_scopes, innermost last
    work_end_s: float = 0.0
    """``time.perf_counter()`` when the last step's work was done (set by ``finish``)."""

    def __post_init__(self) -> None:
        # perf_counter_ns itself on CPU: one C call per mark, no Python frame
        self._mark: Any = time.perf_counter_ns if isinstance(self.timer, CpuTimer) else self.timer.mark

    @property
    def profiling(self) -> bool:
        """Whether this step's collectives are captured by the recorder (the profiler on GPU, the dispatch
        spy on CPU): code that issues one then attributes it with ``comm_scope`` instead of timing it."""
        return self._capture.captures_collectives

    def begin_step(self) -> None:
        self._rows = []
        self.memory_points = []
        self._counts = {}
        if self.capture == "dispatch":
            self._capture = SpyCapture.start(self.open_collective)
        elif self.capture == "profiler":
            self._capture = ProfilerCapture.start(cuda=self.device_type == "cuda")
        self._origin = self._mark()

    def comm_scope(
        self, stream: str, stage: int, chunk: int, microbatch: int = -1, peer: int = -1
    ) -> _Scoped:
        """Attribute the collectives issued inside to (stream, stage, chunk, microbatch[, peer]) when the
        recorder captures them (``profiling``); a no-op otherwise."""
        return _Scoped(self, Owner(stream, stage, chunk, microbatch, peer))

    def collective(self, stream: str, kind: str, bytes: int = 0) -> AbstractContextManager[None]:
        """A blocking collective that plancast issues inside the innermost open span (an expert
        all-to-all, a context-parallel K/V gather): recorded as ``kind`` on ``stream`` with that span's
        stage, chunk and micro-batch, in every capture path (timed here, or attributed to the capture)."""
        key = next((s for s in reversed(self._open) if isinstance(s, SpanKey)), SpanKey("none"))
        if self.profiling:
            return _Scoped(self, Owner(stream, key.stage, key.chunk, key.microbatch, -1, kind, bytes))
        return _Blocking(self.open_collective(stream, kind, key.stage, key.chunk, key.microbatch, -1, bytes))

    def span(self, key: SpanKey) -> _Scoped:
        """Time the enclosed work as one event; collectives issued inside are attributed to ``key``."""
        return _Scoped(self, key)

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
        self,
        stream: str,
        kind: str,
        stage: int = -1,
        chunk: int = -1,
        microbatch: int = -1,
        peer: int = -1,
        bytes: int = 0,
    ) -> Completion:
        """A collective issued now; ``index`` counts its key's collectives in issue order this step.

        Hand the returned ``Completion``'s ``done`` / ``value`` to the collective's future.
        """
        ident = (stream, kind, stage, chunk, microbatch)
        index = self._counts.get(ident, 0)
        self._counts[ident] = index + 1
        row = [SpanKey(kind, stage, chunk, microbatch, stream, peer, bytes, index), self._mark(), None]
        self._rows.append(row)
        return Completion(self._mark, row)

    def finish(self, step: int) -> StepEvents:
        """Stop recording and return the step's events, their table not built yet (``frame``).

        Resolves every mark (after the timer's synchronize) and stops the capture, so the recorder
        is free for the next step; the table is left to whoever writes it, outside the step.
        """
        self.timer.synchronize()
        # the step's work ends here; stopping and reading the capture is the recorder's bookkeeping
        self.work_end_s = time.perf_counter()
        capture, self._capture = self._capture, TIMER_ONLY
        captured = capture.finish(self.rank, step)
        rows, self._rows = self._rows, []
        keys: list[SpanKey] = [r[0] for r in rows]
        start_us, dur_us = self._resolve(rows)
        if captured:
            keys += [SpanKey.of(e) for e in captured]
            start_us = [*start_us, *(e.start_us for e in captured)]
            dur_us = [*dur_us, *(e.dur_us for e in captured)]
        return StepEvents(self.rank, step, keys, start_us, dur_us)

    def _resolve(self, rows: list[Row]) -> tuple[Any, Any]:
        """Start (from the step's origin) and duration of every row, µs; an unobserved end lasts 0."""
        if isinstance(self.timer, CpuTimer):
            starts = np.array([r[1] for r in rows], dtype=np.int64)
            ends = np.array(
                [s if r[2] is None else r[2] for r, s in zip(rows, starts.tolist(), strict=True)],
                dtype=np.int64,
            )
            return (starts - int(self._origin)) / 1e3, np.maximum((ends - starts) / 1e3, 0.0)
        el = self.timer.elapsed_us
        start_us = [el(self._origin, r[1]) for r in rows]
        dur_us = [0.0 if r[2] is None else max(el(r[1], r[2]), 0.0) for r in rows]
        return start_us, dur_us
