"""Published, measured training runs: the validation set of issue 9 (MoE / long-context rows: issue 13).

Each `PublishedRun` is written the way a user would write the run: only what the source says about the
model, batch, plan and machines, plus the framework name. Whatever the source leaves open and had to be
chosen is listed in `assumptions`, one line each. `measured_step_time_s` is the iteration time; when the
source reports throughput instead, `reported` keeps the raw figure and `derive_step_time_s` recomputes
the step time from it with the FLOP formula the source itself used (tests check the two agree).

Pure data: no simulation here. `scenario_dict(run)` gives the TOML-shaped tables for
`plancast.simulator.loader.parse_scenario` (without the framework key); `groups()` the runs that are
several plans of one model on one cluster.
"""

from __future__ import annotations

import json
from collections import defaultdict

from benchmarks.published_amd import amd_runs
from benchmarks.published_blackwell import blackwell_runs
from benchmarks.published_fp8 import fp8_runs
from benchmarks.published_fsdp import mosaic, torchtitan
from benchmarks.published_megatron import bloom, korthikanti, llama3_row, megascale, narayanan
from benchmarks.published_mlperf import mlperf_runs
from benchmarks.published_moe import moe_and_long_context
from benchmarks.published_moe2 import automodel_runs, bridge_runs
from benchmarks.published_moe3 import long_context_runs, modelzoo_runs
from benchmarks.published_record import (
    FlopFormula,
    Framework,
    PublishedRun,
    Reported,
    Unit,
    derive_step_time_s,
    model_table,
    scenario_dict,
    step_flops,
)
from benchmarks.published_torchtitan_fp8 import torchtitan_fp8_runs

__all__ = [
    "AMD_RUNS",
    "BLACKWELL_RUNS",
    "FP8_RUNS",
    "MLPERF_RUNS",
    "MOE_AND_LONG_CONTEXT_RUNS",
    "MOE_RUNS",
    "RUNS",
    "TORCHTITAN_FP8_RUNS",
    "FlopFormula",
    "Framework",
    "PublishedRun",
    "Reported",
    "Unit",
    "derive_step_time_s",
    "groups",
    "model_table",
    "scenario_dict",
    "step_flops",
]


RUNS: tuple[PublishedRun, ...] = (
    *korthikanti(),
    *narayanan(),
    *megascale(),
    llama3_row(8192, 8, 16, 1, 8192, 2048, 430, 12.54),
    llama3_row(16384, 8, 16, 1, 8192, 2048, 400, 6.740),
    *torchtitan(),
    *mosaic(),
    bloom(),
)
"""Dense runs that parse on today's simulator."""

MOE_AND_LONG_CONTEXT_RUNS: tuple[PublishedRun, ...] = moe_and_long_context()
"""Runs that need expert or context parallelism (issue 13): written with issue 13's key names."""

MOE_RUNS: tuple[PublishedRun, ...] = (
    *(r for r in MOE_AND_LONG_CONTEXT_RUNS if model_table(r).get("num_local_experts")),
    *bridge_runs(),
    *automodel_runs(),
    *modelzoo_runs(),
    *long_context_runs(),
)
"""Every published mixture-of-experts run (issue 31): scored leave-one-source-out by published_runs."""

FP8_RUNS: tuple[PublishedRun, ...] = fp8_runs()
"""Runs whose GEMMs train in FP8 (training.fp8), held out of every fit like the MoE rows."""

BLACKWELL_RUNS: tuple[PublishedRun, ...] = blackwell_runs()
"""Runs on Blackwell (DGX B200, GB200 / GB300 NVL72) in FP8, MXFP8 and NVFP4 (issue 32), never fitted on."""

TORCHTITAN_FP8_RUNS: tuple[PublishedRun, ...] = torchtitan_fp8_runs()
"""torchtitan's torchao Float8 rows on H100 (issue 32), never fitted on."""

MLPERF_RUNS: tuple[PublishedRun, ...] = mlperf_runs()
"""MLPerf Training v5.1 Llama 3.1 8B / 405B runs on MI355X, B200, GB200, GB300 (issue 32), never fitted on."""

AMD_RUNS: tuple[PublishedRun, ...] = amd_runs()
"""AMD ROCm performance-page rows on MI325X (Primus, Megatron-LM backend; issue 32), never fitted on."""


def groups(runs: tuple[PublishedRun, ...] = RUNS) -> dict[str, tuple[PublishedRun, ...]]:
    """Runs that are several plans of one model on one cluster at one sequence length, by a key naming
    both. Plans of a group may differ in batch: rank them by `measured_tokens_per_s`."""
    by_key: dict[str, list[PublishedRun]] = defaultdict(list)
    for run in runs:
        key = json.dumps([run.model, run.cluster, run.training["seq_len"]], sort_keys=True)
        by_key[key].append(run)
    return {
        f"{members[0].source}:{members[0].name}": tuple(members)
        for members in by_key.values()
        if len(members) > 1
    }
