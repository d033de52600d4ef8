"""The multi-token-prediction depths in the even pipeline split (issue 31): balanced as layers, then taken
off the last stage, which runs them after its layers (costs/mtp.py), as Megatron-Bridge lays DeepSeek-V3
out."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from plancast.simulator.layer_split import even_layer_split
from plancast.simulator.loader import parse_scenario
from plancast.simulator.predict import simulate


@pytest.mark.parametrize(
    ("layers", "stages", "mtp", "expected"),
    [
        # DeepSeek-V3 on pp 8 x vp 4: Megatron-Bridge's layout "Et|(tt|)*30mL" (the embedding and one
        # layer, 30 stages of two, the MTP block and the loss alone)
        (61, 32, 1, (1, *[2] * 30, 0)),
        (61, 16, 1, (3, *[4] * 14, 2)),  # pp 16: the MTP stage carries two layers
        (8, 4, 0, (2, 2, 2, 2)),  # no MTP: the plain split
        (8, 4, 1, (2, 3, 2, 1)),
        (3, 1, 1, (3,)),  # one stage holds everything
    ],
)
def test_mtp_depths_count_as_layers_of_the_last_stage(
    layers: int, stages: int, mtp: int, expected: tuple[int, ...]
) -> None:
    assert even_layer_split(layers, stages, mtp) == expected


@given(layers=st.integers(1, 200), stages=st.integers(1, 64), mtp=st.integers(0, 3))
def test_the_split_keeps_every_layer_and_every_middle_stage_busy(layers: int, stages: int, mtp: int) -> None:
    split = even_layer_split(layers, stages, mtp)
    assert len(split) == stages and sum(split) == layers
    if layers >= stages:
        assert min(split[1:-1], default=1) >= 1


def _mtp_model(mtp: int, split: list[int] | None = None) -> dict[str, Any]:
    parallelism: dict[str, Any] = {"pipeline_parallel_degree": 4, "framework": "megatron-lm"}
    if split is not None:
        parallelism["pipeline_layer_split"] = split
    return {
        "model": {"preset": "tiny-moe", "num_hidden_layers": 8, "num_nextn_predict_layers": mtp},
        "training": {"seq_len": 256, "micro_batch_size": 1, "global_batch_size": 16},
        "parallelism": parallelism,
        "cluster": {"preset": "dgx-h100-80gb", "num_nodes": 1},
    }


def test_counting_the_mtp_block_shortens_the_step() -> None:
    """The mechanism: the last stage runs its layers, the MTP block and the head; with the MTP depth
    counted it gives a layer to a middle stage, so the slowest stage, and the step, get shorter."""
    counted = parse_scenario(_mtp_model(1)).scenario
    plain = parse_scenario(_mtp_model(1, list(even_layer_split(8, 4)))).scenario
    assert counted.layer_split == (2, 3, 2, 1) and plain.layer_split == (2, 2, 2, 2)
    step = simulate(counted, events=False).summary["step_time_s"]
    assert step < simulate(plain, events=False).summary["step_time_s"]
