"""The capture protocol: how the collectives that library code issues reach the step's events.

One ``Capture`` per step. The recorder tells it which span or ``comm_scope`` is open (``enter`` /
``exit``, innermost last) and asks it, once the step's work is done, for the events it captured
itself (``finish``). Three paths, one module each:

- ``timer`` (timer.py): none; plancast's spans and hooks time everything (DDP, ZeRO-1, pipelines);
- ``dispatch`` (spy.py): a dispatch mode sees every collective as it is issued (CPU, DTensor, FSDP2);
- ``profiler`` (profiler.py): ``torch.profiler`` and the backend's kernels (GPU; CPU fallback).

The mode is chosen by the caller (``choose_capture``); the worker reads ``PLANCAST_CPU_CAPTURE``
once (``cpu_capture_from``) and passes it down, so nothing reads the environment at import time.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Literal, Protocol, get_args

from plancast.runtime.instrument.keys import Scope
from plancast.traces.schema import Event

CaptureMode = Literal["timer", "dispatch", "profiler"]
CpuCapture = Literal["dispatch", "profiler"]
CPU_CAPTURES: tuple[CpuCapture, ...] = get_args(CpuCapture)
CPU_CAPTURE_ENV = "PLANCAST_CPU_CAPTURE"
"""``PLANCAST_CPU_CAPTURE=profiler``: capture library collectives on CPU with torch.profiler, as on GPU,
instead of the dispatch spy (slower: ~65% of a tiny TP step against ~15%,
benchmarks/instrument_overhead.py; the fallback should the dispatch mode misbehave with some torch)."""


class Capture(Protocol):
    """One step's capture of the collectives plancast's own code does not time."""

    captures_collectives: bool
    """Whether collectives are captured here: code that issues one then attributes it with
    ``StepRecorder.comm_scope`` instead of timing it."""

    def enter(self, scope: Scope) -> None:
        """A span or ``comm_scope`` opens: collectives issued from now on belong to it."""

    def exit(self) -> None:
        """The innermost open span or ``comm_scope`` closes."""

    def finish(self, rank: int, step: int) -> list[Event]:
        """Stop capturing (the step's work is done) and return the events not already in the rows."""


def choose_capture(library_collectives: bool, device_type: str, cpu_capture: CpuCapture) -> CaptureMode:
    """The capture path of a run: the profiler on GPU (NCCL kernels are timed on the device), the
    ``cpu_capture`` path on CPU; none when every collective is issued by plancast's own code."""
    if not library_collectives:
        return "timer"
    return "profiler" if device_type == "cuda" else cpu_capture


def cpu_capture_from(environ: Mapping[str, str]) -> CpuCapture:
    """``PLANCAST_CPU_CAPTURE`` of ``environ`` (default ``dispatch``); a clear error for another value."""
    value = environ.get(CPU_CAPTURE_ENV, "dispatch")
    if value == "profiler":
        return "profiler"
    if value == "dispatch":
        return "dispatch"
    raise ValueError(f"{CPU_CAPTURE_ENV}={value!r}: use one of {', '.join(CPU_CAPTURES)} (or leave it unset)")
