"""`plancast run` on the tiny MLA + MoE example (multi-head latent attention, a shared expert, a first
dense layer, expert parallel 2 on two gloo ranks, through torchrun as the CLI starts it), then
`plancast compare`: every predicted event has its measured twin, the expert all-to-alls among them, and
the losses are the single-process reference's."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from plancast.runtime.reference import ReferenceRun
from plancast.simulator.loader import load_scenario
from plancast.traces.store import RunDir, read_events
from tests.cli_runner import REPO, cli_subprocess
from tests.distributed.checks import TOLERANCE

pytestmark = pytest.mark.distributed

SCENARIO = REPO / "examples" / "tiny-mla-moe-cpu.toml"
STEPS = 2


def test_run_then_compare_twins_every_event_of_the_mla_moe_example(tmp_path: Path) -> None:
    out = tmp_path / "run"
    done = cli_subprocess("run", str(SCENARIO), "--out", str(out), "--steps", str(STEPS), timeout_s=600)
    assert done.returncode == 0, done.stderr
    compared = cli_subprocess("compare", str(out), "--json", timeout_s=300)
    assert compared.returncode == 0, compared.stderr
    summary = json.loads(compared.stdout)
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
