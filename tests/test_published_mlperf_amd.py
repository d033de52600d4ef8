"""The MLPerf Training v5.1 rows (benchmarks/published_mlperf.py) and AMD's MI325X rows
(benchmarks/published_amd.py) parse as their sources print them, and widen issue 32's Blackwell + AMD
group."""

from __future__ import annotations

import pytest

from benchmarks.published_amd import SOURCE as AMD_SOURCE
from benchmarks.published_data import (
    AMD_RUNS,
    BLACKWELL_RUNS,
    MLPERF_RUNS,
    PublishedRun,
    derive_step_time_s,
    scenario_dict,
)
from benchmarks.published_mlperf import RECIPES, SYSTEMS
from plancast.simulator.loader import parse_scenario

GPU_PREFIX = {"gb200": "GB200", "gb300": "GB300", "b200": "B200", "mi355x": "MI355X", "mi325x": "MI325X"}
"""What a row's name says of its accelerator -> the preset GPU's name prefix."""


@pytest.mark.parametrize("run", (*MLPERF_RUNS, *AMD_RUNS), ids=lambda r: r.name)
def test_every_new_row_parses_on_its_accelerator(run: PublishedRun) -> None:
    s = parse_scenario(scenario_dict(run), run.name).scenario
    assert s.world_size == run.num_gpus
    (prefix,) = {p for key, p in GPU_PREFIX.items() if f"-{key}-" in run.name}
    assert s.cluster.gpu.name.startswith(prefix)
    assert s.training.global_batch_size * s.training.seq_len == run.tokens_per_step
    assert derive_step_time_s(run) == pytest.approx(run.measured_step_time_s)
    assert run.framework == "megatron-lm"


@pytest.mark.parametrize("run", MLPERF_RUNS, ids=lambda r: r.name)
def test_mlperf_rows_run_the_configurations_precision(run: PublishedRun) -> None:
    s = parse_scenario(scenario_dict(run), run.name).scenario
    assert s.training.fp8 and s.training.fp8_recipe in RECIPES.values()
    assert ("nvfp4" in run.name) == (s.training.fp8_recipe == "nvfp4")
    assert s.training.fp8_param == (s.training.fp8_recipe != "nvfp4")  # FP8_PARAM_GATHER off under NVFP4
    assert run.cluster["preset"] in {preset for preset, _ in SYSTEMS.values()}


def test_amd_rows_read_the_tables_columns() -> None:
    by_name = {r.name: r for r in AMD_RUNS}
    assert all(r.source == AMD_SOURCE and r.reported.unit == "tokens/s/GPU" for r in AMD_RUNS)
    assert by_name["amd-mi325x-fp8-llama31-8b-8gpu"].reported.value == 16224
    fp8 = {r.name for r in AMD_RUNS if r.training.get("fp8")}
    assert fp8 == {r.name for r in AMD_RUNS if "-fp8-" in r.name}


def test_the_blackwell_and_amd_group_has_amd_rows_from_two_sources() -> None:
    amd = [r for r in (*MLPERF_RUNS, *AMD_RUNS) if r.cluster["preset"].startswith("mi3")]
    assert len(amd) >= 5 and len({r.source for r in amd}) == 2
    assert len({r.source for r in (*BLACKWELL_RUNS, *MLPERF_RUNS, *AMD_RUNS)}) >= 4


def test_tp_comm_overlap_follows_each_configuration() -> None:
    """On wherever tp > 1 but under NVFP4 (TP_COMM_OVERLAP=False) and in the University of Florida's
    B200 405B configurations, which comment the line out (benchmarks/published_mlperf.py TP_OVERLAP_OFF)."""
    overlapped = {r.name for r in MLPERF_RUNS if r.parallelism.get("tp_comm_overlap")}
    tp = {r.name for r in MLPERF_RUNS if r.parallelism.get("tensor_parallel_degree", 1) > 1}
    uf_405b = {r.name for r in MLPERF_RUNS if "University-of-Florida" in r.citation and "405b" in r.name}
    assert uf_405b == {"mlperf51-b200-fp8-llama31-405b-256gpu", "mlperf51-b200-fp8-llama31-405b-448gpu"}
    assert overlapped == {n for n in tp - uf_405b if "nvfp4" not in n}
    assert overlapped  # the GB200 / GB300 8B rows on 512 GPUs
