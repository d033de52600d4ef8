"""The layer balancer's uneven split runs: a tiny model whose output layer outweighs its blocks (a
16,384-token vocabulary over 32-wide blocks), on 2 CPU ranks with pp 2, split as the sweep's balancer
splits it; `plancast run` then `plancast compare` twin every predicted event."""

from __future__ import annotations

from pathlib import Path

import pytest
import tomli_w

from plancast.simulator.loader import load_scenario, parse_scenario
from plancast.simulator.sweep_axes import Plan
from plancast.simulator.sweep_space import LayerBalancer
from tests.cli_runner import run_and_compare
from tests.distributed.checks import tiny_scenario

pytestmark = pytest.mark.distributed


def test_the_balancers_uneven_split_runs_with_every_event_twinned(tmp_path: Path) -> None:
    data = tiny_scenario(
        2,
        model={"vocab_size": 16384},
        training={"steps": 2},
        pipeline_parallel_degree=2,
        pipeline_parallel_schedule="1F1B",
    )
    base = parse_scenario(data).scenario
    splits = LayerBalancer(base, 2).splits(2, 1, 1, 1, False)
    assert len(splits) == 2, splits  # the even split and the balancer's
    first, last = splits[1]
    plan = Plan(1, 2, 1, 2, "1F1B", 1, "none", False, 0, 1, 1, first, last)
    split = list(plan.layer_split(base.model.num_hidden_layers))
    assert split[0] > split[-1], split  # the last stage, holding the output layer, keeps fewer blocks
    data["parallelism"]["pipeline_layer_split"] = split
    path = tmp_path / "scenario.toml"
    path.write_text(tomli_w.dumps(data))
    assert list(load_scenario(path).scenario.layer_split) == split
    summary = run_and_compare(path, tmp_path / "run")
    assert summary["events_matched"] > 0
