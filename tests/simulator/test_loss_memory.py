"""The loss's bytes per logit at its peak, per framework and vocabulary split (issue 33): torchtitan's loss
parallel runs torch's fused DTensor backward, which holds four fp32 copies of the logits at once
(torch/distributed/tensor/parallel/loss.py `_nll_loss_and_log_softmax_backward`)."""

from __future__ import annotations

from typing import Any

import pytest

from plancast.simulator.costs.memory import loss_bytes_per_logit, rank_memory
from plancast.simulator.loader import parse_scenario
from plancast.simulator.scenario import Scenario


def scenario(framework: str, tp: int, **training: Any) -> Scenario:
    data: dict[str, Any] = {
        "model": {"preset": "llama3-8b", "num_hidden_layers": 2},
        "training": {
            "seq_len": 4096,
            "micro_batch_size": 1,
            "global_batch_size": 8,
            "dtype": "bf16",
            **training,
        },
        "parallelism": {"tensor_parallel_degree": tp, "framework": framework},
        "cluster": {"preset": "dgx-h100-80gb", "num_nodes": 1},
    }
    return parse_scenario(data).scenario


@pytest.mark.parametrize(
    ("framework", "tp", "training", "expected"),
    [
        ("megatron-lm", 1, {}, 8.0),  # the softmax, the gradient written into it
        ("megatron-lm", 2, {}, 8.0),
        ("torchtitan", 1, {}, 12.0),  # F.cross_entropy: saved log-softmax, incoming and input gradient
        ("torchtitan", 2, {}, 16.0),  # loss parallel: saved log-softmax + zeros, exp, their sum / product
        ("megatron-lm", 2, {"fused_cross_entropy": "te"}, 2.0),  # TE's fused loss: the bf16 logits
    ],
)
def test_bytes_per_logit(framework: str, tp: int, training: dict[str, Any], expected: float) -> None:
    assert loss_bytes_per_logit(scenario(framework, tp, **training)) == expected


def test_the_vocab_split_passed_in_overrides_the_scenarios() -> None:
    """The sweep prices a plan's tp on the base scenario: the split it passes decides."""
    s = scenario("torchtitan", 1)
    assert loss_bytes_per_logit(s, 2) == 16.0
    assert loss_bytes_per_logit(scenario("torchtitan", 2), 1) == 12.0


def test_loss_parallel_holds_16_bytes_a_local_logit_where_a_replicated_loss_holds_12_a_logit() -> None:
    """torchtitan at tp 2: the vocabulary split over 2 (loss parallel) against the logits replicated
    (vocab_parallel off, F.cross_entropy over the full vocabulary): the last stage's activations differ by
    12 x 2 - 16 = 8 bytes per local logit, and by nothing else."""
    split = scenario("torchtitan", 2)
    whole = parse_scenario(
        {
            "model": {"preset": "llama3-8b", "num_hidden_layers": 2},
            "training": {"seq_len": 4096, "micro_batch_size": 1, "global_batch_size": 8, "dtype": "bf16"},
            "parallelism": {"tensor_parallel_degree": 2, "framework": "torchtitan", "vocab_parallel": False},
            "cluster": {"preset": "dgx-h100-80gb", "num_nodes": 1},
        }
    ).scenario
    local_logits = 4096 * split.model.vocab_size / 2
    gap = rank_memory(whole, 0).activations - rank_memory(split, 0).activations
    assert gap == pytest.approx(8.0 * local_logits, rel=1e-9)
