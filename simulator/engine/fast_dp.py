"""One rank's data-parallel stream for the event-free path (fast.py), without SimPy.

The stream is the same program as data_parallel.dp_stream and _sliced, written as a plain generator
that yields the time it next needs to act; the rank's compute loop (fast.py) drives it lazily: before it
queues a collective, posts a pipeline send on the shared link, waits for a gather or for the stream to
drain, it runs the stream up to that moment. Only the rank's own compute and pipeline sends touch its
stream and its link (link.py), so a rank and its stream are simulated together, apart from other ranks.

Where the stream and the compute act at the same instant, SimPy orders them by when their events were
made (simpy/core.py `Environment.schedule`: time, priority, then creation order). The stream keeps, with
each pending wake-up, what decides that order (`Wake`); where it cannot be decided from creation times
the path gives up (`Ambiguous`) and the plan runs through SimPy instead (fast.py).
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Generator
from typing import TYPE_CHECKING, NamedTuple

from plancast.simulator.engine.data_parallel import LINK_SLICE_BYTES, MAX_LINK_SLICES
from plancast.simulator.engine.link import Link
from plancast.simulator.engine.spans import Span, new_span

if TYPE_CHECKING:
    from plancast.simulator.costs.collectives import CollectiveKind, Level
    from plancast.simulator.engine.plan import StepPlan

TIE_REL = 1e-12
"""Two instants this close (relative), but not equal, may be equal in SimPy's own arithmetic: undecidable."""


class Ambiguous(Exception):  # noqa: N818 (a signal to fall back, not an error)
    """The stream and the compute act at one instant in an order this path cannot decide."""


# kinds of a pending wake-up, by what decides its order against the compute at the same instant
DUE, OTHER, WAKE = 0, 1, 2


class Wake(NamedTuple):
    """When the stream next acts, and what orders it against the compute acting at the same time."""

    at_s: float
    kind: int
    """DUE: a collective's data-ready moment (data_parallel's `Due`, made when it was queued); OTHER: one
    of the stream's own timeouts; WAKE: the idle stream woken by a collective queued (at once)."""
    made_s: float
    """When the event was made (DUE: when its collective was queued)."""
    made_turn: int
    """WAKE: the compute's turn (see fast.py `RankRun.turn`) that queued the collective."""


class Done:
    """Completion of a collective something waits on (a ZeRO-2/3 gather)."""

    __slots__ = ("at_s",)

    def __init__(self) -> None:
        self.at_s: float | None = None


class Item(NamedTuple):
    kind: CollectiveKind
    nbytes: float
    where: tuple[int, int, int]
    order: int
    ready_s: float | None
    queued_s: float
    done: Done | None
    levels: tuple[Level, ...] | None


class Cut(Exception):  # noqa: N818 (SimPy's Interrupt, as this path delivers it)
    """A pipeline send cut the stream's run of slices short after `slices` of them (link.py)."""

    def __init__(self, slices: int) -> None:
        super().__init__(slices)
        self.slices = slices


Program = Generator[Wake | None, None, float]


class DpStream:
    """One rank's dp stream (data_parallel.dp_stream), driven by its compute loop."""

    def __init__(self, plan: StepPlan, rank: int, link: Link | None, spans: list[Span]) -> None:
        self.plan, self.rank, self.link, self.spans = plan, rank, link, spans
        self.queue: deque[Item] = deque()
        self.now = 0.0
        self.pending = 0
        self.drained_s = 0.0
        self.wake: Wake | None = None
        self._indices: dict[tuple[str, int, int, int], int] = {}
        self._program = self._loop()
        self._resume()

    # --------------------------------------------------------------------------- driving it
    def _resume(self, cut: Cut | None = None) -> None:
        self.wake = self._program.send(None) if cut is None else self._program.throw(cut)

    def _first(self, wake: Wake, made_s: float, turn: int) -> bool:
        """Whether the stream's `wake` at the compute's instant comes before the compute's turn,
        resumed by an event made at `made_s` (simpy/core.py: the earlier-made event goes first)."""
        if wake.kind == WAKE:
            return wake.made_turn < turn
        if wake.kind == DUE:  # made when its collective was queued, before that turn's own wait
            if wake.made_s != made_s and abs(wake.made_s - made_s) <= TIE_REL * max(1.0, made_s):
                raise Ambiguous
            return wake.made_s <= made_s
        if wake.made_s == made_s or abs(wake.made_s - made_s) <= TIE_REL * max(1.0, made_s):
            raise Ambiguous
        return wake.made_s < made_s

    def catch_up(self, at_s: float, made_s: float, turn: int, strict: bool) -> None:
        """Run the stream through everything it does before the compute's turn at `at_s`. `strict`: the
        compute is about to touch the link, so an undecidable order there gives up."""
        while (wake := self.wake) is not None:
            if strict and wake.at_s != at_s and abs(wake.at_s - at_s) <= TIE_REL * max(1.0, at_s):
                raise Ambiguous
            if wake.at_s > at_s:
                return
            if wake.at_s == at_s:
                first = self._first(wake, made_s, turn) if strict else self._maybe_first(wake, made_s, turn)
                if not first:
                    return
            self.now = wake.at_s
            self._resume()

    def _maybe_first(self, wake: Wake, made_s: float, turn: int) -> bool:
        """`_first` where an undecidable order does not matter (queueing a collective): it waits."""
        try:
            return self._first(wake, made_s, turn)
        except Ambiguous:
            return False

    def push(
        self,
        now: float,
        made_s: float,
        turn: int,
        kind: CollectiveKind,
        nbytes: float,
        where: tuple[int, int, int],
        *,
        ready_s: float | None = None,
        levels: tuple[Level, ...] | None = None,
        notify: bool = False,
    ) -> Done | None:
        """Engine.dp_collective: queue a collective at `now` in the compute's `turn`."""
        self.catch_up(now, made_s, turn, strict=False)
        done = Done() if notify else None
        key = (kind, *where)
        index = self._indices.get(key, 0)
        self._indices[key] = index + 1
        self.queue.append(Item(kind, nbytes, where, index, ready_s, now, done, levels))
        self.pending += 1
        if self.wake is None:  # idle: woken now, after the compute's turn (dp_wake.succeed())
            self.wake = Wake(now, WAKE, now, turn)
        return done

    def post_send(self, now: float, made_s: float, turn: int, seconds: float) -> float:
        """A pipeline send on this stream's link at `now`: its start (pipeline.send, link.post)."""
        assert self.link is not None
        self.catch_up(now, made_s, turn, strict=True)
        start, cut = self.link.post(now, seconds)
        if cut is not None:
            self.now = now  # SimPy delivers the interrupt at once, before anything else at this instant
            self._resume(Cut(cut[1]))
        return start

    def finish(self, done: Done) -> float:
        """Run the stream until `done` completes (the compute waits for it, so does nothing meanwhile)."""
        while done.at_s is None:
            wake = self.wake
            assert wake is not None, "a waited collective was never queued"
            self.now = wake.at_s
            self._resume()
        return done.at_s

    def drain(self) -> float:
        """Run the stream until its queue is empty; when the last collective ended."""
        while self.wake is not None:
            self.now = self.wake.at_s
            self._resume()
        return self.drained_s

    # ------------------------------------------------------------------- the stream's program
    def _loop(self) -> Program:
        """data_parallel.dp_stream, event for event."""
        plan, queue = self.plan, self.queue
        while True:
            if not queue:
                yield None
            kind, nbytes, (stage, chunk, mb), index, ready_s, queued_s, done, levels = queue.popleft()
            if ready_s is not None and not ready_s < self.now:  # Due.wait
                yield Wake(ready_s, DUE, queued_s, -1)
            seconds = plan.dp_collective_s(kind, nbytes, levels)
            if plan.share_links:
                start = yield from self._sliced(nbytes, seconds)
            else:
                start = self.now
                yield Wake(self.now + seconds, OTHER, self.now, -1)
            shard = nbytes / plan.dense_dp if kind == "all_gather" else nbytes
            self.spans.append(
                new_span(
                    (self.rank, "dp", kind, stage, chunk, mb, index, -1, start, seconds, int(shard), 0.0)
                )
            )
            if done is not None:
                done.at_s = self.now
            self.pending -= 1
            if self.pending == 0:
                self.drained_s = self.now

    def _sliced(self, nbytes: float, seconds: float) -> Program:
        """data_parallel._sliced, event for event (its comments say why)."""
        slices = max(1, min(math.ceil(nbytes / LINK_SLICE_BYTES), MAX_LINK_SLICES))
        slice_s = seconds / slices
        link = self.link
        assert link is not None
        start = -1.0
        left = slices
        while left:
            slot = link.queue_slice(self.now, slice_s)
            if slot > self.now:
                yield Wake(self.now + (slot - self.now), OTHER, self.now, -1)
            start = self.now if start < 0 else start
            if not link.hold(self, slot, slice_s, left):
                yield Wake(self.now + (slot + slice_s - self.now), OTHER, self.now, -1)
                left -= 1
                continue
            try:
                yield Wake(self.now + left * slice_s, OTHER, self.now, -1)
                link.run = None
                left = 0
            except Cut as cut:
                yield Wake(self.now + max(slot + cut.slices * slice_s - self.now, 0.0), OTHER, self.now, -1)
                left -= cut.slices
        return start
