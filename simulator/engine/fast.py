"""The event-free path: one step of a plan as a plain loop per rank, no SimPy environment.

It runs the same program as processes.py, pipeline.py and data_parallel.py (each function here names its
twin) and records the same spans. What makes a loop enough: once a rank posts a pipeline send, the
transfer's landing time is known (pipeline.send), and nothing else of one rank reaches another, but for
the tied embedding's meeting at the end. So each rank runs ahead on its own clock until it needs a
transfer (or its partner) that is not posted yet; it then waits, parked, and the loop goes on with a
rank that can run. A rank's data-parallel stream and its link are its own (fast_dp.py).

Applies to the symmetric plans every GPU plan is (one representative per pipeline position); it does not
apply (`blocker` says why) to full fidelity, to ranks sharing a node's cores and to a rendezvous transport
(CPU runs under gloo), whose ranks reach each other's clocks; nor, found while running, where the stream
and the compute act at one instant in an order it cannot decide (fast_dp.Ambiguous). `run_step` then
runs the SimPy engine, which stays the reference (docs/engine.md).
"""

from __future__ import annotations

import gc
from collections import deque
from collections.abc import Generator
from typing import TYPE_CHECKING

from plancast.simulator.engine.data_parallel import BACKWARD_KINDS
from plancast.simulator.engine.fast_dp import Ambiguous, Done, DpStream
from plancast.simulator.engine.fast_passes import (
    broadcast_shards,
    fsdp_pass,
    gathered_forward,
    queue_param_gathers,
    reduce_gradients,
)
from plancast.simulator.engine.link import Link
from plancast.simulator.engine.spans import Span, new_span
from plancast.simulator.units import FsdpState

if TYPE_CHECKING:
    from plancast.simulator.engine.plan import StepPlan
    from plancast.simulator.mesh import Coord
    from plancast.simulator.schedules import Action

__all__ = ["BACKWARD_KINDS", "Ambiguous", "FastEngine", "RankRun", "blocker"]

Program = Generator[object, None, None]
"""A rank's loop: it yields the key of what it waits for (a transfer, a meeting) when that is not there."""


def blocker(plan: StepPlan) -> str | None:
    """Why the event-free path does not apply to `plan`, or None when it does."""
    if plan.full_fidelity:
        return "every rank simulated (full fidelity, or ranks sharing a node's cores)"
    if plan.compute_slots:
        return "ranks share a node's cores"
    if plan.rendezvous:
        return "a rendezvous transport (cluster.compute.p2p_rendezvous)"
    if plan.fsdp and plan.dense_dp == 1:
        return "ZeRO-2/3 units without a data-parallel stream to gather them"
    return None


class RankRun:
    """One simulated rank: its clock and the turn it is in.

    A turn is what the rank does between two waits (a SimPy process between two yields); `made_s` is
    when the event that began the turn was made. With the turn they order the rank's compute against its
    dp stream at one instant (fast_dp.DpStream)."""

    __slots__ = (
        "coord", "dp", "fsdp", "gathers", "holders", "links", "made_s", "now", "pp", "rank", "routes", "turn",
    )  # fmt: skip

    def __init__(self, plan: StepPlan, rank: int, spans: list[Span]) -> None:
        self.rank = rank
        self.coord: Coord = plan.grid.coord(rank)
        self.pp = self.coord.pp
        self.holders = plan.holders(self.coord)
        self.now = self.made_s = 0.0
        self.turn = 0
        self.links: dict[int, Link] = {}
        self.routes: dict[int, tuple[float, Link | None, bool]] = {}
        """Per receiving rank: FastEngine._route, worked out once."""
        dp_link = self.link(plan.dp_tier) if plan.share_links else None
        self.dp = DpStream(plan, rank, dp_link, spans) if plan.dense_dp > 1 else None
        self.gathers: dict[int, tuple[list[Done | None], float]] = {}
        """param_gather.py: per chunk until its first forward, its gathers and backlog (RankState)."""
        self.fsdp = {}
        if plan.fsdp:
            self.fsdp = {
                v: FsdpState(plan.units[v], zero3=plan.zero_stage == 3) for v in plan.owned_stages(self.pp)
            }

    def link(self, tier: int) -> Link:
        link = self.links.get(tier)
        if link is None:
            link = self.links[tier] = Link()
        return link

    def wait(self, until_s: float, made_s: float) -> None:
        """A new turn from `until_s`, begun by an event made at `made_s`."""
        self.now, self.made_s, self.turn = until_s, made_s, self.turn + 1

    def busy(self, seconds: float) -> None:
        """A timeout of `seconds` made now (Engine.busy without shared cores)."""
        now = self.now
        self.now, self.made_s, self.turn = now + seconds, now, self.turn + 1


class FastEngine:
    """Engine's interface (`run`, `spans`, `transfers`, `passes`, `dp_wait_s`) without events."""

    def __init__(self, plan: StepPlan) -> None:
        reason = blocker(plan)
        if reason is not None:
            raise ValueError(f"the event-free path does not apply: {reason}")
        self.plan = plan
        self.spans: list[Span] = []
        self.transfers: list[Span] = []
        self.passes: dict[tuple[int, str, int], int] = {}
        self.dp_wait_s: dict[int, float] = {}
        self.landed: dict[tuple[int, str, int, int], tuple[float, float, float]] = {}
        """Per transfer: (when it lands, when it was posted, the delay its receiver's wake-up was set to)."""
        self.meetings: dict[tuple[str, int, int], float] = {}
        """Tied-embedding holders waiting for their partner: when each arrived."""
        self.met: dict[tuple[str, int, int], float] = {}
        """When both holders had arrived: the later arrival."""
        self._parked: dict[object, Program] = {}
        self._ready: deque[Program] = deque()

    def run(self) -> list[Span]:
        """Simulate one step; the spans of the simulated ranks (`spans`, then `transfers`), as Engine.run."""
        plan = self.plan
        self._ready.extend(self._rank_step(RankRun(plan, rank, self.spans)) for rank in plan.ranks)
        # Every span is a new tuple that stays alive: automatic collections would scan them again and
        # again as they pile up (as in Engine.run, which gives the same reason); nothing here forms cycles
        # but the parked generators, freed with the engine.
        paused = gc.isenabled()
        gc.disable()
        try:
            while self._ready:
                program = self._ready.popleft()
                key = next(program, None)
                if key is not None:
                    self._parked[key] = program
        finally:
            if paused:
                gc.enable()
        if self._parked:  # the schedules are checked deadlock-free (simulator/schedules.py)
            raise RuntimeError(f"ranks wait forever for {sorted(map(str, self._parked))[:4]}")
        return self.spans + self.transfers

    def _wake(self, key: object) -> None:
        program = self._parked.pop(key, None)
        if program is not None:
            self._ready.append(program)

    # ----------------------------------------------------------------------- processes.rank_step
    def _rank_step(self, r: RankRun) -> Program:
        plan = self.plan
        if plan.forward_param_gather:
            queue_param_gathers(self, r)
        for a, last in zip(plan.schedule[r.pp], plan.is_last_backward(r.pp), strict=True):
            d = plan.pass_durations(a)
            if a.kind == "F":
                if a.stage > 0 and r.holders[a.stage - 1] != r.rank:
                    yield from self._recv(r, "F", a, a.stage - 1)
                if plan.fsdp:
                    fsdp_pass(self, r, "forward", a, d.forward_s, d.forward_flops)
                elif a.stage in r.gathers:
                    gathered_forward(self, r, a, d.forward_s, d.forward_flops)
                else:
                    self._compute(r, "forward", a, d.forward_s, d.forward_flops)
                if a.stage < plan.stages - 1 and r.holders[a.stage + 1] != r.rank:
                    self._send(r, "F", a, a.stage + 1, block=not a.paired)
            elif a.kind == "B":
                if a.stage < plan.stages - 1 and r.holders[a.stage + 1] != r.rank:
                    yield from self._recv(r, "B", a, a.stage + 1)
                self._backward(r, a, last)
                if a.stage > 0 and r.holders[a.stage - 1] != r.rank:
                    self._send(r, "B", a, a.stage - 1, block=True)
            else:
                d = plan.pass_durations(a)
                self._compute(r, "backward_weight", a, d.backward_weight_s, d.weight_flops)
        if r.dp is not None:
            drained = r.dp.drain()
            if drained > r.now:
                r.wait(drained, drained)
        yield from self._step_end(r)
        self._optimizer(r)

    def _compute(self, r: RankRun, kind: str, a: Action, seconds: float, flops: float) -> None:
        start = r.now
        r.busy(seconds)
        self.record_pass(r.rank, kind, a, start, r.now - start, flops)

    def _backward(self, r: RankRun, a: Action, last: bool) -> None:
        """processes.backward's passes: recompute, backward (its gradient reductions starting)."""
        plan = self.plan
        d = plan.pass_durations(a)
        if plan.fsdp:
            if d.recompute_s:
                fsdp_pass(self, r, "recompute", a, d.recompute_s, d.forward_flops)
            fsdp_pass(self, r, d.backward_kind, a, d.backward_s, d.backward_flops)
            return
        start = r.now
        if d.recompute_s and not last:  # one timeout for both passes
            r.busy(d.recompute_s + d.backward_s)
            self.record_pass(r.rank, "recompute", a, start, d.recompute_s, d.forward_flops)
            start += d.recompute_s
        else:
            if d.recompute_s:
                r.busy(d.recompute_s)
                self.record_pass(r.rank, "recompute", a, start, r.now - start, d.forward_flops)
                start = r.now
            slowed = reduce_gradients(self, r, a, d.backward_s) if last else 0.0
            r.busy(d.backward_s + slowed)
        self.record_pass(r.rank, d.backward_kind, a, start, r.now - start, d.backward_flops)

    def record_pass(self, rank: int, kind: str, a: Action, start: float, dur: float, flops: float) -> None:
        """Engine.record_pass."""
        self.spans.append(
            new_span((rank, "compute", kind, a.stage, a.chunk, a.microbatch, 0, -1, start, dur, 0, flops))
        )
        key = (rank, kind, a.stage)
        self.passes[key] = self.passes.get(key, 0) + 1

    # ------------------------------------------------------------------------------ pipeline.py
    def _send(self, r: RankRun, kind: str, a: Action, to_stage: int, block: bool) -> None:
        """pipeline.send after the sender's host time; the sender then waits for it unless it overlaps."""
        plan = self.plan
        if plan.p2p_host_s:
            r.busy(plan.p2p_host_s)
        dst = r.holders[to_stage]
        key = (dst, kind, to_stage, a.microbatch)
        route = r.routes.get(dst)
        if route is None:
            route = r.routes[dst] = self._route(r, dst)
        seconds, link, on_dp_link = route
        now = r.now
        if link is not None:  # queued on the rank's link (link.py)
            if on_dp_link:
                assert r.dp is not None
                start = r.dp.post_send(now, r.made_s, r.turn, seconds)
            else:
                start, _ = link.post(now, seconds)  # no collective runs on this tier
            lands = start + seconds
            self.landed[key] = (lands, now, lands - now)
        else:
            start = now
            self.landed[key] = (now + seconds, now, seconds)
        self._wake(key)
        self.transfers.append(
            new_span(
                (
                    r.rank,
                    "pp",
                    "send",
                    a.stage,
                    a.chunk,
                    a.microbatch,
                    0 if kind == "F" else 1,
                    dst,
                    start,
                    seconds,
                    plan.p2p_bytes,
                    0.0,
                )
            )
        )
        if block and not plan.overlap_p2p:
            r.busy(seconds)

    def _route(self, r: RankRun, dst: int) -> tuple[float, Link | None, bool]:
        """Engine.route: a transfer's seconds, the sender's link it queues on when the plan shares links
        (else None), and whether the rank's dp stream uses that link too."""
        plan = self.plan
        seconds = plan.p2p_seconds(r.rank, dst)
        if not (plan.share_links and dst in plan.simulated):
            return seconds, None, False
        link = r.link(plan.tier(r.rank, dst))
        return seconds, link, r.dp is not None and link is r.dp.link

    def _recv(self, r: RankRun, kind: str, a: Action, from_stage: int) -> Program:
        """pipeline.recv: wait until the transfer has landed (the wait is the recv span), then the
        receive side's host time."""
        key = (r.rank, kind, a.stage, a.microbatch)
        start = r.now
        landed = self.landed.pop(key, None)
        while landed is None:
            yield key
            landed = self.landed.pop(key, None)
        lands, posted, delay = landed
        if posted <= start:  # landed (or landing) before the receiver came: a timeout made now
            if lands > start:
                r.wait(start + (lands - start), start)
        else:  # the receiver waited; the sender set its wake-up when posting (pipeline.Arrival)
            r.wait(posted + delay, posted)
        plan = self.plan
        self.transfers.append(
            new_span(
                (
                    r.rank,
                    "pp",
                    "recv",
                    a.stage,
                    a.chunk,
                    a.microbatch,
                    0 if kind == "F" else 1,
                    r.holders[from_stage],
                    start,
                    r.now - start,
                    plan.p2p_bytes,
                    0.0,
                )
            )
        )
        if plan.p2p_host_s:
            r.busy(plan.p2p_host_s)

    # ----------------------------------------------------------------------- after the flush
    def _step_end(self, r: RankRun) -> Program:
        """processes.step_end: sequence-parallel norm sums, the tied embedding's all-reduce."""
        plan = self.plan
        for chunk, stage in enumerate(plan.owned_stages(r.pp)):
            norms = plan.sp_norm_all_reduce(stage)
            if norms is not None:
                nbytes, seconds = norms
                self.spans.append(
                    Span(r.rank, "tp", "all_reduce", stage, chunk, -1, 0, -1, r.now, seconds, nbytes, 0.0)
                )
                r.busy(seconds)
            peer = plan.tie_peer(r.coord, r.rank, stage)
            if peer is not None:
                yield from self._tied(r, stage, chunk, peer)

    def _tied(self, r: RankRun, stage: int, chunk: int, peer: int) -> Program:
        """processes.tied_all_reduce: both holders meet, then sum the gradient."""
        arrived_at = r.now
        key = ("tie", min(r.rank, peer), max(r.rank, peer))
        partner = self.meetings.pop(key, None)
        if partner is not None:  # the partner got here first in the loop, not necessarily in time
            met = max(partner, arrived_at)
            self.met[key] = met
            self._wake(key)
        else:
            self.meetings[key] = arrived_at
            while (when := self.met.get(key)) is None:
                yield key
            met = when
        plan = self.plan
        r.wait(met, met)
        r.busy(plan.tied_all_reduce_s(r.rank, peer))
        self.spans.append(
            Span(r.rank, "pp", "all_reduce", stage, chunk, -1, 0, peer, arrived_at, r.now - arrived_at,
                 plan.tied_grad_bytes, 0.0)
        )  # fmt: skip

    def _optimizer(self, r: RankRun) -> None:
        """processes.optimizer, then ZeRO-1's shard broadcasts."""
        plan = self.plan
        start = r.now
        r.busy(plan.optimizer_s(r.pp))
        self.spans.append(
            Span(r.rank, "compute", "optimizer", -1, -1, -1, 0, -1, start, r.now - start, 0, 0.0)
        )
        if plan.zero_stage == 1 and plan.dense_dp > 1 and not plan.forward_param_gather:
            broadcast_shards(self, r)
