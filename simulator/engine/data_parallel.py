"""The data-parallel stream of one rank and what feeds it: DDP / ZeRO-1 bucket all-reduces, and the
FSDP2 (ZeRO-2/3) passes that wait for their units' all-gathers and issue their reduce-scatters."""

from __future__ import annotations

import math
from collections.abc import Generator
from typing import TYPE_CHECKING, Any, cast

import simpy

from plancast.simulator.engine.due import Due
from plancast.simulator.engine.spans import Process, Span, new_span
from plancast.simulator.schedules import Action

if TYPE_CHECKING:
    from plancast.simulator.costs.collectives import CollectiveKind
    from plancast.simulator.engine.core import Engine, RankState
    from plancast.simulator.units import Unit

LINK_SLICE_BYTES = 8 * 4 * 2**20  # NCCL_BUFFSIZE (4 MiB) x 8 channels: one slice of a collective
MAX_LINK_SLICES = 256  # bounds the SimPy events per collective
BACKWARD_KINDS = frozenset({"backward", "backward_input", "backward_weight"})


def dp_stream(sim: Engine, st: RankState) -> Process:
    """The rank's dp stream: collectives run one after another, each once its data is ready."""
    plan, env, queue = sim.plan, sim.env, st.dp_queue
    while True:
        if not queue:
            st.dp_wake = env.event()
            yield st.dp_wake
        kind, nbytes, (stage, chunk, mb), index, ready, done, levels = queue.popleft()
        due = ready.wait(env) if ready is not None else None
        if due is not None:
            yield due
        seconds = plan.dp_collective_s(kind, nbytes, levels)
        if plan.share_links:
            start = yield from _sliced(sim, st, nbytes, seconds)
        else:
            start = env.now
            yield env.timeout(seconds)
        shard = nbytes / plan.dense_dp if kind == "all_gather" else nbytes  # per-rank payload, as measured
        sim.spans.append(
            new_span((st.rank, "dp", kind, stage, chunk, mb, index, -1, start, seconds, int(shard), 0.0))
        )
        if done is not None:
            done.succeed()
        st.pending_dp -= 1
        if st.pending_dp == 0:
            st.dp_done.succeed()
            st.dp_done = env.event()


def _sliced(sim: Engine, st: RankState, nbytes: float, seconds: float) -> Generator[Any, Any, float]:
    """A collective on a link pipeline sends share (link.py): its slices go through the link's FIFO;
    while nothing else waits, the remaining slices run as one timeout, which a send cuts short
    (pipeline.send interrupts it: the link is released at the end of the current slice). Returns when
    the collective started."""
    env = sim.env
    slices = max(1, min(math.ceil(nbytes / LINK_SLICE_BYTES), MAX_LINK_SLICES))
    slice_s = seconds / slices
    link = sim.link(st.rank, sim.plan.dp_tier)
    start = -1.0
    left = slices
    while left:
        slot = link.queue_slice(env.now, slice_s)
        if slot > env.now:
            yield env.timeout(slot - env.now)
        start = env.now if start < 0 else start
        if not link.hold(st.dp_process, slot, slice_s, left):  # a send waits behind this slice
            yield env.timeout(slot + slice_s - env.now)
            left -= 1
            continue
        try:
            yield env.timeout(left * slice_s)
            link.run = None
            left = 0
        except simpy.Interrupt as cut:  # a send was posted: stop after the slice in progress
            done = cast(int, cut.cause)
            yield env.timeout(max(slot + done * slice_s - env.now, 0.0))
            left -= done
    return start


def broadcast_shards(sim: Engine, st: RankState) -> Process:
    """ZeRO-1 after the optimizer: each owner broadcasts its updated shard, per chunk
    (ZeroRedundancyOptimizer; Megatron's distributed optimizer all-gathers once: StepPlan.shard_sync),
    one after another on the rank's dp stream. By then the rank's stream
    has drained and its pipeline sends are posted, so nothing can come between the broadcasts: their
    spans are laid out at once, as the stream would run them, and the rank waits once."""
    plan, env = sim.plan, sim.env
    now = env.now
    for chunk, stage in enumerate(plan.owned_stages(st.coord.pp)):
        kind, count, shard, seconds = plan.shard_sync(stage)
        for index in range(count):
            if plan.share_links:
                start, now = _alone_on_link(sim, st, shard, seconds, now)
            else:
                start, now = now, now + seconds
            sim.spans.append(
                Span(st.rank, "dp", kind, stage, chunk, -1, index, -1, start, seconds, int(shard), 0.0)
            )
    yield env.timeout(now - env.now)


def _alone_on_link(
    sim: Engine, st: RankState, nbytes: float, seconds: float, now: float
) -> tuple[float, float]:
    """`_sliced` for a collective that no send can cut, as arithmetic: (its start, its end)."""
    slices = max(1, min(math.ceil(nbytes / LINK_SLICE_BYTES), MAX_LINK_SLICES))
    slice_s = seconds / slices
    link = sim.link(st.rank, sim.plan.dp_tier)
    slot = link.queue_slice(now, slice_s)
    if slot > now:
        now += slot - now  # where a timeout to the slot would leave the clock
    link.hold(st.dp_process, slot, slice_s, slices)  # nothing is queued behind it
    link.run = None
    return now, now + slices * slice_s


def reduce_gradients(sim: Engine, st: RankState, a: Action, backward_s: float) -> float:
    """DDP / ZeRO-1, called as a chunk's last backward starts. With overlap_grad_reduce each gradient
    bucket is reduced as soon as the backward has produced it (DDP's autograd hooks, Megatron-LM's
    `--overlap-grad-reduce`), at its share of the backward in reduction order. Without it the reduction
    follows the whole backward pass (Megatron-LM's finalize_model_grads after the pipeline flush;
    DeepSpeed's reduction after the last micro-batch): every chunk's buckets wait for the end of the
    rank's final backward, queued chunk by chunk.

    Returns the seconds the backward loses to the reductions running beside it
    (ComputeModel.overlap_slowdown times the overlapped time), which the caller adds to the pass."""
    plan = sim.plan
    if plan.dense_dp == 1:
        return 0.0
    if plan.s.parallelism.overlap_grad_reduce:
        overlapped = _reduce_chunk(sim, st, a.stage, a.chunk, backward_s, overlap=True)
        return plan.s.cluster.compute.overlap_slowdown * overlapped
    if a != plan.final_backward(st.coord.pp):
        return 0.0
    for chunk, stage in enumerate(plan.owned_stages(st.coord.pp)):
        _reduce_chunk(sim, st, stage, chunk, backward_s, overlap=False)
    return 0.0


def _reduce_chunk(
    sim: Engine, st: RankState, stage: int, chunk: int, backward_s: float, overlap: bool
) -> float:
    """Queue one chunk's gradient buckets, ready at their share of a backward of `backward_s` (overlap)
    or at its end. Returns how long the dense buckets run beside that backward: the dp stream drains
    each bucket's seconds from its ready time on, until the backward ends."""
    plan = sim.plan
    buckets = plan.units[stage].bucket_bytes
    total = sum(buckets) or 1
    done = 0.0
    pending = overlapped = last_ready = 0.0
    kind = plan.dense_grad_reduce
    for nbytes in buckets:
        done += nbytes
        after_s = backward_s * done / total if overlap else backward_s
        sim.dp_collective(st, kind, nbytes, (stage, chunk, -1), ready=Due.after(sim.env, after_s))
        drained = min(pending, after_s - last_ready)
        overlapped, pending, last_ready = overlapped + drained, pending - drained, after_s
        if overlap and after_s < backward_s:
            pending += plan.dp_collective_s(kind, nbytes)
    # routed experts: a second reducer over the expert-data-parallel group, after the dense buckets
    # (docs/moe.md); its one bucket per chunk is complete when the backward is
    for nbytes in plan.units[stage].expert_bucket_bytes:
        sim.dp_collective(
            st,
            "all_reduce",
            nbytes,
            (stage, chunk, -1),
            ready=Due.after(sim.env, backward_s),
            levels=plan.topo.levels("edp"),
        )
    return overlapped


def fsdp_pass(sim: Engine, st: RankState, kind: str, a: Action, seconds: float, flops: float) -> Process:
    """A pass under ZeRO-2/3: units wait for their all-gathers (FSDP2 state rules, simulator/units.py).

    With overlap_param_gather a unit's gather is issued when the unit before it starts (one unit
    of prefetch: FSDP2's backward prefetch and torchtitan's forward prefetch, DeepSpeed's bounded
    `stage3_prefetch_bucket_size`), so it arrives while that unit computes; otherwise, and in backward
    under fsdp_backward_prefetch = "post", when the unit is reached. The time spent waiting for a
    gather is data-parallel communication, kept apart from the compute in `dp_wait_s`. A backward
    unit's reduce-scatter is issued once its gradients exist (overlap_grad_reduce), else after the
    whole backward."""
    env, par = sim.env, sim.plan.s.parallelism
    state = st.fsdp[a.stage]
    is_backward = kind in BACKWARD_KINDS
    steps = state.backward() if is_backward else state.forward()
    ahead = 1 if par.overlap_param_gather else 0
    if is_backward and par.fsdp_backward_prefetch == "post":  # issued once the previous unit is done
        ahead = 0
    reduce_scale = sim.plan.fsdp_reduce_scale
    where = (a.stage, a.chunk, a.microbatch)
    start = env.now
    gathers: list[simpy.Event | None] = [None] * len(steps)
    # units holding parameters, in pass order: a unit's gather and the prefetch go by these (a DeepSpeed
    # block has units without parameters between its GEMMs, simulator/units.py)
    holding = [j for j, (unit, _) in enumerate(steps) if unit.param_bytes > 0.0]
    position = {j: n for n, j in enumerate(holding)}
    # compute beside a collective runs slower (ComputeModel.overlap_slowdown): `pending` is the
    # communication this pass has issued and not yet seen finish, in seconds, drained as time passes
    slowdown, pending = sim.plan.s.cluster.compute.overlap_slowdown, 0.0
    for i, (unit, _need) in enumerate(steps):
        n = position.get(i)
        for j in holding[n : n + 1 + ahead] if n is not None else ():
            if steps[j][1] and gathers[j] is None:
                gathers[j] = _unit_collectives(sim, st, "all_gather", steps[j][0], 1.0, where, notify=True)
                pending += sim.plan.unit_collective_s("all_gather", steps[j][0], 1.0) if slowdown else 0.0
        gathered = gathers[i]
        if gathered is not None and not gathered.processed:
            waited_from = env.now
            yield gathered
            waited = env.now - waited_from
            sim.dp_wait_s[st.rank] = sim.dp_wait_s.get(st.rank, 0.0) + waited
            pending = max(0.0, pending - waited)
        share = unit.backward_share if is_backward else unit.forward_share
        if share:
            compute = seconds * share
            compute += slowdown * min(compute, pending)
            pending = max(0.0, pending - compute)
            yield sim.busy(st.rank, compute)
        if is_backward and par.overlap_grad_reduce and unit.param_bytes > 0.0:
            _unit_collectives(sim, st, "reduce_scatter", unit, reduce_scale, where)
            pending += sim.plan.unit_collective_s("reduce_scatter", unit, reduce_scale) if slowdown else 0.0
            _replicate_all_reduce(sim, st, unit.param_bytes * reduce_scale, where)
    sim.record_pass(st.rank, kind, a, start, env.now - start, flops)
    if is_backward and not par.overlap_grad_reduce:
        for unit in (unit for unit, _ in steps if unit.param_bytes > 0.0):
            _unit_collectives(sim, st, "reduce_scatter", unit, reduce_scale, where)
            _replicate_all_reduce(sim, st, unit.param_bytes * reduce_scale, where)


def _unit_collectives(
    sim: Engine,
    st: RankState,
    kind: CollectiveKind,
    unit: Unit,
    scale: float,
    where: tuple[int, int, int],
    notify: bool = False,
) -> simpy.Event | None:
    """A unit's all-gather or reduce-scatter (bytes x `scale`) over the dense group, then its routed
    experts' over edp (simulator/units.py): one after the other on the dp stream, so the unit is ready
    when the last lands (the event returned with `notify`)."""
    nbytes = unit.param_bytes * scale
    done = sim.dp_collective(st, kind, nbytes, where, notify=notify and not unit.expert_bytes)
    if unit.expert_bytes:
        levels = sim.plan.edp_levels
        done = sim.dp_collective(st, kind, unit.expert_bytes * scale, where, levels=levels, notify=notify)
    return done


def _replicate_all_reduce(sim: Engine, st: RankState, nbytes: float, where: tuple[int, int, int]) -> None:
    """HSDP: the unit's reduce-scattered gradient shard all-reduced across the replicas (FSDP2 with a 2-D
    mesh, torch/distributed/fsdp/_fully_shard/_fsdp_collectives.py `foreach_reduce`: reduce-scatter
    over the shard dim, then all-reduce over the replicate dim)."""
    plan = sim.plan
    if plan.replicate_levels:
        sim.dp_collective(st, "all_reduce", nbytes / plan.dense_dp, where, levels=plan.replicate_levels)
