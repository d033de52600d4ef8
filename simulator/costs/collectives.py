"""Alpha-beta cost of collectives over the cluster's link tiers.

Each tier has a per-rank one-direction bandwidth B (GB/s), an achieved fraction `efficiency` and a
per-message latency alpha. For N ranks and X bytes (the full tensor on each rank):

- ring all-reduce:      2(N-1)/N * X / B  + 2(N-1) alpha   (Patarasuk & Yuan 2009; Thakur et al. 2005)
- ring all-gather / reduce-scatter:  (N-1)/N * X / B + (N-1) alpha
- tree all-reduce:      2 X / B + 2 ceil(log2 N) alpha     (NCCL double binary tree, Sanders et al. 2009)
- hierarchical (two or more levels): reduce-scatter inside the inner tier, all-reduce of the shard
  across the outer tier, all-gather inside again (Jia et al. 2018; NCCL's intra/inter-node rings).
- point-to-point:       X / B + alpha
- all-to-all (X sent per rank): (N-1)/N * X / B + (N-1) alpha on one tier; over tiers, the share
  each tier carries, the slowest tier setting the time (`all_to_all_seconds`).

The seeds' identities hold exactly with efficiency 1 and zero latency, e.g. N = 8, X = 2 GB, 25 GB/s:
2 * 7/8 * 2 / 25 = 0.14 s.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

CollectiveKind = Literal["all_reduce", "all_gather", "reduce_scatter", "broadcast", "send", "recv"]
Algorithm = Literal["auto", "ring", "tree", "hierarchical"]


@dataclass(frozen=True, slots=True)
class Link:
    """One tier as a collective sees it: bandwidth per rank (bytes/s, already times efficiency) and alpha."""

    bandwidth_Bps: float
    latency_s: float

    @classmethod
    def of(cls, bandwidth_GBps: float, latency_us: float, efficiency: float = 1.0) -> Link:
        return cls(bandwidth_GBps * 1e9 * efficiency, latency_us * 1e-6)


@dataclass(frozen=True, slots=True)
class Level:
    """`fan` group members meet over `link` at this level of a hierarchical collective."""

    fan: int
    link: Link


def ring_seconds(kind: CollectiveKind, n: int, nbytes: float, link: Link) -> float:
    """A flat ring over n ranks on one link tier."""
    if n <= 1 or nbytes <= 0:
        return 0.0
    steps = n - 1
    if kind == "all_reduce":
        return 2 * steps / n * nbytes / link.bandwidth_Bps + 2 * steps * link.latency_s
    if kind in ("all_gather", "reduce_scatter"):
        return steps / n * nbytes / link.bandwidth_Bps + steps * link.latency_s
    if kind == "broadcast":  # pipelined ring broadcast: X / B once the pipe is full
        return nbytes / link.bandwidth_Bps + steps * link.latency_s
    return p2p_seconds(nbytes, link)


def tree_seconds(kind: CollectiveKind, n: int, nbytes: float, link: Link) -> float:
    """Double binary tree: bandwidth term independent of n, latency logarithmic (all-reduce only)."""
    if n <= 1 or nbytes <= 0:
        return 0.0
    if kind != "all_reduce":
        return ring_seconds(kind, n, nbytes, link)
    return 2 * nbytes / link.bandwidth_Bps + 2 * math.ceil(math.log2(n)) * link.latency_s


def p2p_seconds(nbytes: float, link: Link) -> float:
    """One message between two ranks."""
    return 0.0 if nbytes <= 0 else nbytes / link.bandwidth_Bps + link.latency_s


def hierarchical_seconds(kind: CollectiveKind, levels: Sequence[Level], nbytes: float) -> float:
    """Multi-level collective: reduce-scatter up the levels, the top level's ring, all-gather down.

    With a single level it is the flat ring. Each level works on the shard left by the levels inside it.
    """
    levels = [lv for lv in levels if lv.fan > 1]
    if not levels or nbytes <= 0:
        return 0.0
    if len(levels) == 1:
        return ring_seconds(kind, levels[0].fan, nbytes, levels[0].link)
    total, shard = 0.0, float(nbytes)
    for level in levels[:-1]:
        if kind in ("all_reduce", "reduce_scatter"):
            total += ring_seconds("reduce_scatter", level.fan, shard, level.link)
        if kind in ("all_reduce", "all_gather"):
            total += ring_seconds("all_gather", level.fan, shard, level.link)
        if kind == "broadcast":
            total += ring_seconds("broadcast", level.fan, shard, level.link)
        if kind != "broadcast":
            shard /= level.fan
    top = levels[-1]
    return total + ring_seconds(kind, top.fan, shard, top.link)


def group_levels(ranks: Sequence[int], tier_sizes: Sequence[int], links: Sequence[Link]) -> tuple[Level, ...]:
    """How a group of ranks spreads over the tiers: members per unit at each tier -> fan-out per level.

    Assumes a regular layout (every unit holds the same number of members), as rank grids produce.
    """
    n = len(ranks)
    inner_count = 1
    levels = []
    for size, link in zip(tier_sizes, links, strict=True):
        units = {r // size for r in ranks}
        per_unit = n // len(units)
        if per_unit > inner_count:
            levels.append(Level(per_unit // inner_count, link))
            inner_count = per_unit
        if per_unit == n:
            break
    return tuple(levels)


def all_to_all_seconds(levels: Sequence[Level], nbytes: float) -> float:
    """All-to-all in which each rank sends `nbytes` in total, 1/N of it to every member (N = product of
    the fans). NCCL runs it as one group of concurrent sends/receives (NCCL docs, "Point-to-point
    communication: all-to-all"), so each tier carries the share addressed to ranks in the same unit of
    that tier but another unit of the tier inside it, and the tiers work at once: the slowest tier sets
    the time. This is the hierarchical dispatch of DeepSpeed-MoE (Rajbhandari et al. 2022 sec. 5.2) and
    DeepSeek-V3 (sec. 3.2.2: IB to the node, NVLink inside it), one alpha per peer reached on a tier."""
    levels = [lv for lv in levels if lv.fan > 1]
    if not levels or nbytes <= 0:
        return 0.0
    n = math.prod(lv.fan for lv in levels)
    inner, slowest = 1, 0.0
    for level in levels:
        outer = inner * level.fan
        share = nbytes * (outer - inner) / n  # bytes to ranks first reached at this level
        slowest = max(slowest, share / level.link.bandwidth_Bps + (level.fan - 1) * level.link.latency_s)
        inner = outer
    return slowest


def collective_seconds(
    kind: CollectiveKind, levels: Sequence[Level], nbytes: float, algorithm: Algorithm = "auto"
) -> float:
    """Time of one collective over the given levels; `auto` picks the fastest algorithm NCCL could."""
    levels = [lv for lv in levels if lv.fan > 1]
    if not levels or nbytes <= 0:
        return 0.0
    if kind in ("send", "recv"):
        return p2p_seconds(nbytes, levels[-1].link)
    n = math.prod(lv.fan for lv in levels)
    outer = levels[-1].link
    candidates = {
        "ring": ring_seconds(kind, n, nbytes, outer),  # a flat ring runs at its slowest link's pace
        "tree": tree_seconds(kind, n, nbytes, outer),
        "hierarchical": hierarchical_seconds(kind, levels, nbytes),
    }
    if algorithm != "auto":
        return candidates[algorithm]
    return min(candidates.values())


class PricedCollectives:
    """`collective_seconds` over `levels`, once per (kind, bytes, algorithm): a sweep prices many
    collectives of one size (FSDP block units, full gradient buckets) on one group."""

    def __init__(self, levels: Sequence[Level]) -> None:
        self.levels, self.seconds = levels, dict[tuple[str, float, str], float]()

    def __call__(self, kind: CollectiveKind, nbytes: float, algorithm: Algorithm = "auto") -> float:
        key = (kind, nbytes, algorithm)
        cached = self.seconds.get(key)
        if cached is None:
            cached = self.seconds[key] = collective_seconds(kind, self.levels, nbytes, algorithm)
        return cached
