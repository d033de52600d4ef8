"""benchmarks/gpu_grouped_gemm.py (issue 31) on the CPU: Transformer Engine's multi-stream issue order and
the GEMMs it issues; the measurement itself needs a CUDA GPU and says so."""

from __future__ import annotations

import pytest
import torch

from benchmarks.gpu_grouped_gemm import SHAPES, main, multi_stream_gemms, te_stream_of


def test_experts_go_round_robin_over_te_s_four_compute_streams() -> None:
    assert [te_stream_of(i) for i in range(10)] == [0, 1, 2, 3, 0, 1, 2, 3, 0, 1]


def test_each_expert_s_gemm_lands_in_its_own_output() -> None:
    groups, rows, k, n = 5, 3, 4, 6
    x = torch.randn(groups * rows, k)
    w = torch.randn(groups, k, n)
    chunks = x.split(rows)
    outs = [torch.full((rows, n), float("nan")) for _ in range(groups)]
    multi_stream_gemms(chunks, w, outs)()
    for i in range(groups):
        torch.testing.assert_close(outs[i], chunks[i] @ w[i])


def test_te_pr_2045_points_are_measured_beside_the_rows_shapes() -> None:
    by_label = {label: (groups, rows, k, n) for label, groups, rows, k, n in SHAPES}
    assert by_label["te2045 16x2048"] == (16, 2048, 2048, 768)
    assert by_label["te2045 8x4096"] == (8, 4096, 2048, 768)
    assert by_label["q235 tp4 gu"][1] == 512  # the ModelZoo TP 4 plan's rows per expert


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal on a machine without CUDA")
def test_without_a_gpu_it_refuses_with_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([]) == 2
    assert "needs a CUDA GPU" in capsys.readouterr().err
