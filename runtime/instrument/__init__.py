"""Spans -> trace rows: one measured event per predicted event (traces/schema.py conventions).

- ``recorder.py``: ``StepRecorder``, one step's spans and hooked collectives on one rank;
- ``capture.py``: the ``Capture`` protocol (enter, exit, finish) for collectives library code issues,
  with one module per path: ``timer.py`` (none; perf_counter on CPU, CUDA events on GPU), ``spy.py``
  (a dispatch mode, CPU) and ``profiler.py`` (torch.profiler, GPU);
- ``keys.py``: span keys and collective owners as typed tuples, and their attribution rule;
- ``frame.py``: the step's rows -> the schema table, once, after the step.
"""

from plancast.runtime.instrument.capture import (
    CaptureMode,
    CpuCapture,
    choose_capture,
    cpu_capture_from,
)
from plancast.runtime.instrument.frame import StepEvents, events_frame, rows_frame
from plancast.runtime.instrument.keys import Completion, Owner, SpanKey
from plancast.runtime.instrument.recorder import StepRecorder
from plancast.runtime.instrument.timer import CpuTimer, CudaTimer, Timer, default_timer

__all__ = [
    "CaptureMode",
    "Completion",
    "CpuCapture",
    "CpuTimer",
    "CudaTimer",
    "Owner",
    "SpanKey",
    "StepEvents",
    "StepRecorder",
    "Timer",
    "choose_capture",
    "cpu_capture_from",
    "default_timer",
    "events_frame",
    "rows_frame",
]
