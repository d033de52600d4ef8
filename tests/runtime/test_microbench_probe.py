"""runtime/microbench_probe.py: the machine-speed probe runs its fixed workload in this thread's CPU
time, and the run's summary keys come from every rank's before/after pair."""

from __future__ import annotations

import time

import pytest
import torch

from plancast.runtime.microbench_probe import (
    PROBE_SIZES,
    probe,
    probe_pair_summary,
    profile_probe,
    workload,
)

CPU = torch.device("cpu")


def test_a_probe_reads_the_three_kernels_in_cpu_time() -> None:
    reading = probe(CPU, repeat=4)
    kernels = reading["kernel_s"]
    assert set(kernels) == {"gemm", "elementwise", "dispatch"}
    assert all(seconds > 0 for seconds in kernels.values())
    assert reading["probe_s"] == pytest.approx(sum(kernels.values()))
    assert reading["clock"] == "thread cpu" and reading["workload"] == workload(CPU)
    assert 0 < reading["cpu_share"] <= 1 and reading["wall_s"] > 0
    assert reading["probe_wall_s"] > 0


def test_a_thread_that_waits_for_a_core_does_not_read_slower() -> None:
    """Thread CPU time: a probe whose thread sleeps between its samples (as one waiting on a run queue
    would) still counts only its own work; its wall time grows, its probe time does not by as much."""
    calls = 0
    real = time.thread_time

    def sleepy_clock() -> float:
        nonlocal calls
        calls += 1
        time.sleep(0.02)  # off the CPU: wall time passes, this thread's CPU time does not
        return real()

    baseline = probe(CPU, repeat=4)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr("plancast.runtime.microbench_probe._cpu_clock", sleepy_clock)
        slept = probe(CPU, repeat=4)
    assert calls > 0
    # each sample holds one 20 ms sleep: read as wall time it would add 3 x 20 ms to probe_s, far more
    # than this machine's speed moves a ~7 ms probe (by up to 40%)
    assert slept["probe_s"] < baseline["probe_s"] + 0.03
    # per kernel: a start read in each of the 5 rounds (warm-up too) and an end read in the 4 sampled
    # ones, each sleeping 20 ms: 9 sleeps (counting 10 failed CI at 0.594 s against 0.6 on a fast run)
    assert calls == len(slept["kernel_s"]) * (5 + 4)
    assert slept["wall_s"] >= calls * 0.02
    # the wall clock saw the sleeps: each kernel's sample ends with one 20 ms sleep inside the clock's
    # read, a floor no load can lower (comparing with the baseline's wall time instead failed at load ~5)
    assert slept["probe_wall_s"] >= len(slept["kernel_s"]) * 0.02


def test_the_workload_names_its_device_and_sizes() -> None:
    cpu, gpu = workload(CPU), workload(torch.device("cuda", 0))
    assert cpu.startswith("cpu:") and gpu.startswith("cuda:") and cpu != gpu
    assert f"mm {PROBE_SIZES['cpu'].gemm_edge}^3" in cpu


def reading(probe_s: float) -> dict[str, object]:
    return {"probe_s": probe_s, "probe_wall_s": 2 * probe_s, "workload": "w"}


@pytest.mark.parametrize(
    ("pairs", "expected"),
    [
        # the slowest rank's mean sets the run's probe, with its own before and after
        ([(reading(1.0), reading(1.2)), (reading(2.0), reading(1.0))], (1.5, 2.0, 1.0)),
        ([(reading(1.0), reading(1.0))], (1.0, 1.0, 1.0)),
    ],
)
def test_the_summary_takes_the_slowest_ranks_pair(
    pairs: list[tuple[dict[str, object], dict[str, object]]], expected: tuple[float, float, float]
) -> None:
    keys = probe_pair_summary(pairs)
    assert (keys["speed_probe_s"], keys["speed_probe_before_s"], keys["speed_probe_after_s"]) == expected
    assert keys["speed_probe_workload"] == "w"
    assert list(keys["rank_speed_probe_s"]) == [str(r) for r in range(len(pairs))]


def test_a_rank_without_a_pair_leaves_the_run_without_a_probe() -> None:
    assert probe_pair_summary([(reading(1.0), reading(1.0)), (None, None)]) == {}
    assert probe_pair_summary([]) == {}


def test_a_profile_keeps_every_reading_and_their_mean() -> None:
    record = profile_probe([reading(1.0), reading(3.0), reading(5.0)], 7.0)
    assert (record["probe_s"], record["probe_wall_s"], record["workload"]) == (3.0, 7.0, "w")
    assert record["probe_wall_readings_s"] == 6.0
    assert [r["probe_s"] for r in record["readings"]] == [1.0, 3.0, 5.0]
