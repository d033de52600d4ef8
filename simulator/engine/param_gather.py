"""Megatron-LM's overlapped parameter gather (StepPlan.forward_param_gather), as SimPy processes.

With `--overlap-param-gather` the distributed optimizer does not all-gather the updated parameters
after its step. Each model chunk's buckets are gathered in forward order, asynchronously, and a
bucket's forward waits only for its own gather (the forward pre-hook, megatron/core/distributed/
distributed_data_parallel.py `_make_forward_pre_hook` -> param_and_grad_buffer.py `finish_param_sync`),
so the first bucket's gather is exposed and the rest run beside the compute of earlier buckets.

When they are issued: Megatron dispatches the first chunk's gathers inside the previous step's optimizer
(`--overlap-param-gather-with-optimizer-step`) or at the start of the forward-backward for every
pipeline stage at once (`align_param_gather`, on unless `--no-align-param-gather`; the interleaved
schedule then dispatches each later chunk ahead of its first forward). plancast simulates one step in
steady state, so every chunk's gathers are queued as the step starts, before the pipeline's first
receive; the NCCL stream runs them one after another (`dp_stream`). The fast path's twins are in
fast_passes.py.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from plancast.simulator.engine.spans import Process
from plancast.simulator.schedules import Action

if TYPE_CHECKING:
    from plancast.simulator.engine.core import Engine, RankState


def queue_param_gathers(sim: Engine, st: RankState) -> None:
    """Queue every owned chunk's parameter gathers on the rank's dp stream, chunk by chunk; note per
    chunk the seconds of gathers queued up to and including it (its backlog)."""
    plan = sim.plan
    backlog_s = 0.0
    for chunk, stage in enumerate(plan.owned_stages(st.coord.pp)):
        events = []
        for nbytes in plan.param_gather_buckets(stage):
            events.append(sim.dp_collective(st, "all_gather", nbytes, (stage, chunk, -1), notify=True))
            backlog_s += plan.dp_collective_s("all_gather", nbytes)
        st.param_gathers[stage] = (events, backlog_s)


def gathered_forward(sim: Engine, st: RankState, a: Action, seconds: float, flops: float) -> Process:
    """A chunk's first forward: each bucket's share of the pass (by its parameters) waits for that
    bucket's gather. Compute beside the gathers still running is slowed (ComputeModel.overlap_slowdown):
    what runs is the chunk's backlog less the time since the step started, drained as the pass goes."""
    env, plan = sim.env, sim.plan
    events, backlog_s = st.param_gathers.pop(a.stage)
    shares = plan.param_gather_buckets(a.stage)
    total = sum(shares) or 1.0
    slowdown = plan.s.cluster.compute.overlap_slowdown
    pending = max(0.0, backlog_s - env.now) if slowdown else 0.0
    start = env.now
    for nbytes, gathered in zip(shares, events, strict=True):
        if gathered is not None and not gathered.processed:
            waited_from = env.now
            yield gathered
            waited = env.now - waited_from
            sim.dp_wait_s[st.rank] = sim.dp_wait_s.get(st.rank, 0.0) + waited
            pending = max(0.0, pending - waited)
        compute = seconds * nbytes / total
        compute += slowdown * min(compute, pending)
        pending = max(0.0, pending - compute)
        yield sim.busy(st.rank, compute)
    sim.record_pass(st.rank, "forward", a, start, env.now - start, flops)
