"""Issue 33 acceptance: HSDP (torchtitan's dp_replicate x dp_shard, 2 x 2) on 4 CPU ranks through
`plancast run --oversubscribe` then `plancast compare`: FSDP2 on a 2-D (dp_replicate, dp_shard) mesh
reduce-scatters each unit's gradients over its shard group and all-reduces the shard over the replicas;
every predicted event has its measured twin, the memory rows are there, and the losses are the
single-process reference's.

One of the suite's two 4-rank tests (with test_mla_cli.py's DualPipeV pp 2 x ep 2): tiny
(OMP_NUM_THREADS=1, a 4-layer width-32 model, about 0.5 GiB a rank), so it fits a 2-core machine's
memory, and it runs in the rank group (tests/conftest.py), never beside another rank test. Its timings
mean nothing on 2 cores, and nothing here reads them."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import tomli_w

from plancast.runtime.reference import ReferenceRun
from plancast.simulator.loader import load_scenario
from plancast.traces.store import RunDir, read_measured
from tests.cli_runner import cli_main, cli_subprocess
from tests.distributed.checks import TOLERANCE, tiny_scenario

pytestmark = pytest.mark.distributed

STEPS = 2
RANKS = 4


def test_hsdp_2x2_twins_every_event_and_keeps_the_losses(tmp_path: Path) -> None:
    data = tiny_scenario(
        RANKS,
        training={"steps": STEPS, "global_batch_size": 16},  # 2 micro-batches per rank
        data_parallel_degree=RANKS,
        data_parallel_replicate_degree=2,
        zero_stage=3,
    )
    scenario_path = tmp_path / "scenario.toml"
    scenario_path.write_text(tomli_w.dumps(data))
    scenario = load_scenario(scenario_path).scenario
    run_dir = tmp_path / "run"
    ran = cli_subprocess("run", str(scenario_path), "--out", str(run_dir), "--oversubscribe", timeout_s=600)
    assert ran.returncode == 0, ran.stderr[-3000:]
    if len(os.sched_getaffinity(0)) < RANKS:
        assert "the measured times are not meaningful" in ran.stderr, ran.stderr
    code, stdout, stderr = cli_main("compare", str(run_dir), "--json")  # starts no ranks
    assert code == 0, stderr
    summary = json.loads(stdout)
    assert (summary["events_missing"], summary["events_extra"]) == (0, 0), summary
    assert {"peak_memory", "memory_timeline"} <= {c["component"] for c in summary["components"]}
    events = read_measured(RunDir(run_dir)).events
    dp = events[events["stream"] == "dp"]
    units = scenario.model.num_hidden_layers + 1  # every block, then the root (embedding, norm, head)
    per_rank = STEPS * scenario.num_microbatches * units
    # each unit's backward: a reduce-scatter over its shard pair, then an all-reduce over the replicas
    assert (dp["kind"] == "reduce_scatter").sum() == RANKS * per_rank
    assert (dp["kind"] == "all_reduce").sum() == RANKS * per_rank
    losses = json.loads((run_dir / "measured" / "summary.json").read_text())["losses"]
    reference = ReferenceRun(scenario)
    expected = [sum(reference.step(step)) / scenario.dp for step in range(STEPS)]
    assert losses == pytest.approx(expected, abs=TOLERANCE), (losses, expected)
