"""Every MLPerf Training v5.1 row and AMD MI325X row (benchmarks/published_mlperf.py, published_amd.py)
trained, so each must be predicted to fit, but for the rows named below with the memory term each points at
(strict both ways: a named row that starts to fit must leave the list). The older Blackwell rows have the
same check in tests/test_published_blackwell_memory.py."""

from __future__ import annotations

import pytest

from benchmarks.fit_published import run_scenario
from benchmarks.published_data import AMD_RUNS, MLPERF_RUNS
from plancast.simulator.predict import simulate

NOT_FITTING_YET: dict[str, str] = {}
RUNS = {r.name: r for r in (*MLPERF_RUNS, *AMD_RUNS)}


@pytest.mark.parametrize("name", sorted(RUNS))
def test_every_new_row_that_trained_is_predicted_to_fit(name: str) -> None:
    fits = simulate(run_scenario(RUNS[name]), events=False).summary["fits_in_memory"]
    if name in NOT_FITTING_YET:
        assert not fits, f"{name} fits now: remove it from NOT_FITTING_YET"
    else:
        assert fits, f"{name} trained but is predicted not to fit"


def test_the_known_misses_are_rows_that_exist() -> None:
    assert set(NOT_FITTING_YET) <= set(RUNS)
