"""The blocking expert- and context-parallel collectives inside one transformer block, one micro-batch.

Issue order (the runtime records the same, docs/moe.md): forward: the cp all-gather of K/V before
attention, then the MoE dispatch and combine all-to-alls; backward in reverse: combine-grad,
dispatch-grad, then the cp reduce-scatter of dK/dV. Full recompute repeats the forward list. Each is
priced over the tiers its group spans (simulator/mesh.py groups "ep" and "cp" of rank 0; the grid is
regular, so every group spans the same tiers).
"""

from __future__ import annotations

from typing import NamedTuple

from plancast.simulator.costs.collectives import (
    Level,
    Link,
    collective_seconds,
    group_levels,
)
from plancast.simulator.costs.cp import kv_grad_bytes, kv_shard_bytes
from plancast.simulator.costs.moe import all_to_all_bytes
from plancast.simulator.costs.moe_dispatch import dispatch_seconds
from plancast.simulator.costs.routing import node_limited_levels
from plancast.simulator.mesh import GroupName
from plancast.simulator.scenario import Scenario


class InnerCollective(NamedTuple):
    """One blocking collective: stream ("ep" or "cp"), trace kind, payload this rank sends, seconds."""

    stream: str
    kind: str
    bytes: int
    seconds: float


EpCp = tuple[tuple[InnerCollective, ...], tuple[InnerCollective, ...]]
"""A block's (forward, backward) ep/cp collectives, in issue order (`layer_collectives`)."""


def group_levels_of(s: Scenario, name: GroupName, *, raw: bool = False) -> tuple[Level, ...]:
    """How the group `name` of rank 0 spreads over the cluster's tiers (`raw`: links at efficiency 1)."""
    tiers = s.cluster.tiers
    links = tuple(Link.of(t.bandwidth_GBps, t.latency_us, 1.0 if raw else t.efficiency) for t in tiers)
    return group_levels(s.grid.group(name, 0), s.cluster.tier_sizes, links)


def _ep_members_per_node(s: Scenario) -> int:
    """Members of rank 0's expert-parallel group on its node (the innermost tier's unit)."""
    ranks, node = s.grid.group("ep", 0), s.cluster.tier_sizes[0]
    return len(ranks) // len({r // node for r in ranks})


def layer_collectives(s: Scenario, *, moe: bool) -> EpCp:
    """(forward, backward) ep/cp collectives of one block (an MoE block when `moe`)."""
    host_s = s.cluster.compute.tp_collective_overhead_us * 1e-6  # one collective's launch on the host
    fwd: list[InnerCollective] = []
    bwd: list[InnerCollective] = []
    if s.cp > 1:
        levels = group_levels_of(s, "cp")
        shard, grad = kv_shard_bytes(s), kv_grad_bytes(s)
        # cost formulas take the gathered tensor for an all-gather, the full input for a reduce-scatter
        fwd.append(
            InnerCollective(
                "cp", "all_gather", shard, host_s + collective_seconds("all_gather", levels, grad)
            )
        )
        bwd.append(
            InnerCollective(
                "cp", "reduce_scatter", grad, host_s + collective_seconds("reduce_scatter", levels, grad)
            )
        )
    if moe and s.ep > 1:
        nbytes = all_to_all_bytes(s)
        # node-limited routing (model.topk_group) thins the traffic beyond the node for every dispatcher
        members = _ep_members_per_node(s)
        levels = node_limited_levels(group_levels_of(s, "ep"), s.model, members)
        raw = node_limited_levels(group_levels_of(s, "ep", raw=True), s.model, members)
        m = s.model
        routing = (m.num_experts_per_tok, m.num_experts, s.training.moe_token_spread)
        seconds = dispatch_seconds(s.parallelism.moe_token_dispatcher, levels, raw, nbytes, routing)
        a2a = InnerCollective("ep", "all_to_all", nbytes, host_s + seconds)
        fwd += [a2a, a2a]  # dispatch, combine
        bwd[:0] = [a2a, a2a]  # combine-grad, dispatch-grad, before the cp reduce-scatter
    return tuple(fwd), tuple(bwd)
