"""Every Blackwell, torchtitan Float8, MLPerf Training v5.1 and AMD MI325X row that trained is predicted
to fit, but for the rows named
below with the memory term each points at (strict both ways: a named row that starts to fit must leave
the list). The other published rows have the same check in tests/test_published_memory.py."""

from __future__ import annotations

import pytest

from benchmarks.fit_published import run_scenario
from benchmarks.published_data import AMD_RUNS, BLACKWELL_RUNS, MLPERF_RUNS, TORCHTITAN_FP8_RUNS
from plancast.simulator.predict import simulate

# What the model still counts that these Llama runs do not keep: Llama has no dropout (config.json
# attention_dropout 0.0, no hidden dropout), yet each block is counted with two 1-byte dropout masks per
# token and hidden unit (costs/memory.py layer_activation_bytes: no model key says "no dropout" yet).
_DROPOUT = "dropout masks Llama does not keep: ~10 GiB on rank 0's 158 in-flight blocks, 9.8 GiB over"
_FSDP = "dropout masks Llama does not keep: ~10 GiB on the 40 resident blocks, 4.8 GiB over"
_TT_INTERLEAVED = (
    "8 micro-batches of 4 samples (torchtitan 9dec370's default, benchmarks/published_torchtitan_fp8.py) in "
    "flight under Interleaved 1F1B: 83.2 GiB predicted against 82.8 usable; measured 72.7 GiB, below the "
    "1F1B row's 82.5, which the model's in-flight count does not reproduce"
)
NOT_FITTING_YET = {
    "torchtitan-h100-fp8-llama31-405b-512gpu-interleaved": _TT_INTERLEAVED,
    "bridge-gb200-fp8-llama31-405b-256gpu": _DROPOUT,
    "bridge-gb200-fp8cs-llama31-405b-256gpu": _DROPOUT,
    "bridge-gb200-fp8-llama3-70b-64gpu-fsdp": _FSDP,
    "bridge-gb200-fp8cs-llama3-70b-64gpu-fsdp": _FSDP,
}
RUNS = {r.name: r for r in (*BLACKWELL_RUNS, *TORCHTITAN_FP8_RUNS, *MLPERF_RUNS, *AMD_RUNS)}


@pytest.mark.parametrize("name", sorted(RUNS))
def test_every_row_that_trained_is_predicted_to_fit(name: str) -> None:
    fits = simulate(run_scenario(RUNS[name]), events=False).summary["fits_in_memory"]
    if name in NOT_FITTING_YET:
        assert not fits, f"{name} fits now: remove it from NOT_FITTING_YET"
    else:
        assert fits, f"{name} trained but is predicted not to fit"


def test_the_known_misses_are_rows_that_exist() -> None:
    assert set(NOT_FITTING_YET) <= set(RUNS)
