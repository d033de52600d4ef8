"""parallelism.moe_overlap_ep_comm hides a pass's all-to-alls only behind a pass of the other kind: the
forwards and backwards that run alone (Megatron-Core's warm-up and cool-down, the first forward and last
backward without a pipeline; DualPipe outside its F&B chunks) pay them in full (costs/moe_overlap.py
unpaired_passes, engine/plan.py `alone`)."""

from __future__ import annotations

import pytest

from plancast.simulator.costs.moe_overlap import hidden_seconds, unpaired_passes
from plancast.simulator.engine.plan import StepPlan
from plancast.simulator.predict import simulate
from plancast.simulator.schedules import build_schedule
from tests.simulator.test_moe_keys import _scenario


def _counts(name: str, pp: int, m: int, v: int) -> list[tuple[int, int, int]]:
    """Per pp rank: (unpaired forwards, unpaired backwards, forwards)."""
    schedule = build_schedule(name, pp, m, v)
    alone = unpaired_passes(schedule)
    return [
        (
            sum(a.kind == "F" and ("F", a.stage, a.microbatch) in alone for a in actions),
            sum(a.kind == "B" and ("B", a.stage, a.microbatch) in alone for a in actions),
            sum(a.kind == "F" for a in actions),
        )
        for actions in schedule
    ]


@pytest.mark.parametrize(("pp", "m", "v"), [(8, 128, 4), (4, 16, 2), (2, 8, 3)])
def test_interleaved_unpaired_passes_are_megatrons_warm_up_and_cool_down(pp: int, m: int, v: int) -> None:
    """Megatron-Core's interleaved schedule (pipeline_parallel/schedules.py) runs (pp - r - 1) * 2 +
    (v - 1) * pp warm-up forwards on rank r before its steady state, and as many cool-down backwards."""
    for rank, (forwards, backwards, total) in enumerate(_counts("Interleaved1F1B", pp, m, v)):
        warm_up = (pp - rank - 1) * 2 + (v - 1) * pp
        assert forwards == backwards == warm_up
        assert total == m * v


def test_without_a_pipeline_the_first_forward_and_the_last_backward_run_alone() -> None:
    """combined_1f1b_schedule_for_no_pipelining: F0 alone, then (F i+1, B i) pairs, then B m-1 alone."""
    assert _counts("1F1B", 1, 16, 1) == [(1, 1, 16)]


def test_dualpipev_pairs_only_its_marked_f_and_b_chunks() -> None:
    schedule = build_schedule("DualPipeV", 4, 16, 2)
    alone = unpaired_passes(schedule)
    for actions in schedule:
        paired = {(a.stage, a.microbatch) for a in actions if a.kind == "F" and a.paired}
        unpaired = {(a.stage, a.microbatch) for a in actions if ("F", a.stage, a.microbatch) in alone}
        assert paired and not paired & unpaired
        assert len(paired) + len(unpaired) == sum(a.kind == "F" for a in actions)


def test_the_passes_that_run_alone_pay_their_all_to_alls_in_full() -> None:
    """One stage, m micro-batches: the step's exposed ep time is m passes of the overlapped price plus the
    hidden part of the one forward and the one backward that run alone; more than m overlapped passes,
    less than none overlapped."""
    overlapped = _scenario(moe_overlap_ep_comm=True)
    plan = StepPlan.of(overlapped)
    (cost,) = plan.costs
    forward_hidden, backward_hidden = hidden_seconds(cost)
    assert forward_hidden > 0 and backward_hidden > 0
    m = overlapped.num_microbatches
    exposed = simulate(overlapped, events=False).summary["exposed_comm_s"]["ep"]
    steady = m * cost.stream_comm_s("ep")
    assert exposed == pytest.approx(steady + forward_hidden + backward_hidden, rel=1e-9)
    plain = simulate(_scenario(), events=False).summary["exposed_comm_s"]["ep"]
    assert steady < exposed < plain


def test_a_plan_without_overlapped_all_to_alls_has_no_pass_alone() -> None:
    plan = StepPlan.of(_scenario())
    assert plan.alone == frozenset() and plan.alone_durations == ()


def test_the_events_of_a_pass_alone_carry_its_whole_all_to_alls_on_the_ep_stream() -> None:
    """Each transfer is still one blocking event; a pass alone has no remainder on ep_overlap, and the
    blocking events sum to the summary's exposed ep time."""
    prediction = simulate(_scenario(moe_overlap_ep_comm=True))
    events = prediction.events
    rank = events[(events["rank"] == 0) & (events["step"] == events["step"].min())]
    first = rank[(rank["microbatch"] == 0) & (rank["kind"] == "all_to_all")]
    forward_mb0 = first[first["index"] < 2 * 4]  # 4 blocks x (dispatch, combine) in the forward
    assert set(forward_mb0["stream"]) == {"ep"}
    ep = rank[rank["stream"] == "ep"]["dur_us"].sum() / 1e6
    assert ep == pytest.approx(prediction.summary["exposed_comm_s"]["ep"], rel=1e-6)


@pytest.mark.parametrize(
    ("keys", "training", "warning"),
    [
        ({"pipeline_parallel_degree": 2}, {}, 'pipeline_parallel_schedule = "Interleaved1F1B"'),
        ({"moe_token_dispatcher": "allgather"}, {}, "the allgather dispatcher"),
        ({}, {"recompute": "full"}, "full recompute"),
    ],
)
def test_megatron_lm_overlap_that_megatron_core_refuses_is_warned(
    keys: dict[str, object], training: dict[str, object], warning: str
) -> None:
    """Megatron-Core's TransformerConfig asserts virtual stages under a pipeline, an alltoall or flex
    dispatcher and no full recompute for overlap_moe_expert_parallel_comm; the plain plan is not warned."""
    from plancast.simulator.loader import parse_scenario
    from tests.simulator.test_moe_keys import MOE

    def warnings(par: dict[str, object], train: dict[str, object]) -> list[str]:
        data = {
            **MOE,
            "parallelism": {**MOE["parallelism"], "moe_overlap_ep_comm": True, **par},
            "training": {**MOE["training"], **train},
        }
        if par.get("pipeline_parallel_degree") == 2:  # ep 32 needs dp >= 32: 4 nodes -> 8 nodes
            data["cluster"] = {**MOE["cluster"], "num_nodes": 8}
        return parse_scenario(data, "overlap").warnings

    assert not [w for w in warnings({}, {}) if "Megatron-Core refuses" in w]
    assert any(warning in w and "Megatron-Core refuses" in w for w in warnings(keys, training))
