"""benchmarks/moe_plan_terms.py: the Megatron Qwen3-235B-A22B plans' per-rank counts, read from their
plans (256 H100, global batch 2,048, 94 layers, 128 experts top-8, etp 1)."""

from __future__ import annotations

import pytest

from benchmarks.moe_plan_terms import EXPERT_GEMMS_PER_LAYER, PlanTerms, main, plan_terms
from benchmarks.published_data import MOE_RUNS


def _terms(name: str) -> PlanTerms:
    return plan_terms(next(r for r in MOE_RUNS if r.name == name))


@pytest.mark.parametrize(
    ("name", "microbatches", "layers", "local", "routed", "rows"),
    [
        # tp2 pp8 dp16: 2048 / 16 micro-batches; 96 units (embedding and loss counted) over 32 stages of 3,
        # a rank's 4 chunks hold 12 layers; ep 32: 4 experts; 4096 / 2 tokens routed (etp 1 under tp 2);
        # 32 * 2048 * 8 / 128 rows an expert, times the default imbalance 1.25
        ("modelzoo-qwen3-235b-tp2-pp8-ep32", 128, 12, 4, 2048, 5120.0),
        ("modelzoo-qwen3-235b-tp4-pp8-ep8", 256, 12, 16, 1024, 640.0),
        ("modelzoo-qwen3-235b-tp2-pp32-ep8-alltoall", 512, 3, 16, 2048, 1280.0),
        ("modelzoo-qwen3-235b-tp2-ep8-fsdp", 4, 94, 16, 8192, 5120.0),
    ],
)
def test_per_rank_counts_follow_the_plan(
    name: str, microbatches: int, layers: int, local: int, routed: int, rows: float
) -> None:
    p = _terms(name)
    assert (p.microbatches, p.moe_layers, p.local_experts, p.routed_tokens) == (
        microbatches,
        layers,
        local,
        routed,
    )
    assert p.expert_rows == pytest.approx(rows)
    assert p.expert_gemms == microbatches * layers * local * EXPERT_GEMMS_PER_LAYER
    gap_s = p.measured_s - p.predicted_s
    assert p.gap_per_layer_ms == pytest.approx(gap_s / (microbatches * layers) * 1e3)


def test_a_match_that_names_no_row_is_refused_with_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--match", "no-such-row"]) == 2
    assert "--match takes part of a name" in capsys.readouterr().out
