"""`plancast run` on the tiny MLA + MoE example (multi-head latent attention, a shared expert, a first
dense layer, expert parallel 2 on two gloo ranks, through torchrun as the CLI starts it), then
`plancast compare`: every predicted event has its measured twin, the expert all-to-alls among them, and
the losses are the single-process reference's. Then the same model under DualPipeV (pp 2, 2 ranks)."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

import pandas as pd
import pytest
import tomli_w

from plancast.runtime.reference import ReferenceRun
from plancast.simulator.loader import load_scenario
from plancast.traces.store import RunDir, read_events, read_measured
from tests.cli_runner import REPO, cli_main, cli_subprocess, run_and_compare
from tests.distributed.checks import TOLERANCE

pytestmark = pytest.mark.distributed

SCENARIO = REPO / "examples" / "tiny-mla-moe-cpu.toml"
STEPS = 2


def test_run_then_compare_twins_every_event_of_the_mla_moe_example(tmp_path: Path) -> None:
    out = tmp_path / "run"
    done = cli_subprocess("run", str(SCENARIO), "--out", str(out), "--steps", str(STEPS), timeout_s=600)
    assert done.returncode == 0, done.stderr
    code, stdout, stderr = cli_main("compare", str(out), "--json")  # starts no ranks
    assert code == 0, stderr
    summary = json.loads(stdout)
    assert summary["events_missing"] == 0 and summary["events_extra"] == 0, summary
    assert summary["events_matched"] > 0
    scenario = load_scenario(SCENARIO).scenario
    m = scenario.model
    assert m.is_mla and m.q_lora_rank and m.n_shared_experts and m.first_k_dense_replace
    run = RunDir(out)
    measured = pd.concat([read_events(path) for path in run.rank_files().values()], ignore_index=True)
    a2a = measured[(measured["stream"] == "ep") & (measured["kind"] == "all_to_all")]
    moe_layers = m.num_hidden_layers - m.first_k_dense_replace
    # per rank, step and micro-batch: 2 forward + 2 backward all-to-alls per MoE layer
    assert len(a2a) == 2 * STEPS * scenario.num_microbatches * 4 * moe_layers
    reference = ReferenceRun(scenario)
    run_losses = json.loads((out / "measured" / "summary.json").read_text())["losses"]
    assert len(run_losses) == STEPS
    for step, loss in enumerate(run_losses):
        want = sum(reference.step(step)) / scenario.dp
        assert abs(loss - want) < TOLERANCE, f"step {step}: run {loss} != reference {want}"


def test_the_mla_moe_model_under_dualpipev_twins_every_event_and_keeps_the_losses(tmp_path: Path) -> None:
    """The same model (one more MoE layer: DualPipeV at pp 2 holds 4 virtual stages of at least one
    layer each) on a DualPipeV pipeline of 2 ranks: rank 0 holds the first and last stage (embedding,
    dense layer; last MoE layer, head), rank 1 the V's turn; the split backward's weight passes run the
    experts' and the latent projections' weight gradients."""
    data = tomllib.loads(SCENARIO.read_text(encoding="utf-8"))
    data["model"]["num_hidden_layers"] = 4
    data["training"]["steps"] = STEPS  # 8 / 2 = 4 micro-batches: DualPipeV's least at pp 2 (2 x pp)
    data["parallelism"] = {
        "data_parallel_degree": 1,
        "pipeline_parallel_degree": 2,
        "pipeline_parallel_schedule": "DualPipeV",
        "virtual_stages_per_rank": 2,
    }
    path = tmp_path / "scenario.toml"
    path.write_text(tomli_w.dumps(data))
    scenario = load_scenario(path).scenario
    assert scenario.model.is_mla and scenario.model.num_local_experts and scenario.num_microbatches == 4
    run_dir = tmp_path / "run"
    run_and_compare(path, run_dir)  # asserts 0 missing, 0 extra
    kinds = set(read_measured(RunDir(run_dir)).events["kind"])
    assert {"backward_input", "backward_weight"} <= kinds
    losses = json.loads((run_dir / "measured" / "summary.json").read_text())["losses"]
    reference = ReferenceRun(scenario)
    expected = [sum(reference.step(step)) for step in range(STEPS)]
    assert losses == pytest.approx(expected, abs=TOLERANCE), (losses, expected)


def test_the_mla_moe_model_under_dualpipev_with_expert_parallel_on_4_ranks(tmp_path: Path) -> None:
    """pp 2 x ep 2 (dp 2) under DualPipeV, with --oversubscribe on a 2-core machine: the split backward's
    gradients are all-reduced after the weight passes (one dense bucket per chunk over dp; the experts'
    replicas are one rank, ep = dp), the expert all-to-alls run inside the pipeline's passes; every event
    twinned and the losses the reference's."""
    data = tomllib.loads(SCENARIO.read_text(encoding="utf-8"))
    data["model"]["num_hidden_layers"] = 4
    data["training"].update(steps=STEPS, global_batch_size=16)  # 4 micro-batches per pipeline
    data["parallelism"] = {
        "data_parallel_degree": 2,
        "expert_parallel_degree": 2,
        "pipeline_parallel_degree": 2,
        "pipeline_parallel_schedule": "DualPipeV",
        "virtual_stages_per_rank": 2,
    }
    data["cluster"]["gpus_per_node"] = 4
    path = tmp_path / "scenario.toml"
    path.write_text(tomli_w.dumps(data))
    scenario = load_scenario(path).scenario
    run_dir = tmp_path / "run"
    ran = cli_subprocess("run", str(path), "--out", str(run_dir), "--oversubscribe", timeout_s=600)
    assert ran.returncode == 0, ran.stderr[-3000:]
    code, stdout, stderr = cli_main("compare", str(run_dir), "--json")  # starts no ranks
    assert code == 0, stderr
    summary = json.loads(stdout)
    assert (summary["events_missing"], summary["events_extra"]) == (0, 0), summary
    events = read_measured(RunDir(run_dir)).events
    assert {"all_to_all"} <= set(events.loc[events["stream"] == "ep", "kind"])
    assert (events.loc[events["stream"] == "dp", "kind"] == "all_reduce").any()
    losses = json.loads((run_dir / "measured" / "summary.json").read_text())["losses"]
    reference = ReferenceRun(scenario)
    expected = [sum(reference.step(step)) / scenario.dp for step in range(STEPS)]
    assert losses == pytest.approx(expected, abs=TOLERANCE), (losses, expected)
