"""Did the ranks run where the plan put them? The plan's nodes against the measured ones (pure).

The simulator prices each process group's traffic on the innermost cluster tier that holds all its
ranks, with ranks laid out node after node (``mesh.span_tier``: rank r sits on node
r // gpus_per_node). A measured run whose ranks landed elsewhere (a rendezvous that numbered nodes in
join order, a launcher with another ranks-per-node) moved traffic to another tier: tensor parallel
over the network, say. ``check_placement`` names every such difference; ``compare`` prints them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from plancast.simulator.mesh import GROUPS, GroupName, RankGrid
from plancast.simulator.scenario import Scenario


@dataclass(frozen=True)
class Placement:
    """The outcome of a check: one line per difference (empty when the run matched the plan)."""

    nodes: dict[int, str]
    """Measured: rank -> the node it ran on."""
    problems: list[str]

    @property
    def matches(self) -> bool:
        return not self.problems


def measured_nodes(ranks: Sequence[Mapping[str, object]]) -> dict[int, str]:
    """rank -> node name from ``env.json``'s ``ranks`` entries (``node_name``, else host and node index)."""
    nodes: dict[int, str] = {}
    for entry in ranks:
        rank = entry.get("rank")
        if not isinstance(rank, int) or isinstance(rank, bool):
            continue
        name = entry.get("node_name")
        if not isinstance(name, str) or not name:
            name = f"{entry.get('hostname', '?')}#{entry.get('node', '?')}"
        nodes[rank] = name
    return nodes


def check_placement(s: Scenario, ranks: Sequence[Mapping[str, object]], ranks_per_node: int) -> Placement:
    """Compare the plan's node of each rank (``rank // ranks_per_node``, node order = rank order) and
    which groups it keeps inside one node with the measured placement in ``ranks``."""
    nodes = measured_nodes(ranks)
    grid = s.grid
    problems: list[str] = []
    missing = [r for r in range(grid.world_size) if r not in nodes]
    if missing:
        problems.append(f"env.json names no node for ranks {_short(missing)}: placement not checked for them")
    order = _node_order(nodes, ranks_per_node)
    for rank, name in sorted(nodes.items()):
        planned = rank // ranks_per_node
        if rank < grid.world_size and order.get(name) != planned:
            problems.append(
                f"rank {rank} ran on node {name!r} (node {order.get(name)} in rank order); the plan puts it "
                f"on node {planned} (global rank = node x {ranks_per_node} + local rank)"
            )
    for axis in GROUPS:
        problems += _group_problems(grid, axis, nodes, ranks_per_node)
    return Placement(nodes, problems)


def _node_order(nodes: Mapping[int, str], ranks_per_node: int) -> dict[str, int]:
    """Each measured node's index: the planned node of the lowest rank it held."""
    first: dict[str, int] = {}
    for rank, name in sorted(nodes.items()):
        first.setdefault(name, rank // ranks_per_node)
    return first


def _group_problems(
    grid: RankGrid, axis: GroupName, nodes: Mapping[int, str], ranks_per_node: int
) -> list[str]:
    if grid.size(axis) == 1:
        return []
    out: list[str] = []
    for group in grid.groups(axis):
        if any(r not in nodes for r in group):
            continue
        planned_inside = len({r // ranks_per_node for r in group}) == 1
        measured = sorted({nodes[r] for r in group})
        if planned_inside != (len(measured) == 1):
            where = "inside one node" if planned_inside else "across nodes"
            out.append(
                f"{axis} group {list(group)}: the plan keeps it {where}, the run had it on "
                f"{', '.join(measured)}"
            )
    return out


def _short(values: Sequence[int]) -> str:
    return str(list(values[:8]))[:-1] + (", ...]" if len(values) > 8 else "]")
