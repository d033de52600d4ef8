"""The runtime's receives posted ahead on gloo (runtime/parallel/pp.py) and the simulator's rendezvous
replay (simulator/engine/pipeline.py) follow one order: the schedule's, per rank. Gloo matches a peer's
messages to receives in posting order, so a receive posted ahead out of that order would take another
micro-batch's activation; the correctness tests (tests/distributed/test_correctness.py) run the real
thing."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from plancast.runtime.parallel.pp import PipelineExecutor
from plancast.runtime.plan import rank_plan
from plancast.simulator.engine import pipeline
from plancast.simulator.engine.core import Engine, RankState
from plancast.simulator.loader import parse_scenario

PLANS = {
    "GPipe pp2": {"pipeline_parallel_degree": 2, "pipeline_parallel_schedule": "GPipe"},
    "1F1B pp4": {"pipeline_parallel_degree": 4, "pipeline_parallel_schedule": "1F1B"},
    "interleaved pp2 v2": {
        "pipeline_parallel_degree": 2,
        "pipeline_parallel_schedule": "Interleaved1F1B",
        "virtual_stages_per_rank": 2,
    },
    "ZeroBubble pp2": {"pipeline_parallel_degree": 2, "pipeline_parallel_schedule": "ZeroBubble"},
}


def scenario(parallelism: dict[str, Any]) -> Any:
    pp = parallelism["pipeline_parallel_degree"]
    data = {
        "model": {"preset": "tiny-gpt"},
        "training": {"seq_len": 128, "micro_batch_size": 2, "global_batch_size": 16, "dtype": "fp32"},
        "parallelism": parallelism,
        "cluster": {"preset": "local-cpu", "gpus_per_node": pp},
    }
    return parse_scenario(data).scenario


@pytest.mark.parametrize("name", PLANS)
def test_runtime_and_simulator_post_receives_in_one_order(name: str) -> None:
    s = scenario(PLANS[name])
    engine = Engine(s, full_fidelity=True)
    for rank in range(s.pp):
        executor = PipelineExecutor(rank_plan(s, rank), {}, None, (1,), torch.float32, torch.device("cpu"))  # type: ignore[arg-type]
        runtime = [(kind, stage, mb) for kind, stage, mb, _peer in reversed(executor._receives())]
        coord = engine.plan.grid.coord(rank)
        st = RankState(rank, coord, engine.plan.holders(coord), engine.env.event())
        simulated = [(kind, stage, mb) for _rank, kind, stage, mb in pipeline.receives(engine, st)]
        assert runtime == simulated
        assert len(runtime) > 0


def test_receives_are_posted_ahead_on_cpu_only() -> None:
    plan = rank_plan(scenario(PLANS["GPipe pp2"]), 1)
    cpu = PipelineExecutor(plan, {}, None, (1,), torch.float32, torch.device("cpu"))  # type: ignore[arg-type]
    cuda = PipelineExecutor(plan, {}, None, (1,), torch.float32, torch.device("cuda"))  # type: ignore[arg-type]
    assert cpu.posts_ahead and not cuda.posts_ahead
