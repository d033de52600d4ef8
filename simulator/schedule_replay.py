"""Replaying a schedule with ideal links: the checks every schedule passes and the ideal-case timings
its bubble identities are tested with (tests/simulator/test_schedules*.py).

A rank runs its actions in order, each as soon as its inputs are ready: F of stage s needs F of stage
s - 1; B of stage s needs B of stage s + 1 (the last stage's B needs its own F); W needs B. This is the
rule the simulator's engine and the runtime's executor follow too (simulator/schedules.py).
"""

from __future__ import annotations

from collections.abc import Callable

from plancast.simulator.schedule_action import Action, ActionKind, Schedule, loop_stages, v_stages

_Key = tuple[ActionKind, int, int]
"""(kind, stage, microbatch): identifies one action across the whole schedule."""


def check_dependencies(
    schedule: Schedule, pp: int, virtual_stages: int = 1, *, v_shape: bool = False
) -> None:
    """Raise ValueError unless ``schedule`` is complete, well placed and runs without deadlock.

    Checks: one tuple per rank; every action sits on the rank and chunk its stage implies; each
    (stage, microbatch) has exactly one F and one B (and one W if any W appears); on its rank F
    precedes B precedes W; and replaying the order with unit-time ops finishes (see
    ``unit_time_makespan`` for the dependency rules). `v_shape`: stages placed in a V (``v_stages``).
    """
    _check_structure(schedule, pp, virtual_stages, v_shape)
    finish_times(schedule, pp * virtual_stages, lambda _action: 1.0)


def unit_time_makespan(
    schedule: Schedule,
    pp: int,
    virtual_stages: int = 1,
    *,
    f: float = 1.0,
    b: float = 1.0,
    w: float = 0.0,
    v_shape: bool = False,
) -> float:
    """Time at which the last action ends, with ideal links and uniform stages.

    ``f``, ``b`` and ``w`` are the durations of a forward, backward and weight-gradient pass over
    all the layers one rank holds; a chunk op costs ``1 / virtual_stages`` of that. Ranks start at
    0 and run their actions in order, each as soon as its inputs are ready: F of stage s needs F of
    stage s - 1; B of stage s needs B of stage s + 1 (the last stage's B needs its own F); W needs B.
    Without W actions ``w`` is unused; with split backwards ``b + w`` is the full backward.
    Without W, GPipe and 1F1B give ``(m + pp - 1) * (f + b)``, i.e. bubble fraction
    ``(pp - 1) / (m + pp - 1)`` (Narayanan et al. 2021, arXiv 2104.04473 section 2.2.1).
    """
    _check_structure(schedule, pp, virtual_stages, v_shape)
    cost = {"F": f / virtual_stages, "B": b / virtual_stages, "W": w / virtual_stages}
    finish = finish_times(schedule, pp * virtual_stages, lambda action: cost[action.kind])
    return max(finish.values(), default=0.0)


def _check_structure(schedule: Schedule, pp: int, virtual_stages: int, v_shape: bool = False) -> None:
    if len(schedule) != pp:
        raise ValueError(f"schedule has {len(schedule)} ranks, expected pp={pp}")
    where: dict[_Key, tuple[int, int]] = {}
    for rank, actions in enumerate(schedule):
        owned = v_stages(pp, rank) if v_shape else loop_stages(pp, rank, virtual_stages)
        for index, a in enumerate(actions):
            if not 0 <= a.chunk < len(owned) or owned[a.chunk] != a.stage:
                raise ValueError(
                    f"rank {rank} cannot run {a}: it holds stages {owned} by chunk "
                    f"(pp={pp}, virtual_stages={virtual_stages}{', V placement' if v_shape else ''})"
                )
            key = (a.kind, a.stage, a.microbatch)
            if key in where:
                raise ValueError(f"{a} appears twice (rank {rank} and rank {where[key][0]})")
            where[key] = (rank, index)
    num_microbatches = 1 + max((a.microbatch for actions in schedule for a in actions), default=-1)
    kinds: tuple[ActionKind, ...] = ("F", "B", "W") if any(k[0] == "W" for k in where) else ("F", "B")
    for stage in range(pp * virtual_stages):
        for mb in range(num_microbatches):
            found = {kind: where.get((kind, stage, mb)) for kind in kinds}
            missing = [kind for kind, position in found.items() if position is None]
            if missing:
                raise ValueError(f"stage {stage} microbatch {mb} has no {'/'.join(missing)} action")
            indices = [position[1] for position in found.values() if position is not None]
            if indices != sorted(indices):
                raise ValueError(
                    f"stage {stage} microbatch {mb}: actions must run in {' < '.join(kinds)} order"
                )
    if len(where) != len(kinds) * pp * virtual_stages * num_microbatches:
        raise ValueError(f"schedule has actions outside {len(kinds)} kinds x stages x microbatches")


def _inputs(a: Action, num_stages: int) -> tuple[_Key, ...]:
    """Actions whose results ``a`` consumes (same-rank order is enforced by the replay itself)."""
    if a.kind == "F":
        return (("F", a.stage - 1, a.microbatch),) if a.stage > 0 else ()
    if a.kind == "B":
        if a.stage == num_stages - 1:
            return (("F", a.stage, a.microbatch),)
        return (("B", a.stage + 1, a.microbatch), ("F", a.stage, a.microbatch))
    return (("B", a.stage, a.microbatch),)


def finish_times(schedule: Schedule, num_stages: int, cost: Callable[[Action], float]) -> dict[_Key, float]:
    """Finish time of every (kind, stage, micro-batch) with ideal links, each rank running its actions
    in order as soon as their inputs are ready (``unit_time_makespan``'s rules, any `cost` per action);
    raise ValueError on deadlock."""
    finish: dict[_Key, float] = {}
    next_index = [0] * len(schedule)
    free_at = [0.0] * len(schedule)
    progressed = True
    while progressed:
        progressed = False
        for rank, actions in enumerate(schedule):
            while next_index[rank] < len(actions):
                a = actions[next_index[rank]]
                inputs = _inputs(a, num_stages)
                if any(key not in finish for key in inputs):
                    break
                start = max([free_at[rank], *(finish[key] for key in inputs)])
                free_at[rank] = finish[(a.kind, a.stage, a.microbatch)] = start + cost(a)
                next_index[rank] += 1
                progressed = True
    blocked = [
        f"rank {r} at {acts[i]}"
        for r, (acts, i) in enumerate(zip(schedule, next_index, strict=True))
        if i < len(acts)
    ]
    if blocked:
        raise ValueError(f"schedule deadlocks: {'; '.join(blocked)} wait on each other")
    return finish
