"""Node-limited routing (DeepSeek-V3, arXiv 2412.19437, sec. 2.1.2 and 3.2.2): the routed experts form
`n_group` groups and each token's top-k experts come from at most `topk_group` of them; DeepSeek places
one group per node, so a token reaches at most topk_group nodes across InfiniBand, and its dispatch
sends it once to each node it reaches (NVLink forwards it inside the node).

`nodes_spanned` is the pure count; `node_limited_levels` is the one hook the expert all-to-all's pricing
calls: it scales the share the tiers beyond the node carry by the nodes a token reaches with the limit
over the nodes it reaches without it. The once-per-node saving itself belongs to the dispatcher.
"""

from __future__ import annotations

from dataclasses import replace

from plancast.simulator.costs.collectives import Level
from plancast.simulator.scenario import Model


def nodes_spanned(top_k: int, nodes: int, n_group: int | None = None, topk_group: int | None = None) -> float:
    """Expected distinct nodes (of `nodes` holding the experts evenly) a token's `top_k` experts span.

    Unrestricted, each expert is an independent uniform draw: nodes * (1 - (1 - 1/nodes)^k) distinct
    nodes (the occupancy expectation). Group-limited, at most topk_group groups, i.e. at most
    topk_group * max(1, nodes / n_group) nodes (groups finer than nodes share a node; coarser ones span
    several), and never more than the unrestricted draw reaches."""
    if nodes <= 1:
        return 1.0
    uniform = nodes * (1.0 - (1.0 - 1.0 / nodes) ** top_k)
    if n_group is None or topk_group is None:
        return uniform
    cap = min(float(nodes), topk_group * max(1.0, nodes / n_group))
    return min(uniform, cap)


def scale_out_factor(m: Model, nodes: int) -> float:
    """The scale-out share of a token's dispatch under node-limited routing over its share without it."""
    if m.n_group is None or m.topk_group is None or nodes <= 1:
        return 1.0
    k = m.num_experts_per_tok
    return nodes_spanned(k, nodes, m.n_group, m.topk_group) / nodes_spanned(k, nodes)


def node_limited_levels(levels: tuple[Level, ...], m: Model, members_per_node: int) -> tuple[Level, ...]:
    """The expert-parallel group's levels with the tiers beyond the node carrying `scale_out_factor` of
    their bytes (as a bandwidth 1 / factor times the tier's; each peer's latency unchanged)."""
    nodes = 1
    for level in levels:
        nodes *= level.fan
    nodes //= max(members_per_node, 1)
    factor = scale_out_factor(m, nodes)
    if factor == 1.0:
        return levels
    first_remote = 1 if members_per_node > 1 else 0  # the first level is inside the node
    return tuple(
        lv
        if i < first_remote
        else replace(lv, link=replace(lv.link, bandwidth_Bps=lv.link.bandwidth_Bps / factor))
        for i, lv in enumerate(levels)
    )
