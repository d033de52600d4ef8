"""DualPipe's second copy of the model (parallelism.pipeline_parameter_copies = 2; DeepSeek-V3 report,
arXiv 2412.19437 sec. 3.2.1 and Table 2): parameters and gradients twice, one more chunk of activations,
the optimizer states once under ZeRO-1, the step time unchanged (memory only)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from plancast.simulator.costs.memory import rank_memory
from plancast.simulator.costs.memory_dualpipe import parameter_stages
from plancast.simulator.costs.params import rank_parameters
from plancast.simulator.loader import ScenarioError, parse_scenario
from plancast.simulator.predict import simulate
from plancast.simulator.scenario import Scenario
from plancast.simulator.schedules import owned_stages
from tests.cli_runner import cli_main


def scenario(copies: int = 1, gpus: int = 8, **parallelism: Any) -> Scenario:
    """Llama 3 8B, 24 layers over pp 4 as DualPipeV (8 chunks of 3), dp 2 on one DGX H100, Megatron-LM."""
    data: dict[str, Any] = {
        "model": {"preset": "llama3-8b", "num_hidden_layers": 24},
        "training": {
            "seq_len": 4096,
            "micro_batch_size": 1,
            "global_batch_size": 48,
            "flash_attention": True,
        },
        "parallelism": {
            "pipeline_parallel_degree": 4,
            "pipeline_parallel_schedule": "DualPipeV",
            "virtual_stages_per_rank": 2,
            "framework": "megatron-lm",
            "zero_stage": 1,
            "distributed_optimizer": True,
            "pipeline_parameter_copies": copies,
            **parallelism,
        },
        "cluster": {"preset": "dgx-h100-80gb", "num_nodes": 1, "gpus_per_node": gpus},
    }
    return parse_scenario(data).scenario


@pytest.mark.parametrize("pp", [2, 4, 8])
def test_each_rank_keeps_dualpipes_two_stages_and_every_stage_is_kept_twice(pp: int) -> None:
    s = scenario(2, pipeline_parallel_degree=pp)
    held = [parameter_stages(s, owned_stages("DualPipeV", pp, r, 2)) for r in range(pp)]
    for r, chunks in enumerate(held):  # DualPipe's rank j holds stages j and pp-1-j of pp (chunks 2j, 2j+1)
        j = r // 2
        assert sorted(chunks) == sorted({2 * j, 2 * j + 1, 2 * (pp - 1 - j), 2 * (pp - 1 - j) + 1})
    assert all(sum(c in h for h in held) == 2 for c in range(2 * pp))  # the model twice on the pipeline


def test_one_copy_keeps_the_ranks_own_chunks() -> None:
    s = scenario()
    assert all(parameter_stages(s, owned_stages("DualPipeV", 4, r, 2)) == (r, 7 - r) for r in range(4))


def test_the_second_copy_doubles_a_middle_ranks_parameters_and_gradients_not_its_optimizer() -> None:
    one, two = scenario(1), scenario(2)
    assert one.layer_split == (3,) * 8
    for r in (2, 3):  # DualPipe's rank 1: stages 1 and 2, the chunks 2 to 5, no embedding or output layer
        a, b = rank_memory(one, r), rank_memory(two, r)
        assert parameter_stages(two, (r, 7 - r)) == (2, 3, 4, 5)
        assert b.parameters == pytest.approx(2 * a.parameters)
        assert b.gradients == pytest.approx(2 * a.gradients)
        assert b.optimizer == pytest.approx(a.optimizer)  # ZeRO-1 over both copies' ranks
        assert b.activations > a.activations  # DualPipe's PP + 1 stages: one chunk more than DualPipeV


def test_the_end_ranks_keep_the_embedding_and_output_layer_of_both_copies() -> None:
    two = scenario(2)
    held = parameter_stages(two, (1, 6))
    assert held == (0, 1, 6, 7)
    m = two.model
    with_ends = rank_parameters(m, two.layer_split, held, tp=1, vocab_tp=1, ep=1)[0]
    blocks = rank_parameters(m, (3,) * 8, (2, 3, 4, 5), tp=1, vocab_tp=1, ep=1)[0]
    # the untied embedding and output layer, and the final norm
    assert with_ends == pytest.approx(blocks + 2 * m.vocab_size * m.hidden_size + m.hidden_size)


def test_without_zero_the_optimizer_states_are_kept_twice_too() -> None:
    plain = {"zero_stage": 0, "distributed_optimizer": False}
    a, b = (rank_memory(scenario(c, **plain), 2) for c in (1, 2))
    assert b.optimizer == pytest.approx(2 * a.optimizer)


def test_the_copy_is_memory_only() -> None:
    one, two = (simulate(scenario(c), events=False).summary for c in (1, 2))
    assert two["step_time_s"] == one["step_time_s"]
    assert two["peak_memory_gib"] > one["peak_memory_gib"]


@pytest.mark.parametrize(
    ("gpus", "parallelism"),
    [
        (8, {"pipeline_parallel_schedule": "ZBV"}),
        (6, {"pipeline_parallel_degree": 3}),
        (8, {"zero_stage": 2, "distributed_optimizer": False}),
    ],
    ids=["not-dualpipev", "odd-pp", "zero-2"],
)
def test_the_copy_outside_dualpipe_with_even_pp_and_zero_1_is_refused_by_name(
    gpus: int, parallelism: dict[str, Any]
) -> None:
    with pytest.raises(ScenarioError) as err:
        scenario(2, gpus, **parallelism)
    assert [p.path for p in err.value.problems] == ["parallelism.pipeline_parameter_copies"]
    scenario(1, gpus, **parallelism)  # the same plan with one copy is valid


def test_the_cli_refuses_a_second_copy_under_another_schedule_with_exit_2(tmp_path: Path) -> None:
    path = tmp_path / "copies.toml"
    path.write_text(
        '[model]\npreset = "llama3-8b"\nnum_hidden_layers = 4\n[training]\nseq_len = 1024\n'
        "global_batch_size = 8\n[parallelism]\npipeline_parallel_degree = 2\npipeline_parameter_copies = 2\n"
        '[cluster]\npreset = "dgx-h100-80gb"\nnum_nodes = 1\n'
    )
    code, out, err = cli_main("simulate", str(path))
    assert code == 2 and "Traceback" not in out + err
    assert "parallelism.pipeline_parameter_copies" in err and "DualPipeV" in err


def test_the_sweep_refuses_the_second_copy_with_exit_2(tmp_path: Path) -> None:
    path = tmp_path / "dualpipe.toml"
    path.write_text(
        '[model]\npreset = "llama3-8b"\nnum_hidden_layers = 8\n[training]\nseq_len = 1024\n'
        "global_batch_size = 32\n[parallelism]\npipeline_parallel_degree = 2\n"
        'pipeline_parallel_schedule = "DualPipeV"\nvirtual_stages_per_rank = 2\n'
        "pipeline_parameter_copies = 2\n"
        '[cluster]\npreset = "dgx-h100-80gb"\nnum_nodes = 1\n'
    )
    assert cli_main("simulate", str(path))[0] == 0  # the plan itself simulates
    code, out, err = cli_main("sweep", str(path), "--gpus", "8")
    assert code == 2 and "Traceback" not in out + err
    assert "parallelism.pipeline_parameter_copies" in err


def test_the_timeline_holds_the_second_copy_and_stays_within_the_reported_peak() -> None:
    from plancast.simulator.costs.memory_timeline import memory_timeline

    one, two = scenario(1), scenario(2)
    for r in (2, 3):
        a, b = memory_timeline(one, r), memory_timeline(two, r)
        peak = max(p.allocated_bytes for p in b)
        assert peak <= rank_memory(two, r).total * (1 + 1e-12)
        grown = rank_memory(two, r).parameters - rank_memory(one, r).parameters
        assert b[-1].allocated_bytes - a[-1].allocated_bytes >= grown  # after the optimizer: states only
        assert peak > max(p.allocated_bytes for p in a)
