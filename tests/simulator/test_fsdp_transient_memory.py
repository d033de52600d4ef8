"""FSDP2's backward buffers (simulator/costs/memory_fsdp.py, issue 33): under torchtitan's ZeRO-2/3 each
block's backward holds the previous block's reduce-scatter input (reduce dtype) beside its own gradient
(training dtype), and under ZeRO-3 the root unit (embedding, final norm, output layer) stays gathered for
the whole backward; under pipeline parallel only each chunk's last backward reduce-scatters."""

from __future__ import annotations

from typing import Any

import pytest

from plancast.simulator.costs.memory import rank_memory
from plancast.simulator.costs.memory_fsdp import (
    backward_buffer_bytes,
    live_at_last_backwards,
    reduce_scatter_bytes,
    root_unit_bytes,
)
from plancast.simulator.costs.memory_timeline import memory_timeline
from plancast.simulator.costs.params import layer_params
from plancast.simulator.loader import parse_scenario
from plancast.simulator.scenario import Scenario
from plancast.simulator.schedule_action import Action

GATHERED_BLOCKS = 2  # ZeRO-3's unit being computed and the one prefetched (costs/memory.py)


def scenario(framework: str = "torchtitan", zero: int = 3, pp: int = 1, **parallelism: Any) -> Scenario:
    """Llama 3 8B on one DGX H100 (8 GPUs), data parallel over what pp leaves."""
    data: dict[str, Any] = {
        "model": {"preset": "llama3-8b"},
        "training": {"seq_len": 2048, "micro_batch_size": 1, "global_batch_size": 64, "dtype": "bf16"},
        "parallelism": {
            "pipeline_parallel_degree": pp,
            "zero_stage": zero,
            "framework": framework,
            **parallelism,
        },
        "cluster": {"preset": "dgx-h100-80gb", "num_nodes": 1},
    }
    return parse_scenario(data).scenario


def _block(s: Scenario) -> float:
    return layer_params(s.model).per_rank(s.tp)


@pytest.mark.parametrize(("reduce", "reduce_bytes"), [("fp32", 4), ("bf16", 2)])
def test_a_backward_holds_two_blocks_of_gradient_one_in_the_reduce_dtype(
    reduce: str, reduce_bytes: int
) -> None:
    s = scenario(zero=2, fsdp_reduce_dtype=reduce)
    assert reduce_scatter_bytes(s) == pytest.approx(_block(s) * (2 + reduce_bytes))
    assert rank_memory(s, 0).gathered == pytest.approx(_block(s) * (2 + reduce_bytes))


def test_zero3_also_keeps_the_root_unit_gathered_through_backward() -> None:
    s = scenario(zero=3, fsdp_reduce_dtype="fp32")
    m = s.model
    root = (2 * m.vocab_size * m.hidden_size + m.hidden_size) * 2  # untied embedding and output, final norm
    assert root_unit_bytes(s, (0,)) == pytest.approx(root)
    expected = GATHERED_BLOCKS * _block(s) * 2 + _block(s) * (2 + 4) + root
    assert rank_memory(s, 0).gathered == pytest.approx(expected)
    assert root_unit_bytes(scenario(zero=2), (0,)) == 0.0


@pytest.mark.parametrize(
    "s",
    [scenario(zero=1), scenario("megatron-lm", zero=1), scenario("deepspeed", zero=3)],
    ids=["torchtitan-zero1", "megatron-zero1", "deepspeed-zero3"],
)
def test_other_frameworks_and_zero1_hold_none(s: Scenario) -> None:
    assert reduce_scatter_bytes(s) == 0.0
    assert root_unit_bytes(s, (0,)) == 0.0


def test_under_pipeline_parallel_only_each_chunks_last_backward_counts() -> None:
    """GPipe on one chunk: four forwards in flight at the first backward, one at the last; the reduce-scatter
    buffers ride on the last backward only."""
    gpipe = tuple(Action("F", mb, 0, 0) for mb in range(4)) + tuple(Action("B", mb, 0, 0) for mb in range(4))
    assert live_at_last_backwards(gpipe, {0: 1.0}, {0: 0.0}) == 1.0
    assert live_at_last_backwards(gpipe, {0: 1.0}, {0: 0.5}) == 3.0  # the four kept outputs stay
    s = scenario(zero=2, pp=2)
    buffers = backward_buffer_bytes(s, (0,), gpipe)
    assert buffers == [0.0] * 7 + [reduce_scatter_bytes(s)]


def test_the_last_stage_under_1f1b_reduce_scatters_at_its_peak() -> None:
    """torchtitan's 1F1B last stage keeps every micro-batch's logits to the step's end, so its last
    backward is as full as its peak: the buffers add in full there; the first stage's last backward has one
    micro-batch in flight against its warm-up's two, and its kept outputs are small."""
    s = scenario(zero=2, pp=2, pipeline_parallel_schedule="1F1B", pipeline_output_chunks="every_stage")
    rs = reduce_scatter_bytes(s)
    assert rs > 0
    assert rank_memory(s, 1).gathered == pytest.approx(rs)
    assert 0.0 <= rank_memory(s, 0).gathered < rs


@pytest.mark.parametrize("zero", [2, 3])
def test_the_timeline_holds_them_in_backwards_only_and_peaks_at_rank_memory(zero: int) -> None:
    s = scenario(zero=zero)
    points = memory_timeline(s, 0)
    forward, backward = points[0], points[1]
    assert (forward.kind, backward.kind) == ("forward", "backward")
    assert max(p.allocated_bytes for p in points) == pytest.approx(rank_memory(s, 0).total)
    buffers = reduce_scatter_bytes(s) + root_unit_bytes(s, (0,))
    optimizer = points[-1]
    assert optimizer.allocated_bytes == pytest.approx(
        rank_memory(s, 0).total - rank_memory(s, 0).activations - buffers
    )
