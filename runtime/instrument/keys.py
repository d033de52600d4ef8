"""What a step records: span keys, the owner of a captured collective, and the rows being filled.

Keys are typed tuples end to end: a span's key goes into a row, and a collective captured by the
dispatch spy or the profiler is attributed from the stack of open keys (``owner_of``), never from
a label packed into a string and split again.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from plancast.traces.schema import COMPUTE_KINDS, Event

# c10d op (as the dispatcher and the profiler name it) -> trace kind; point-to-point ops are timed
# by spans instead. Gloo runs reduce-scatter as an all-reduce; the event keeps the issued op's kind.
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


class SpanKey(NamedTuple):
    """What a span is: trace kind and the (stage, chunk, microbatch) it belongs to (traces/schema.py)."""

    kind: str
    stage: int = -1
    chunk: int = -1
    microbatch: int = -1
    stream: str = "compute"
    peer: int = -1
    bytes: int = 0
    index: int = 0  # type: ignore[assignment]  # the schema's column; shadows tuple.index on purpose

    @classmethod
    def of(cls, e: Event) -> SpanKey:
        """The key of an already resolved event (a profiled collective, a test's event)."""
        return cls(e.kind, e.stage, e.chunk, e.microbatch, e.stream, e.peer, e.bytes, e.index)


class Owner(NamedTuple):
    """Whose collectives: a ``comm_scope``'s stream and key, or the compute span they are issued in.

    ``kind`` (when set) names the event instead of the op (a K/V gradient reduce-scatter however the
    backend runs it), ``bytes`` its payload; the capture paths take both from here.
    """

    stream: str
    stage: int
    chunk: int
    microbatch: int
    peer: int = -1
    kind: str | None = None
    bytes: int = 0


Scope = SpanKey | Owner
"""An open span or ``comm_scope``: what a collective issued inside it is attributed to."""


def owner_of(scope: Scope, stream: str) -> Owner | None:
    """The owner of a collective issued inside ``scope``, the innermost one open at that moment.

    A ``comm_scope`` names stream and key; a compute span gives its key and the collective ``stream``
    (the capture path's guess: ``tp`` for DTensor's, ``dp`` for FSDP2's); inside a communication span
    (a pipeline send/recv) the op is that span's and is not recorded again (None).
    """
    if isinstance(scope, Owner):
        return scope
    if scope.kind in COMPUTE_KINDS:
        return Owner(stream, scope.stage, scope.chunk, scope.microbatch)
    return None


Row = list[Any]
"""One event of the step being recorded: ``[SpanKey, start mark, end mark or None]``."""


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
