"""`sweep --runnable`: the exact best of the plans the scenario's framework runs as given, the plans it
refuses (a schedule it does not ship, Megatron-Core's EP-overlap rules) left out by the exact checks."""

from __future__ import annotations

import pytest

from plancast.simulator.costs.memory import peak_memory
from plancast.simulator.predict import simulate
from plancast.simulator.sweep import _base_for, _passes_exact_checks, sweep
from plancast.simulator.sweep_axes import Pins, Plan
from plancast.simulator.sweep_space import enumerate_plans, subtree_sizes
from plancast.simulator.validation import check_plan
from plancast.simulator.validation_moe import framework_refusals
from tests.simulator.test_sweep import small


def test_runnable_finds_the_exhaustive_best_the_framework_runs() -> None:
    """Every plan of a tiny MoE space on 2 GPUs simulated: the best of them is one Megatron-LM does not
    run (a zero-bubble schedule); `--runnable` finds the best of those it does run."""
    gpus = 2
    base = small(gpus, 1.0, batch=8, preset="tiny-moe", parallelism={"framework": "megatron-lm"})
    limit = base.cluster.gpu.memory_GiB * 1024**3
    runs: list[tuple[float, Plan]] = []
    refused: list[tuple[float, Plan]] = []
    for plan in enumerate_plans(_base_for(base, gpus), gpus):
        s = plan.apply(_base_for(base, gpus))
        if check_plan(s)[0] or peak_memory(s)[1].total > limit:
            continue
        step = simulate(s, events=False).summary["step_time_s"]
        (refused if framework_refusals(s) else runs).append((step, plan))
    assert min(refused) < min(runs)  # the unrestricted best is refused: the test can fail
    found = sweep(base, gpus, finalists=3, pins=Pins(runnable=True)).finalists
    assert [r.plan for r in found] == [plan for _, plan in sorted(runs)[:3]]
    assert found[0].step_time_s == pytest.approx(min(runs)[0], rel=1e-12)
    assert sweep(base, gpus, finalists=1).finalists[0].plan == min(refused)[1]


def test_megatron_ep_overlap_refusals_are_exact_checks() -> None:
    """EP overlap on a 1F1B pipeline under megatron-lm: refused with --runnable, kept without; on the
    interleaved schedule Megatron-Core runs it."""
    gpus = 8
    base = _base_for(
        small(gpus, 1.0, batch=32, preset="tiny-moe", parallelism={"framework": "megatron-lm"}), gpus
    )
    limit = base.cluster.gpu.memory_GiB * 1024**3
    plain = Plan(1, 2, 4, 2, "1F1B", 1, "none", False, 0, 2, 1, dispatcher="alltoall", overlap_ep=True)
    interleaved = Plan(1, 2, 4, 2, "Interleaved1F1B", 2, "none", False, 0, 2, 1, dispatcher="alltoall",
                       overlap_ep=True)  # fmt: skip
    assert framework_refusals(plain.apply(base)) and not framework_refusals(interleaved.apply(base))
    assert _passes_exact_checks(base, limit, plain) and not _passes_exact_checks(base, limit, plain, True)
    assert _passes_exact_checks(base, limit, interleaved, True)


def test_a_pinned_schedule_the_framework_does_not_ship_is_refused() -> None:
    pins = Pins.parse(["schedule=ZBV,1F1B"])
    kept = Pins(pins.values, runnable=True).for_framework("megatron-lm")
    assert kept.get("schedule") == ("1F1B",) and kept.runnable and pins.for_framework("megatron-lm") == pins
    with pytest.raises(ValueError, match="runs none of them"):
        Pins(Pins.parse(["schedule=ZBV"]).values, runnable=True).for_framework("megatron-lm")


def test_runnable_space_leaves_out_the_variants_refused_on_every_member() -> None:
    """Under megatron-lm, `--runnable` drops EP overlap on a non-interleaved pipeline and with the allgather
    dispatcher where the space is formed (sweep_space.moe_choices): no plan left has either refusal, the
    counts (`subtree_sizes`) are the plans `enumerate_plans` yields, and full recompute with overlap (a
    member's own refusal) stays for the exact checks."""
    gpus = 8
    megatron = small(gpus, 1.0, batch=32, preset="tiny-moe", parallelism={"framework": "megatron-lm"})
    base, runnable = _base_for(megatron, gpus), Pins(runnable=True)
    kept = list(enumerate_plans(base, gpus, pins=runnable.for_framework("megatron-lm")))
    every = list(enumerate_plans(base, gpus))
    assert len(kept) < len(every)
    said = [" ".join(framework_refusals(p.apply(base))) for p in kept]
    assert not any("unless it is interleaved" in w or "allgather dispatcher" in w for w in said)
    assert any("full recompute" in w for w in said)
    assert any(p.overlap_ep and p.pp > 1 and p.schedule == "Interleaved1F1B" for p in kept)
    sizes = subtree_sizes(base, gpus, runnable.for_framework("megatron-lm"))
    assert sum(sizes.values()) == len(kept)
