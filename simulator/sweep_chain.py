"""The pipeline part of the sweep's lower bound (simulator/sweep_bound.py; docs/sweep.md proves it): over
a plan's per-stage pass times (sweep_segments.stage_times), the closed-form forward and cool-down chains,
and the schedule replayed action by action."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple

from plancast.simulator.schedules import Action, Schedule, splits_backward
from plancast.simulator.sweep_segments import StageTimes


def trailing_weight_passes(schedule: str, pp_rank: int, m: int) -> int | None:
    """How many weight passes (W) may follow a rank's last backward: none without a split backward;
    ZB-H1 defers the W of backward k to after backward k + rank, so the last rank + 1 of them follow
    (simulator/schedules.py, _zero_bubble_h1); ZB-H2 to after backward k + 2 rank, so 2 rank + 1
    (schedules_zb.py, zb_h2); None for the V schedules (ZB-V, DualPipeV): any of them may."""
    if not splits_backward(schedule):  # type: ignore[arg-type]
        return 0
    lag = {"ZeroBubble": 1, "ZBH2": 2}.get(schedule)
    return None if lag is None else min(lag * pp_rank + 1, m)


V_TESTED_PP = 32
"""`v_trailing_weights` is checked against the built ZB-V and DualPipeV schedules up to this many
pipeline ranks (tests/simulator/test_sweep_bound.py); beyond it the bound lets every W follow."""


def v_trailing_weights(schedule: str, pp: int, pp_rank: int, m: int) -> tuple[int, int] | None:
    """At least how many weight passes of each of a V rank's two chunks (stage r, stage 2 pp - 1 - r)
    follow its last backward. DualPipeV (schedules_zb.py, dual_pipe_v): min(r + 1, h) and
    max(r + 1 - h, 0) with h = ceil(pp / 2), exactly; ZB-V: r + 1 and r once m >= 2 pp - 1, fewer
    below (capped by m), so those counts are an upper bound, which only loosens the bound. None for
    other schedules, or past the sizes the test checks."""
    if pp > V_TESTED_PP:
        return None
    if schedule == "ZBV":
        return min(pp_rank + 1, m), min(pp_rank, m)
    if schedule == "DualPipeV":
        half = (pp + 1) // 2
        return min(pp_rank + 1, half), max(pp_rank + 1 - half, 0)
    return None


def _trailing_s(
    schedule: str, times: tuple[StageTimes, ...], weights: list[float], rank: int, m: int, split: bool
) -> float:
    """At most what `rank` runs after its last backward: weight passes only (a split backward's; stage
    0's W holds its whole backward), as many as the closed forms say, else all of them (`weights`)."""
    count = trailing_weight_passes(schedule, rank, m)
    pp = len(weights)
    stages: tuple[int, ...] = (rank,)
    counts: tuple[int, ...] | None = None if count is None else (count if split else 0,)
    if count is None and len(times) == 2 * pp:  # the V: stages r and 2 pp - 1 - r
        stages, counts = (rank, 2 * pp - 1 - rank), v_trailing_weights(schedule, pp, rank, m)
    if counts is None:
        return weights[rank]
    total = 0.0
    for stage, n in zip(stages, counts, strict=True):
        st = times[stage]
        total += n * (st.backward_weight_s + (st.backward_input_s if stage == 0 else 0.0))
    return total


class Compute(NamedTuple):
    """The compute part of a plan's bound (see the module docstring)."""

    other_ranks_s: float
    """max over ranks of the forward chain into the rank plus all its passes (its optimizer not counted)."""
    first_rank_s: float
    """When the first rank's last pass ends at the earliest: its passes, or a later rank's last
    backward and the cool-down from it."""
    final_backward_start_s: float
    """When the first rank's final backward can start at the earliest (after its recompute)."""
    final_backward_s: float
    """That backward pass's own time."""


def chain_bound(
    times: tuple[StageTimes, ...],
    pp: int,
    m: int,
    schedule: str,
    hop_s: float,
    holders: tuple[int, ...] | None = None,
    waits: tuple[float, ...] | None = None,
    alone: tuple[tuple[int, int], ...] | None = None,
) -> Compute:
    """The compute part of the bound over a plan's per-stage times (see the module docstring). Under a
    split backward the first stage's B is empty and its W is the whole backward (costs/stage.py).
    `holders`: per stage, its pipeline rank (default the loop placement, stage % pp). Stages 0..pp-1 sit
    on ranks 0..pp-1 in the loop and the V placement alike, so the forward and cool-down chains through
    them hold for both; a V rank's last backward is on its first chunk (its second chunk's backward of
    that micro-batch precedes it), so the cool-down from it runs through stages r-1..0 as in the loop.
    `waits`: per rank from the first (the ranks past its end: none), time its forward and backward passes
    spend waiting beyond `times` (ZeRO-2's gathers, sweep_fsdp.rank_waits), added to its work.
    `alone`: per stage, how many of its forwards and backwards run unpaired (`alone_counts`), each
    longer by the stage's `alone_forward_s` / `alone_backward_s`; that is work of its rank too, but where
    a split backward puts it on W (the first stage) it is left out of the cool-down term, since those
    W passes may follow the last backward."""
    split = splits_backward(schedule)  # type: ignore[arg-type]
    owner = holders or tuple(v % pp for v in range(len(times)))
    work, weights, late = [0.0] * pp, [0.0] * pp, [0.0] * pp
    for v, (f, rc, b, w, _, _) in enumerate(times):  # StageTimes by position: a bound per group and plan
        work[owner[v]] += m * (f + rc + b + w)  # StageTimes.total_s, in its order
        weights[owner[v]] += m * (w + (b if v == 0 else 0.0))
    for v, (forwards, backwards) in enumerate(alone or ()):
        st = times[v]
        work[owner[v]] += forwards * st.alone_forward_s + backwards * st.alone_backward_s
        if split and v == 0:  # its B is empty: W carries the unpaired backward's all-to-alls
            late[owner[v]] += backwards * st.alone_backward_s
    for r, wait in enumerate(waits or ()):
        work[r] += wait
    other = first = work[0]
    into = cool = 0.0
    for r in range(1, pp):
        prev = times[r - 1]
        into += prev.forward_s + hop_s
        if r == 1:  # the first stage's backward (or its W) ends its cool-down in any schedule
            cool = prev.recompute_s + prev.backward_input_s + prev.backward_weight_s + hop_s
        else:
            weight = 0.0 if split else prev.backward_weight_s
            cool += prev.recompute_s + prev.backward_input_s + weight + hop_s
        tail = _trailing_s(schedule, times, weights, r, m, split) if split else 0.0  # 0 if unsplit
        other = max(other, into + work[r])
        first = max(first, into + work[r] - late[r] - tail + cool)
    s0 = times[0]
    if split:  # the final B of stage 0 is empty; the W passes after it hold stage 0's whole backward
        b0, tail0 = 0.0, _trailing_s(schedule, times, weights, 0, m, split)
    else:
        b0, tail0 = s0.backward_input_s + s0.backward_weight_s, 0.0
    # rank 0's unpaired passes may include its final backward and trailing W's: none counted here
    unpaired0 = sum(
        f * times[v].alone_forward_s + b * times[v].alone_backward_s
        for v, (f, b) in enumerate(alone or ())
        if owner[v] == 0
    )
    return Compute(other, first, max(work[0] - unpaired0 - tail0 - b0, 0.0), b0)


class Replay(NamedTuple):
    """The schedule replayed with the bound's pass times and transfers: every action as early as its
    rank's previous action and its input allow (the engine starts each no earlier, docs/sweep.md)."""

    rank_end_s: tuple[float, ...]
    """Per pipeline rank, when its last action ends."""
    last_backward_s: tuple[tuple[float, float], ...]
    """Per chunk of the first rank: (when its last backward's own pass starts, after any recompute; that
    pass's time)."""


class StageUnits(NamedTuple):
    """One virtual stage's FSDP units in forward order (the root first where the stage has one), as
    simulator/units.py's dp_plan makes them: each one's gather and reduce-scatter seconds (host cost
    included; a unit without parameters gathers nothing) and its weight in a pass's time."""

    gather_s: tuple[float, ...]
    scatter_s: tuple[float, ...]
    forward_weight: tuple[float, ...]
    backward_weight: tuple[float, ...]
    root: bool


@dataclass
class FsdpUnits:
    """ZeRO-2/3 passes as the engine runs them (engine/data_parallel.py, fsdp_pass), without events:
    each unit waits for its gather, issued with one unit of prefetch (`ahead`) on the rank's serial dp
    stream, where reduce-scatters queue too. Times only lower bounds: no link sharing, no slowdown."""

    stages: tuple[StageUnits, ...]
    zero3: bool
    ahead_forward: int
    ahead_backward: int
    reduce_in_pass: bool
    gathered: dict[int, bool] = field(default_factory=dict)
    _steps: dict[tuple[int, bool], Steps] = field(default_factory=dict)

    def steps(self, stage: int, backward: bool) -> Steps:
        """One pass over `stage`'s units, worked out once per stage and direction: per unit in pass
        order, (its position, the gathers first issued there as (position, seconds), whether it holds
        parameters, its weight in the pass, its reduce-scatter in the pass or None); then the
        reduce-scatters after the pass."""
        key = (stage, backward)
        cached = self._steps.get(key)
        if cached is not None:
            return cached
        u = self.stages[stage]
        blocks = list(range(1 if u.root else 0, len(u.gather_s)))
        order = [*reversed(blocks), *([0] if u.root else [])] if backward else list(range(len(u.gather_s)))
        weight = u.backward_weight if backward else u.forward_weight
        ahead = self.ahead_backward if backward else self.ahead_forward
        holding = [q for q, unit in enumerate(order) if u.gather_s[unit] > 0.0]
        rank_of = {q: n for n, q in enumerate(holding)}
        issued: set[int] = set()
        out = []
        for q, unit in enumerate(order):
            n = rank_of.get(q)
            new = []
            for j in holding[n : n + 1 + ahead] if n is not None else ():
                if j not in issued:
                    issued.add(j)
                    new.append((j, u.gather_s[order[j]]))
            scatter = u.scatter_s[unit] if backward and self.reduce_in_pass and n is not None else None
            out.append((q, tuple(new), n is not None, weight[unit], scatter))
        after = tuple(u.scatter_s[unit] for unit in order if u.gather_s[unit] > 0.0)
        cached = self._steps[key] = (tuple(out), after if backward and not self.reduce_in_pass else ())
        return cached

    def run(
        self, stage: int, backward: bool, start: float, seconds: float, stream: float
    ) -> tuple[float, float]:
        """(when the pass ends, when the rank's dp stream is free) for one pass of `seconds` from `start`."""
        steps, after = self.steps(stage, backward)
        need = not self.gathered.get(stage, False)
        landed: dict[int, float] = {}
        now = start
        for q, new, holds, weight, scatter in steps:
            if need:
                for j, gather_s in new:
                    stream = landed[j] = max(stream, now) + gather_s
                if holds:
                    now = max(now, landed[q])
            now += seconds * weight
            if scatter is not None:
                stream = max(stream, now) + scatter
        for scatter in after:
            stream = max(stream, now) + scatter
        self.gathered[stage] = not (backward or self.zero3)
        return now, stream


Step = tuple[int, tuple[tuple[int, float], ...], bool, float, float | None]
"""One unit of a pass (FsdpUnits.steps)."""
Steps = tuple[tuple[Step, ...], tuple[float, ...]]


def replay(
    times: tuple[StageTimes, ...],
    schedule: Schedule,
    hop_s: float,
    split: bool,
    slowed_s: tuple[float, ...] | None = None,
    units: FsdpUnits | None = None,
    holders: tuple[int, ...] | None = None,
    alone: frozenset[tuple[str, int, int]] = frozenset(),
) -> Replay:
    """`Replay` of `schedule` over per-stage `times`; `slowed_s`: per stage, what its last backward loses to
    the all-reduces beside it (engine/data_parallel.py); `units`: ZeRO-2/3 passes unit by unit (`FsdpUnits`),
    the rank ending no earlier than its dp stream; `holders`: stage -> rank; `alone`: unpaired passes."""
    pp, stages = len(schedule), len(times)
    hop_in, hop_back = _hops(holders or tuple(v % pp for v in range(stages)), hop_s)
    extra, backwards_left = slowed_s or (0.0,) * stages, _backwards_per_stage(schedule, stages)
    durations = [action_seconds(st, v, split) for v, st in enumerate(times)]
    lonely = [_alone_seconds(d, st, split) for d, st in zip(durations, times, strict=True)]
    m, forward_end, backward_end = _ends(schedule, stages)
    stream, position, free, last_b = [0.0] * pp, [0] * pp, [0.0] * pp, dict[int, tuple[float, float]]()
    left = sum(len(actions) for actions in schedule)
    while left:
        moved = False
        for rank, actions in enumerate(schedule):
            i, now = position[rank], free[rank]
            while i < len(actions):
                a = actions[i]
                stage = a.stage
                unpaired = alone and (a.kind, stage, a.microbatch) in alone
                f_s, b_s, w_s, r_s = (lonely if unpaired else durations)[stage]
                if a.kind == "F":
                    ready = forward_end[(stage - 1) * m + a.microbatch] if stage else 0.0
                    if ready < 0.0:
                        break
                    start = max(now, ready + hop_in[stage] if stage else 0.0)
                    fsdp = None if units is None else units.run(stage, False, start, f_s, stream[rank])
                    now, stream[rank] = fsdp or (start + f_s, stream[rank])
                    forward_end[stage * m + a.microbatch] = now
                elif a.kind == "B":
                    last_stage = stage == stages - 1
                    ready = 0.0 if last_stage else backward_end[(stage + 1) * m + a.microbatch]
                    if ready < 0.0:
                        break
                    start = max(now, ready if last_stage else ready + hop_back[stage])
                    start, now, stream[rank] = _backward(units, stage, start, r_s, b_s, stream[rank])
                    backwards_left[stage] -= 1
                    now += 0.0 if backwards_left[stage] else extra[stage]
                    backward_end[stage * m + a.microbatch] = now
                    if rank == 0:
                        last_b[stage] = (start, b_s)
                else:
                    now += w_s
                i += 1
                moved = True
            left -= i - position[rank]
            position[rank], free[rank] = i, now
        if not moved:  # the schedules are checked deadlock-free (simulator/schedules.py)
            raise ValueError("schedule deadlocks")
    ends = tuple(max(f, d) for f, d in zip(free, stream, strict=True))
    return Replay(ends, tuple(last_b[s] for s in sorted(last_b)))


def first_rank_walk(
    times: tuple[StageTimes, ...], actions: tuple[Action, ...], split: bool, units: FsdpUnits
) -> float:
    """When the first rank's actions and its dp stream end at the earliest with every input taken as
    ready: its ZeRO-2/3 passes run unit by unit (`units`, fresh), each action as soon as the one before
    it. In `replay` each of its actions starts no earlier (it also waits for its input and the transfer),
    the rank's stream is no freer, and `FsdpUnits.run` ends no earlier from a later start or a busier
    stream; unpaired passes are taken at their paired time, which only shortens them. So this is at
    most the replay's first-rank end, at a pp-th of its work (docs/sweep.md, "The first rank walked")."""
    durations = [action_seconds(st, v, split) for v, st in enumerate(times)]
    now = stream = 0.0
    for a in actions:
        f_s, b_s, w_s, r_s = durations[a.stage]
        if a.kind == "F":
            now, stream = units.run(a.stage, False, now, f_s, stream)
        elif a.kind == "B":
            _, now, stream = _backward(units, a.stage, now, r_s, b_s, stream)
        else:
            now += w_s
    return max(now, stream)


def _alone_seconds(durations: ActionSeconds, st: StageTimes, split: bool) -> ActionSeconds:
    """`action_seconds` of an unpaired pass (costs/moe_overlap.py unpaired_passes) as the engine runs it
    (engine/plan.py, _alone): F and B longer by the hidden all-to-alls, W in B's place if B is empty."""
    f_s, b_s, w_s, r_s = durations
    if b_s or not split:
        return f_s + st.alone_forward_s, b_s + st.alone_backward_s, w_s, r_s
    return f_s + st.alone_forward_s, b_s, w_s + st.alone_backward_s, r_s


def _ends(schedule: Schedule, stages: int) -> tuple[int, list[float], list[float]]:
    """The micro-batch count m (rank 0 runs every micro-batch), and the forward's and backward's end per
    (stage, micro-batch), at stage * m + micro-batch (-1: not yet)."""
    m = 1 + max((a.microbatch for a in schedule[0]), default=0)
    return m, [-1.0] * (stages * m), [-1.0] * (stages * m)


def _hops(owner: tuple[int, ...], hop_s: float) -> tuple[list[float], list[float]]:
    """Per stage, the transfer into it from the stage before (forward) and from the stage after
    (backward): none between two stages of one rank (the turn of a V), where the engine sends nothing
    (engine/processes.py)."""
    stages = len(owner)
    into = [hop_s if v and owner[v - 1] != owner[v] else 0.0 for v in range(stages)]
    back = [hop_s if v < stages - 1 and owner[v + 1] != owner[v] else 0.0 for v in range(stages)]
    return into, back


def _backwards_per_stage(schedule: Schedule, stages: int) -> list[int]:
    counts = [0] * stages
    for actions in schedule:
        for a in actions:
            if a.kind == "B":
                counts[a.stage] += 1
    return counts


def _backward(
    units: FsdpUnits | None, stage: int, start: float, recompute_s: float, backward_s: float, stream: float
) -> tuple[float, float, float]:
    """A backward action from `start`: (when its own pass starts, after any recompute; when it ends; when
    the rank's dp stream is free)."""
    if units is None:
        return start + recompute_s, start + recompute_s + backward_s, stream
    if recompute_s:
        start, stream = units.run(stage, False, start, recompute_s, stream)
    end, stream = units.run(stage, True, start, backward_s, stream)
    return start, end, stream


def overlapped_s(buckets: tuple[int, ...], seconds: tuple[float, ...], backward_s: float) -> float:
    """How long a chunk's buckets run beside its last backward of `backward_s`, each ready at its share
    of it and drained from then (engine/data_parallel.py, _reduce_chunk, the same arithmetic)."""
    total = sum(buckets) or 1
    done = pending = overlapped = last_ready = 0.0
    for nbytes, collective_s in zip(buckets, seconds, strict=True):
        done += nbytes
        after_s = backward_s * done / total
        drained = min(pending, after_s - last_ready)
        overlapped, pending, last_ready = overlapped + drained, pending - drained, after_s
        if after_s < backward_s:
            pending += collective_s
    return overlapped


ActionSeconds = tuple[float, float, float, float]
"""(F, B's own pass, W, B's recompute) of one stage's actions."""


def action_seconds(st: StageTimes, stage: int, split: bool) -> ActionSeconds:
    """(F, B's own pass, W, B's recompute) of one stage's actions (costs/stage.py, Durations.of)."""
    if not split:
        return st.forward_s, st.backward_input_s + st.backward_weight_s, 0.0, st.recompute_s
    if stage == 0:  # the first stage has no input gradient: its W is the whole backward
        return st.forward_s, 0.0, st.backward_input_s + st.backward_weight_s, st.recompute_s
    return st.forward_s, st.backward_input_s, st.backward_weight_s, st.recompute_s
