"""What a rank's passes queue on its dp stream, for the event-free path (fast.py): the twins of
data_parallel.reduce_gradients, fsdp_pass and broadcast_shards and of param_gather.py, over a rank's
clock (fast.RankRun) and its stream (fast_dp.DpStream) instead of SimPy processes. The reasons for
each rule are in data_parallel.py and param_gather.py; only the time-keeping differs."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from plancast.simulator.engine.data_parallel import BACKWARD_KINDS, LINK_SLICE_BYTES, MAX_LINK_SLICES
from plancast.simulator.engine.fast_dp import Done
from plancast.simulator.engine.spans import Span

if TYPE_CHECKING:
    from plancast.simulator.costs.collectives import CollectiveKind
    from plancast.simulator.engine.fast import FastEngine, RankRun
    from plancast.simulator.schedules import Action
    from plancast.simulator.units import Unit


def reduce_gradients(sim: FastEngine, r: RankRun, a: Action, backward_s: float) -> float:
    """data_parallel.reduce_gradients: DDP / ZeRO-1 buckets, queued as a chunk's last backward starts;
    returns what the backward loses to the reductions beside it."""
    plan = sim.plan
    if plan.dense_dp == 1:
        return 0.0
    if plan.s.parallelism.overlap_grad_reduce:
        overlapped = _reduce_chunk(sim, r, a.stage, a.chunk, backward_s, overlap=True)
        return plan.s.cluster.compute.overlap_slowdown * overlapped
    if a != plan.final_backward(r.pp):
        return 0.0
    for chunk, stage in enumerate(plan.owned_stages(r.pp)):
        _reduce_chunk(sim, r, stage, chunk, backward_s, overlap=False)
    return 0.0


def _reduce_chunk(
    sim: FastEngine, r: RankRun, stage: int, chunk: int, backward_s: float, overlap: bool
) -> float:
    """data_parallel._reduce_chunk: one chunk's buckets, each ready at its share of the backward."""
    plan, dp = sim.plan, r.dp
    assert dp is not None
    buckets = plan.units[stage].bucket_bytes
    total = sum(buckets) or 1
    done = 0.0
    pending = overlapped = last_ready = 0.0
    now = r.now
    kind = plan.dense_grad_reduce
    for nbytes in buckets:
        done += nbytes
        after_s = backward_s * done / total if overlap else backward_s
        dp.push(now, r.made_s, r.turn, kind, nbytes, (stage, chunk, -1), ready_s=now + after_s)
        drained = min(pending, after_s - last_ready)
        overlapped, pending, last_ready = overlapped + drained, pending - drained, after_s
        if overlap and after_s < backward_s:
            pending += plan.dp_collective_s(kind, nbytes)
    for nbytes in plan.units[stage].expert_bucket_bytes:
        dp.push(
            now, r.made_s, r.turn, "all_reduce", nbytes, (stage, chunk, -1), ready_s=now + backward_s,
            levels=plan.topo.levels("edp"),
        )  # fmt: skip
    return overlapped


def fsdp_pass(sim: FastEngine, r: RankRun, kind: str, a: Action, seconds: float, flops: float) -> None:
    """data_parallel.fsdp_pass: a ZeRO-2/3 pass whose units wait for their all-gathers."""
    plan, dp = sim.plan, r.dp
    assert dp is not None
    par = plan.s.parallelism
    state = r.fsdp[a.stage]
    is_backward = kind in BACKWARD_KINDS
    steps = state.backward() if is_backward else state.forward()
    ahead = 1 if par.overlap_param_gather else 0
    if is_backward and par.fsdp_backward_prefetch == "post":
        ahead = 0
    reduce_scale = plan.fsdp_reduce_scale
    where = (a.stage, a.chunk, a.microbatch)
    start = r.now
    gathers: list[Done | None] = [None] * len(steps)
    holding = [j for j, (unit, _) in enumerate(steps) if unit.param_bytes > 0.0]
    position = {j: n for n, j in enumerate(holding)}
    slowdown, pending = plan.s.cluster.compute.overlap_slowdown, 0.0
    for i, (unit, _need) in enumerate(steps):
        n = position.get(i)
        for j in holding[n : n + 1 + ahead] if n is not None else ():
            if steps[j][1] and gathers[j] is None:
                gathers[j] = _unit_collectives(sim, r, "all_gather", steps[j][0], 1.0, where, notify=True)
                pending += plan.unit_collective_s("all_gather", steps[j][0], 1.0) if slowdown else 0.0
        gathered = gathers[i]
        if gathered is not None:
            done_s = dp.finish(gathered)
            if done_s >= r.now:  # not yet seen done: the pass waits (a wait of 0 where it ends now)
                waited = done_s - r.now
                r.wait(done_s, done_s)
                sim.dp_wait_s[r.rank] = sim.dp_wait_s.get(r.rank, 0.0) + waited
                pending = max(0.0, pending - waited)
        share = unit.backward_share if is_backward else unit.forward_share
        if share:
            compute = seconds * share
            compute += slowdown * min(compute, pending)
            pending = max(0.0, pending - compute)
            r.busy(compute)
        if is_backward and par.overlap_grad_reduce and unit.param_bytes > 0.0:
            _unit_collectives(sim, r, "reduce_scatter", unit, reduce_scale, where)
            pending += plan.unit_collective_s("reduce_scatter", unit, reduce_scale) if slowdown else 0.0
            _replicate_all_reduce(sim, r, unit.param_bytes * reduce_scale, where)
    sim.record_pass(r.rank, kind, a, start, r.now - start, flops)
    if is_backward and not par.overlap_grad_reduce:
        for unit in (unit for unit, _ in steps if unit.param_bytes > 0.0):
            _unit_collectives(sim, r, "reduce_scatter", unit, reduce_scale, where)
            _replicate_all_reduce(sim, r, unit.param_bytes * reduce_scale, where)


def _unit_collectives(
    sim: FastEngine,
    r: RankRun,
    kind: CollectiveKind,
    unit: Unit,
    scale: float,
    where: tuple[int, int, int],
    notify: bool = False,
) -> Done | None:
    """data_parallel._unit_collectives: the unit's collective, then its routed experts' over edp."""
    assert r.dp is not None
    nbytes = unit.param_bytes * scale
    done = r.dp.push(r.now, r.made_s, r.turn, kind, nbytes, where, notify=notify and not unit.expert_bytes)
    if unit.expert_bytes:
        levels = sim.plan.edp_levels
        done = r.dp.push(
            r.now, r.made_s, r.turn, kind, unit.expert_bytes * scale, where, levels=levels, notify=notify
        )
    return done


def _replicate_all_reduce(sim: FastEngine, r: RankRun, nbytes: float, where: tuple[int, int, int]) -> None:
    """data_parallel._replicate_all_reduce (HSDP)."""
    plan = sim.plan
    if plan.replicate_levels:
        assert r.dp is not None
        r.dp.push(
            r.now, r.made_s, r.turn, "all_reduce", nbytes / plan.dense_dp, where, levels=plan.replicate_levels
        )


def broadcast_shards(sim: FastEngine, r: RankRun) -> None:
    """data_parallel.broadcast_shards: ZeRO-1's shard broadcasts after the optimizer, laid out at once."""
    plan = sim.plan
    now = r.now
    for chunk, stage in enumerate(plan.owned_stages(r.pp)):
        kind, count, shard, seconds = plan.shard_sync(stage)
        for index in range(count):
            if plan.share_links:
                start, now = _alone_on_link(sim, r, shard, seconds, now)
            else:
                start, now = now, now + seconds
            sim.spans.append(
                Span(r.rank, "dp", kind, stage, chunk, -1, index, -1, start, seconds, int(shard), 0.0)
            )
    r.busy(now - r.now)


def _alone_on_link(
    sim: FastEngine, r: RankRun, nbytes: float, seconds: float, now: float
) -> tuple[float, float]:
    """data_parallel._alone_on_link."""
    slices = max(1, min(math.ceil(nbytes / LINK_SLICE_BYTES), MAX_LINK_SLICES))
    slice_s = seconds / slices
    link = r.link(sim.plan.dp_tier)
    slot = link.queue_slice(now, slice_s)
    if slot > now:
        now += slot - now
    link.hold(r.dp, slot, slice_s, slices)
    link.run = None
    return now, now + slices * slice_s


def queue_param_gathers(sim: FastEngine, r: RankRun) -> None:
    """param_gather.queue_param_gathers: every chunk's parameter gathers, queued as the step starts."""
    plan, dp = sim.plan, r.dp
    assert dp is not None
    backlog_s = 0.0
    for chunk, stage in enumerate(plan.owned_stages(r.pp)):
        dones = []
        for nbytes in plan.param_gather_buckets(stage):
            where = (stage, chunk, -1)
            dones.append(dp.push(r.now, r.made_s, r.turn, "all_gather", nbytes, where, notify=True))
            backlog_s += plan.dp_collective_s("all_gather", nbytes)
        r.gathers[stage] = (dones, backlog_s)


def gathered_forward(sim: FastEngine, r: RankRun, a: Action, seconds: float, flops: float) -> None:
    """param_gather.gathered_forward: each bucket's share of a chunk's first forward waits for its gather."""
    plan, dp = sim.plan, r.dp
    assert dp is not None
    dones, backlog_s = r.gathers.pop(a.stage)
    shares = plan.param_gather_buckets(a.stage)
    total = sum(shares) or 1.0
    slowdown = plan.s.cluster.compute.overlap_slowdown
    pending = max(0.0, backlog_s - r.now) if slowdown else 0.0
    start = r.now
    for nbytes, gathered in zip(shares, dones, strict=True):
        if gathered is not None:
            done_s = dp.finish(gathered)
            if done_s >= r.now:  # not yet seen done: the pass waits (a wait of 0 where it ends now)
                waited = done_s - r.now
                r.wait(done_s, done_s)
                sim.dp_wait_s[r.rank] = sim.dp_wait_s.get(r.rank, 0.0) + waited
                pending = max(0.0, pending - waited)
        compute = seconds * nbytes / total
        compute += slowdown * min(compute, pending)
        pending = max(0.0, pending - compute)
        r.busy(compute)
    sim.record_pass(r.rank, "forward", a, start, r.now - start, flops)
