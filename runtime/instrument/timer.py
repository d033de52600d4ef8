"""The timer capture path: plancast's own spans and hooked collectives, timed where the work runs.

``time.perf_counter_ns`` on CPU; CUDA events on GPU, resolved once per step after a synchronize.
Collectives issued deep inside library code (DTensor, FSDP2) are not seen on this path:
``TimerCapture`` captures nothing; plans that issue such collectives use the dispatch spy
(``spy.py``) or the profiler (``profiler.py``).
"""

from __future__ import annotations

import time
from typing import Any, Protocol

import torch

from plancast.runtime.instrument.keys import Scope
from plancast.traces.schema import Event


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


class TimerCapture:
    """Captures no library collectives: spans and hooks are all there is (``capture = "timer"``)."""

    captures_collectives = False

    def enter(self, scope: Scope) -> None:
        return None

    def exit(self) -> None:
        return None

    def finish(self, rank: int, step: int) -> list[Event]:
        return []


TIMER_ONLY = TimerCapture()
"""Stateless, so one serves every recorder (also between steps)."""
