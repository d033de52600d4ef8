"""The best-first search of the sweep (simulator/sweep.py): a heap of lower bounds at four levels, each
opened only once no entry left is smaller, and rounds of simulations over `map_fn` until the next bound
cannot beat the k-th best.

The levels, coarsest first: a tp degree (simulator/sweep_floor.py: a floor under every plan of the
degree, priced without a layer key), opened into its families of groups (simulator/sweep_groups.py: the
degree's per-layer costs worked out then, the expensive part of a large sweep); a family, opened into
its groups, each bounded; a group, opened into its classes
or its plans' first bounds (simulator/sweep_bound.py); a first bound, refined into the replayed one; a
replayed bound, whose plan is simulated. Each entry's key is at most every bound under it, so the plan
returned has the smallest tighter bound of all, and a level never opened holds only slower plans.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from plancast.simulator.sweep_bound import TOLERANCE
from plancast.simulator.sweep_groups import Family, Group
from plancast.simulator.sweep_space import Root

if TYPE_CHECKING:
    from plancast.simulator.sweep import Ranked

MapFn = Callable[[Callable[[Any], Any], Sequence[Any]], Iterable[Any]]
"""`map`'s contract: fn over the items, results in the items' order (a process pool's map at the CLI)."""


Estimate = tuple[float, tuple[Any, ...], float]
"""(bound_s, the plan's fields, memory_GiB): plain tuples cost a tenth of dataclasses to send back from
a worker process, and sort as (bound_s, Plan) does."""


@dataclass(frozen=True, order=True)
class Degree:
    """One tp degree of the space, not yet grouped: its floor (sweep_floor.degree_floor_s) and subtrees."""

    floor_s: float
    tp: int
    subtrees: list[Root] = field(compare=False)
    plans: int = field(compare=False)
    """Plans the degree enumerates (sweep_space.subtree_sizes)."""


@dataclass(frozen=True)
class Levels:
    """The coarser entries of the search and how each is opened: `groups`, each into its members' first
    bounds by `expand` (simulator/sweep_groups.py), a mixed one first into its classes by `classes`
    (sweep_groups.Grouper.classes); `degrees`, each into its families by `group` (simulator/sweep.py),
    each family into its groups by `open`."""

    groups: Sequence[Group] = ()
    expand: Callable[[Group], list[Estimate]] | None = None
    classes: Callable[[Group], list[Group]] | None = None
    degrees: Sequence[Degree] = ()
    group: Callable[[list[Degree]], list[Family]] | None = None
    open: Callable[[Family], list[Group]] | None = None
    """A family (sweep_groups.Family) into its groups, each bounded (sweep_groups.Grouper.open)."""
    walk: Callable[[Estimate], float | None] | None = None
    """A bound between a first bound and its refinement, worked out here before a refinement is handed
    over (sweep_bound.Bound.walked: ZeRO-2/3 plans; None where it has none)."""


class Frontier:
    """Candidates in the order of their tighter bound, worked out lazily: one heap of tp degrees (grouped
    into families once no other entry is smaller), families (their groups bounded once no other entry
    is smaller), groups (opened into their plans' first bounds once no other entry is smaller), first
    bounds (walked where `Levels.walk` applies, then refined, each once no other entry is smaller) and
    tighter bounds (returned once no other entry is smaller). Each entry's key is at most every bound
    below it (a degree's floor at most its families', a family's at most its groups', a group's at most
    its members', a first bound at most its walked and tighter ones), so the candidate returned has the
    smallest tighter bound of all."""

    def __init__(
        self,
        candidates: list[Estimate],
        refine: Callable[[Estimate], float | None] | None,
        refine_many: Callable[[list[Estimate]], Iterable[float | None]] | None = None,
        levels: Levels | None = None,
    ) -> None:
        self.levels = levels = levels or Levels()
        self.refine_many = refine_many or (lambda batch: [refine(c) if refine else c[0] for c in batch])
        self.batch = REFINE_ROUND if refine_many is not None else 1
        self.pending: list[tuple[list[Estimate], Iterable[float | None]]] = []
        """Batches handed to `refine_many` whose tighter bounds are not yet in the heap: a pool's map
        works them out while this process opens the groups next in line (`pop`)."""
        self.refused = 0
        """Candidates whose refinement was None: plans the exact checks turn down (simulator/sweep.py
        checks them before replaying them), never returned."""
        self.heap: list[tuple[float, int, Any]] = [(c[0], _FIRST, c) for c in candidates]
        self.heap += [(g.bound_s, _GROUP, g) for g in levels.groups]
        self.heap += [(d.floor_s, _DEGREE, d) for d in levels.degrees]
        heapq.heapify(self.heap)

    def pop(self) -> Estimate | None:
        """The candidate with the smallest tighter bound (its bound in place of the first), or None.

        A batch of first bounds goes to `refine_many` and stays pending while the entries next in line
        are groups (opened meanwhile: each would be opened before any candidate is returned unless the
        search stops first), up to `PENDING` batches while they are first bounds; every pending batch is
        in the heap before a tighter bound or a tp degree comes out, so the candidate returned is the
        smallest, as without them."""
        while self.heap or self.pending:
            top = self.heap[0][1] if self.heap else None
            if self.pending and (
                top in (None, _TIGHT, _DEGREE) or (top in (_WALKED, _FIRST) and len(self.pending) >= PENDING)
            ):
                self._settle()
                continue
            _, kind, item = heapq.heappop(self.heap)
            if kind == _TIGHT:
                return item
            if kind == _GROUP:
                self._open(item)
                continue
            if kind == _FAMILY:
                self._open_family(item)
                continue
            if kind == _DEGREE:
                self._group(item)
                continue
            if kind == _FIRST and self._walked(item):
                continue
            batch = [item, *self._firsts()]
            self.pending.append((batch, self.refine_many(batch)))
        return None

    def _walked(self, candidate: Estimate) -> bool:
        """Whether `candidate` went back into the heap under its walked bound (`Levels.walk`)."""
        found = self.levels.walk(candidate) if self.levels.walk is not None else None
        if found is None:
            return False
        walked = max(candidate[0], found)
        heapq.heappush(self.heap, (walked, _WALKED, (walked, *candidate[1:])))
        return True

    def _settle(self) -> None:
        """The oldest pending batch's tighter bounds into the heap (waiting for them if need be)."""
        batch, refined = self.pending.pop(0)
        for candidate, bound_s in zip(batch, refined, strict=True):
            if bound_s is None:  # the exact checks turned it down: no bound, never returned
                self.refused += 1
                continue
            tighter = max(candidate[0], bound_s)
            heapq.heappush(self.heap, (tighter, _TIGHT, (tighter, *candidate[1:])))

    def _firsts(self) -> list[Estimate]:
        """The first bounds next in line after one just taken, to refine with it (up to `batch` in all):
        taken while the smallest entry is a first bound or a group (opened on the way), so that each
        would be refined next anyway unless the search stops first."""
        out: list[Estimate] = []
        while self.heap and len(out) + 1 < self.batch and self.heap[0][1] != _TIGHT:
            _, kind, item = heapq.heappop(self.heap)
            if kind == _GROUP:
                self._open(item)
            elif kind == _FAMILY:
                self._open_family(item)
            elif kind == _DEGREE:
                self._group(item)
            elif kind == _WALKED or not self._walked(item):
                out.append(item)
        return out

    def _group(self, degree: Degree) -> None:
        """`degree` into its groups, with every other degree whose floor is at most each entry that is not
        a degree (each would be grouped before any of them anyway): one round over a worker pool. With no
        such entry yet (the first degree) alone."""
        others = [key for key, kind, _ in self.heap if kind != _DEGREE]
        batch = [degree]
        if others:
            below = min(others)
            batch += [item for key, kind, item in self.heap if kind == _DEGREE and key <= below]
            self.heap = [entry for entry in self.heap if entry[1] != _DEGREE or entry[2] not in batch]
            heapq.heapify(self.heap)
        assert self.levels.group is not None
        for family in self.levels.group(batch):
            heapq.heappush(self.heap, (family.floor_s, _FAMILY, family))

    def _open_family(self, family: Family) -> None:
        """A family into its groups, each bounded (each bound at least the family's floor)."""
        assert self.levels.open is not None
        for group in self.levels.open(family):
            heapq.heappush(self.heap, (group.bound_s, _GROUP, group))

    def _open(self, group: Group) -> None:
        """A mixed group into its classes (each bound at least the group's), any other into its plans."""
        if group.mixed and self.levels.classes is not None:
            for part in self.levels.classes(group):
                heapq.heappush(self.heap, (part.bound_s, _GROUP, part))
            return
        assert self.levels.expand is not None
        for candidate in self.levels.expand(group):
            heapq.heappush(self.heap, (candidate[0], _FIRST, candidate))

    def below(self, threshold_s: float) -> int:
        """About how many candidates left could still beat `threshold_s` (for progress)."""
        return sum(_plans(kind, item) for key, kind, item in self.heap if key <= threshold_s)


PENDING = 2
"""Batches of first bounds out for refinement at once (`Frontier.pop`): one being worked out while the
next is handed over keeps a pool's workers busy between this process's turns."""

REFINE_ROUND = 32
"""First bounds refined together over a worker pool (`refine_many`): enough to keep its workers busy;
a few may be refined that the search would have stopped before (never a different top k)."""

_TIGHT, _WALKED, _FIRST, _GROUP, _FAMILY, _DEGREE = 0, 1, 2, 3, 4, 5
"""Kinds of frontier entries; on equal keys the tighter bound comes out first, as before a refinement."""


def _plans(kind: int, item: Any) -> int:
    """How many plans a frontier entry holds."""
    if kind == _GROUP:
        return len(item.members) * len(item.variants)
    if kind == _FAMILY:
        return sum(len(group.members) * len(group.variants) for group in item.groups)
    return item.plans if kind == _DEGREE else 1


ROUND = 16
"""Plans examined per round of the best-first search: simulated, or refused by the exact checks while the
round was gathered (at refinement: `Frontier.refused`); enough to keep a pool's workers busy. Counting the
refused keeps a round as short as when the checks came after the refinement: where most plans that fit
the first rank's memory do not fit the others' (DeepSeek-V3), sixteen that fit would take the search
twice as deep before the first k-th best, its stopping threshold. The top k does not depend on it (only
how many plans beyond the stopping point get simulated too)."""


def best_first(
    candidates: list[Estimate],
    run: Callable[[Estimate], Ranked | None],
    k: int,
    map_fn: MapFn = map,
    progress: Callable[[int, int], None] | None = None,
    cost: Callable[[Estimate], int] | None = None,
    refine: Callable[[Estimate], float | None] | None = None,
    refine_many: Callable[[list[Estimate]], Iterable[float | None]] | None = None,
    levels: Levels | None = None,
) -> tuple[list[Ranked], int, int]:
    """The k fastest of `candidates` by `run`'s step time, sorted (ties by plan), how many `run` simulated,
    and how many were refused: by `run` (None: a plan the exact checks turn down before simulating it) or
    by a refinement (None in place of a tighter bound: the same checks, made before it).

    `candidates` are sorted by a lower bound of that time; `refine` gives a tighter one (never below
    it), worked out lazily (`Frontier`). Rounds of the next `ROUND` candidates by tighter bound run over
    `map_fn`; the search stops at the first whose bound, less the bound's rounding slack, exceeds the
    k-th best: it and every one after it are slower, so the result is what running every candidate
    would give. `cost` orders each round, the costliest first, so that a pool ends on short runs.
    `refine_many` refines several at once (`REFINE_ROUND`, over a pool) in place of `refine`. `levels`:
    groups and tp degrees that join the candidates, each opened only once its key is the smallest left
    (`Levels`)."""
    best: list[Ranked] = []
    frontier = Frontier(candidates, refine, refine_many, levels)
    checked = refused = 0
    stopped = False
    while not stopped:
        threshold = (best[k - 1].step_time_s or math.inf) if len(best) >= k else math.inf
        batch: list[Estimate] = []
        refused_before = frontier.refused
        while not batch or len(batch) + frontier.refused - refused_before < ROUND:
            candidate = frontier.pop()
            stopped = candidate is None or candidate[0] * (1 - TOLERANCE) > threshold
            if stopped or candidate is None:
                break
            batch.append(candidate)
        if cost is not None:
            batch.sort(key=cost, reverse=True)
        for done in map_fn(run, batch) if batch else ():
            checked += 1
            if done is None:
                refused += 1
            else:
                best.append(done)
        best.sort(key=lambda r: (r.step_time_s or math.inf, r.plan))
        del best[k:]
        if progress is not None:
            progress(checked, checked + frontier.below(threshold))
    return best, checked - refused, refused + frontier.refused
