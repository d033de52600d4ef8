"""Calibration on runs (simulator/calibration/runs.py): what runs determine a parameter, the inverse
(runs simulated with known constants give those constants back), and leave-one-run-out scores."""

from __future__ import annotations

from typing import Any

import pytest

from plancast.simulator.calibration.compute import Observation, model_x, stage_row
from plancast.simulator.calibration.observations import (
    collective_means_s,
    compute_observations,
    mean_observations,
    untracked_per_step,
)
from plancast.simulator.calibration.runs import RunData, evaluate, fit_runs, score_table, with_fields
from plancast.simulator.costs.host import HostCosts
from plancast.simulator.loader import parse_scenario
from plancast.simulator.predict import simulate
from plancast.simulator.scenario import Scenario

TRUE = {
    "matmul_efficiency": 0.4,
    "attention_efficiency": 0.25,
    "memory_efficiency": 0.4,
    "op_overhead_us": 30.0,
}


def scenario(micro_batch: int, **parallelism: Any) -> Scenario:
    data = {
        "model": {"preset": "tiny-gpt"},
        "training": {"seq_len": 64, "micro_batch_size": micro_batch, "global_batch_size": 8, "dtype": "fp32"},
        "parallelism": parallelism,
        "cluster": {"preset": "local-cpu", "gpus_per_node": 2},
    }
    return parse_scenario(data).scenario


def measured_run(name: str, s: Scenario, truth: dict[str, float], remainder_us: float = 0.0) -> RunData:
    """A run 'measured' on a machine whose compute model is `truth` (its simulation, relabelled); its
    steps hold `remainder_us` more untracked time (a fixed per-step cost no transfer explains)."""
    prediction = simulate(with_fields(s, truth))
    events = prediction.events.assign(source="measured")
    obs = mean_observations(compute_observations(events))
    observations = tuple(Observation(int(r.stage), str(r.kind), float(r.seconds)) for r in obs.itertuples())
    untracked = untracked_per_step(events)
    if untracked is not None:
        untracked = (untracked[0] + remainder_us * 1e-6, untracked[1])
    step_s = float(prediction.summary["step_time_s"])
    return RunData(name, s, observations, step_s, collective_means_s(events), untracked)


def test_two_runs_at_different_micro_batch_sizes_recover_the_compute_model() -> None:
    runs = [measured_run(f"pp2 mb{b}", scenario(b, pipeline_parallel_degree=2), TRUE) for b in (1, 4)]
    fit = fit_runs(runs)
    assert fit.fields["op_overhead_us"] == pytest.approx(TRUE["op_overhead_us"], rel=0.05)
    # one common scale on the shipped efficiency ratios: the matmul efficiency moves the most
    assert fit.fields["matmul_efficiency"] < 0.8
    scores = evaluate(runs)
    assert [s.name for s in scores] == ["pp2 mb1", "pp2 mb4"]
    for score in scores:
        assert abs(score.in_sample_error) < 0.1
    # held out, each run's compute model comes from one run only: not fitted, the shipped one stays
    shipped = [simulate(r.scenario, events=False).summary["step_time_s"] for r in runs]
    assert [s.held_out_s for s in scores] == pytest.approx(shipped)


def test_a_parameter_one_run_determines_is_not_fitted_and_the_notes_say_why() -> None:
    runs = [
        measured_run("pp2 mb1", scenario(1, pipeline_parallel_degree=2), TRUE),
        measured_run("pp2 mb1 again", scenario(1, pipeline_parallel_degree=2), TRUE),
    ]
    fit = fit_runs(runs)
    assert "op_overhead_us" not in fit.fields
    assert any("compute model not fitted" in note and "micro-batch" in note for note in fit.notes)


def test_the_optimizer_per_tensor_time_is_fitted_from_runs_with_different_tensor_counts() -> None:
    truth = {**TRUE, "optimizer_overhead_us": 80.0}
    runs = [  # every tensor on one rank (dp), about half of them per rank (pp)
        measured_run("dp2", scenario(2, data_parallel_degree=2), truth),
        measured_run("pp2", scenario(1, pipeline_parallel_degree=2), truth),
    ]
    fit = fit_runs(runs)
    assert fit.fields["optimizer_overhead_us"] == pytest.approx(80.0, rel=0.02)


def test_the_score_table_prints_in_sample_and_held_out_per_run() -> None:
    runs = [measured_run(f"dp2 mb{b}", scenario(b, data_parallel_degree=2), TRUE) for b in (1, 2, 4)]
    lines = score_table(evaluate(runs))
    assert "in-sample s" in lines[0] and "held-out s" in lines[0]
    assert [line.split()[0] for line in lines[1:4]] == ["dp2", "dp2", "dp2"]
    assert lines[-1].startswith("mean |error|")


def test_a_preempted_span_counts_in_the_observation_as_in_the_step_time() -> None:
    """Three 10 ms forward spans and one preempted for 40 ms more: a step that holds them takes their
    sum, so the fit targets their mean (20 ms), not their median (10 ms: an idle core)."""
    import pandas as pd

    spans = pd.DataFrame(
        {"rank": [0] * 4, "stage": [0] * 4, "kind": ["forward"] * 4, "seconds": [0.01, 0.01, 0.01, 0.05]}
    )
    (row,) = mean_observations(spans).itertuples()
    assert row.seconds == pytest.approx(0.02)


def tp_run(name: str, micro_batch: int, host_s: float, **parallelism: Any) -> RunData:
    """A run whose compute spans hold, beyond the TRUE compute model, `host_s` per layer and micro-batch
    (forward and backward half each): DTensor dispatch or FSDP2 hooks inside the spans."""
    s = scenario(micro_batch, **parallelism)
    base = measured_run(name, s, TRUE)
    units = s.layer_split[0] + (1 if s.fsdp else 0)  # FSDP2: the root unit too
    observations = tuple(
        Observation(o.stage, o.kind, o.seconds + (host_s * units / 2 if o.kind != "optimizer" else 0.0))
        for o in base.observations
    )
    return RunData(name, s, observations, base.step_s)


def test_a_tp_collective_is_subtracted_from_the_span_it_was_issued_in_only() -> None:
    """Forward and backward of a micro-batch share (stage, micro-batch): each loses its own
    collectives, not the other's too (what is left is the simulated compute alone)."""
    s = with_fields(scenario(2, tensor_parallel_degree=2), TRUE)
    obs = mean_observations(compute_observations(simulate(s).events.assign(source="measured")))
    for row in obs[obs["kind"].isin(["forward", "backward"])].itertuples():
        expected = float(stage_row(s, int(row.stage), str(row.kind)) @ model_x(s.cluster.compute))
        assert row.seconds == pytest.approx(expected, rel=0.01)


@pytest.mark.parametrize(
    ("parallelism", "field"),
    [
        ({"tensor_parallel_degree": 2}, "tp_layer_overhead_us"),
        ({"tensor_parallel_degree": 2, "sequence_parallel": True}, "sp_layer_overhead_us"),
        ({"data_parallel_degree": 2, "zero_stage": 3}, "fsdp_unit_overhead_us"),
    ],
)
def test_the_per_layer_host_time_is_fitted_from_spans_at_two_micro_batch_sizes(
    parallelism: dict[str, Any], field: str
) -> None:
    plain = [measured_run(f"pp2 mb{b}", scenario(b, pipeline_parallel_degree=2), TRUE) for b in (1, 4)]
    runs = [*plain, *(tp_run(f"mb{b}", b, 0.004, **parallelism) for b in (1, 4))]
    fit = fit_runs(runs)
    assert fit.fields[field] == pytest.approx(4000.0, rel=0.05)
    assert {f for f in fit.fields if f.endswith("_layer_overhead_us") or f.startswith("fsdp")} == {field}
    # one such run only: not fitted, and the notes say why
    one = fit_runs([*plain, runs[2]])
    assert field not in one.fields
    assert any(note.startswith(f"{field} not fitted") and "micro-batch" in note for note in one.notes)


def test_zero2_and_zero3_runs_separate_the_unshard_from_the_unit_hooks() -> None:
    """ZeRO-3 unshards a unit twice per micro-batch, ZeRO-2 once: runs of both give the unshard's host
    time (their difference) and the hooks' beyond it; ZeRO-3 runs alone fit the hooks only."""
    plain = [measured_run(f"pp2 mb{b}", scenario(b, pipeline_parallel_degree=2), TRUE) for b in (1, 4)]
    zero2 = [tp_run(f"z2 mb{b}", b, 0.004, data_parallel_degree=2, zero_stage=2) for b in (1, 4)]
    zero3 = [tp_run(f"z3 mb{b}", b, 0.0055, data_parallel_degree=2, zero_stage=3) for b in (1, 4)]
    fit = fit_runs([*plain, *zero2, *zero3])
    assert fit.fields["fsdp_gather_overhead_us"] == pytest.approx(1500.0, rel=0.05)
    assert fit.fields["fsdp_unit_overhead_us"] == pytest.approx(2500.0, rel=0.05)
    # the fitted pair predicts each stage's host time: 2500 + 1 x 1500 and 2500 + 2 x 1500 per unit
    for runs, per_unit_us in ((zero2, 4000.0), (zero3, 5500.0)):
        s = with_fields(runs[0].scenario, fit.fields)
        assert HostCosts.of(s).unit_s * 1e6 == pytest.approx(per_unit_us, rel=0.05)
    only3 = fit_runs([*plain, *zero3])
    assert "fsdp_gather_overhead_us" not in only3.fields
    assert only3.fields["fsdp_unit_overhead_us"] == pytest.approx(5500.0, rel=0.05)
    assert any(note.startswith("fsdp_gather_overhead_us not fitted") for note in only3.notes)


@pytest.mark.parametrize(("stage", "unshards"), [(2, 1), (3, 2)])
def test_the_unshard_host_time_lengthens_the_step_once_per_unshard(stage: int, unshards: int) -> None:
    s = with_fields(scenario(2, data_parallel_degree=2, zero_stage=stage), TRUE)
    base = simulate(s, events=False).summary["step_time_s"]
    gather = with_fields(s, {"fsdp_gather_overhead_us": 1000.0})
    slower = simulate(gather, events=False).summary["step_time_s"]
    units = (s.layer_split[0] + 1) * s.num_microbatches  # every block and the root, per micro-batch
    assert slower - base == pytest.approx(unshards * units * 1e-3, rel=0.05)


def waiting_tp_run(
    name: str, micro_batch: int, wait_us: float, field: str = "tp_collective_wait_us"
) -> RunData:
    """A tp 2 run (dp 2 for the DDP wait) measured on a machine whose collectives each wait `wait_us`."""
    plan = {"tensor_parallel_degree": 2} if field.startswith("tp") else {"data_parallel_degree": 2}
    return measured_run(name, scenario(micro_batch, **plan), {**TRUE, field: wait_us})


def test_two_tensor_parallel_runs_recover_the_collectives_wait_and_one_does_not() -> None:
    runs = [waiting_tp_run(f"tp2 mb{b}", b, 400.0) for b in (1, 4)]
    assert fit_runs(runs).fields["tp_collective_wait_us"] == pytest.approx(400.0, rel=1e-6)
    one = fit_runs(runs[:1])
    assert "tp_collective_wait_us" not in one.fields
    assert any(n.startswith("tp_collective_wait_us not fitted") for n in one.notes)
    # a machine that waits longer than a scheduler period is clipped to the bound, and says so
    far = fit_runs([waiting_tp_run(f"tp2 mb{b}", b, 50_000.0) for b in (1, 4)])
    assert far.fields["tp_collective_wait_us"] == pytest.approx(12_000.0)
    assert any("tp_collective_wait_us: measured" in n and "clipped" in n for n in far.notes)


def test_the_collectives_wait_lengthens_only_tensor_parallel_steps_by_each_collective() -> None:
    """Each tp collective blocks its span: the step grows by (collectives a step) x the wait."""
    tp = scenario(2, tensor_parallel_degree=2)
    base = simulate(tp)
    waited = simulate(with_fields(tp, {"tp_collective_wait_us": 500.0}))
    per_rank = int((base.events["stream"] == "tp").sum()) // 2  # two tp ranks
    grew = waited.summary["step_time_s"] - base.summary["step_time_s"]
    assert grew == pytest.approx(per_rank * 500e-6, rel=1e-6)
    dp = scenario(2, data_parallel_degree=2)
    assert simulate(with_fields(dp, {"tp_collective_wait_us": 500.0}), events=False).summary[
        "step_time_s"
    ] == pytest.approx(simulate(dp, events=False).summary["step_time_s"])


def pipeline_run(name: str, micro_batch: int, p2p_us: float, remainder_us: float = 0.0) -> RunData:
    """A pp 2 run measured on a machine whose transfer sides each take `p2p_us` of host time."""
    s = scenario(micro_batch, pipeline_parallel_degree=2)
    return measured_run(name, s, {**TRUE, "p2p_overhead_us": p2p_us}, remainder_us)


def test_pipeline_runs_with_different_transfer_counts_recover_the_transfer_host_time() -> None:
    """mb 1 and 4 at global batch 8: 8 and 2 micro-batches, so 16 and 4 transfer sides per rank step;
    the slope over them is the per-side time, and a fixed per-step remainder stays out of it."""
    runs = [pipeline_run(f"pp2 mb{b}", b, 250.0, remainder_us=800.0) for b in (1, 4)]
    fit = fit_runs(runs)
    assert fit.fields["p2p_overhead_us"] == pytest.approx(250.0, rel=0.02)
    assert any("p2p_overhead_us = " in n and "+0.80 ms a step left over" in n for n in fit.notes)
    one = fit_runs([*runs[:1], pipeline_run("pp2 mb1 again", 1, 250.0)])  # one transfer count
    assert "p2p_overhead_us" not in one.fields
    assert any(n.startswith("p2p_overhead_us not fitted") for n in one.notes)


def test_untracked_time_is_what_no_span_covers() -> None:
    """Overlapping spans count once, a send in flight not at all; the rank's step ends at the end of
    its last span that holds its thread."""
    events = simulate(scenario(2, pipeline_parallel_degree=2)).events.assign(source="measured")
    rows = events[events["rank"] == 0].copy()
    rows["start_us"], rows["dur_us"] = 0.0, 0.0
    compute = rows.index[rows["stream"] == "compute"][:3]
    rows.loc[compute, ["start_us", "dur_us"]] = [[0.0, 100.0], [50.0, 100.0], [400.0, 100.0]]
    send = rows.index[rows["kind"] == "send"][0]
    rows.loc[send, ["start_us", "dur_us"]] = [200.0, 5_000.0]  # in flight: holds no thread
    untracked = untracked_per_step(rows)
    assert untracked is not None
    assert untracked[0] == pytest.approx(250e-6)  # [0, 500) less [0, 150) and [400, 500)


def test_two_ddp_runs_recover_their_collectives_wait_and_it_lengthens_only_their_steps() -> None:
    """DDP's all-reduce runs beside the last backward; its wait in a run is fitted as the tp one, and
    moves DDP / ZeRO-1 steps only (the rank waits for its last bucket before the optimizer)."""
    runs = [waiting_tp_run(f"dp2 mb{b}", b, 2_000.0, "ddp_collective_wait_us") for b in (1, 4)]
    fit = fit_runs(runs)
    assert fit.fields["ddp_collective_wait_us"] == pytest.approx(2_000.0, rel=1e-6)
    assert "tp_collective_wait_us" not in fit.fields
    wait = {"ddp_collective_wait_us": 2_000.0}
    for plan, moves in (
        ({"data_parallel_degree": 2}, True),
        ({"zero_stage": 1}, True),
        ({"zero_stage": 3}, False),
    ):
        s = scenario(2, **plan)
        base, waited = (simulate(x, events=False).summary["step_time_s"] for x in (s, with_fields(s, wait)))
        assert (waited > base + 1e-3) if moves else waited == pytest.approx(base)
