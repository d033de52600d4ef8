"""The sweep's lower bound never exceeds the engine's step time, so its best-first search is exact.

docs/sweep.md proves each term; these tests check the proof's premises (schedules start with their
first forward, collective times are subadditive in bytes, ZB-H1's trailing weight passes) and the
conclusion on every plan of small spaces and on real-shaped plans, then the search against a brute
force over every plan that fits.
"""

from __future__ import annotations

import random
from typing import Any

import pytest

from plancast.simulator.costs.collectives import collective_seconds
from plancast.simulator.costs.memory import peak_memory
from plancast.simulator.engine import Engine, StepPlan, Topology
from plancast.simulator.loader import load_scenario, parse_scenario
from plancast.simulator.predict import simulate
from plancast.simulator.scenario import Scenario
from plancast.simulator.schedules import SCHEDULES, build_schedule, schedule_problems
from plancast.simulator.sweep import _base_for, sweep
from plancast.simulator.sweep_axes import Plan
from plancast.simulator.sweep_bound import TOLERANCE, Bound
from plancast.simulator.sweep_chain import V_TESTED_PP, trailing_weight_passes, v_trailing_weights
from plancast.simulator.sweep_estimate import Estimator
from plancast.simulator.sweep_fsdp import gather_passes
from plancast.simulator.sweep_space import enumerate_plans, schedules
from plancast.simulator.validation import check_plan
from tests.cli_runner import REPO
from tests.simulator.test_sweep import small

EXAMPLES = REPO / "examples"

SEARCHED = {name for pp, m in [(1, 1), (4, 8)] for name, _ in schedules(pp, m, 32)}
assert {"ZBH2", "ZBV", "DualPipeV"} <= SEARCHED
"""Every schedule the sweep searches (simulator/sweep_space.py)."""


def toy(preset: str, gpus: int, batch: int = 16, **training: Any) -> Scenario:
    """`preset` on an A100 node: sims of a tiny model are cheap, the costs real-shaped."""
    data: dict[str, Any] = {
        "model": {"preset": preset},
        "training": {"seq_len": 64, "global_batch_size": batch, "dtype": "bf16", **training},
        "cluster": {"preset": "dgx-a100-80gb", "num_nodes": 1},
    }
    return _base_for(parse_scenario(data).scenario, gpus)


def assert_bounds_hold(base: Scenario, gpus: int, plans: list[Plan]) -> int:
    """Both bounds of every valid plan of `plans` are at most its simulated step time; returns how many."""
    bound = Bound(Estimator(base, gpus))
    checked = 0
    for plan in plans:
        s = plan.apply(base)
        if check_plan(s)[0]:
            continue
        step = simulate(s, events=False).summary["step_time_s"]
        cheap, replayed = bound.seconds(plan), bound.replayed(plan)
        assert cheap <= replayed * (1 + TOLERANCE), plan
        assert replayed <= step * (1 + TOLERANCE), (plan.label(), replayed, step)
        checked += 1
    return checked


def every_nth(plans: list[Plan], n: int) -> list[Plan]:
    return plans[:: max(len(plans) // n, 1)]


@pytest.mark.parametrize(("preset", "gpus"), [("tiny-gpt", 8), ("tiny-moe", 8), ("tiny-llama", 8)])
def test_the_bound_holds_across_small_spaces(preset: str, gpus: int) -> None:
    """Every degree, schedule, recompute, SP and ZeRO stage (a stride through the space); tiny-moe's
    first block is dense, so FSDP's unit shares differ from 1 on its first stage."""
    base = toy(preset, gpus)
    plans = sorted(enumerate_plans(base, gpus))
    assert assert_bounds_hold(base, gpus, every_nth(plans, 120)) > 60


NEW_KINDS: dict[str, Any] = {
    "ZB-H2": lambda p: p.schedule == "ZBH2",
    "ZB-V": lambda p: p.schedule == "ZBV",
    "DualPipeV": lambda p: p.schedule == "DualPipeV",
    "deepep": lambda p: p.dispatcher == "deepep",
    "allgather": lambda p: p.dispatcher == "allgather",
    "ep overlap": lambda p: p.overlap_ep,
    "folded etp": lambda p: p.etp > 0,
}
"""The axes issue 31 item 6 and issue 34 item 4 added to the search, each a filter of plans."""


@pytest.mark.parametrize("kind", sorted(NEW_KINDS))
def test_the_bound_holds_on_every_new_kind_of_plan(kind: str) -> None:
    """Many plans of each new kind (a stride through them): tiny-moe on 8 GPUs of an A100 node (NVLink,
    InfiniBand: DeepEP runs there), whose 2 dense-first blocks make V stages differ, with 32 micro-batches
    so the V schedules build at pp 4."""
    base = toy("tiny-moe", 8, batch=32)
    plans = sorted(p for p in enumerate_plans(base, 8) if NEW_KINDS[kind](p))
    assert len(plans) > 40, kind
    assert assert_bounds_hold(base, 8, every_nth(plans, 40)) > 20


def test_the_bound_holds_without_overlap_and_on_cpu_ranks() -> None:
    """Gradients reduced after the flush, blocking sends; and ranks sharing cores over gloo
    (rendezvous transfers, busy-sender delays: examples/tiny-local-cpu.toml)."""
    base = toy("tiny-gpt", 8)
    par = base.parallelism.model_copy(update={"overlap_grad_reduce": False, "overlap_p2p_comm": False})
    blocking = base.model_copy(update={"parallelism": par})
    assert assert_bounds_hold(blocking, 8, every_nth(sorted(enumerate_plans(blocking, 8)), 60)) > 30
    cpu = _base_for(load_scenario(EXAMPLES / "tiny-local-cpu.toml").scenario, 4)
    assert assert_bounds_hold(cpu, 4, every_nth(sorted(enumerate_plans(cpu, 4)), 40)) > 20


@pytest.mark.parametrize(
    ("example", "gpus", "sample", "subtrees"),
    [
        ("gpt3-175b-dgx-a100.toml", 1536, 6, None),
        ("mixtral-8x7b-dgx-h100.toml", 64, 8, None),
        ("llama3-8b-cp4-128k.toml", 64, 6, None),
        ("deepseek-v3-h800.toml", 2048, 3, [(8, 8), (4, 16)]),  # a million plans: two subtrees of them
    ],
)
def test_the_bound_holds_on_real_shapes(
    example: str, gpus: int, sample: int, subtrees: list[tuple[int, int]] | None
) -> None:
    """A seeded sample of each real space's plans that fit (GPT-3, Mixtral, 128k with cp, DeepSeek-V3
    with its dense first blocks, whose first stage under ZeRO-2/3 has FSDP shares below 1)."""
    base = _base_for(load_scenario(EXAMPLES / example).scenario, gpus)
    est = Estimator(base, gpus)
    limit = base.cluster.gpu.usable_memory_GiB * 1024**3
    rng = random.Random(34)
    plans = [p for p in enumerate_plans(base, gpus, subtrees) if est.memory_bytes(p) <= limit]
    picked = [p for p in rng.sample(plans, 8 * sample) if peak_memory(p.apply(base))[1].total <= limit]
    assert assert_bounds_hold(base, gpus, picked[:sample]) == sample


SIZES = [(2, 4), (4, 8), (4, 4), (8, 16), (3, 6), (4, 13), (2, 9)]
"""(pp, micro-batches) the premises are checked on (those a schedule cannot build are skipped)."""


def built(name: str) -> list[tuple[int, int, Any]]:
    """(pp, m, schedule) for every size of SIZES that `name` builds."""
    rules = SCHEDULES[name]  # type: ignore[index]
    v = 2 if rules.interleaved or rules.v_shape else 1
    return [
        (pp, m, build_schedule(name, pp, m, v))  # type: ignore[arg-type]
        for pp, m in SIZES
        if not schedule_problems(name, pp, m, v)
    ]


@pytest.mark.parametrize("name", sorted(SEARCHED))
def test_every_rank_starts_with_the_first_forward_of_its_first_stage(name: str) -> None:
    """The bound's forward chain: rank r's first action is F of stage r, micro-batch 0, so every pass of
    the rank waits for that micro-batch's forwards on stages 0..r-1. Over every schedule the sweep
    searches (sweep_space.schedules), the V-placed ZB-V and DualPipeV included."""
    for pp, m, sched in built(name):
        for rank, actions in enumerate(sched):
            first = actions[0]
            assert (first.kind, first.stage, first.microbatch) == ("F", rank, 0), (name, pp, m, rank)


@pytest.mark.parametrize("name", sorted(SEARCHED))
def test_every_ranks_last_backward_is_on_its_first_stage(name: str) -> None:
    """The bound's cool-down chain runs from rank r's last backward through stages r-1..0: under the V
    placement too, whose rank r also holds stage 2 pp - 1 - r (that chunk's backward of a micro-batch
    comes before the first chunk's, so the rank's last backward is on stage r)."""
    for pp, m, sched in built(name):
        for rank, actions in enumerate(sched):
            last = [a for a in actions if a.kind == "B"][-1]
            assert last.stage == rank, (name, pp, m, rank)


@pytest.mark.parametrize("name", ["ZeroBubble", "ZBH2", "ZBV", "DualPipeV", "1F1B"])
def test_trailing_weight_passes_match_the_schedule(name: str) -> None:
    """ZB-H1 and ZB-H2 in closed form (exactly the W's after the rank's last backward); the V schedules
    have none (None: the bound lets every W of the rank follow it); unsplit schedules have no W."""
    for pp, m, sched in built(name):
        for rank, actions in enumerate(sched):
            last_b = max(i for i, a in enumerate(actions) if a.kind == "B")
            after = actions[last_b + 1 :]
            assert all(a.kind == "W" for a in after)
            count = trailing_weight_passes(name, rank, m)
            assert count is None or count == len(after), (name, pp, m, rank)
            assert (count is None) == (name in ("ZBV", "DualPipeV"))


@pytest.mark.parametrize("name", ["ZBV", "DualPipeV"])
def test_v_trailing_weights_cover_the_schedule_up_to_the_tested_size(name: str) -> None:
    """Per chunk of a V rank, the W's that follow its last backward are at most `v_trailing_weights`'s
    counts (subtracting more only loosens the bound), exactly so for DualPipeV and for ZB-V at
    m >= 2 pp - 1;
    checked at every pp up to V_TESTED_PP, at micro-batch counts around each regime's edge."""
    exact = 0
    for pp in range(2, V_TESTED_PP + 1):
        for m in sorted({pp, pp + 1, 2 * pp - 2, 2 * pp - 1, 2 * pp, 3 * pp + 1, 64}):
            if m < 1 or schedule_problems(name, pp, m, 2):  # type: ignore[arg-type]
                continue
            for rank, actions in enumerate(build_schedule(name, pp, m, 2)):  # type: ignore[arg-type]
                last_b = max(i for i, a in enumerate(actions) if a.kind == "B")
                after = actions[last_b + 1 :]
                second = 2 * pp - 1 - rank
                found = (sum(a.stage == rank for a in after), sum(a.stage == second for a in after))
                assert all(a.kind == "W" for a in after) and sum(found) == len(after)
                counts = v_trailing_weights(name, pp, rank, m)
                assert counts is not None and found[0] <= counts[0] and found[1] <= counts[1], (pp, m, rank)
                exact += found == counts
                if name == "DualPipeV" or m >= 2 * pp - 1:
                    assert found == counts, (pp, m, rank)
    assert exact > 1000
    assert v_trailing_weights(name, V_TESTED_PP + 1, 0, 64) is None


@pytest.mark.parametrize("kind", ["all_reduce", "all_gather", "reduce_scatter", "broadcast"])
@pytest.mark.parametrize("algorithm", ["auto", "hierarchical", "ring"])
def test_collective_times_are_subadditive_in_bytes(kind: str, algorithm: str) -> None:
    """The bound prices a stream of collectives as one of their summed bytes: valid when
    t(a) + t(b) >= t(a + b), which holds for latency + bytes / bandwidth per algorithm and for the
    fastest of several (costs/collectives.py)."""
    base = _base_for(load_scenario(EXAMPLES / "gpt3-175b-dgx-a100.toml").scenario, 1536)
    rng = random.Random(7)
    for dp, tp in [(192, 8), (24, 8), (16, 4), (2, 1)]:
        s = Plan(tp, 1536 // (dp * tp), dp, 1, "1F1B", 1, "none", False, 0).apply(base)
        levels = Topology.of(s).levels("dp_cp")
        for _ in range(200):
            parts = [rng.uniform(1, 1e9) for _ in range(rng.randint(2, 6))]
            apart = sum(collective_seconds(kind, levels, b, algorithm) for b in parts)  # type: ignore[arg-type]
            whole = collective_seconds(kind, levels, sum(parts), algorithm)  # type: ignore[arg-type]
            assert whole <= apart * (1 + 1e-12), (dp, tp, parts)


def brute_force_top(base: Scenario, gpus: int, k: int) -> list[tuple[float, Plan]]:
    """Simulate every valid plan that fits (exact peak memory): the engine's top k, ties by plan."""
    limit = base.cluster.gpu.usable_memory_GiB * 1024**3
    every = []
    for plan in enumerate_plans(base, gpus):
        s = plan.apply(base)
        if check_plan(s)[0] or peak_memory(s)[1].total > limit:
            continue
        every.append((simulate(s, events=False).summary["step_time_s"], plan))
    return sorted(every)[:k]


@pytest.mark.parametrize(("preset", "gpus", "memory_gib"), [("tiny-gpt", 4, 1.0), ("tiny-moe", 4, 0.004)])
def test_the_top_k_is_the_brute_forces_top_k(preset: str, gpus: int, memory_gib: float) -> None:
    """Every plan that fits simulated, against the search (a toy GPU and network, test_sweep.small)."""
    base = _base_for(small(gpus, memory_gib, batch=8, layers=None, preset=preset), gpus)
    result = sweep(base, gpus, finalists=8)
    expected = brute_force_top(base, gpus, 8)
    assert [(r.step_time_s, r.plan) for r in result.finalists] == expected
    assert len(expected) == 8 and result.simulated < result.fits  # the bound spared some simulations


@pytest.mark.parametrize("zero", [2, 3])
@pytest.mark.parametrize(
    ("schedule", "v", "recompute"), [("1F1B", 1, "none"), ("Interleaved1F1B", 2, "full")]
)
def test_gather_passes_count_the_engines_gathers(zero: int, schedule: str, v: int, recompute: str) -> None:
    """The bound's count of ZeRO-2/3 gathers per stage is the engine's (units.py FsdpState), on the
    first rank: each gather of a pass gathers every unit of the stage."""
    base = toy("tiny-gpt", 8)
    plan = Plan(1, 2, 4, 1, schedule, v, recompute, False, zero)
    s = plan.apply(base)
    sched = build_schedule(schedule, 2, s.num_microbatches, v)  # type: ignore[arg-type]
    counts = gather_passes(sched[0], zero == 3, recompute == "full")
    engine = StepPlan.of(s)
    spans = [x for x in Engine(s).run() if x.rank == 0 and x.kind == "all_gather"]
    for stage in engine.owned_stages(0):
        units = sum(1 for u in engine.units[stage].units if u.param_bytes > 0)
        assert sum(1 for x in spans if x.stage == stage) == counts[stage] * units, stage


def test_the_bound_holds_under_megatrons_distributed_optimizer() -> None:
    """parallelism.distributed_optimizer: ZeRO-1 plans reduce-scatter their buckets and all-gather the
    parameters once (engine/plan.py dense_grad_reduce), which the estimate and both bounds follow."""
    base = toy("tiny-gpt", 8)
    par = base.parallelism.model_copy(update={"distributed_optimizer": True})
    distopt = base.model_copy(update={"parallelism": par})
    plans = [p for p in sorted(enumerate_plans(distopt, 8)) if p.zero_stage == 1 and p.dp > 1]
    assert assert_bounds_hold(distopt, 8, every_nth(plans, 30)) > 15


def test_the_bound_holds_on_overlapped_plans_with_a_prediction_block() -> None:
    """Overlapped ep all-to-alls (unpaired passes pay their hidden seconds, costs/moe_overlap.py) and a
    multi-token-prediction block on the last stage (costs/mtp.py), under every schedule the space has."""
    data: dict[str, Any] = {
        "model": {"preset": "tiny-moe", "num_nextn_predict_layers": 1},
        "training": {"seq_len": 64, "global_batch_size": 32, "dtype": "bf16"},
        "cluster": {"preset": "dgx-a100-80gb", "num_nodes": 1},
    }
    base = _base_for(parse_scenario(data).scenario, 8)
    plans = sorted(p for p in enumerate_plans(base, 8) if p.overlap_ep and p.pp > 1)
    assert {p.schedule for p in plans} >= {"1F1B", "ZBV", "DualPipeV"}
    assert assert_bounds_hold(base, 8, every_nth(plans, 40)) > 20


def test_the_replayed_bound_is_tight_on_deepseek_v3s_overlapped_plan() -> None:
    """Its unpaired passes' all-to-alls and its prediction block counted, the replayed bound of a
    DualPipe-like plan (ZB-V, EP 64, DeepEP overlapped) is within 1% of the engine: without them it was
    3.2% (unpaired passes) and 6.9% (both) below, and the sweep simulated hundreds of plans more."""
    base = _base_for(load_scenario(EXAMPLES / "deepseek-v3-h800.toml").scenario, 2048)
    plan = Plan(2, 16, 64, 1, "ZBV", 2, "none", True, 1, 64, dispatcher="deepep", overlap_ep=True, etp=1)
    replayed = Bound(Estimator(base, 2048)).replayed(plan)
    step = simulate(plan.apply(base), events=False).summary["step_time_s"]
    assert step * 0.99 <= replayed <= step * (1 + TOLERANCE), (replayed, step)


@pytest.mark.parametrize("preset", ["tiny-gpt", "tiny-moe"])
def test_partial_recompute_is_bounded_as_the_engine_runs_it(preset: str) -> None:
    """With `training.recompute_num_layers` (Megatron's block method) a full-recompute plan re-runs the
    chosen blocks' forward inside their backward, with no recompute pass of its own (costs/stage.py).
    The bound once added a whole recompute pass on top (33% above the engine on this space, which could
    drop a plan from an exact top k); every plan's bounds now stay at most the engine's step time."""
    partial = {"recompute": "full", "recompute_num_layers": 1}
    base = _base_for(small(8, 1.0, 16, preset=preset, training=partial), 8)
    bound = Bound(Estimator(base, 8))
    checked = 0
    for plan in [p for p in enumerate_plans(base, 8) if p.recompute == "full"][::3]:  # the others are refused
        if check_plan(s := plan.apply(base))[0]:
            continue
        step = simulate(s, events=False).summary["step_time_s"]
        assert bound.seconds(plan) <= bound.replayed(plan) * (1 + TOLERANCE) <= step * (1 + TOLERANCE) ** 2
        checked += 1
    assert checked > 30
