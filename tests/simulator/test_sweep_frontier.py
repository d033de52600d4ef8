"""The best-first frontier returns candidates in the order of their tighter bound, with batches of first
bounds refined over a pool while it opens the groups next in line."""

from __future__ import annotations

import random
from collections.abc import Iterator

import pytest

from plancast.simulator.sweep_frontier import REFINE_ROUND, Estimate, Frontier, Levels
from plancast.simulator.sweep_groups import Group


def _space(seed: int) -> tuple[list[Estimate], list[Group], dict[Group, list[Estimate]], dict[int, float]]:
    """Loose candidates, and groups each holding candidates at or above its bound; each candidate's
    tighter bound at or above its first."""
    rng = random.Random(seed)
    loose = [(rng.uniform(1.0, 3.0), (n,), 0.0) for n in range(40)]
    groups, members = [], {}
    for g in range(60):
        bound = rng.uniform(1.0, 3.0)
        group = Group(bound, (g,) * 12, (), ())  # type: ignore[arg-type]
        groups.append(group)
        members[group] = [(bound + rng.uniform(0.0, 0.5), (100 + 10 * g + k,), 0.0) for k in range(5)]
    every = [*loose, *(c for m in members.values() for c in m)]
    return loose, groups, members, {c[1][0]: c[0] + rng.uniform(0.0, 1.0) for c in every}


class Pool:
    """A pool's map as the frontier sees it: handed a batch at once, worked out when read; and the
    groups' opener. Both log when they run."""

    def __init__(self, members: dict[Group, list[Estimate]], tighter: dict[int, float]) -> None:
        self.members, self.tighter, self.log = members, tighter, list[str]()

    def expand(self, group: Group) -> list[Estimate]:
        self.log.append("open")
        return self.members[group]

    def refine_many(self, batch: list[Estimate]) -> Iterator[float]:
        self.log.append("hand over")
        return self._read(batch)

    def _read(self, batch: list[Estimate]) -> Iterator[float]:
        yield from (self.tighter[c[1][0]] for c in batch)
        self.log.append("read")


@pytest.mark.parametrize("walk", [False, True], ids=["first", "walked"])
@pytest.mark.parametrize("seed", range(5))
def test_candidates_come_out_in_tighter_order_with_batches_refined_while_groups_open(
    seed: int, walk: bool
) -> None:
    """With `Levels.walk` (a bound between the first and the tighter one, here halfway for the even
    candidates, none for the odd) the order is the same."""
    loose, groups, members, tighter = _space(seed)
    pool = Pool(members, tighter)

    def walked(c: Estimate) -> float | None:
        return (c[0] + tighter[c[1][0]]) / 2 if c[1][0] % 2 == 0 else None

    levels = Levels(groups=groups, expand=pool.expand, walk=walked if walk else None)
    frontier = Frontier(sorted(loose), None, pool.refine_many, levels)
    out = []
    while (candidate := frontier.pop()) is not None:
        out.append(candidate)
    assert [c[0] for c in out] == sorted(tighter.values())
    assert sorted(c[1][0] for c in out) == sorted(tighter)
    assert not frontier.pending and REFINE_ROUND > 1
    log = pool.log  # some group opened after a batch was handed over, before it was read
    assert any(log[i] == "hand over" and "open" in log[i + 1 : log.index("read", i)] for i in range(len(log)))
