"""Builders of the split-backward schedules beyond ZB-H1: ZB-H2, ZB-V and DualPipeV.

Pure data like simulator/schedules.py, which registers them (names, rules, placement). A full backward
is emitted as ``B`` followed at once by its ``W``: the same work, and every schedule here runs on the
simulator's and runtime's split-backward path (torch's FULL_BACKWARD is that pair run as one call).
"""

from __future__ import annotations

from plancast.simulator.schedule_action import Action, ActionKind, v_stages


class _Emitter:
    """Appends a rank's actions, numbering each (kind, chunk)'s micro-batches in order."""

    def __init__(self, stages: tuple[int, ...], microbatches: int) -> None:
        self.stages, self.m = stages, microbatches
        self.next: dict[tuple[ActionKind, int], int] = {}
        self.actions: list[Action] = []
        self.weights: list[tuple[int, int]] = []  # (chunk, micro-batch) whose W is still to run

    def count(self, kind: ActionKind, chunk: int) -> int:
        return self.next.get((kind, chunk), 0)

    def emit(self, kind: ActionKind, chunk: int, *, paired: bool = False) -> None:
        """The next micro-batch's `kind` on `chunk`; micro-batches past the real count (padding that
        fills the V's warm-up when there are few, as torch pads ZB-V) are numbered but not emitted."""
        key = (kind, chunk)
        mb = self.next.get(key, 0)  # `count`, inline: the V schedules emit hundreds of thousands
        self.next[key] = mb + 1
        if mb < self.m:
            self.actions.append(Action(kind, mb, self.stages[chunk], chunk, paired))

    def backward(self, chunk: int, *, full: bool) -> None:
        """B on `chunk`; a full backward runs its W at once, a split one queues it (DualPipe's
        WeightGradStore: W's run later in B order)."""
        mb = self.count("B", chunk)
        self.emit("B", chunk)
        if full:
            self.emit("W", chunk)
        else:
            self.weights.append((chunk, mb))

    def deferred_weight(self) -> None:
        """The oldest queued W, if any (for the micro-batch its B ran)."""
        if self.weights:
            chunk, mb = self.weights.pop(0)
            self.next[("W", chunk)] = self.count("W", chunk) + 1
            if mb < self.m:
                self.actions.append(Action("W", mb, self.stages[chunk], chunk))


def zb_h2(rank: int, pp: int, m: int) -> tuple[Action, ...]:
    """ZB-H2 (Qi et al. 2023, arXiv 2401.10241 section 2.2, figure 3 bottom): ZB-H1 with more warm-up.

    Rank r runs ``2 (pp - r) - 1`` warm-up forwards, filling the wait for its first backward, then
    B, F pairs with W of backward ``k`` after backward ``k + 2r``; the last ``2r`` W's close the
    step and fill its tail. With F = B = W a rank never idles between its first and last op (the
    parallelogram of the paper's figure 3), at the cost of up to ``2 pp - 1`` micro-batches held
    on rank 0 against 1F1B's ``pp``.
    """
    warmup, lag = min(2 * (pp - rank) - 1, m), min(2 * rank, m)
    out = _Emitter((rank,), m)
    for _ in range(warmup):
        out.emit("F", 0)
    for k in range(m):
        out.emit("B", 0)
        if k >= lag:
            out.emit("W", 0)
        if warmup + k < m:
            out.emit("F", 0)
    _flush_weights(out)
    return tuple(out.actions)


def zb_v(rank: int, pp: int, m: int) -> tuple[Action, ...]:
    """ZB-V (Qi et al. 2024, arXiv 2405.15362 section 3 and figure 4; torch's ScheduleZBVZeroBubble).

    Two chunks per rank in a V. Warm-up: ``2 (pp - r) - 1`` forwards of chunk 0, ``r`` pairs of
    chunk-1 then chunk-0 forwards, ``pp - r`` rounds of F, B, W on chunk 1; steady state: F B W on
    chunk 0 then on chunk 1; cool-down: ``r`` backward pairs, then ``pp - r`` B W on chunk 0, then
    the rest of the W's. It holds at most 1F1B's activation memory (``2 pp`` chunk micro-batches of
    half a stage each) and, with F = B = W, has no bubble between a rank's first and last op.
    With fewer than ``2 pp - 1`` micro-batches the order is built for that many and the padding
    dropped, as torch does.
    """
    n = max(2 * pp - 1, m)
    out = _Emitter(v_stages(pp, rank), m)
    for _ in range(2 * (pp - rank) - 1):
        out.emit("F", 0)
    for _ in range(rank):
        out.emit("F", 1)
        out.emit("F", 0)
    for _ in range(pp - rank):
        out.emit("F", 1)
        out.backward(1, full=True)
    while out.count("F", 1) < out.count("F", 0) or out.count("F", 0) < n:
        if out.count("F", 0) < n:
            out.emit("F", 0)
        out.backward(0, full=True)
        out.emit("F", 1)
        out.backward(1, full=True)
    for _ in range(rank):  # input gradients only; their W's close the step
        out.emit("B", 0)
        out.emit("B", 1)
    for _ in range(pp - rank):
        out.emit("B", 0)
        out.emit("W", 0)
    _flush_weights(out)
    return tuple(out.actions)


def _flush_weights(out: _Emitter) -> None:
    """Every W still owed: chunk 1's first, then chunk 0's (torch's ZB-V tail)."""
    for chunk in (1, 0) if len(out.stages) == 2 else (0,):
        while out.count("W", chunk) < out.count("B", chunk):
            out.emit("W", chunk)


def dual_pipe_v(rank: int, pp: int, m: int) -> tuple[Action, ...]:
    """DualPipeV (DeepSeek's DualPipe "cut in half", github.com/deepseek-ai/DualPipe dualpipev.py;
    torch's ScheduleDualPipeV): two chunks per rank in a V, 8 phases per rank.

    1. ``2 (pp - r - 1)`` forwards of chunk 0;  2. ``r + 1`` pairs F0 F1;
    3. ``pp - r - 1`` rounds B1 W1 F1 (zero-bubble backward of chunk 1);
    4. ``m - 2 pp + r + 1`` rounds of two overlapped pairs, F0 with the full backward of chunk 1 and
       F1 with that of chunk 0 (the last rank runs its first F0 and B1 apart);
    5. ``pp - r - 1`` rounds of B1 then the pair F1 & B0;
    6. ``r + 1`` backward pairs B1 B0, switching to split backwards half way (W's queued);
    7. ``pp - r - 1`` rounds of a queued W then B0;  8. the remaining queued W's.
    Needs ``m >= 2 pp``. The paired forward carries ``paired=True`` (schedule_action.Action).
    """
    out = _Emitter(v_stages(pp, rank), m)
    _dual_pipe_v_warmup(out, rank, pp)
    _dual_pipe_v_steady(out, rank, pp, m)
    _dual_pipe_v_cooldown(out, rank, pp)
    return tuple(out.actions)


def _dual_pipe_v_warmup(out: _Emitter, rank: int, pp: int) -> None:
    """Phases 1-3: chunk-0 forwards, F0 F1 pairs, then B1 W1 F1 rounds."""
    for _ in range(2 * (pp - rank - 1)):
        out.emit("F", 0)
    for _ in range(rank + 1):
        out.emit("F", 0)
        out.emit("F", 1)
    for _ in range(pp - rank - 1):
        out.backward(1, full=False)
        out.deferred_weight()
        out.emit("F", 1)


def _dual_pipe_v_steady(out: _Emitter, rank: int, pp: int, m: int) -> None:
    """Phases 4-5: the overlapped F&B pairs (the last rank's first F0 and B1 run apart)."""
    for i in range(m - 2 * pp + rank + 1):
        out.emit("F", 0, paired=not (i == 0 and rank == pp - 1))
        out.backward(1, full=True)
        out.emit("F", 1, paired=True)
        out.backward(0, full=True)
    for _ in range(pp - rank - 1):
        out.backward(1, full=True)
        out.emit("F", 1, paired=True)
        out.backward(0, full=True)


def _dual_pipe_v_cooldown(out: _Emitter, rank: int, pp: int) -> None:
    """Phases 6-8: backward pairs turning to split backwards half way, B0's, then the queued W's."""
    split = False
    for i in range(rank + 1):
        split = split or (i == (rank + 1) // 2 and rank % 2 == 1)
        out.backward(1, full=not split)
        split = split or (i == (rank + 1) // 2 and rank % 2 == 0)
        out.backward(0, full=not split)
    for _ in range(pp - rank - 1):
        out.deferred_weight()
        out.backward(0, full=not split)
    while out.weights:
        out.deferred_weight()
