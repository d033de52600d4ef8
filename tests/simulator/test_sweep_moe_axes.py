"""The sweep's MoE axes (issue 31 item 6): the dispatchers a cluster's hardware runs, the folded expert
grid, and the space they add (each new kind of plan appears, and only where it is valid)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from plancast.simulator.costs.stage import stage_costs
from plancast.simulator.engine import Topology
from plancast.simulator.loader import parse_scenario
from plancast.simulator.scenario import Scenario
from plancast.simulator.sweep import _base_for
from plancast.simulator.sweep_axes import Pins, Plan, dispatcher_choices, folded_choices
from plancast.simulator.sweep_estimate import Estimator
from plancast.simulator.sweep_segments import segment_times
from plancast.simulator.sweep_space import enumerate_plans, moe_choices, schedules
from plancast.simulator.validation import check_plan


def on(cluster: str, preset: str = "tiny-moe", gpus: int = 8, batch: int = 32) -> Scenario:
    data: dict[str, Any] = {
        "model": {"preset": preset},
        "training": {"seq_len": 64, "global_batch_size": batch, "dtype": "bf16"},
        "cluster": {"preset": cluster},
    }
    return _base_for(parse_scenario(data).scenario, gpus)


@pytest.mark.parametrize(
    ("cluster", "flex"),
    [
        ("hgx-h800", "deepep"),  # Hopper, NVLink, InfiniBand: DeepEP's README hardware
        ("dgx-a100-80gb", "deepep"),  # Ampere (SM80)
        ("eth-h100-80gb", "deepep"),  # RoCE is RDMA
        ("gb200-nvl72", "hybridep"),  # Megatron-Bridge: HybridEP on GB200 NVL72, DeepEP not
        ("pcie-a100-80gb", None),  # no NVLink
        ("mi300x", None),  # not an NVIDIA GPU
    ],
)
def test_the_dispatchers_searched_are_those_the_hardware_runs(cluster: str, flex: str | None) -> None:
    found = dispatcher_choices(on(cluster, gpus=8 if cluster != "gb200-nvl72" else 72, batch=144))
    assert found == ("alltoall", "allgather", *((flex,) if flex else ()))


def test_folded_grid_spans_tensor_parallel_ranks() -> None:
    """DeepSeek-V3's EP64 over TP2 x DP32 (ep does not divide dp) is searched, etp 1; the folded grid
    equal to the unfolded one (etp = tp, cp 1, ep | dp) is not repeated."""
    base = on("hgx-h800", "deepseek-v3", gpus=2048, batch=15360)
    grids = folded_choices(base, tp=2, cp=1, dp=32)
    assert (64, 1) in grids and all(etp == 1 for _, etp in grids)
    assert all(not (etp == 1 and ep == 1) for ep, etp in grids)
    assert folded_choices(base, tp=1, cp=1, dp=32) == []  # each is the unfolded grid's ep
    assert (64, 1) in folded_choices(base, tp=1, cp=2, dp=32)  # over cp x dp: not the unfolded grid


def test_moe_choices_only_where_tokens_leave_their_rank() -> None:
    base = on("hgx-h800")
    assert moe_choices(base, 1) == [("alltoall", False)]
    assert set(moe_choices(base, 2)) == {(d, o) for d in ("alltoall", "allgather", "deepep") for o in (0, 1)}
    pinned = Pins.parse(["dispatcher=hybridep", "overlap=true"])
    assert moe_choices(base, 4, pinned) == [("hybridep", True)]


def test_every_new_kind_appears_and_every_plan_is_valid() -> None:
    """tiny-moe on 8 A100s with 32 sequences: each new axis value is enumerated, and the plans the engine
    would refuse are few (a memory-free check: the plan's rules, check_plan)."""
    base = on("dgx-a100-80gb")
    plans = list(enumerate_plans(base, 8))
    assert {"ZBH2", "ZBV", "DualPipeV"} <= {p.schedule for p in plans}
    assert {"alltoall", "allgather", "deepep"} == {p.dispatcher for p in plans}
    assert any(p.overlap_ep for p in plans) and any(p.etp for p in plans)
    assert all(p.dispatcher == "alltoall" and not p.overlap_ep for p in plans if p.ep == 1)
    sample = plans[:: max(len(plans) // 300, 1)]
    assert all(not check_plan(p.apply(base))[0] for p in sample), [
        (p.label(), check_plan(p.apply(base))[0]) for p in sample if check_plan(p.apply(base))[0]
    ][:3]


def test_v_schedules_need_two_micro_batches_per_stage() -> None:
    """DualPipeV needs 2 pp micro-batches (schedules.py, as torch's ScheduleDualPipeV): the sweep offers
    it only then, with two chunks per rank, and the V schedules only where each of 2 pp stages gets a
    layer."""
    assert ("DualPipeV", 2) in set(schedules(4, 8, 16)) and ("ZBV", 2) in set(schedules(4, 8, 16))
    assert ("DualPipeV", 2) not in set(schedules(4, 7, 16))
    assert not {"ZBV", "DualPipeV"} & {name for name, _ in schedules(4, 8, 7)}
    assert ("ZBH2", 1) in set(schedules(4, 3, 7))


@pytest.mark.parametrize(
    ("dispatcher", "overlap"), [("deepep", True), ("allgather", False), ("alltoall", True)]
)
def test_a_dispatcher_variants_layer_is_what_stage_costs_gives(dispatcher: str, overlap: bool) -> None:
    """The estimator derives a dispatcher/overlap variant's segments from the default's by pricing the
    all-to-alls again: exactly the numbers stage_costs gives for that plan (the bound relies on them)."""
    base = on("dgx-a100-80gb", gpus=8, batch=32)
    est = Estimator(base, 8)
    for tp, ep, etp, rc in [(1, 4, 0, "none"), (2, 2, 0, "full"), (2, 4, 1, "selective")]:
        plan = Plan(tp, 1, 8 // tp, 2, "1F1B", 1, rc, False, 0, ep, 1, 0, 0, dispatcher, overlap, etp)
        est.layer(replace(plan, dispatcher="alltoall", overlap_ep=False))  # the default, priced first
        s = plan.apply(base)
        direct = stage_costs(s, Topology.of(s).levels("tp"))[0].segments
        expected = segment_times(direct, s.parallelism.tp_comm_overlap, rc == "full")
        assert est.layer(plan).segments == expected, (plan.label(), dispatcher, overlap)
