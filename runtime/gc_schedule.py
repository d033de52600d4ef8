"""Python's cyclic garbage collector, run between steps instead of whenever allocations trigger it.

Left automatic, the collector's oldest generation runs when enough objects have survived into it: on a
rank that holds torch, its model and a step's recorded events, one such collection takes 110-120 ms
(measured here with ``gc.callbacks``: a pipeline-parallel run on this project's 2-core machine, where
the step takes ~28 ms). It lands at the same step of every run and stalls only the rank that makes it,
so the other ranks wait on it: PP 2 1F1B showed a 4-6x step at steps 15-16 (4 micro-batches) or 10-12
(8), in every round. Frameworks switch the automatic collector off during training and collect the
young generations at a fixed interval: torchtitan (``training.gc_freq = 50``, its ``GarbageCollection``
disables ``gc`` and runs ``gc.collect(1)`` every ``gc_freq`` steps) and Megatron-LM (``--manual-gc``,
``--manual-gc-interval``). The runtime does as torchtitan does, between steps, outside their spans."""

from __future__ import annotations

import gc
from types import TracebackType

GC_EVERY_STEPS = 50  # torchtitan's default training.gc_freq (torchtitan/config/job_config.py)


class StepGC:
    """Within ``with``: the automatic collector is off, ``between_steps(step)`` collects generations 0-1
    every ``every_steps`` steps; on leaving, the collector is as it was."""

    def __init__(self, every_steps: int = GC_EVERY_STEPS) -> None:
        if every_steps < 1:
            raise ValueError(f"every_steps must be >= 1, got {every_steps}")
        self.every_steps = every_steps
        self._was_enabled = True

    def __enter__(self) -> StepGC:
        self._was_enabled = gc.isenabled()
        gc.disable()
        gc.collect(1)  # what setup left in the young generations, as torchtitan does at start
        return self

    def between_steps(self, steps_done: int) -> None:
        """Call after each step with the number of steps done so far."""
        if steps_done % self.every_steps == 0:
            gc.collect(1)

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._was_enabled:
            gc.enable()
