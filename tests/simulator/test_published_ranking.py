"""Where the validation set holds several published plans of one model on one cluster, the simulator
(which ranks the sweep's finalists) orders them as their measured throughput does (issue 9)."""

from __future__ import annotations

import pytest

from benchmarks.fit_published import run_scenario
from benchmarks.published_data import PublishedRun, groups
from plancast.simulator.predict import simulate

GROUPS = groups()

# Known misses, each with its cause; strict: the test fails once the model gets them right.
KNOWN_MISSES = {
    # ZeRO-3 on 384 GPUs (one micro-batch of 4 sequences per GPU): plancast hides the NIC-paced gathers
    # behind the (4x larger) compute and predicts it faster than 768 and 1,536 GPUs; the measured step
    # lies between their maximum and their sum: the overlap is partial on the GPUs, ideal in plancast.
    "narayanan2021:narayanan2021-t2-zero3-gpt3-175b-384",
}


def tokens_per_s(run: PublishedRun) -> float:
    return run.tokens_per_step / simulate(run_scenario(run), events=False).summary["step_time_s"]


def test_the_data_set_has_groups() -> None:
    assert len(GROUPS) >= 8


@pytest.mark.parametrize(
    "key",
    [
        pytest.param(k, marks=pytest.mark.xfail(strict=True, reason="known miss, see KNOWN_MISSES"))
        if k in KNOWN_MISSES
        else k
        for k in GROUPS
    ],
)
def test_predicted_order_matches_the_measured_order(key: str) -> None:
    runs = GROUPS[key]
    measured = sorted(runs, key=lambda r: -r.measured_tokens_per_s)
    predicted = sorted(runs, key=lambda r: -tokens_per_s(r))
    assert [r.name for r in predicted] == [r.name for r in measured]
