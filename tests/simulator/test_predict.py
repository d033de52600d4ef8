"""simulate(): determinism, symmetry, event structure, and accuracy against published runs."""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from benchmarks.published_runs import figure1, table4, table5
from plancast.simulator.loader import parse_scenario
from plancast.simulator.predict import simulate
from plancast.simulator.scenario import Scenario
from plancast.traces.schema import ALIGNMENT_KEY, validate
from plancast.traces.store import write_events


def scenario(**parallelism: Any) -> Scenario:
    data: dict[str, Any] = {
        "model": {"preset": "tiny-gpt"},
        "training": {"seq_len": 32, "micro_batch_size": 1, "global_batch_size": 8, "dtype": "fp32"},
        "parallelism": parallelism,
        "cluster": {
            "preset": "local-cpu",
            "gpus_per_node": 8,
            "tiers": [
                {"name": "loopback", "size": 4, "bandwidth_GBps": 1.0, "latency_us": 50.0},
                {"name": "tcp", "bandwidth_GBps": 0.5, "latency_us": 100.0},
            ],
        },
    }
    return parse_scenario(data).scenario


PLANS = {
    "dp8": {},
    "zero1": {"zero_stage": 1},
    "zero3": {"zero_stage": 3},
    "tp2-sp": {"tensor_parallel_degree": 2, "sequence_parallel": True},
    "3d": {"tensor_parallel_degree": 2, "pipeline_parallel_degree": 2, "zero_stage": 1},
    "interleaved": {
        "pipeline_parallel_degree": 2,
        "pipeline_parallel_schedule": "Interleaved1F1B",
        "virtual_stages_per_rank": 2,
    },
    "zb": {"pipeline_parallel_degree": 4, "pipeline_parallel_schedule": "ZeroBubble"},
}


@pytest.mark.parametrize("plan", PLANS)
def test_same_scenario_gives_byte_identical_events(plan: str, tmp_path: Path) -> None:
    a, b = simulate(scenario(**PLANS[plan])), simulate(scenario(**PLANS[plan]))
    write_events(tmp_path / "a.parquet", a.events)
    write_events(tmp_path / "b.parquet", b.events)
    assert (tmp_path / "a.parquet").read_bytes() == (tmp_path / "b.parquet").read_bytes()
    assert a.summary == b.summary


@pytest.mark.parametrize("plan", PLANS)
def test_full_fidelity_equals_symmetric_simulation(plan: str) -> None:
    sym = simulate(scenario(**PLANS[plan]))
    full = simulate(scenario(**PLANS[plan]), full_fidelity=True)
    key = [*ALIGNMENT_KEY, "stream", "peer"]
    left = sym.events.sort_values(key).reset_index(drop=True)
    right = full.events.sort_values(key).reset_index(drop=True)
    pd.testing.assert_frame_equal(left, right, check_exact=False, rtol=1e-9)
    assert sym.summary["step_time_s"] == pytest.approx(full.summary["step_time_s"], rel=1e-12)


@pytest.mark.parametrize("plan", PLANS)
def test_events_follow_the_schema_and_have_unique_keys(plan: str) -> None:
    s = scenario(**PLANS[plan])
    events = validate(simulate(s).events)
    assert sorted(events["rank"].unique()) == list(range(s.world_size))
    assert not events.duplicated(list(ALIGNMENT_KEY)).any()
    per_rank = events[events["kind"] == "forward"].groupby("rank").size()
    assert (per_rank == s.num_microbatches * s.vpp).all()
    assert (events.groupby("rank")["kind"].apply(lambda k: (k == "optimizer").sum()) == 1).all()


def test_summary_has_the_cli_contract_keys() -> None:
    summary = simulate(scenario(**PLANS["3d"])).summary
    for key in (
        "step_time_s",
        "bubble_fraction",
        "compute_time_s",
        "exposed_comm_time_s",
        "peak_memory_gib",
        "memory_gib",
        "num_parameters",
        "model_tflops_per_gpu",
        "mfu",
        "tokens_per_s",
        "fits_in_memory",
    ):
        assert key in summary
    assert set(summary["memory_gib"]) == {"parameters", "gradients", "optimizer", "activations", "gathered"}


def test_figure1_memory_within_10_percent() -> None:
    rows = figure1()
    assert len(rows) == 12
    worst = max(rows, key=lambda r: abs(r["error"]))
    assert abs(worst["error"]) < 0.10, worst


def test_table4_layer_times_within_15_percent() -> None:
    rows = table4()
    errors = [abs(r["forward_error"]) for r in rows] + [abs(r["backward_error"]) for r in rows]
    assert max(errors) < 0.15


def test_table5_iteration_times() -> None:
    """Korthikanti et al. 2022 Table 5: mean absolute percentage error <= 5%, no row worse than 10%."""
    errors = [abs(r["error"]) for r in table5()]
    assert statistics.fmean(errors) <= 0.05
    assert max(errors) <= 0.10


@pytest.mark.parametrize("plan", ["tp2-sp", "3d", "zero3"])
def test_summary_is_the_same_with_and_without_events(plan: str) -> None:
    with_events = simulate(scenario(**PLANS[plan]), events=True).summary
    without = simulate(scenario(**PLANS[plan]), events=False).summary
    assert with_events.keys() == without.keys()
    for key, value in with_events.items():
        assert value == (pytest.approx(without[key]) if not isinstance(value, dict) else without[key]), key


def test_ranks_sharing_cores_slow_each_other_down() -> None:
    """Four CPU ranks on two cores: compute queues for a core, so the step takes longer than with four."""
    def with_slots(slots: int | None) -> float:
        s = scenario(pipeline_parallel_degree=4, pipeline_parallel_schedule="GPipe")
        cluster = s.cluster.model_copy(update={"compute_slots_per_node": slots})
        return simulate(s.model_copy(update={"cluster": cluster}), events=False).summary["step_time_s"]

    assert with_slots(2) > with_slots(None)
    assert with_slots(8) == pytest.approx(with_slots(None))  # more cores than ranks: no contention
