"""Pipeline schedules: exact orders, ideal-case bubble identities, memory bounds, and agreement with torch."""

from __future__ import annotations

import itertools
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any, cast

import pytest
from hypothesis import given
from hypothesis import strategies as st
from torch.distributed.pipelining import schedules as torch_schedules

from plancast.simulator.schedule_replay import check_dependencies, unit_time_makespan
from plancast.simulator.schedules import (
    SCHEDULE_NAMES,
    SCHEDULES,
    Action,
    ActionKind,
    Schedule,
    ScheduleName,
    build_schedule,
    schedule_problems,
    splits_backward,
    validate_schedule_args,
)


def _fmt(schedule: Schedule) -> list[str]:
    """Compact golden form: one line per rank, ``F0``/``B0``/``W0`` plus ``@stage`` when interleaved."""
    interleaved = any(a.chunk for rank in schedule for a in rank)
    return [
        " ".join(f"{a.kind}{a.microbatch}" + (f"@{a.stage}" if interleaved else "") for a in rank)
        for rank in schedule
    ]


@pytest.mark.parametrize(
    ("name", "pp", "m", "v", "expected"),
    [
        ("GPipe", 2, 3, 1, ["F0 F1 F2 B0 B1 B2", "F0 F1 F2 B0 B1 B2"]),
        ("1F1B", 1, 3, 1, ["F0 B0 F1 B1 F2 B2"]),
        ("1F1B", 2, 3, 1, ["F0 F1 B0 F2 B1 B2", "F0 B0 F1 B1 F2 B2"]),
        ("1F1B", 3, 1, 1, ["F0 B0", "F0 B0", "F0 B0"]),  # fewer microbatches than stages
        ("ZeroBubble", 2, 3, 1, ["F0 F1 B0 W0 F2 B1 W1 B2 W2", "F0 B0 F1 B1 W0 F2 B2 W1 W2"]),
        (
            "Interleaved1F1B",
            2,
            2,
            2,
            ["F0@0 F1@0 F0@2 F1@2 B0@2 B1@2 B0@0 B1@0", "F0@1 F1@1 F0@3 B0@3 F1@3 B1@3 B0@1 B1@1"],
        ),
    ],
)
def test_golden_orders(name: ScheduleName, pp: int, m: int, v: int, expected: list[str]) -> None:
    schedule = build_schedule(name, pp, m, v)
    assert _fmt(schedule) == expected
    check_dependencies(schedule, pp, v)


@pytest.mark.parametrize(
    ("name", "pp", "m", "v", "message"),
    [
        ("PipeDream", 2, 4, 1, "pipeline_parallel_schedule: must be one of"),
        ("1F1B", 0, 4, 1, "pipeline_parallel_degree: must be >= 1, got 0"),
        ("GPipe", 2, 0, 1, "gives 0 microbatches"),
        ("Interleaved1F1B", 2, 4, 1, "virtual_stages_per_rank: Interleaved1F1B needs at least 2 virtual"),
        (
            "Interleaved1F1B",
            4,
            6,
            2,
            r"micro-batch count \(6\) divisible by pipeline_parallel_degree \(4\)",
        ),
        ("1F1B", 2, 4, 2, "virtual_stages_per_rank: 1F1B runs one stage per rank"),
        ("GPipe", 2, 4, 3, "virtual_stages_per_rank: GPipe runs one stage per rank"),
        ("ZeroBubble", 2, 4, 2, "virtual_stages_per_rank: ZeroBubble runs one stage per rank"),
    ],
)
def test_invalid_arguments(name: str, pp: int, m: int, v: int, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        validate_schedule_args(name, pp, m, v)
    with pytest.raises(ValueError, match=message):
        build_schedule(name, pp, m, v)  # type: ignore[arg-type]


def test_only_the_zero_bubble_family_splits_the_backward() -> None:
    assert [splits_backward(n) for n in SCHEDULE_NAMES] == [False, False, False, True, True, True, True]
    assert not any(a.kind == "W" for rank in build_schedule("1F1B", 4, 8) for a in rank)


valid_args = st.one_of(
    st.tuples(
        st.sampled_from(["GPipe", "1F1B", "ZeroBubble"]), st.integers(1, 6), st.integers(1, 12), st.just(1)
    ),
    st.tuples(st.just("Interleaved1F1B"), st.integers(1, 5), st.integers(1, 4), st.integers(2, 4)).map(
        lambda t: (t[0], t[1], t[1] * t[2], t[3])
    ),
)


@given(args=valid_args)
def test_every_schedule_is_complete_and_deadlock_free(args: tuple[ScheduleName, int, int, int]) -> None:
    name, pp, m, v = args
    schedule = build_schedule(name, pp, m, v)
    check_dependencies(schedule, pp, v)
    kinds = "FBW" if splits_backward(name) else "FB"
    for rank, actions in enumerate(schedule):
        expected = {(k, c * pp + rank, j) for k in kinds for c in range(v) for j in range(m)}
        assert sorted((a.kind, a.stage, a.microbatch) for a in actions) == sorted(expected)


# --- ideal-case identities (uniform stages, zero-latency links) -----------------------------------


@pytest.mark.parametrize("name", ["GPipe", "1F1B"])
@pytest.mark.parametrize(("pp", "m"), [(1, 1), (1, 5), (2, 4), (4, 2), (4, 4), (4, 8), (8, 32)])
@pytest.mark.parametrize(("f", "b"), [(1.0, 1.0), (1.0, 2.0)])
def test_flush_schedules_have_the_classic_bubble(
    name: ScheduleName, pp: int, m: int, f: float, b: float
) -> None:
    """Makespan (m + p - 1)(f + b), so bubble (p - 1)/(m + p - 1) (GPipe, arXiv 1811.06965 section 2.3)."""
    makespan = unit_time_makespan(build_schedule(name, pp, m), pp, f=f, b=b)
    assert makespan == (m + pp - 1) * (f + b)
    assert 1 - m * (f + b) / makespan == pytest.approx((pp - 1) / (m + pp - 1), rel=1e-12)


@pytest.mark.parametrize(
    ("pp", "m", "v"), [(2, 4, 2), (4, 4, 2), (4, 8, 2), (4, 8, 3), (2, 6, 4), (8, 16, 2)]
)
def test_interleaving_divides_the_bubble_by_v(pp: int, m: int, v: int) -> None:
    """Bubble (p - 1)(f + b)/v: arXiv 2104.04473 section 2.2.2, exact under uniform chunks.

    With f = b = v every chunk op lasts 1, so the rank computes 2vm and idles 2(p - 1):
    bubble fraction (p - 1)/(vm + p - 1).
    """
    makespan = unit_time_makespan(build_schedule("Interleaved1F1B", pp, m, v), pp, v, f=v, b=v)
    assert makespan == 2 * v * m + 2 * (pp - 1)
    flush = unit_time_makespan(build_schedule("1F1B", pp, m), pp, f=v, b=v)
    assert flush - makespan == 2 * (pp - 1) * (v - 1)


@pytest.mark.parametrize(("pp", "m"), [(1, 3), (2, 2), (2, 5), (4, 4), (4, 8), (4, 13), (8, 16)])
def test_zero_bubble_h1_bubble(pp: int, m: int) -> None:
    """ZB-H1 bubble (p - 1)(f + b - w) vs 1F1B's (p - 1)(f + b + w) (arXiv 2401.10241 section 2.1), m >= p."""
    zb = unit_time_makespan(build_schedule("ZeroBubble", pp, m), pp, f=1, b=1, w=1)
    one_f_one_b = unit_time_makespan(build_schedule("1F1B", pp, m), pp, f=1, b=2)
    assert zb == 3 * m + (pp - 1) * (1 + 1 - 1)
    assert one_f_one_b == 3 * m + (pp - 1) * (1 + 1 + 1)


@pytest.mark.parametrize(("pp", "m"), [(2, 1), (4, 1), (4, 3), (6, 5)])
def test_zero_bubble_beats_1f1b_with_few_microbatches(pp: int, m: int) -> None:
    zb = unit_time_makespan(build_schedule("ZeroBubble", pp, m), pp, f=1, b=1, w=1)
    assert zb < unit_time_makespan(build_schedule("1F1B", pp, m), pp, f=1, b=2)


# --- activation memory: microbatches held per rank ------------------------------------------------


def _peak_held(actions: tuple[Action, ...], released_by: str) -> int:
    """Most microbatches whose F has run and whose ``released_by`` action has not."""
    held = peak = 0
    for a in actions:
        held += (a.kind == "F") - (a.kind == released_by)
        peak = max(peak, held)
    return peak


@pytest.mark.parametrize(("pp", "m"), [(2, 1), (4, 2), (4, 4), (4, 8), (8, 24)])
def test_zero_bubble_keeps_1f1b_peak_memory(pp: int, m: int) -> None:
    """1F1B rank r holds min(p - r, m) microbatches; ZB-H1 holds as many until B, and 1F1B's peak until W."""
    one_f_one_b = build_schedule("1F1B", pp, m)
    zb = build_schedule("ZeroBubble", pp, m)
    for rank in range(pp):
        assert _peak_held(one_f_one_b[rank], "B") == min(pp - rank, m)
        assert _peak_held(zb[rank], "B") == min(pp - rank, m)
        assert _peak_held(zb[rank], "W") <= min(pp, m)
    assert max(_peak_held(r, "W") for r in zb) == max(_peak_held(r, "B") for r in one_f_one_b)


# --- check_dependencies rejects broken schedules ---------------------------------------------------


def _edit(schedule: Schedule, rank: int, edit: Callable[[list[Action]], list[Action]]) -> Schedule:
    return tuple(tuple(edit(list(acts))) if r == rank else acts for r, acts in enumerate(schedule))


def _f(mb: int, stage: int) -> Action:
    return Action("F", mb, stage, 0)


def _b(mb: int, stage: int) -> Action:
    return Action("B", mb, stage, 0)


@pytest.mark.parametrize(
    ("schedule", "pp", "message"),
    [
        (
            ((_f(0, 0), _b(0, 0), _f(1, 0), _b(1, 0)), (_f(0, 1), _f(1, 1), _b(0, 1), _b(1, 1))),
            2,
            "deadlocks",
        ),
        (((_f(0, 0), _b(0, 0)),), 2, "schedule has 1 ranks, expected pp=2"),
        (((_f(0, 0), _b(0, 0)), (_f(0, 0), _b(0, 1))), 2, "rank 1 cannot run"),
        (((_f(0, 0), _b(0, 0), _f(1, 0)),), 1, "stage 0 microbatch 1 has no B action"),
        (((_f(0, 0), _b(0, 0), _b(0, 0)),), 1, "appears twice"),
        (((_b(0, 0), _f(0, 0)),), 1, "must run in F < B order"),
        (((_f(0, 0), Action("W", 0, 0, 0), _b(0, 0)),), 1, "must run in F < B < W order"),
    ],
)
def test_check_dependencies_rejects(schedule: Schedule, pp: int, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        check_dependencies(schedule, pp)


def test_check_dependencies_rejects_an_edited_real_schedule() -> None:
    """Swapping rank 1's first B ahead of the F it waits for breaks 1F1B."""
    schedule = build_schedule("1F1B", 3, 6)

    def move_b_first(acts: list[Action]) -> list[Action]:
        first_b = next(i for i, a in enumerate(acts) if a.kind == "B")
        return [acts[first_b], *acts[:first_b], *acts[first_b + 1 :]]

    with pytest.raises(ValueError, match="must run in F < B order"):
        check_dependencies(_edit(schedule, 1, move_b_first), 3)


# --- agreement with torch.distributed.pipelining ----------------------------------------------------
#
# What is compared, per rank, is the sequence of compute actions (kind, microbatch, stage) torch
# would run, with its idle slots (None) and gradient-reduction markers (REDUCE_GRAD) dropped:
# - GPipe and 1F1B are single-stage schedules whose order lives in ``_step_microbatches``. We run it
#   for every rank with a recording stand-in for the stage (no process group, no tensors) and
#   compare the forward/backward calls it makes. (torch also builds an informational
#   ``pipeline_order``; for 1F1B in torch 2.13 its last rank is off by one microbatch, so the
#   executed order is the reference.) GPipe's ``pipeline_order`` is checked as well.
# - Interleaved1F1B is a ``_PipelineScheduleRuntime`` that executes ``pipeline_order`` itself;
#   its constructor only reads stage sizes, so stand-in stages give every rank's order.
# - ZeroBubble (v = 1) has no torch class; torch's interleaved zero-bubble rank order, evaluated
#   at one stage per rank before bubble padding, is the same deferral rule, so it is compared too.


class _RecordingStage:
    """Stand-in for torch's ``_PipelineStageBase``: records compute calls and communicates nothing."""

    def __init__(self, stage_index: int, num_stages: int) -> None:
        self.stage_index, self.num_stages = stage_index, num_stages
        self.is_first, self.is_last = stage_index == 0, stage_index == num_stages - 1
        self.calls: list[Action] = []

    def _no_p2p(self, microbatch: int) -> list[object]:
        return []

    get_fwd_recv_ops = get_fwd_send_ops = get_bwd_recv_ops = get_bwd_send_ops = _no_p2p

    def forward_one_chunk(self, microbatch: int, *args: object, **kwargs: object) -> None:
        self.calls.append(Action("F", microbatch, self.stage_index, 0))

    def backward_one_chunk(self, microbatch: int, **kwargs: object) -> None:
        self.calls.append(Action("B", microbatch, self.stage_index, 0))

    def clear_runtime_states(self) -> None:
        pass

    def perform_reduce_grad(self, grad_scale_factor: int) -> None:
        pass


def _torch_executed(cls: type, pp: int, m: int) -> Schedule:
    orders = []
    for rank in range(pp):
        stage = _RecordingStage(rank, pp)
        schedule = cls(stage, m)
        # An initialised forward (and, with no loss_fn, no backward to set up) makes torch skip
        # shape inference and p2p warm-up, the only parts that need real tensors and a process group.
        schedule._stage_forward_initialized = True
        schedule._step_microbatches()
        orders.append(tuple(stage.calls))
    return tuple(orders)


def _from_torch(order: Mapping[int, Sequence[Any]], pp: int) -> Schedule:
    """Torch ``_Action``s as ours; torch's I (input-gradient backward) is our split B."""
    kinds: dict[str, ActionKind] = {"F": "F", "B": "B", "I": "B", "W": "W"}
    return tuple(
        tuple(
            Action(kinds[a.computation_type.value], a.microbatch_index, a.stage_index, a.stage_index // pp)
            for a in order[rank]
            if a is not None and a.computation_type.value in kinds
        )
        for rank in range(pp)
    )


class _StageSizes:
    """The stage attributes ``PipelineScheduleMulti.__init__`` reads."""

    def __init__(self, num_stages: int, group_size: int, group_rank: int) -> None:
        self.num_stages, self.group_size, self.group_rank = num_stages, group_size, group_rank


def _stand_in_stages(pp: int, v: int) -> Any:
    return [_StageSizes(num_stages=pp * v, group_size=pp, group_rank=0) for _ in range(v)]


@pytest.mark.parametrize(("name", "cls_name"), [("GPipe", "ScheduleGPipe"), ("1F1B", "Schedule1F1B")])
@pytest.mark.parametrize(("pp", "m"), [(1, 3), (2, 4), (4, 4), (4, 8), (4, 16), (3, 7)])
def test_single_stage_schedules_match_torch_execution(
    name: ScheduleName, cls_name: str, pp: int, m: int
) -> None:
    ours = build_schedule(name, pp, m)
    assert ours == _torch_executed(getattr(torch_schedules, cls_name), pp, m)


@pytest.mark.parametrize(("pp", "m"), [(2, 4), (4, 4), (4, 8), (4, 16)])
def test_gpipe_matches_torch_pipeline_order(pp: int, m: int) -> None:
    torch_order = torch_schedules.ScheduleGPipe(cast(Any, _RecordingStage(0, pp)), m).pipeline_order
    assert torch_order is not None
    assert build_schedule("GPipe", pp, m) == _from_torch(torch_order, pp)


@pytest.mark.parametrize(("pp", "m", "v"), [(2, 4, 2), (4, 8, 2), (4, 8, 3), (4, 4, 2), (2, 8, 4), (3, 6, 2)])
def test_interleaved_matches_torch(pp: int, m: int, v: int) -> None:
    torch_order = torch_schedules.ScheduleInterleaved1F1B(_stand_in_stages(pp, v), m).pipeline_order
    assert build_schedule("Interleaved1F1B", pp, m, v) == _from_torch(torch_order, pp)


@pytest.mark.parametrize(("pp", "m"), [(2, 4), (4, 4), (4, 8), (4, 16)])
def test_zero_bubble_matches_torch_zero_bubble_rule_at_one_stage_per_rank(pp: int, m: int) -> None:
    sizes = _TorchZeroBubbleSizes(pp, m)
    order = {
        r: torch_schedules.ScheduleInterleavedZeroBubble._calculate_single_rank_operations(
            cast(Any, sizes), r
        )
        for r in range(pp)
    }
    assert build_schedule("ZeroBubble", pp, m) == _from_torch(order, pp)


class _TorchZeroBubbleSizes:
    """The attributes ``ScheduleInterleavedZeroBubble._calculate_single_rank_operations`` reads."""

    def __init__(self, pp: int, m: int) -> None:
        self.n_local_stages, self.pp_group_size, self._n_microbatches = 1, pp, m
        self.microbatches_per_round = m // max(1, m // pp)


def test_every_schedule_name_has_its_rules() -> None:
    assert tuple(SCHEDULES) == SCHEDULE_NAMES


@pytest.mark.parametrize("name", SCHEDULE_NAMES)
def test_the_rules_are_exactly_what_the_builder_accepts(name: ScheduleName) -> None:
    """One rule, two users: ``schedule_problems`` is empty exactly when ``build_schedule`` builds."""
    for pp, m, v in itertools.product(range(1, 5), range(1, 9), range(1, 4)):
        problems = schedule_problems(name, pp, m, v)
        if problems:
            with pytest.raises(ValueError, match=re.escape(str(problems[0]))):
                build_schedule(name, pp, m, v)
        else:
            check_dependencies(build_schedule(name, pp, m, v), pp, v, v_shape=SCHEDULES[name].v_shape)
