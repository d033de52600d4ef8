"""The memory validation set (issue 33): every published or measured run that states its peak memory,
predicted as the statistic its source reports, and no published run that trained called "does not fit".

Rows are benchmarks/published_memory.py (torchtitan's H100 tables, Megatron-LM PR #482's measured
Llama 2 7B table, plancast's own GPU runs) and the runs of benchmarks/published_data.py that report
memory. No constant of the memory model was fitted on any of them.
"""

from __future__ import annotations

import statistics
from functools import cache
from typing import Any

import pytest

from benchmarks.published_data import FP8_RUNS, MOE_AND_LONG_CONTEXT_RUNS, RUNS

# Rows more than 15% off, each with what the memory model does not hold yet. A row that comes within
# 15% must leave this list (test_known_misses_are_still_missed).
KNOWN_MISSES: dict[str, str] = {}
# Published runs that trained yet are predicted "does not fit", each with the evidence of what is missing.
_LLAMA3 = (
    "the paper's schedule groups N micro-batches per virtual stage (sec. 3.3.2, Figure 6) and states no N "
    "for the run; as Megatron-Core's interleaved 1F1B with N = pp (16) its warm-up, 2(pp-1) + (V-1)N = 142 "
    "forwards, covers all 8 x 16 of a step: every layer's activations of every micro-batch in flight. The "
    "row's framework 'other' also takes torchtitan's autocast (fp32 master parameters, an fp32 residual "
    "stream), which the paper does not state; even as framework megatron-lm (a bf16 residual stream, "
    "sequence-parallel inputs saved as shards) the 8,192-GPU row holds 88.3 GiB and the 16,384-GPU row "
    "81.6 GiB against 73.5 usable: the in-flight count N sets it. Planned as the paper's FSDP (zero_stage "
    "2, parameters, gradients and optimizer sharded, no reshard after forward) the 8,192-GPU row still "
    "holds 131.6 GiB of activations (144.3 in all); that plan is not the rows' yet because the engine "
    "charges its gathers and reduce-scatters every micro-batch (12.4 -> 26.5 s), where torch's pipelining "
    "keeps the stage gathered and reduce-scatters once, after each chunk's last backward (docs/memory.md)"
)
NOT_FITTING_YET = {
    "llama3-405b-8192": _LLAMA3,
    "llama3-405b-16384": _LLAMA3,
    "llama3-405b-16384-cp16-131072": _LLAMA3,
    "deepseek-v3-2048xh800": "102.6 GiB allocated on pp rank 1 against 73.5 usable, with DualPipe's "
    "second copy of the model (sec. 3.2.1, Table 2: pipeline_parameter_copies 2; 73.8 GiB as the "
    "single-copy DualPipeV): its rank holds the embedding, the output layer, the MTP module and 5 "
    "blocks, 4.93B parameters, at 4 + 2 bytes (fp32 parameters and their bf16 cast) + 4 (fp32 "
    "gradients) under the autocast layout that framework 'other' is priced with (torchtitan's; the "
    "scenario has no framework 'other', so the report's BF16 moments, optimizer_moment_dtype, stay "
    "refused). The report states a different layout (sec. 3.3.3: fp32 master weights stored by the "
    "optimizer, ZeRO-1, BF16 moments): as framework megatron-lm prices it the same rank holds 81.6 GiB "
    "(bf16 parameters and TE's FP8 weight caches 14.0, fp32 gradients 18.4, optimizer 1.1, activations "
    "48.1, their residual stream bf16), still 8 GiB over. Unknown, and what would settle it: the "
    "stack's buffers (bf16 weights beside FP8 ones? gradients kept fp32 per copy?), the micro-batch "
    "size and how the 61 blocks and the MTP module sit on DualPipe's 16 stages",
}


@cache
def _memory_rows() -> tuple[dict[str, Any], ...]:
    from benchmarks.published_runs import score_memory

    return tuple(score_memory())


def test_the_set_holds_twelve_rows_from_three_sources() -> None:
    rows = _memory_rows()
    assert len(rows) >= 12
    assert len({r["source"] for r in rows}) >= 3
    assert {r["metric"] for r in rows} == {"reserved", "allocated"}


def test_memory_is_predicted_within_8_percent_on_average_and_15_at_worst() -> None:
    rows = _memory_rows()
    errors = [abs(r["error"]) for r in rows]
    assert statistics.fmean(errors) <= 0.08, statistics.fmean(errors)
    off = {r["run"]: r["error"] for r in rows if abs(r["error"]) > 0.15}
    assert set(off) <= set(KNOWN_MISSES), off


def test_known_misses_are_still_missed() -> None:
    by_name = {r["run"]: r for r in _memory_rows()}
    for name in KNOWN_MISSES:
        assert abs(by_name[name]["error"]) > 0.15, f"{name} is within 15% now: remove it from KNOWN_MISSES"


@pytest.mark.parametrize("name", sorted({r.name for r in (*RUNS, *MOE_AND_LONG_CONTEXT_RUNS, *FP8_RUNS)}))
def test_no_published_run_that_trained_is_predicted_not_to_fit(name: str) -> None:
    """Each of these runs trained on its GPUs, so a plan that says "does not fit" for it is wrong (and the
    sweep would hide it). Checked on the reserve the allocator needs (fits_in_memory)."""
    from benchmarks.fit_published import run_scenario
    from plancast.simulator.predict import simulate

    run = next(r for r in (*RUNS, *MOE_AND_LONG_CONTEXT_RUNS, *FP8_RUNS) if r.name == name)
    fits = simulate(run_scenario(run), events=False).summary["fits_in_memory"]
    if name in NOT_FITTING_YET:
        assert not fits, f"{name} fits now: remove it from NOT_FITTING_YET"
    else:
        assert fits, name


def test_every_memory_row_fits() -> None:
    """The memory rows ran too."""
    assert all(r["fits_in_memory"] for r in _memory_rows())
