"""Pipeline-parallel schedules as pure data: the ordered compute actions each pp rank performs.

This is the single source of truth for schedule order: the simulator replays it on SimPy streams
and the runtime executes it, so predicted and measured events line up one to one.

Conventions (shared with ``torch.distributed.pipelining`` and Megatron-LM):

- ``Action.stage`` is the *global virtual stage* ``chunk * pp + pp_rank`` ("loop" placement,
  Narayanan et al. 2021, arXiv 2104.04473 section 2.2), so rank ``r`` owns stages ``r, r + pp, ...``;
  the V schedules (ZB-V, DualPipeV) place rank ``r``'s two chunks at ``r`` and ``2 pp - 1 - r``.
  ``owned_stages`` and ``stage_rank`` are the placement every other module reads.
- ``F`` is a forward, ``B`` a backward and ``W`` a weight-gradient pass. Schedules for which
  ``splits_backward`` is true emit ``B`` as the input-gradient pass only, followed later by ``W``.
- No idle slots are stored: a rank runs its actions in order, each as soon as its inputs arrive.
  simulator/schedule_replay.py replays that rule with ideal (zero-latency) links.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import lru_cache
from typing import Literal, NamedTuple, get_args

from plancast.simulator.schedule_action import Action, ActionKind, Schedule, loop_stages, v_holder, v_stages
from plancast.simulator.schedules_zb import dual_pipe_v, zb_h2, zb_v

ScheduleName = Literal["GPipe", "1F1B", "Interleaved1F1B", "ZeroBubble", "ZBH2", "ZBV", "DualPipeV"]
"""The scenario's ``parallelism.pipeline_parallel_schedule``; each has its rules in ``SCHEDULES``.
"ZeroBubble" is ZB-H1 (Qi et al. 2023); see docs/schedules.md for when to use which."""
SCHEDULE_NAMES: tuple[ScheduleName, ...] = get_args(ScheduleName)


@dataclass(frozen=True, slots=True)
class ScheduleRules:
    """Everything plancast knows about one schedule: how to build it and when it can be built."""

    build: Callable[[int, int, int, int], tuple[Action, ...]]
    """(pp rank, pp, microbatches, virtual stages) -> that rank's ordered actions."""
    interleaved: bool = False
    """Several model chunks per rank: needs virtual_stages_per_rank >= 2 and whole rounds of pp
    microbatches (Megatron-LM's interleaved schedule assumes them); the others need exactly 1."""
    splits_backward: bool = False
    """``B`` is the input-gradient pass only and separate ``W`` actions follow (zero bubble)."""
    v_shape: bool = False
    """Exactly two chunks per rank placed in a V (``v_stages``): rank r holds stages r and 2 pp - 1 - r."""
    min_microbatches_per_stage: int = 0
    """Fewest micro-batches per virtual stage the builder needs (0: any count >= 1)."""


class PlanProblem(NamedTuple):
    """A schedule rule the plan breaks: the scenario key to change, and how."""

    path: str
    message: str

    def __str__(self) -> str:
        return f"{self.path}: {self.message}"


def schedule_problems(
    name: str, pp: int, num_microbatches: int, virtual_stages: int = 1
) -> list[PlanProblem]:
    """Every rule of schedule ``name`` that these sizes break (none: ``build_schedule`` can build it).

    The one place the schedule rules live: scenario validation reports these, the builder refuses them.
    """
    if name not in SCHEDULES:
        return [
            PlanProblem(
                "parallelism.pipeline_parallel_schedule",
                f"must be one of {SCHEDULE_NAMES}, got {name!r}",
            )
        ]
    problems = []
    if pp < 1:
        problems.append(PlanProblem("parallelism.pipeline_parallel_degree", f"must be >= 1, got {pp}"))
    if num_microbatches < 1:
        problems.append(
            PlanProblem(
                "training.global_batch_size",
                f"gives {num_microbatches} microbatches (global_batch_size / (micro_batch_size * "
                "data_parallel_degree)); a pipeline needs at least 1",
            )
        )
    rules = SCHEDULES[name]
    if rules.interleaved:
        problems += _interleaved_problems(name, pp, num_microbatches, virtual_stages)
    elif rules.v_shape:
        problems += _v_shape_problems(
            name, pp, num_microbatches, virtual_stages, rules.min_microbatches_per_stage
        )
    elif virtual_stages != 1:
        problems.append(
            PlanProblem(
                "parallelism.virtual_stages_per_rank",
                f"{name} runs one stage per rank; set virtual_stages_per_rank = 1 or use "
                f"{' / '.join(n for n, rules in SCHEDULES.items() if rules.interleaved)}",
            )
        )
    return problems


def _interleaved_problems(name: str, pp: int, m: int, virtual_stages: int) -> list[PlanProblem]:
    problems = []
    if virtual_stages < 2:
        problems.append(
            PlanProblem(
                "parallelism.virtual_stages_per_rank",
                f"{name} needs at least 2 virtual stages per rank, got {virtual_stages}; set it to 2 or "
                "more, or use the 1F1B schedule",
            )
        )
    if pp >= 1 and m >= 1 and m % pp:  # Megatron-LM's interleaved schedule runs whole rounds of pp
        problems.append(
            PlanProblem(
                "training.global_batch_size",
                f"{name} needs the micro-batch count ({m}) divisible by "
                f"pipeline_parallel_degree ({pp}); change global_batch_size or micro_batch_size",
            )
        )
    return problems


def _v_shape_problems(name: str, pp: int, m: int, virtual_stages: int, per_stage: int) -> list[PlanProblem]:
    problems = []
    if virtual_stages != 2:
        problems.append(
            PlanProblem(
                "parallelism.virtual_stages_per_rank",
                f"{name} runs exactly two chunks per rank in a V; set virtual_stages_per_rank = 2",
            )
        )
    need = per_stage * 2 * pp  # 2 pp stages in the V
    if pp >= 1 and 1 <= m < need:
        problems.append(
            PlanProblem(
                "training.global_batch_size",
                f"{name} needs at least {need} micro-batches (2 x pipeline_parallel_degree, one per "
                f"stage of the V; torch's ScheduleDualPipeV asks the same), got {m}; raise "
                "global_batch_size or lower micro_batch_size",
            )
        )
    return problems


def owned_stages(name: ScheduleName, pp: int, pp_rank: int, virtual_stages: int) -> tuple[int, ...]:
    """The virtual stages pipeline rank `pp_rank` holds, by chunk, under schedule `name`: the one
    placement rule the simulator, memory model and runtime all read."""
    if SCHEDULES[name].v_shape:
        return v_stages(pp, pp_rank)
    return loop_stages(pp, pp_rank, virtual_stages)


def stage_rank(name: ScheduleName, pp: int, stage: int) -> int:
    """The pipeline rank holding virtual `stage` under schedule `name` (inverse of ``owned_stages``)."""
    return v_holder(pp, stage) if SCHEDULES[name].v_shape else stage % pp


@lru_cache(maxsize=1024)
def stage_holders(name: ScheduleName, pp: int, virtual_stages: int) -> tuple[int, ...]:
    """Per virtual stage, the pipeline rank holding it (``stage_rank`` of each). Pure in its three
    arguments (``stage_rank`` reads only them and ``SCHEDULES``, a constant), so memoised: the plan
    search asks for it once per bound, tens of thousands of times over a few hundred shapes."""
    return tuple(stage_rank(name, pp, v) for v in range(pp * virtual_stages))


def schedule_choices(pp: int, num_microbatches: int, layers: int) -> Iterator[tuple[ScheduleName, int]]:
    """Every (schedule, virtual stages per rank) that builds for these sizes, with a layer or more per
    stage and some effect at this pp: the schedule axis of a plan search, read from ``SCHEDULES`` so a
    new schedule joins the search by its entry there."""
    for name, rules in SCHEDULES.items():
        chunks = range(2, layers // max(pp, 1) + 1) if rules.interleaved else (2,) if rules.v_shape else (1,)
        for v in chunks:
            buildable = pp * v <= layers and not schedule_problems(name, pp, num_microbatches, v)
            if buildable and not schedule_warnings(name, pp):
                yield name, v


def schedule_warnings(name: ScheduleName, pp: int) -> list[str]:
    """Legal but pointless: an interleaved, V or split-backward schedule without pipeline parallelism."""
    rules = SCHEDULES[name]
    if pp == 1 and (rules.interleaved or rules.splits_backward or rules.v_shape):
        return [f"{name} has no effect without pipeline parallelism"]
    return []


def splits_backward(name: ScheduleName) -> bool:
    """True when ``B`` is the input-gradient pass only and ``W`` actions are separate (ZeroBubble)."""
    if name not in SCHEDULES:
        raise ValueError(str(schedule_problems(name, 1, 1)[0]))
    return SCHEDULES[name].splits_backward


def validate_schedule_args(name: str, pp: int, num_microbatches: int, virtual_stages: int = 1) -> None:
    """Raise ValueError, naming the scenario key, if ``name`` cannot be built with these sizes."""
    problems = schedule_problems(name, pp, num_microbatches, virtual_stages)
    if problems:
        raise ValueError("; ".join(map(str, problems)))


def build_schedule(name: ScheduleName, pp: int, num_microbatches: int, virtual_stages: int = 1) -> Schedule:
    """Ordered actions for each of the ``pp`` ranks under schedule ``name``."""
    validate_schedule_args(name, pp, num_microbatches, virtual_stages)
    build = SCHEDULES[name].build
    return tuple(build(rank, pp, num_microbatches, virtual_stages) for rank in range(pp))


def _gpipe(rank: int, m: int) -> tuple[Action, ...]:
    """All forwards, then all backwards in microbatch order (GPipe, arXiv 1811.06965; torch ScheduleGPipe)."""
    return tuple(Action("F", j, rank, 0) for j in range(m)) + tuple(Action("B", j, rank, 0) for j in range(m))


def _steady_state(num_ops: int, warmup: int) -> Iterator[tuple[ActionKind, int]]:
    """The 1F1B pattern over ``num_ops`` forwards/backwards: ``warmup`` forwards, then F/B pairs, then B.

    Yields (kind, k) where k is the k-th forward or k-th backward of the rank
    (Narayanan et al. 2021, arXiv 2104.04473 figure 4; Megatron-LM ``forward_backward_pipelining_*``).
    """
    for k in range(warmup):
        yield "F", k
    for k in range(num_ops - warmup):
        yield "F", warmup + k
        yield "B", k
    for k in range(num_ops - warmup, num_ops):
        yield "B", k


def _one_f_one_b(rank: int, pp: int, m: int) -> tuple[Action, ...]:
    """PipeDream-Flush 1F1B: ``pp - rank - 1`` warm-up forwards (arXiv 2104.04473 fig. 4; torch)."""
    warmup = min(pp - rank - 1, m)
    return tuple(Action(kind, k, rank, 0) for kind, k in _steady_state(m, warmup))


def _interleaved(rank: int, pp: int, m: int, v: int) -> tuple[Action, ...]:
    """Interleaved 1F1B, depth first in rounds of ``pp`` microbatches (arXiv 2104.04473 section 2.2).

    Same order as Megatron-LM's ``forward_backward_pipelining_with_interleaving`` and torch's
    ``ScheduleInterleaved1F1B`` for ``m % pp == 0``: the k-th forward of a rank runs chunk
    ``(k // pp) % v`` on microbatch ``(k // (pp * v)) * pp + k % pp``; backwards walk the chunks in
    reverse. Warm-up: ``(v - 1) * pp + 2 * (pp - rank - 1)`` forwards, capped at ``v * m``. (Megatron-LM
    runs all forwards first when ``m == pp``; torch does not, and we follow torch, which the runtime uses.)
    """
    warmup = min((v - 1) * pp + 2 * (pp - rank - 1), v * m)
    out = []
    for kind, k in _steady_state(v * m, warmup):
        chunk = (k // pp) % v
        if kind == "B":
            chunk = v - 1 - chunk
        out.append(Action(kind, (k // (pp * v)) * pp + k % pp, chunk * pp + rank, chunk))
    return tuple(out)


def _zero_bubble_h1(rank: int, pp: int, m: int) -> tuple[Action, ...]:
    """ZB-H1 (Qi et al. 2023, arXiv 2401.10241 section 2.1, figure 3): 1F1B with the backward split.

    Rank ``r`` runs 1F1B order with B as input-gradient only; the W of backward ``k`` follows
    backward ``k + r``, and the last ``r`` W's close the schedule, filling the cool-down bubble.
    Each rank keeps at most ``pp`` microbatches awaiting W, the peak of 1F1B's first stage, so
    peak activation memory equals 1F1B's (the same deferral as torch's ``_get_1f1b_rank_ops``
    with ``enable_zero_bubble``, which torch only offers for >= 2 stages per rank).
    """
    actions: list[Action] = []
    for kind, k in _steady_state(m, min(pp - rank - 1, m)):
        actions.append(Action(kind, k, rank, 0))
        if kind == "B" and k >= rank:
            actions.append(Action("W", k - rank, rank, 0))
    actions.extend(Action("W", j, rank, 0) for j in range(max(m - rank, 0), m))
    return tuple(actions)


SCHEDULES: dict[ScheduleName, ScheduleRules] = {
    "GPipe": ScheduleRules(lambda rank, _pp, m, _v: _gpipe(rank, m)),
    "1F1B": ScheduleRules(lambda rank, pp, m, _v: _one_f_one_b(rank, pp, m)),
    "Interleaved1F1B": ScheduleRules(_interleaved, interleaved=True),
    "ZeroBubble": ScheduleRules(lambda rank, pp, m, _v: _zero_bubble_h1(rank, pp, m), splits_backward=True),
    "ZBH2": ScheduleRules(lambda rank, pp, m, _v: zb_h2(rank, pp, m), splits_backward=True),
    "ZBV": ScheduleRules(lambda rank, pp, m, _v: zb_v(rank, pp, m), splits_backward=True, v_shape=True),
    "DualPipeV": ScheduleRules(
        lambda rank, pp, m, _v: dual_pipe_v(rank, pp, m),
        splits_backward=True,
        v_shape=True,
        min_microbatches_per_stage=1,
    ),
}
"""Every schedule's rules; adding a schedule is a name in ``ScheduleName``, a builder and an entry here."""


class Receive(NamedTuple):
    """One cross-rank receive of a rank's schedule: F (activation) or B (gradient), for `stage`'s
    `microbatch`, from rank `src`."""

    kind: str
    stage: int
    microbatch: int
    src: int


def cross_rank_receives(
    actions: tuple[Action, ...], num_stages: int, holder: Callable[[int], int], rank: int
) -> tuple[Receive, ...]:
    """The receives from other ranks of `rank`'s `actions`, in the order the schedule waits for them
    (the order each peer sends in): what the runtime posts ahead on gloo (runtime/parallel/pp.py) and
    the simulator replays (simulator/engine/pipeline.py). `holder(stage)`: the rank holding a stage."""
    out = []
    for a in actions:
        if a.kind == "F" and a.stage > 0 and holder(a.stage - 1) != rank:
            out.append(Receive("F", a.stage, a.microbatch, holder(a.stage - 1)))
        elif a.kind == "B" and a.stage < num_stages - 1 and holder(a.stage + 1) != rank:
            out.append(Receive("B", a.stage, a.microbatch, holder(a.stage + 1)))
    return tuple(out)
