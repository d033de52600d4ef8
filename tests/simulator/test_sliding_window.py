"""Sliding-window attention (model.sliding_window, model.layer_types; training.sliding_window_skip): a
kernel that skips the key blocks a window empties computes only the blocks its band touches; one that
does not (or an unfused core) computes what a causal layer does (costs/attention.py window_work)."""

from __future__ import annotations

from typing import Any

import pytest

from plancast.simulator.costs.attention import window_block_fraction, window_work
from plancast.simulator.costs.model_flops import model_flops_per_token
from plancast.simulator.costs.ops import Shape, layer_forward
from plancast.simulator.importers import import_file
from plancast.simulator.loader import ScenarioError, parse_scenario
from plancast.simulator.predict import simulate
from plancast.simulator.scenario import Scenario
from plancast.simulator.validation import check_plan
from tests.simulator.test_importers import DATA

ALTERNATING = ["sliding_attention", "full_attention"] * 16  # llama3-8b's 32 layers, gpt-oss's pattern


def _scenario(
    window: int | None = 128,
    backend: str | None = "flex",
    skip: bool | None = None,
    flash: bool = True,
    layer_types: list[str] | None = ALTERNATING,
) -> Scenario:
    model: dict[str, Any] = {"preset": "llama3-8b"}
    if window is not None:
        model |= {"sliding_window": window, "layer_types": layer_types}
    training: dict[str, Any] = {
        "seq_len": 4096,
        "micro_batch_size": 1,
        "global_batch_size": 8,
        "flash_attention": flash,
    }
    if backend is not None:
        training["attention_backend"] = backend
    if skip is not None:
        training["sliding_window_skip"] = skip
    data = {
        "model": model,
        "training": training,
        "parallelism": {"framework": "torchtitan"},
        "cluster": {"preset": "dgx-h100-80gb"},
    }
    return parse_scenario(data, "sliding-window").scenario


def _attention_flops(s: Scenario) -> float:
    return sum(op.flops for op in layer_forward(Shape.of(s)) if op.category == "attention")


def _step_s(s: Scenario) -> float:
    return float(simulate(s, events=False).summary["step_time_s"])


@pytest.mark.parametrize(
    ("seq_len", "window", "fraction"),
    [
        (4096, 128, 63 / 528),  # 32 query blocks: 1 + 2 x 31 of the 32 x 33 / 2 causal blocks
        (8192, 4096, (33 * 34 / 2 + 31 * 33) / (64 * 65 / 2)),  # a band of 33 blocks
        (128, 128, 1.0),  # one block: nothing to skip
        (4096, 4096, 1.0),  # a window as long as the sequence is causal attention
        (4096, 100_000, 1.0),
    ],
)
def test_blocks_a_window_leaves_over_causal_blocks(seq_len: int, window: int, fraction: float) -> None:
    assert window_block_fraction(seq_len, window) == pytest.approx(fraction)


def test_flexattention_skips_the_emptied_blocks_on_the_windowed_half_of_the_layers() -> None:
    windowed, causal = _scenario(), _scenario(window=None)
    assert window_work(windowed) == pytest.approx(0.5 + 0.5 * 63 / 528)
    assert _attention_flops(windowed) == pytest.approx(window_work(windowed) * _attention_flops(causal))
    assert _step_s(windowed) < _step_s(causal)


def test_every_layer_is_windowed_without_layer_types() -> None:
    assert window_work(_scenario(layer_types=None)) == pytest.approx(63 / 528)


@pytest.mark.parametrize("backend", ["te", "sdpa"])
def test_kernels_not_known_to_skip_cost_what_causal_attention_does(backend: str) -> None:
    """cuDNN's fused kernel (no published figure) and torch SDPA (a dense mask) by default."""
    windowed, causal = _scenario(backend=backend), _scenario(window=None, backend=backend)
    assert window_work(windowed) == 1.0
    assert _step_s(windowed) == _step_s(causal)


def test_sliding_window_skip_true_makes_a_windowed_model_faster() -> None:
    skipped, dense = _scenario(backend="te", skip=True), _scenario(backend="te", skip=False)
    assert _attention_flops(skipped) < _attention_flops(dense)
    assert _step_s(skipped) < _step_s(dense)
    assert _step_s(_scenario(skip=False)) > _step_s(_scenario())  # flex told it does not skip


def test_a_narrower_window_costs_less_where_the_kernel_skips() -> None:
    assert _step_s(_scenario(window=128)) < _step_s(_scenario(window=1024)) < _step_s(_scenario(window=None))


def test_an_unfused_core_computes_every_score_window_or_not() -> None:
    unfused = _scenario(flash=False, backend=None, skip=True)
    assert _step_s(unfused) == _step_s(_scenario(window=None, flash=False, backend=None))


def test_layer_types_of_the_wrong_length_are_refused_naming_the_key() -> None:
    with pytest.raises(ScenarioError, match=r"model\.layer_types: has 2 entries for num_hidden_layers = 32"):
        _scenario(layer_types=["sliding_attention", "full_attention"])


def test_sliding_layers_without_a_window_are_refused_naming_the_key() -> None:
    s = _scenario(window=None)
    model = s.model.model_copy(update={"layer_types": ALTERNATING})
    errors, _ = check_plan(s.model_copy(update={"model": model}))
    assert [e.path for e in errors] == ["model.sliding_window"]


def test_an_unknown_layer_type_is_refused_naming_the_key() -> None:
    with pytest.raises(ScenarioError, match=r"model\.layer_types"):
        _scenario(layer_types=["chunked_attention"] * 32)  # Llama 4's, which plancast does not price
    with pytest.raises(ScenarioError, match=r"model\.linear_num_key_heads"):  # Gated DeltaNet's, widths unset
        _scenario(layer_types=["linear_attention"] * 32)


def test_hf_import_reads_the_window_and_the_layer_types() -> None:
    gpt_oss = import_file("hf", DATA / "gpt-oss-120b.config.json")["model"]
    assert gpt_oss["sliding_window"] == 128
    assert gpt_oss["layer_types"] == ["sliding_attention", "full_attention"] * 18
    mistral = import_file("hf", DATA / "mistral-7b.config.json")
    assert mistral["model"]["sliding_window"] == 4096
    assert "layer_types" not in mistral["model"] and mistral["warnings"] == []


def test_hf_import_leaves_a_window_that_use_sliding_window_turns_off() -> None:
    qwen2 = import_file("hf", DATA / "qwen2-7b.config.json")["model"]
    assert "sliding_window" not in qwen2


def test_model_flops_behind_mfu_count_the_full_scores_window_or_not() -> None:
    assert model_flops_per_token(_scenario()) == model_flops_per_token(_scenario(window=None))
