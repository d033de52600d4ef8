"""A rank's link on one tier, shared by its pipeline sends and its data-parallel collective: a FIFO of
transfers whose durations are known when they are queued, so a send's start is computed when it is
posted (no SimPy event), and a collective holds the link for many slices in one timeout until a send
asks for it.

NCCL moves a collective in chunks (NCCL_BUFFSIZE, 4 MiB per channel), so pipeline transfers on the same
link interleave with it rather than wait for all of it: the collective is a series of slices, each
queued behind whatever was posted before it, and a send posted during a slice starts when that slice
ends. Pure timing (seconds); the SimPy side is in data_parallel.py and pipeline.py.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any


@dataclass(slots=True)  # not frozen: a frozen dataclass's __init__ sets each field through object.__setattr__
class SliceRun:
    """A collective holding the link for `slices` slices of `slice_s` from `from_s`, back to back
    (never changed once made)."""

    holder: Any
    """Who to tell when a send cuts the run short (the dp stream's SimPy process)."""
    from_s: float
    slice_s: float
    slices: int

    def slices_done_by(self, now_s: float) -> int:
        """Slices finished once the one in progress at `now_s` ends: where a send posted now starts."""
        return min(math.floor((now_s - self.from_s) / self.slice_s) + 1, self.slices)

    def end_of(self, slices: int) -> float:
        return self.from_s + slices * self.slice_s


@dataclass(slots=True)
class Link:
    """FIFO timing of one link (see the module docstring)."""

    free_s: float = 0.0
    """When everything queued so far has gone through."""
    run: SliceRun | None = None
    """The collective's run of slices while nothing else waits, else None."""

    def post(self, now_s: float, seconds: float) -> tuple[float, tuple[Any, int] | None]:
        """Queue a transfer of `seconds` at `now_s`: (its start, and (holder, slices done) of a run
        it cuts short, whose holder must stop after those slices)."""
        cut = None
        if self.run is not None:
            done = self.run.slices_done_by(now_s)
            self.free_s = self.run.end_of(done)
            cut = (self.run.holder, done)
            self.run = None
        start_s = max(now_s, self.free_s)
        self.free_s = start_s + seconds
        return start_s, cut

    def queue_slice(self, now_s: float, slice_s: float) -> float:
        """Queue one slice of a collective at `now_s`; returns its start."""
        start_s = max(now_s, self.free_s)
        self.free_s = start_s + slice_s
        return start_s

    def hold(self, holder: Any, from_s: float, slice_s: float, slices: int) -> bool:
        """After a slice queued at `from_s` starts: hold the link for `slices` slices in one run if
        nothing was queued behind that slice (returns True), else the slice goes alone (False)."""
        if self.free_s > from_s + slice_s:
            return False
        self.run = SliceRun(holder, from_s, slice_s, slices)
        self.free_s = self.run.end_of(slices)
        return True
