"""parallelism.pipeline_output_chunks: torch.distributed.pipelining keeping each micro-batch's stage output
for the step (stage.output_chunks, before pytorch/pytorch#153383 on every stage, after it on the last)
raises memory by exactly those outputs, never time (issue 33)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from plancast.simulator.costs.memory import rank_memory
from plancast.simulator.costs.memory_timeline import memory_timeline
from plancast.simulator.loader import ScenarioError, parse_scenario
from plancast.simulator.predict import simulate
from plancast.simulator.scenario import Scenario
from tests.cli_runner import cli_main

SEQ, MBS, M = 2048, 1, 8


def scenario(kept: str, pp: int = 4, **parallelism: Any) -> Scenario:
    """Llama 3 8B (32 blocks) on two DGX H100s, tp 2 + SP, pp 4, 8 micro-batches, under torchtitan."""
    data: dict[str, Any] = {
        "model": {"preset": "llama3-8b"},
        "training": {"seq_len": SEQ, "micro_batch_size": MBS, "global_batch_size": M * 2, "dtype": "bf16"},
        "parallelism": {
            "tensor_parallel_degree": 2,
            "sequence_parallel": True,
            "pipeline_parallel_degree": pp,
            "framework": "torchtitan",
            "pipeline_output_chunks": kept,
            **parallelism,
        },
        "cluster": {"preset": "dgx-h100-80gb", "num_nodes": 2},
    }
    return parse_scenario(data).scenario


@pytest.mark.parametrize(
    ("kept", "middle", "last"), [("every_stage", True, True), ("last_stage", False, True)]
)
def test_kept_outputs_add_every_micro_batch_of_the_step(kept: str, middle: bool, last: bool) -> None:
    """1F1B keeps as many micro-batches in flight at its last forward as in its warm-up, and by then every
    forward of the step has left its output: each rank's peak grows by m outputs, a boundary (b s h / tp
    under SP, bf16) on a middle stage, a row of local logits (bf16) on the last."""
    base, more = scenario("none"), scenario(kept)
    boundary = MBS * SEQ * base.model.hidden_size * 2 / 2
    logits = MBS * SEQ * base.model.vocab_size / 2 * 2
    first = rank_memory(more, 0).activations - rank_memory(base, 0).activations
    final = rank_memory(more, 3).activations - rank_memory(base, 3).activations
    assert first == pytest.approx(M * boundary if middle else 0.0)
    assert final == pytest.approx(M * logits if last else 0.0)


def test_the_timeline_keeps_them_to_the_step_end_and_its_peak_is_rank_memorys() -> None:
    s = scenario("every_stage")
    for rank in range(s.pp):
        points = memory_timeline(s, rank)
        assert max(p.allocated_bytes for p in points) == pytest.approx(rank_memory(s, rank).total)
        assert points[-1].allocated_bytes < points[-2].allocated_bytes  # merged and freed with the step


def test_kept_outputs_change_no_time() -> None:
    a, b = (
        simulate(scenario("none"), events=False).summary,
        simulate(scenario("every_stage"), events=False).summary,
    )
    assert a["step_time_s"] == b["step_time_s"] and a["peak_memory_gib"] < b["peak_memory_gib"]


def test_without_a_pipeline_it_is_refused() -> None:
    with pytest.raises(ScenarioError) as err:
        scenario("every_stage", pp=1)
    assert "parallelism.pipeline_output_chunks" in str(err.value)


def test_a_bad_value_exits_2_naming_the_key(tmp_path: Path) -> None:
    path = tmp_path / "kept.toml"
    path.write_text(
        '[model]\npreset = "llama3-8b"\nnum_hidden_layers = 4\n'
        '[training]\nseq_len = 1024\nglobal_batch_size = 8\n'
        '[parallelism]\npipeline_parallel_degree = 2\npipeline_output_chunks = "all"\n'
        '[cluster]\npreset = "dgx-h100-80gb"\nnum_nodes = 1\n'
    )
    code, out, err = cli_main("simulate", str(path))
    assert code == 2 and "Traceback" not in out + err
    assert "pipeline_output_chunks" in err
