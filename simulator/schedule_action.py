"""The unit of a pipeline schedule (one compute action) and where each virtual stage lives.

Kept apart from simulator/schedules.py so the schedule builders of schedules_zb.py can import it
without a cycle; schedules.py re-exports everything here, the one place callers import from.
"""

from __future__ import annotations

from typing import Literal, NamedTuple

ActionKind = Literal["F", "B", "W"]


class Action(NamedTuple):
    """One compute op of one microbatch on one (virtual) pipeline stage."""

    kind: ActionKind
    """F forward; B backward (input-gradient only when the schedule splits it); W weight-gradient."""
    microbatch: int
    """Microbatch index, 0..num_microbatches-1."""
    stage: int
    """Global virtual stage: ``chunk * pp + pp_rank`` (loop placement) or the V's (``v_stages``)."""
    chunk: int
    """Model chunk local to the rank, 0..virtual_stages-1."""
    paired: bool = False
    """A forward that DualPipe overlaps with the rank's next action, a backward of its other chunk
    (the "F&B" pair of the DeepSeek-V3 report, arXiv 2412.19437 section 3.2.1): its pipeline send does
    not hold up that backward."""


Schedule = tuple[tuple[Action, ...], ...]
"""One ordered tuple of actions per pp rank (index = pp rank)."""


def loop_stages(pp: int, pp_rank: int, virtual_stages: int) -> tuple[int, ...]:
    """Stages of `pp_rank`, by chunk, in loop placement: ``chunk * pp + pp_rank`` (Narayanan et al.
    2021, arXiv 2104.04473 section 2.2; torch's ``generate_stage_to_rank_mapping`` style "loop")."""
    return tuple(chunk * pp + pp_rank for chunk in range(virtual_stages))


def v_stages(pp: int, pp_rank: int) -> tuple[int, ...]:
    """Stages of `pp_rank`, by chunk, in V placement: ``pp_rank`` then ``2 pp - 1 - pp_rank``, so the
    first and last stage share rank 0 and the turn of the V stays on rank pp - 1 (ZB-V, Qi et al. 2024,
    arXiv 2405.15362 section 3; DualPipeV; torch's ``generate_stage_to_rank_mapping`` style "v")."""
    return (pp_rank, 2 * pp - 1 - pp_rank)


def v_holder(pp: int, stage: int) -> int:
    """The pp rank holding `stage` in V placement (the inverse of ``v_stages``)."""
    return stage if stage < pp else 2 * pp - 1 - stage
