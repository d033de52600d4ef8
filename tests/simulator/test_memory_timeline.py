"""The predicted memory timeline of a rank (simulator/costs/memory_timeline.py): one point per compute
event of the schedule, keyed as the trace's events, whose peak is the reported peak."""

from __future__ import annotations

from typing import Any

import pytest

from plancast.simulator.costs.memory import rank_memory
from plancast.simulator.costs.memory_timeline import memory_timeline
from plancast.simulator.loader import parse_scenario
from plancast.simulator.predict import simulate
from plancast.simulator.scenario import Scenario


def scenario(schedule: str = "1F1B", v: int = 1, **training: Any) -> Scenario:
    data: dict[str, Any] = {
        "model": {"preset": "llama3-8b", "num_hidden_layers": 8},
        "training": {"seq_len": 2048, "global_batch_size": 8, "flash_attention": True, **training},
        "parallelism": {
            "tensor_parallel_degree": 2,
            "pipeline_parallel_degree": 2,
            "pipeline_parallel_schedule": schedule,
            "virtual_stages_per_rank": v,
            "framework": "megatron-lm",
        },
        "cluster": {"preset": "dgx-h100-80gb", "num_nodes": 1},
    }
    return parse_scenario(data).scenario


@pytest.mark.parametrize("schedule", ["1F1B", "GPipe"])
@pytest.mark.parametrize("training", [{}, {"recompute": "full"}, {"recompute": "selective"}])
def test_the_timelines_peak_is_the_reported_peak(schedule: str, training: dict[str, Any]) -> None:
    s = scenario(schedule, **training)
    for pp_rank in range(s.pp):
        peak = max(p.allocated_bytes for p in memory_timeline(s, pp_rank))
        assert peak == pytest.approx(rank_memory(s, pp_rank).total, rel=1e-12)


def test_interleaved_timeline_never_exceeds_the_reported_peak() -> None:
    s = scenario("Interleaved1F1B", 2)
    for pp_rank in range(s.pp):
        peak = max(p.allocated_bytes for p in memory_timeline(s, pp_rank))
        assert peak <= rank_memory(s, pp_rank).total * (1 + 1e-12)


def test_every_point_is_a_predicted_compute_event() -> None:
    """Each point's key (kind, stage, chunk, micro-batch) is a compute event the simulator emits."""
    s = scenario()
    events = simulate(s).events
    compute = events[(events["stream"] == "compute") & (events["step"] == 0)]
    for pp_rank in range(s.pp):
        rank = pp_rank * s.tp * s.dp  # the first rank of the pipeline position
        mine = compute[compute["rank"] == rank]
        keys = {(r.kind, r.stage, r.chunk, r.microbatch) for r in mine.itertuples()}
        points = memory_timeline(s, pp_rank)
        assert {(p.kind, p.stage, p.chunk, p.microbatch) for p in points} <= keys
        assert [p.order for p in points] == list(range(len(points)))


def test_memory_rises_over_the_forwards_and_falls_back_to_the_states() -> None:
    s = scenario("GPipe")
    points = memory_timeline(s, 0)
    forwards = [p.allocated_bytes for p in points if p.kind == "forward"]
    assert forwards == sorted(forwards) and forwards[0] < forwards[-1]
    mem = rank_memory(s, 0)
    assert points[-1].kind == "optimizer"
    states = mem.parameters + mem.gradients + mem.optimizer + mem.gathered
    assert points[-1].allocated_bytes == pytest.approx(states)


@pytest.mark.parametrize("schedule", ["ZBV", "DualPipeV"])
def test_v_schedules_keep_the_activations_of_the_stages_the_rank_holds(schedule: str) -> None:
    """Under a V schedule rank r holds stages r and 2 pp - 1 - r, not the loop's r and r + pp: on a split
    whose stages differ (1, 3, 3, 1 layers) the timeline keeps what those stages keep, so its peak stays
    within the reported one (the loop's stages put 4 layers on rank 0 where it holds 2)."""
    s = scenario(schedule, 2, recompute="none")
    s = parse_scenario(
        {
            **s.model_dump(mode="json", exclude_none=True),
            "parallelism": {
                **s.parallelism.model_dump(mode="json", exclude_none=True),
                "pipeline_layer_split": [1, 3, 3, 1],
            },
        }
    ).scenario
    for pp_rank in range(s.pp):
        points = memory_timeline(s, pp_rank)
        assert {p.stage for p in points if p.stage >= 0} == {pp_rank, 2 * s.pp - 1 - pp_rank}
        peak = max(p.allocated_bytes for p in points)
        assert peak <= rank_memory(s, pp_rank).total * (1 + 1e-12)
