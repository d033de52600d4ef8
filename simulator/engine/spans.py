"""What the engine records: one span per pass, transfer or collective of one simulated rank."""

from __future__ import annotations

from collections.abc import Generator
from typing import Any, NamedTuple

Process = Generator[Any, Any, None]
"""A SimPy process function's generator (processes.py and its helpers)."""


class Span(NamedTuple):
    """One recorded span (seconds); the trace schema's columns before expansion (traces/schema.py)."""

    rank: int
    stream: str
    """compute, pp, dp or tp."""
    kind: str
    """forward, backward, send, all_gather, ..."""
    stage: int
    """Virtual pipeline stage (-1: none, as the optimizer)."""
    chunk: int
    microbatch: int
    """-1: not tied to one micro-batch (gradient reductions, the optimizer)."""
    order: int
    """Issue order within (rank, stream, kind, stage, chunk, microbatch): the trace schema's `index`
    (a tuple's `index` is its method)."""
    peer: int
    """The other rank of a point-to-point transfer, or -1."""
    start_s: float
    dur_s: float
    bytes: int
    flops: float
