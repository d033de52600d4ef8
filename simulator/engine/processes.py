"""The SimPy processes of one step, as small generator functions over the engine's state (core.py)
and the plan's numbers (plan.py), in the style of SimPy's own examples.

`rank_step` runs one rank's pipeline schedule on its compute stream: per action a forward, backward
or weight pass, with the pipeline transfers around it (pipeline.py); then the flush, the per-chunk
reductions and the optimizer. `data_parallel.dp_stream` runs the rank's data-parallel collectives one
after another (NCCL stream order), overlapping the backward. Tensor-parallel collectives sit inside the
compute spans (predict.py lays them out).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from plancast.simulator.engine.data_parallel import broadcast_shards, fsdp_pass, reduce_gradients
from plancast.simulator.engine.param_gather import gathered_forward, queue_param_gathers
from plancast.simulator.engine.pipeline import recv, send
from plancast.simulator.engine.spans import Process, Span
from plancast.simulator.schedules import Action

if TYPE_CHECKING:
    from plancast.simulator.engine.core import Engine, RankState


def rank_step(sim: Engine, st: RankState) -> Process:
    """One rank's step: its schedule's actions, the wait for its gradients, reductions, optimizer."""
    plan = sim.plan
    pp = st.coord.pp
    if plan.forward_param_gather:
        queue_param_gathers(sim, st)
    for a, last in zip(plan.schedule[pp], plan.is_last_backward(pp), strict=True):
        if a.kind == "F":
            yield from forward(sim, st, a)
        elif a.kind == "B":
            yield from backward(sim, st, a, last)
        else:
            d = plan.pass_durations(a)
            yield from compute(sim, st, "backward_weight", a, d.backward_weight_s, d.weight_flops)
    if st.pending_dp:
        yield st.dp_done
    yield from step_end(sim, st)
    yield from optimizer(sim, st)


def forward(sim: Engine, st: RankState, a: Action) -> Process:
    """Receive the activation, run the forward pass, send its output to the next stage.

    A forward of DualPipe's overlapped F&B pair (`a.paired`) does not wait for its send: the transfer
    overlaps the pair's backward (DeepSeek-V3 report, arXiv 2412.19437 section 3.2.1). The two passes'
    compute runs one after the other: the engine does not overlap two compute spans, so the pair's
    compute is priced sequentially and only its communication is hidden (docs/schedules.md)."""
    plan = sim.plan
    d = plan.pass_durations(a)
    if a.stage > 0 and st.holders[a.stage - 1] != st.rank:
        yield from recv(sim, st, "F", a, a.stage - 1)
    if plan.fsdp:
        yield from fsdp_pass(sim, st, "forward", a, d.forward_s, d.forward_flops)
    elif a.stage in st.param_gathers:  # the chunk's first forward waits for its parameter gathers
        yield from gathered_forward(sim, st, a, d.forward_s, d.forward_flops)
    else:
        start = sim.env.now
        yield sim.busy(st.rank, d.forward_s)
        sim.record_pass(st.rank, "forward", a, start, sim.env.now - start, d.forward_flops)
    if a.stage < plan.stages - 1 and st.holders[a.stage + 1] != st.rank:
        if plan.p2p_host_s:
            yield sim.busy(st.rank, plan.p2p_host_s)
        blocking = send(sim, st, "F", a, a.stage + 1)
        if blocking is not None and not a.paired:
            yield blocking


def backward(sim: Engine, st: RankState, a: Action, last: bool) -> Process:
    """Receive the gradient, recompute if the plan does, run the backward pass (starting the gradient
    reductions of the chunk's `last` backward), send the input gradient to the previous stage."""
    plan = sim.plan
    d = plan.pass_durations(a)
    if a.stage < plan.stages - 1 and st.holders[a.stage + 1] != st.rank:
        yield from recv(sim, st, "B", a, a.stage + 1)
    if plan.fsdp:
        if d.recompute_s:
            yield from fsdp_pass(sim, st, "recompute", a, d.recompute_s, d.forward_flops)
        yield from fsdp_pass(sim, st, d.backward_kind, a, d.backward_s, d.backward_flops)
    else:
        start = sim.env.now
        if d.recompute_s and not last and not plan.compute_slots:  # one timeout for both passes
            yield sim.busy(st.rank, d.recompute_s + d.backward_s)
            sim.record_pass(st.rank, "recompute", a, start, d.recompute_s, d.forward_flops)
            start += d.recompute_s
        else:
            if d.recompute_s:
                yield sim.busy(st.rank, d.recompute_s)
                sim.record_pass(st.rank, "recompute", a, start, sim.env.now - start, d.forward_flops)
                start = sim.env.now
            slowed = reduce_gradients(sim, st, a, d.backward_s) if last else 0.0
            yield sim.busy(st.rank, d.backward_s + slowed)
        sim.record_pass(st.rank, d.backward_kind, a, start, sim.env.now - start, d.backward_flops)
    if a.stage > 0 and st.holders[a.stage - 1] != st.rank:
        if plan.p2p_host_s:
            yield sim.busy(st.rank, plan.p2p_host_s)
        blocking = send(sim, st, "B", a, a.stage - 1)
        if blocking is not None:
            yield blocking


def compute(sim: Engine, st: RankState, kind: str, a: Action, seconds: float, flops: float) -> Process:
    """One pass on the compute stream, recorded as one span."""
    start = sim.env.now
    yield sim.busy(st.rank, seconds)
    sim.record_pass(st.rank, kind, a, start, sim.env.now - start, flops)


# ------------------------------------------------------------------------------ after the flush
def step_end(sim: Engine, st: RankState) -> Process:
    """Per-chunk reductions after the pipeline flush: sequence-parallel norm gradients over tp, and
    the tied embedding's two copies (first and last stage) over the pipeline."""
    plan = sim.plan
    for chunk, stage in enumerate(plan.owned_stages(st.coord.pp)):
        norms = plan.sp_norm_all_reduce(stage)
        if norms is not None:
            nbytes, seconds = norms
            sim.spans.append(
                Span(st.rank, "tp", "all_reduce", stage, chunk, -1, 0, -1, sim.env.now, seconds, nbytes, 0.0)
            )
            yield sim.env.timeout(seconds)
        peer = plan.tie_peer(st.coord, st.rank, stage)
        if peer is not None:
            yield from tied_all_reduce(sim, st, stage, chunk, peer)


def tied_all_reduce(sim: Engine, st: RankState, stage: int, chunk: int, peer: int) -> Process:
    """Both holders of the tied embedding meet, then sum its gradient (Megatron-LM's embedding group).

    The span starts when this rank arrives, as a blocking collective measures it: it includes the
    wait for the other holder."""
    env = sim.env
    arrived_at = env.now
    key = (min(st.rank, peer), max(st.rank, peer))
    partner = sim.meetings.pop(key, None)
    if partner is None:
        arrived = sim.meetings[key] = env.event()
        yield arrived
    else:
        partner.succeed()
    yield env.timeout(sim.plan.tied_all_reduce_s(st.rank, peer))
    nbytes = sim.plan.tied_grad_bytes
    sim.spans.append(
        Span(
            st.rank,
            "pp",
            "all_reduce",
            stage,
            chunk,
            -1,
            0,
            peer,
            arrived_at,
            env.now - arrived_at,
            nbytes,
            0.0,
        )
    )


def optimizer(sim: Engine, st: RankState) -> Process:
    """The optimizer step; under ZeRO-1 each owner then broadcasts its updated shard, per chunk
    (ZeroRedundancyOptimizer), or Megatron's distributed optimizer all-gathers them, unless it
    overlaps that gather with the next forward (param_gather.py)."""
    plan, env = sim.plan, sim.env
    start = env.now
    yield sim.busy(st.rank, plan.optimizer_s(st.coord.pp))
    sim.spans.append(Span(st.rank, "compute", "optimizer", -1, -1, -1, 0, -1, start, env.now - start, 0, 0.0))
    if plan.zero_stage == 1 and plan.dense_dp > 1 and not plan.forward_param_gather:
        yield from broadcast_shards(sim, st)
