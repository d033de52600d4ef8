"""The engine's derived numbers (`StepPlan`), checked without running a simulation (no SimPy events)."""

from __future__ import annotations

import ast
from typing import Any

import pytest

from plancast.simulator.engine import StepPlan
from plancast.simulator.loader import load_scenario, parse_scenario
from plancast.simulator.mesh import Coord
from plancast.simulator.schedules import Action
from tests.cli_runner import REPO
from tests.simulator.test_predict import scenario

GPT3 = REPO / "examples" / "gpt3-175b-dgx-a100.toml"


def tiny(**parallelism: Any) -> StepPlan:
    """The plan of test_predict's tiny GPT on 8 local ranks (two tiers of 4)."""
    return StepPlan.of(scenario(**parallelism))


def test_the_plan_module_needs_no_simpy() -> None:
    tree = ast.parse((REPO / "simulator" / "engine" / "plan.py").read_text(encoding="utf-8"))
    imported = {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    imported |= {n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    assert not any(name.split(".")[0] == "simpy" for name in imported)


def test_gpt3_example_numbers() -> None:
    plan = StepPlan.of(load_scenario(GPT3).scenario)
    # one activation of micro-batch 1 x 2048 tokens x 12288 hidden in fp16, 1/8 per tp rank (Megatron-LM's
    # scatter/gather sends, the megatron-lm framework default)
    assert plan.p2p_bytes == 2048 * 12288 * 2 // 8 == 6_291_456
    # one representative per pipeline position: rank = pp * (dp * tp) in the pp-outermost grid
    assert plan.ranks == tuple(p * 24 * 8 for p in range(8))
    assert not plan.full_fidelity
    assert (plan.zero_stage, plan.fsdp, plan.stages) == (1, False, 8)
    assert plan.share_links  # pipeline and dp traffic both cross InfiniBand
    assert plan.dp_tier == 1
    assert plan.compute_slots is None
    # an InfiniBand hop: bytes / (25 GB/s x 0.96) + 5 us
    assert plan.p2p_seconds(0, 192) == pytest.approx(6_291_456 / (25e9 * 0.96) + 5e-6, rel=1e-12)
    assert plan.tie_peer(Coord(0, 0, 0), 0, 0) == 7 * 192  # the embedding is tied: last stage's holder
    assert plan.sp_norm_all_reduce(3) is None  # no sequence parallelism
    assert plan.optimizer_s(0) > 0


def test_holders_and_owned_stages_follow_the_grid() -> None:
    plan = tiny(
        pipeline_parallel_degree=2,
        tensor_parallel_degree=2,
        pipeline_parallel_schedule="Interleaved1F1B",
        virtual_stages_per_rank=2,
    )
    # world 8 = pp 2 x dp 2 x tp 2; virtual stage v sits on pipeline rank v % 2
    assert plan.stages == 4
    assert plan.holders(Coord(0, 1, 1)) == (3, 7, 3, 7)
    assert plan.owned_stages(1) == (1, 3)
    assert plan.ranks == (0, 4)


def test_last_backwards_are_the_last_b_of_each_chunk() -> None:
    plan = tiny(pipeline_parallel_degree=2, pipeline_parallel_schedule="1F1B")
    m = plan.s.num_microbatches
    assert plan.last_backwards(0) == frozenset({Action("B", m - 1, 0, 0)})
    assert plan.last_backwards(1) == frozenset({Action("B", m - 1, 1, 0)})
    flags = plan.is_last_backward(0)
    assert [a for a, last in zip(plan.schedule[0], flags, strict=True) if last] == [Action("B", m - 1, 0, 0)]


def test_zero_is_off_without_data_parallelism_and_fsdp_from_stage_2() -> None:
    assert tiny(zero_stage=3, tensor_parallel_degree=2, pipeline_parallel_degree=4).zero_stage == 0
    sharded = tiny(zero_stage=3)
    assert (sharded.zero_stage, sharded.fsdp, sharded.share_links) == (3, True, False)


def test_shared_compute_slots_simulate_every_rank() -> None:
    data: dict[str, Any] = {
        "model": {"preset": "tiny-gpt"},
        "training": {"seq_len": 32, "micro_batch_size": 1, "global_batch_size": 4, "dtype": "fp32"},
        "parallelism": {"pipeline_parallel_degree": 2},
        "cluster": {"preset": "local-cpu", "gpus_per_node": 4, "compute_slots_per_node": 2},
    }
    plan = StepPlan.of(parse_scenario(data).scenario)
    assert plan.compute_slots == 2
    assert plan.full_fidelity and plan.ranks == (0, 1, 2, 3)
    assert StepPlan.of(parse_scenario(data).scenario, full_fidelity=False).ranks == (0, 1, 2, 3)


def test_tied_embedding_gradient_is_summed_in_fp32_between_first_and_last_stage() -> None:
    plan = tiny(pipeline_parallel_degree=4)
    m = plan.s.model
    assert m.tie_word_embeddings
    assert plan.tied_grad_bytes == m.vocab_size * m.hidden_size * 4
    coord = Coord(0, 0, 0)
    last = plan.holder(coord, 3)
    assert plan.tie_peer(coord, 0, 0) == last
    assert plan.tie_peer(Coord(3, 0, 0), last, 3) == 0
    assert plan.tie_peer(Coord(1, 0, 0), plan.holder(coord, 1), 1) is None


def test_sequence_parallel_norm_gradients_are_reduced_over_tp() -> None:
    plan = tiny(tensor_parallel_degree=2, sequence_parallel=True)
    found = plan.sp_norm_all_reduce(0)
    assert found is not None
    nbytes, seconds = found
    assert nbytes > 0 and seconds > 0


def test_the_plan_is_frozen() -> None:
    plan = tiny()
    with pytest.raises(AttributeError):
        plan.p2p_bytes = 1  # type: ignore[misc]


def test_a_new_plan_per_scenario_is_derived_from_it_alone() -> None:
    a, b = tiny(pipeline_parallel_degree=2), tiny(pipeline_parallel_degree=2)
    assert a.schedule == b.schedule and a.durations == b.durations and a.ranks == b.ranks
