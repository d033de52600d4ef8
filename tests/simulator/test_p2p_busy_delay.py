"""ComputeModel.p2p_busy_delay_us (a pipeline transfer's mean extra time when its sender computes on a
machine with no idle core, measured by runtime/microbench_host.py) and p2p_rendezvous (gloo's protocol:
a transfer starts once both sides have posted; the runtime keeps each rank's next receive posted ahead,
runtime/parallel/pp.py): the delay lengthens pipeline steps only where a receive is posted while its
sender computes, leaves plans without transfers alone, and the profile bounds it by a scheduler period."""

from __future__ import annotations

from typing import Any

import pytest

from plancast.simulator.calibration.microbench import BOUNDS, bounded
from plancast.simulator.loader import parse_scenario
from plancast.simulator.predict import simulate


def scenario(delay_us: float, rendezvous: bool = False, batch: int = 8, **parallelism: Any) -> Any:
    data = {
        "model": {"preset": "tiny-gpt"},
        "training": {"seq_len": 128, "micro_batch_size": 2, "global_batch_size": batch, "dtype": "fp32"},
        "parallelism": parallelism,
        "cluster": {
            "preset": "local-cpu",
            "gpus_per_node": 2,
            "compute": {"p2p_busy_delay_us": delay_us, "p2p_rendezvous": rendezvous},
        },
    }
    return parse_scenario(data).scenario


def step(delay_us: float, rendezvous: bool = False, batch: int = 8, **parallelism: Any) -> float:
    s = scenario(delay_us, rendezvous, batch, **parallelism)
    return float(simulate(s, events=False).summary["step_time_s"])


@pytest.mark.parametrize("schedule", ["1F1B", "GPipe"])
def test_a_busy_delay_lengthens_a_pipeline_step(schedule: str) -> None:
    plan = {"pipeline_parallel_degree": 2, "pipeline_parallel_schedule": schedule}
    assert step(1000.0, **plan) > step(0.0, **plan) + 1e-3  # at least one transfer on the critical path


def test_the_local_cpu_preset_models_gloo_as_a_rendezvous() -> None:
    data = {
        "model": {"preset": "tiny-gpt"},
        "training": {"seq_len": 128, "micro_batch_size": 2, "global_batch_size": 8},
        "cluster": {"preset": "local-cpu"},
    }
    assert parse_scenario(data).scenario.cluster.compute.p2p_rendezvous


def test_under_rendezvous_the_delay_falls_only_on_receives_posted_while_the_sender_computes() -> None:
    """GPipe, 8 micro-batches, a last stage three times the first: it posts its next forward receive
    as each activation lands, after that activation's successor was sent and while the first stage
    still computes, so a delay longer than a forward pass lengthens the step. 1F1B: every receive is
    posted while the peer waits or before the peer's send, so the delay changes nothing."""
    gpipe = {
        "pipeline_parallel_degree": 2,
        "pipeline_parallel_schedule": "GPipe",
        "pipeline_layer_split": [1, 3],
    }
    one_f_one_b = {"pipeline_parallel_degree": 2, "pipeline_parallel_schedule": "1F1B"}
    long = 1e6  # 1 s: longer than any pass of this plan on the shipped local-cpu numbers
    assert step(long, True, 16, **gpipe) > step(0.0, True, 16, **gpipe) + 0.1
    assert step(long, True, **one_f_one_b) == pytest.approx(step(0.0, True, **one_f_one_b))


@pytest.mark.parametrize("schedule", ["1F1B", "GPipe", "Interleaved1F1B"])
def test_a_rendezvous_send_lasts_from_its_post_to_its_landing(schedule: str) -> None:
    """Each send span ends when its receive can end: the matching recv span ends at or after it."""
    v = 2 if schedule == "Interleaved1F1B" else 1
    s = scenario(
        2_000.0,
        True,
        16,
        pipeline_parallel_degree=2,
        pipeline_parallel_schedule=schedule,
        virtual_stages_per_rank=v,
    )
    events = simulate(s).events
    assert events is not None
    sends = events[events.kind == "send"].set_index(["peer", "stage", "microbatch", "index"])
    recvs = events[events.kind == "recv"]
    assert len(sends) == len(recvs) > 0
    for r in recvs.itertuples():
        stage = r.stage - 1 if r.index == 0 else r.stage + 1
        sent = sends.loc[(r.rank, stage, r.microbatch, r.index)]
        assert r.start_us + r.dur_us >= sent.start_us + sent.dur_us - 1e-6
        assert sent.dur_us > 0


def test_plans_without_transfers_are_unchanged() -> None:
    assert step(1000.0, data_parallel_degree=2) == pytest.approx(step(0.0, data_parallel_degree=2))


def test_the_bound_is_a_scheduler_period() -> None:
    value, clipped = bounded("p2p_busy_delay_us", 50_000.0)
    assert value == BOUNDS["p2p_busy_delay_us"].high_us and clipped is not None
    assert bounded("p2p_busy_delay_us", 900.0) == (900.0, None)
