"""ZB-H2, ZB-V and DualPipeV: exact orders, the V placement, agreement with torch 2.13, rules, ideal-case
bubble identities against the papers' formulas, and the activations each holds."""

from __future__ import annotations

import itertools
from types import SimpleNamespace
from typing import Any

import pytest
from torch.distributed.pipelining import schedules as torch_schedules

from plancast.simulator.schedule_replay import check_dependencies, finish_times, unit_time_makespan
from plancast.simulator.schedules import (
    SCHEDULES,
    Action,
    Schedule,
    ScheduleName,
    build_schedule,
    owned_stages,
    schedule_choices,
    schedule_problems,
    schedule_warnings,
    stage_holders,
    stage_rank,
)


def _v(name: ScheduleName) -> int:
    return 2 if SCHEDULES[name].v_shape else 1


def _fmt(schedule: Schedule) -> list[str]:
    """``F0@3``: forward of micro-batch 0 on stage 3; a trailing ``&`` marks DualPipe's paired forward."""
    return [
        " ".join(f"{a.kind}{a.microbatch}@{a.stage}" + ("&" if a.paired else "") for a in rank)
        for rank in schedule
    ]


@pytest.mark.parametrize(
    ("name", "pp", "m", "expected"),
    [
        (
            "ZBH2",
            2,
            3,
            ["F0@0 F1@0 F2@0 B0@0 W0@0 B1@0 W1@0 B2@0 W2@0", "F0@1 B0@1 F1@1 B1@1 F2@1 B2@1 W0@1 W1@1 W2@1"],
        ),
        (
            "ZBV",
            2,
            4,
            [
                "F0@0 F1@0 F2@0 F0@3 B0@3 W0@3 F1@3 B1@3 W1@3 F3@0 B0@0 W0@0 F2@3 B2@3 W2@3 B1@0 W1@0 "
                "F3@3 B3@3 W3@3 B2@0 W2@0 B3@0 W3@0",
                "F0@1 F0@2 F1@1 F1@2 B0@2 W0@2 F2@1 B0@1 W0@1 F2@2 B1@2 W1@2 F3@1 B1@1 W1@1 F3@2 B2@2 W2@2 "
                "B2@1 B3@2 B3@1 W2@1 W3@2 W3@1",
            ],
        ),
        (
            "DualPipeV",
            2,
            4,
            [
                "F0@0 F1@0 F2@0 F0@3 B0@3 W0@3 F1@3 F3@0& B1@3 W1@3 F2@3& B0@0 W0@0 B2@3 W2@3 F3@3& B1@0 "
                "W1@0 B3@3 W3@3 B2@0 W2@0 B3@0 W3@0",
                "F0@1 F0@2 F1@1 F1@2 F2@1 B0@2 W0@2 F2@2& B0@1 W0@1 F3@1& B1@2 W1@2 F3@2& B1@1 W1@1 B2@2 "
                "W2@2 B2@1 W2@1 B3@2 B3@1 W3@2 W3@1",
            ],
        ),
    ],
)
def test_golden_orders(name: ScheduleName, pp: int, m: int, expected: list[str]) -> None:
    schedule = build_schedule(name, pp, m, _v(name))
    assert _fmt(schedule) == expected
    check_dependencies(schedule, pp, _v(name), v_shape=SCHEDULES[name].v_shape)


@pytest.mark.parametrize("pp", [1, 2, 3, 4, 8])
def test_v_placement_is_one_rule_both_ways(pp: int) -> None:
    """Rank r holds stages r and 2pp - 1 - r: the first and last stage on rank 0, the V's turn on pp - 1."""
    for name in ("ZBV", "DualPipeV"):
        held = [owned_stages(name, pp, r, 2) for r in range(pp)]
        assert sorted(s for stages in held for s in stages) == list(range(2 * pp))
        assert held[0] == (0, 2 * pp - 1) and held[-1] == (pp - 1, pp)
        assert all(stage_rank(name, pp, s) == r for r, stages in enumerate(held) for s in stages)
    assert owned_stages("Interleaved1F1B", pp, 0, 2) == (0, pp)  # loop placement unchanged


@pytest.mark.parametrize("name", list(SCHEDULES))
def test_stage_holders_is_owned_stages_inverted(name: ScheduleName) -> None:
    """The memoised per-stage holders (the plan search's `Plan.holders`) are, stage by stage, the rank
    whose `owned_stages` list it: loop placement r, r + pp, ...; the V's r and 2 pp - 1 - r."""
    chunks = (2,) if SCHEDULES[name].v_shape else (1, 2, 3)
    for pp, v in itertools.product((1, 2, 3, 4, 8), chunks):
        holders = stage_holders(name, pp, v)
        assert len(holders) == pp * v
        for r in range(pp):
            owned = owned_stages(name, pp, r, v)
            assert all(holders[stage] == r == stage_rank(name, pp, stage) for stage in owned)


# --- agreement with torch.distributed.pipelining 2.13 ---------------------------------------------
# Both classes compute every rank's order from sizes alone (`_calculate_single_rank_operations`), so a
# namespace with those sizes stands in for the schedule object. Torch's I is our split B; its full
# backward (B) is our B then W; its OVERLAP_F_B is its two sub-actions, the forward paired.


def _ours(a: Any, pp: int, paired: bool = False) -> list[Action]:
    kind, chunk = a.computation_type.value, 0 if a.stage_index < pp else 1
    if kind == "OVERLAP_F_B":
        forward, backward = a.sub_actions
        return _ours(forward, pp, paired=True) + _ours(backward, pp)
    kinds = {"F": "F", "I": "B", "W": "W", "B": "BW"}[kind]
    return [Action(k, a.microbatch_index, a.stage_index, chunk, paired and k == "F") for k in kinds]


def _torch_order(cls_name: str, pp: int, m: int) -> Schedule:
    sizes = SimpleNamespace(pp_group_size=pp, _n_microbatches=m, num_stages=2 * pp)
    rank_ops = getattr(torch_schedules, cls_name)._calculate_single_rank_operations
    return tuple(
        tuple(x for a in rank_ops(sizes, r) if a is not None for x in _ours(a, pp)) for r in range(pp)
    )


@pytest.mark.parametrize(
    ("pp", "m"), [(1, 1), (1, 4), (2, 1), (2, 3), (2, 4), (3, 5), (4, 4), (4, 7), (4, 16)]
)
def test_zb_v_is_torch_order(pp: int, m: int) -> None:
    assert build_schedule("ZBV", pp, m, 2) == _torch_order("ScheduleZBVZeroBubble", pp, m)


@pytest.mark.parametrize(("pp", "m"), [(1, 2), (2, 4), (2, 7), (3, 6), (4, 8), (4, 13), (8, 16)])
def test_dual_pipe_v_is_torch_order(pp: int, m: int) -> None:
    assert build_schedule("DualPipeV", pp, m, 2) == _torch_order("ScheduleDualPipeV", pp, m)


@pytest.mark.parametrize("name", ["ZBH2", "ZBV", "DualPipeV"])
def test_complete_and_deadlock_free(name: ScheduleName) -> None:
    v = _v(name)
    for pp, m in itertools.product(range(1, 7), range(1, 20)):
        if schedule_problems(name, pp, m, v):
            continue
        schedule = build_schedule(name, pp, m, v)
        check_dependencies(schedule, pp, v, v_shape=SCHEDULES[name].v_shape)  # one F, B, W each; no deadlock
        paired = [i for rank in schedule for i, a in enumerate(rank) if a.paired]
        assert all(rank[i + 1].kind == "B" for rank in schedule for i, a in enumerate(rank) if a.paired)
        assert bool(paired) == (name == "DualPipeV")


# --- rules ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "pp", "m", "v", "message"),
    [
        ("ZBV", 2, 8, 1, "virtual_stages_per_rank: ZBV runs exactly two chunks per rank in a V"),
        ("DualPipeV", 4, 8, 3, "virtual_stages_per_rank: DualPipeV runs exactly two chunks"),
        ("DualPipeV", 4, 7, 2, r"training.global_batch_size: DualPipeV needs at least 8 micro-batches"),
        ("ZBH2", 2, 8, 2, "virtual_stages_per_rank: ZBH2 runs one stage per rank"),
    ],
)
def test_rules(name: str, pp: int, m: int, v: int, message: str) -> None:
    assert message in "; ".join(map(str, schedule_problems(name, pp, m, v)))


def test_any_micro_batch_count_builds_zb_h2_and_zb_v() -> None:
    assert not any(
        schedule_problems(n, pp, m, _v(n)) for n in ("ZBH2", "ZBV") for pp in (1, 4) for m in (1, 3)
    )


@pytest.mark.parametrize("name", ["ZBH2", "ZBV", "DualPipeV"])
def test_pointless_without_pipeline_parallelism(name: ScheduleName) -> None:
    assert schedule_warnings(name, 1) == [f"{name} has no effect without pipeline parallelism"]
    assert schedule_warnings(name, 2) == []


# --- ideal-case bubbles (zero-latency links, uniform stages) ----------------------------------------


def _idle(name: ScheduleName, pp: int, m: int, f: float, b: float, w: float) -> list[float]:
    """Each rank's idle time between its own first start and last finish (f, b, w: one rank's whole
    share of the model; a chunk op of a V schedule costs half)."""
    v = _v(name)
    cost = {"F": f / v, "B": b / v, "W": w / v}
    schedule = build_schedule(name, pp, m, v)
    finish = finish_times(schedule, 2 * pp if v == 2 else pp, lambda a: cost[a.kind])
    out = []
    for actions in schedule:
        ends = [finish[(a.kind, a.stage, a.microbatch)] for a in actions]
        starts = [end - cost[a.kind] for end, a in zip(ends, actions, strict=True)]
        out.append(max(ends) - min(starts) - m * (f + b + w))
    return out


@pytest.mark.parametrize(("pp", "m"), [(2, 3), (2, 8), (4, 7), (4, 16), (6, 11), (8, 32)])
@pytest.mark.parametrize(
    ("f", "b", "w"), [(1, 1, 1), (1, 2, 1), (2, 2, 1), (2, 1, 1), (3, 2, 2), (1, 1, 0.5)]
)
def test_zb_h2_bubble(pp: int, m: int, f: float, b: float, w: float) -> None:
    """ZB-H2's bubble (p - 1)(F + B - 2W) on the first rank, where F + B > 2W or all three are equal, against
    ZB-H1's (p - 1)(F + B - W) (Qi et al. 2023, arXiv 2401.10241 section 2; DualPipe's README writes it with
    B the full backward). With F = B = W no rank idles between its first and last op (the parallelogram)."""
    zb_h2, zb_h1 = _idle("ZBH2", pp, m, f, b, w), _idle("ZeroBubble", pp, m, f, b, w)
    assert zb_h2[0] == pytest.approx((pp - 1) * (f + b - 2 * w), abs=1e-9)
    assert zb_h1[0] == pytest.approx((pp - 1) * (f + b - w), abs=1e-9)
    if f == b == w:
        assert zb_h2 == pytest.approx([0.0] * pp, abs=1e-9)


@pytest.mark.parametrize(("pp", "m"), [(2, 3), (2, 8), (4, 7), (4, 16), (8, 32)])
def test_zb_v_has_no_bubble_when_passes_are_equal(pp: int, m: int) -> None:
    """ZB-V: zero bubble for T_F = T_B = T_W (arXiv 2405.15362 section 3); the step ends after the warm-up
    of (p - 1) chunk forwards, half of ZB-H2's (p - 1) F, its chunks being half a stage."""
    assert _idle("ZBV", pp, m, 1, 1, 1) == pytest.approx([0.0] * pp, abs=1e-9)
    makespan = unit_time_makespan(build_schedule("ZBV", pp, m, 2), pp, 2, f=1, b=1, w=1, v_shape=True)
    assert makespan == 3 * m + (pp - 1) / 2
    assert unit_time_makespan(build_schedule("ZBH2", pp, m), pp, f=1, b=1, w=1) == 3 * m + (pp - 1)


@pytest.mark.parametrize(("pp", "m"), [(2, 4), (2, 8), (4, 8), (4, 16), (8, 16), (8, 32)])
@pytest.mark.parametrize(("f", "b", "w"), [(1, 1, 1), (1, 2, 1), (2, 2, 1), (2, 3, 1), (1, 1, 0.5)])
def test_dual_pipe_v_bubble(pp: int, m: int, f: float, b: float, w: float) -> None:
    """DualPipe's README gives (PP/2 - 1)(F&B + B - 3W) for DualPipe on PP ranks, and the same for DualPipeV
    on PP/2 ranks (F, B, W per chunk, B the full backward, F&B the overlapped pair). Priced as plancast prices
    the pair, sequentially (F&B = F + B), torch's order replayed idles at most that on every rank, and with
    equal chunk passes u exactly (p - 1) u: the DualPipe figure's half-width bubble."""
    chunk_f, chunk_b, chunk_w = f / 2, (b + w) / 2, w / 2
    readme = (pp - 1) * ((chunk_f + chunk_b) + chunk_b - 3 * chunk_w)
    idle = _idle("DualPipeV", pp, m, f, b, w)
    assert max(idle) <= readme + 1e-9
    if f == b == w:
        assert idle[0] == pytest.approx((pp - 1) * f / 2, abs=1e-9)


@pytest.mark.parametrize(("pp", "m"), [(2, 8), (4, 8), (4, 16), (8, 16)])
def test_v_schedules_beat_zb_h1_and_1f1b(pp: int, m: int) -> None:
    spans = {
        n: unit_time_makespan(
            build_schedule(n, pp, m, _v(n)), pp, _v(n), f=1, b=1, w=1, v_shape=SCHEDULES[n].v_shape
        )
        for n in ("ZeroBubble", "ZBV", "DualPipeV")
    }
    one_f_one_b = unit_time_makespan(build_schedule("1F1B", pp, m), pp, f=1, b=2)
    assert spans["ZBV"] < spans["ZeroBubble"] < one_f_one_b
    assert spans["DualPipeV"] < spans["ZeroBubble"]


# --- activations held: micro-batch chunks whose forward ran and whose backward has not ----------------


def _peak_held(actions: tuple[Action, ...], released_by: str) -> int:
    held = peak = 0
    for a in actions:
        held += (a.kind == "F") - (a.kind == released_by)
        peak = max(peak, held)
    return peak


@pytest.mark.parametrize(("pp", "m"), [(2, 8), (4, 8), (4, 16), (8, 32)])
def test_activation_memory(pp: int, m: int) -> None:
    """ZB-H2 holds 2p - 1 micro-batches on rank 0 against 1F1B's p (arXiv 2401.10241 section 2.2); ZB-V
    holds 2p half-stage chunks, 1F1B's peak (arXiv 2405.15362: ZB-V at 1F1B's activation memory);
    DualPipeV one chunk more, 2p + 1 (DualPipe's README: activation PP + 1 against 1F1B's PP)."""
    zb_h2, zb_v, dual = (build_schedule(n, pp, m, _v(n)) for n in ("ZBH2", "ZBV", "DualPipeV"))
    assert [_peak_held(r, "B") for r in zb_h2] == [2 * (pp - r) - 1 for r in range(pp)]
    assert [_peak_held(r, "B") for r in zb_v] == [2 * pp] * pp
    assert [_peak_held(r, "B") for r in dual] == [2 * pp + 1] * pp


def test_schedule_choices_cover_what_the_sweep_searches_and_the_new_names() -> None:
    """`schedule_choices` is the schedule axis read from the rules: it holds every (schedule, chunks)
    the sweep enumerates today (simulator/sweep_space.py keeps its own list) and the new schedules."""
    from plancast.simulator.sweep_space import schedules as sweep_schedules

    for pp, m, layers in itertools.product((1, 2, 4, 8), (1, 4, 8, 16, 24), (8, 16, 96)):
        choices = set(schedule_choices(pp, m, layers))
        assert set(sweep_schedules(pp, m, layers)) <= choices, (pp, m, layers)
        for name, v in choices:
            build_schedule(name, pp, m, v)  # every choice builds
        if pp > 1 and m >= 2 * pp and layers >= 2 * pp:
            assert {("ZBH2", 1), ("ZBV", 2), ("DualPipeV", 2)} <= choices
    assert set(schedule_choices(1, 8, 16)) == {("GPipe", 1), ("1F1B", 1)}
