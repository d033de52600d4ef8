"""``runtime.worker``'s pure parts: the summary, torchrun's environment and the fault hook."""

from __future__ import annotations

import os

import pytest

from plancast.runtime.schedstat import ThreadTimes
from plancast.runtime.worker import GiB, RankEnv, RankResult, fault_step, own_core_share, rank_env, summarize


def result(rank: int, times: list[float], losses: list[float | None], peak_gib: float) -> RankResult:
    memory = {"parameters": GiB, "gradients": GiB, "optimizer": 2 * GiB, "activations": 0}
    return RankResult(rank, times, losses, {**memory, "peak_bytes": int(peak_gib * GiB)})


def test_summary_takes_the_slowest_rank_per_step_and_skips_warmup() -> None:
    summary = summarize(
        [
            result(0, [9.0, 1.0, 3.0, 2.0], [None] * 4, peak_gib=5.0),
            result(1, [8.0, 2.0, 1.0, 4.0], [4.0, 3.0, 2.0, 1.0], peak_gib=6.0),
            result(2, [7.0, 1.0, 1.0, 1.0], [2.0, 1.0, 0.0, 1.0], peak_gib=4.0),
        ],
        steps=4,
    )
    assert summary["step_times_s"] == [9.0, 2.0, 3.0, 4.0]
    assert summary["step_time_s"] == 3.0  # median of steps 1..3; step 0 is warm-up
    assert summary["losses"] == [3.0, 2.0, 1.0, 1.0]  # mean over the ranks reporting one
    assert (summary["peak_memory_gib"], summary["peak_memory_rank"]) == (6.0, 1)
    parts = {"parameters": 1.0, "gradients": 1.0, "optimizer": 2.0, "activations": 0.0}
    assert summary["memory_gib"] == parts
    assert sorted(summary["rank_memory_gib"]) == ["0", "1", "2"]
    assert (summary["status"], summary["world_size"], summary["warmup_steps"]) == ("ok", 3, 1)


def test_a_single_step_is_its_own_median() -> None:
    summary = summarize([result(0, [2.5], [1.0], peak_gib=1.0)], steps=1)
    assert (summary["step_time_s"], summary["warmup_steps"]) == (2.5, 0)


def test_summary_has_the_ranks_core_wait_where_every_rank_recorded_it() -> None:
    ranks = [result(0, [9.0, 1.0, 3.0], [None] * 3, 1.0), result(1, [8.0, 2.0, 1.0], [1.0] * 3, 1.0)]
    ranks[0].core_wait_s, ranks[1].core_wait_s = [5.0, 0.002, 0.004], [5.0, 0.006, 0.0]
    summary = summarize(ranks, steps=3)
    assert summary["core_wait_s"] == pytest.approx(0.003)  # median over steps 1-2 of the ranks' mean
    assert summary["rank_core_wait_s"] == pytest.approx({"0": 0.003, "1": 0.003})
    ranks[1].core_wait_s = None  # a rank whose kernel has no schedstat: nothing said
    assert "core_wait_s" not in summarize(ranks, steps=3)


def test_rank_env_reads_torchrun_variables() -> None:
    env = rank_env({"RANK": "5", "WORLD_SIZE": "8", "LOCAL_RANK": "1", "GROUP_RANK": "2"})
    assert env == RankEnv(rank=5, world_size=8, local_rank=1, node=2)


def test_rank_env_outside_torchrun_says_how_to_start() -> None:
    with pytest.raises(SystemExit, match="start it under torchrun"):
        rank_env({"RANK": "0"})


FAULTS: list[tuple[dict[str, str], int, int | None]] = [
    ({}, 0, None),
    ({"PLANCAST_FAULT_RANK": "1", "PLANCAST_FAULT_STEP": "2"}, 1, 2),
    ({"PLANCAST_FAULT_RANK": "1", "PLANCAST_FAULT_STEP": "2"}, 0, None),
    ({"PLANCAST_FAULT_RANK": "1"}, 1, None),
]


@pytest.mark.parametrize(("environ", "rank", "step"), FAULTS)
def test_fault_hook(environ: dict[str, str], rank: int, step: int | None) -> None:
    assert fault_step(environ, rank) == step


def test_summary_has_the_smallest_core_share_of_the_ranks_compute_threads() -> None:
    """core_share: CPU / (CPU + run-queue wait) of each rank's compute thread over the scored steps,
    the smallest over the ranks (the slowest sets the step); step 0 (warm-up) is left out."""
    ranks = [result(0, [9.0, 1.0, 3.0], [None] * 3, 1.0), result(1, [8.0, 2.0, 1.0], [1.0] * 3, 1.0)]
    ranks[0].compute_thread_s = [ThreadTimes(0.1, 5.0), ThreadTimes(0.3, 0.1), ThreadTimes(0.3, 0.1)]
    ranks[1].compute_thread_s = [ThreadTimes(0.1, 5.0), ThreadTimes(0.4, 0.0), ThreadTimes(0.2, 0.0)]
    summary = summarize(ranks, steps=3)
    assert summary["rank_core_share"] == pytest.approx({"0": 0.75, "1": 1.0})
    assert summary["core_share"] == pytest.approx(0.75)
    ranks[1].compute_thread_s = None  # a rank whose kernel has no schedstat: nothing said
    assert "core_share" not in summarize(ranks, steps=3)


def test_the_share_a_plans_own_ranks_leave_each_other_is_cores_over_ranks() -> None:
    """core_share_own: min(1, cores / ranks) on this process's cores, recorded beside core_share so
    compare does not call a plan of more ranks than cores 'busy' for the sharing it prices itself."""
    cores = len(os.sched_getaffinity(0))
    assert own_core_share(cores) == 1.0
    assert own_core_share(2 * cores) == pytest.approx(0.5)
    assert own_core_share(1) == 1.0


def test_summary_has_the_slowest_ranks_speed_probe_where_every_rank_ran_it() -> None:
    """speed_probe_s: the mean of the before/after probe of the rank whose mean is the largest (the
    slowest sets the step), with that rank's two readings beside it (runtime/microbench_probe.py)."""
    ranks = [result(1, [1.0, 1.0], [1.0] * 2, 1.0), result(0, [1.0, 1.0], [None] * 2, 1.0)]
    ranks[0].speed_probes = ({"probe_s": 0.008, "workload": "w"}, {"probe_s": 0.010, "workload": "w"})
    ranks[1].speed_probes = ({"probe_s": 0.007, "workload": "w"}, {"probe_s": 0.007, "workload": "w"})
    summary = summarize(ranks, steps=2)
    assert summary["speed_probe_s"] == pytest.approx(0.009)
    assert (summary["speed_probe_before_s"], summary["speed_probe_after_s"]) == (0.008, 0.010)
    assert summary["rank_speed_probe_s"] == {"0": [0.007, 0.007], "1": [0.008, 0.010]}
    assert summary["speed_probe_workload"] == "w"
    ranks[1].speed_probes = (None, None)  # a rank that never probed: nothing said
    assert "speed_probe_s" not in summarize(ranks, steps=2)


def probed(rank: int, readings: list[tuple[int, float, float, float, float]]) -> RankResult:
    ranked = result(rank, [0.2, 0.1, 0.1, 0.1, 0.1], [1.0] * 5, 1.0)
    pair = {"probe_s": 0.010 + rank * 0.001, "workload": "cpu"}
    ranked.speed_probes = (pair, {**pair, "probe_s": 0.012})
    ranked.speed_readings = readings
    return ranked


def test_summary_keeps_the_readings_between_steps_with_the_slowest_rank_at_each() -> None:
    ranks = [probed(0, [(2, 0.020, 0.001, 0.002, 0.06)]), probed(1, [(2, 0.015, 0.003, 0.0, 0.03)])]
    summary = summarize(ranks, steps=5)
    assert summary["speed_probe_readings"] == {"after_step": [-1, 2, 4], "probe_s": [0.011, 0.020, 0.012]}
    assert summary["rank_speed_probe_readings_s"]["1"] == [[-1, 0.011], [2, 0.015], [4, 0.012]]
    assert summary["rank_speed_probe_gaps_s"] == {"0": [[2, 0.001, 0.002]], "1": [[2, 0.003, 0.0]]}
    assert summary["speed_probe_between_cost"] == pytest.approx(0.06 / 0.6)
    ranks[1].speed_readings = []  # ranks that read after different steps (a resumed rank): nothing said
    alone = summarize(ranks, steps=5)
    assert "speed_probe_readings" not in alone and alone["speed_probe_s"] == pytest.approx(0.0115)
    ranks[0].speed_readings = []  # no rank read between steps (a short or resumed run): the pair alone
    short = summarize(ranks, steps=5)
    assert "speed_probe_readings" not in short and short["speed_probe_before_s"] == pytest.approx(0.011)
