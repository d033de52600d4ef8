"""Published and measured peak memory per GPU: the memory validation set (issue 33). Data only.

Each `MemoryRow` is a run whose source states its peak memory, written as a user would write the plan,
with the figure the source reports and which statistic it is: "reserved" (the caching allocator's
`torch.cuda.max_memory_reserved`) or "allocated" (`max_memory_allocated`). What the source leaves open is
listed in `assumptions`. The runs of benchmarks/published_data.py that report memory (torchtitan's eager
and compiled Llama 3.1 8B rows) are scored beside these (benchmarks/published_runs.py `score_memory`).
No constant of the memory model was fitted on any row.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from benchmarks.published_fsdp import _H100_96GB, TORCHTITAN_H100
from benchmarks.published_record import cluster_table, plan_table, training_table

Metric = Literal["reserved", "allocated"]
GPU_RUNS = Path(__file__).resolve().parent.parent / "tests" / "data" / "gpu_runs"


@dataclass(frozen=True)
class MemoryRow:
    name: str
    source: str
    citation: str
    scenario: dict[str, Any] = field(hash=False)
    """The scenario tables, framework included."""
    measured_gib: float
    metric: Metric
    assumptions: tuple[str, ...] = ()


# ------------------------------------------------------------------------- torchtitan, Tables 1-6
# docs/performance.md (commit eaea6f6): Grand Teton H100 96GB at 500 W; "Memory(GiB)" is train.py's
# max_reserved_gib. Every row but Table 1/3's eager and compiled ones (benchmarks/published_fsdp.py)
# used torch.compile and Float8 (torchao, per-tensor scaling on nn.Linear).
_TT_ASSUMPTIONS = (
    "torch.compile (per block): elementwise 'fused'; Float8 linears (torchao): training.fp8 under FSDP2, "
    "whose gathered weights are cast per use (no step-long FP8 copies)",
    "FSDP2 over dp x cp (torchtitan's dp_shard_cp mesh): zero_stage 3, fp32 gradient reduce-scatter; under "
    "PP zero_stage 2, FSDP2 without resharding after forward (torchtitan 9dec370 parallelize_llama.py "
    "apply_fsdp: reshard_after_forward = False when PP is on)",
    "full AC = recompute 'full'; selective = per-op SAC; SDPA fused attention",
    "pipeline micro-batches: torchtitan's default then, one per pipeline rank (torchtitan 9dec370 "
    "torchtitan/parallelisms/pipelining_utils.py: pipeline_parallel_microbatches defaults to "
    "pipeline_parallel_degree), so 8 of 4 samples under Interleaved 1F1B too",
    "pipeline receive buffers per micro-batch, kept for the step: torch.distributed.pipelining as of the "
    "benchmark's torch (pytorch/pytorch#136380): parallelism.pipeline_receive_buffers 'per_microbatch'",
    "pipeline stages keep every micro-batch's output for the step (stage.output_chunks: the boundary "
    "activation, the last stage's logits) in torch 1963fc8, before pytorch/pytorch#153383: "
    "parallelism.pipeline_output_chunks 'every_stage'",
)
# name, table, preset, GPUs, seq, local batch, fsdp, tp, pp, cp, schedule, v, recompute, memory
_TT_ROWS = (
    ("t1-8b-fsdp-compile-float8", "Table 1", "llama3-8b", 8, 8192, 2, 8, 1, 1, 1, None, 1, "selective", 76.8),
    ("t3-8b-fsdp-compile-float8", "Table 3", "llama3-8b", 128, 8192, 2, 128, 1, 1, 1, None, 1, "selective",
     61.8),
    ("t2-8b-fsdp8-cp1-32k", "Table 2", "llama3-8b", 8, 32768, 1, 8, 1, 1, 1, None, 1, "full", 83.9),
    ("t2-8b-fsdp4-cp2-64k", "Table 2", "llama3-8b", 8, 65536, 1, 4, 1, 1, 2, None, 1, "full", 84.2),
    ("t2-8b-fsdp2-cp4-128k", "Table 2", "llama3-8b", 8, 131072, 1, 2, 1, 1, 4, None, 1, "full", 84.0),
    ("t2-8b-fsdp1-cp8-256k", "Table 2", "llama3-8b", 8, 262144, 1, 1, 1, 1, 8, None, 1, "full", 84.5),
    ("t4-70b-2d", "Table 4", "llama3-70b", 256, 8192, 16, 32, 8, 1, 1, None, 1, "full", 71.9),
    ("t5-405b-3d-1f1b", "Table 5", "llama3-405b", 512, 8192, 32, 8, 8, 8, 1, "1F1B", 1, "full", 82.5),
    ("t5-405b-3d-interleaved", "Table 5", "llama3-405b", 512, 8192, 32, 8, 8, 8, 1, "Interleaved1F1B", 2,
     "full", 72.7),
    ("t6-405b-4d-cp1-32k", "Table 6", "llama3-405b", 512, 32768, 8, 8, 8, 8, 1, "1F1B", 1, "full", 75.3),
    ("t6-405b-4d-cp2-64k", "Table 6", "llama3-405b", 512, 65536, 8, 4, 8, 8, 2, "1F1B", 1, "full", 75.9),
    ("t6-405b-4d-cp4-128k", "Table 6", "llama3-405b", 512, 131072, 8, 2, 8, 8, 4, "1F1B", 1, "full", 77.1),
    ("t6-405b-4d-cp8-256k", "Table 6", "llama3-405b", 512, 262144, 8, 1, 8, 8, 8, "1F1B", 1, "full", 84.9),
)


def _torchtitan_row(row: tuple[Any, ...]) -> MemoryRow:
    name, table, preset, gpus, seq, local, fsdp, tp, pp, cp, schedule, v, recompute, memory = row
    microbatches = pp  # torchtitan 9dec370: n_microbatches defaults to the pipeline degree (_TT_ASSUMPTIONS)
    extra: dict[str, Any] = {"context_parallel_degree": cp} if cp > 1 else {}
    if tp > 1:
        extra["sequence_parallel"] = True
    zero = 2 if pp > 1 else 3  # under PP torchtitan keeps FSDP2 units gathered (_TT_ASSUMPTIONS)
    plan = plan_table(tp, pp, v, zero_stage=zero, fsdp_reduce_dtype="fp32", framework="torchtitan", **extra)
    if schedule:
        plan["pipeline_parallel_schedule"] = schedule
        plan["pipeline_receive_buffers"] = "per_microbatch"
        plan["pipeline_output_chunks"] = "every_stage"
    training = training_table(
        seq,
        local // microbatches,
        local * fsdp,
        "bf16",
        recompute,
        flash_attention=True,
        selective_recompute="op",
        elementwise="fused",
        fp8=True,
    )
    return MemoryRow(
        f"torchtitan-h100-{name}",
        "torchtitan",
        f"{TORCHTITAN_H100.split(', TPS/GPU')[0]}; {table}",
        {
            "model": {"preset": preset},
            "training": training,
            "parallelism": plan,
            "cluster": cluster_table("dgx-h100-80gb", gpus, gpu=_H100_96GB),
        },
        memory,
        "reserved",
        _TT_ASSUMPTIONS,
    )


# ------------------------------------------------------------------ Megatron-LM memory analysis tool
MEGATRON_PR482 = (
    "NVIDIA/Megatron-LM pull request #482, tools/get_training_info/README.md: Llama2 7B on one 8 x H800 "
    "node, Peak_Memory_Actual = torch.cuda.max_memory_allocated after several iterations (GB read as "
    "GiB, as torch reports it), with --use-flash-attn --use-distributed-optimizer --swiglu --bf16"
)
_PR482_ASSUMPTIONS = (
    "seq_len 2048: the table states none; the README's example script uses --seq-length 2048",
    "Megatron-LM (2023, local transformer, no sequence parallel, no recompute): framework megatron-lm, "
    "its fp32 main gradients and distributed optimizer (zero_stage 1)",
    "vocab 32000 (Llama 2), untied embeddings",
    "dropout: Megatron-LM's defaults, --hidden-dropout 0.1 and --attention-dropout 0.1 (arguments.py): the "
    "flags the README lists set neither, so each block keeps its two hidden-dropout masks",
)
# MBS, GBS, DP, PP, TP, Peak_Memory_Actual
_PR482_ROWS = (
    (2, 2048, 8, 1, 1, 69.1),
    (4, 512, 4, 1, 2, 55.7),
    (2, 2048, 4, 2, 1, 49.8),
    (4, 128, 1, 1, 8, 28.8),
)


def _megatron_row(mbs: int, gbs: int, dp: int, pp: int, tp: int, memory: float) -> MemoryRow:
    return MemoryRow(
        f"megatron-pr482-llama2-7b-dp{dp}-pp{pp}-tp{tp}-mbs{mbs}",
        "megatron-lm-pr482",
        MEGATRON_PR482,
        {
            "model": {"preset": "llama2-7b", "hidden_dropout": 0.1, "attention_dropout": 0.1},
            "training": training_table(2048, mbs, gbs, "bf16", "none", flash_attention=True),
            "parallelism": plan_table(tp, pp, zero_stage=1, framework="megatron-lm"),
            "cluster": {"preset": "hgx-h800", "num_nodes": 1},
        },
        memory,
        "allocated",
        _PR482_ASSUMPTIONS,
    )


# ---------------------------------------------------------------------- plancast's own GPU runs
GPU_RUNS_CITATION = (
    "tests/data/gpu_runs/*/measured/summary.json: plancast's runtime on one H100 or H200 (torch 2.11, "
    "autocast bf16, fused AdamW), peak_memory_gib = torch.cuda.max_memory_allocated (docs/calibration.md)"
)


def _gpu_run_row(path: Path) -> MemoryRow:
    import json

    with (path / "scenario.toml").open("rb") as f:
        scenario = tomllib.load(f)
    summary = json.loads((path / "measured" / "summary.json").read_text()[:1_000_000])
    return MemoryRow(
        f"gpu-run-{path.name}",
        "plancast-gpu-runs",
        GPU_RUNS_CITATION,
        scenario,
        float(summary["peak_memory_gib"]),
        "allocated",
        ("the run's own scenario.toml, as measured",),
    )


def memory_rows() -> tuple[MemoryRow, ...]:
    """Every row of the memory validation set beyond the published runs that report memory."""
    return (
        *(_torchtitan_row(r) for r in _TT_ROWS),
        *(_megatron_row(*r) for r in _PR482_ROWS),
        *(_gpu_run_row(p) for p in sorted(GPU_RUNS.iterdir()) if _scored_gpu_run(p)),
    )


def _scored_gpu_run(path: Path) -> bool:
    """A kept GPU run with a measured summary that is a test of the model (benchmarks/gpu_runs.py
    KNOWN_MISSES lists the runs that measured something else, e.g. the runtime's old MoE)."""
    from benchmarks.gpu_runs import KNOWN_MISSES

    return (path / "measured" / "summary.json").is_file() and path.name not in KNOWN_MISSES


def published_run_rows() -> tuple[MemoryRow, ...]:
    """The published runs of benchmarks/published_data.py whose source reports memory, as memory rows."""
    from benchmarks.published_data import RUNS
    from benchmarks.published_record import scenario_dict

    rows = []
    for run in (r for r in RUNS if r.measured_memory_gib is not None):
        data = scenario_dict(run)
        data["parallelism"]["framework"] = run.framework
        metric: Metric = "reserved" if "reserved" in run.memory_metric else "allocated"
        rows.append(
            MemoryRow(run.name, run.source, run.citation, data, float(run.measured_memory_gib or 0), metric)
        )
    return tuple(rows)


def score_memory_rows() -> list[dict[str, Any]]:
    """Every memory row against the prediction of the statistic its source reports (never fitted)."""
    from plancast.simulator.loader import parse_scenario
    from plancast.simulator.predict import simulate

    out = []
    for row in (*published_run_rows(), *memory_rows()):
        summary = simulate(parse_scenario(row.scenario, row.name).scenario, events=False).summary
        predicted = summary["peak_reserved_gib" if row.metric == "reserved" else "peak_memory_gib"]
        out.append(
            {
                "source": row.source,
                "run": row.name,
                "metric": row.metric,
                "measured_gib": row.measured_gib,
                "predicted_gib": predicted,
                "error": predicted / row.measured_gib - 1,
                "fits_in_memory": summary["fits_in_memory"],
            }
        )
    return out
