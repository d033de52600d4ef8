"""Packed documents (training.packed_document_tokens): a fused attention core that takes the documents'
boundaries computes each document's causal triangle, (L + 1) / (s + 1) of the sequence's, windows within
each document; nothing else moves, and what the key cannot change or does not model is refused."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from plancast.runtime.plan import PlanError, check_framework_behaviour
from plancast.simulator.costs.attention import window_block_fraction
from plancast.simulator.costs.model_flops import model_flops_per_token
from plancast.simulator.costs.ops import Shape, layer_forward
from plancast.simulator.loader import ScenarioError, parse_scenario
from plancast.simulator.predict import simulate
from plancast.simulator.scenario import Scenario
from tests.cli_runner import cli_main

SEQ = 32768


def _scenario(doc: int | None = None, model: dict[str, Any] | None = None, **training: Any) -> Scenario:
    """Llama 3 8B on 8 H100 (tp 8) at 32k tokens, sequences packed from `doc`-token documents."""
    data = {
        "model": {"preset": "llama3-8b", **(model or {})},
        "training": {"seq_len": SEQ, "micro_batch_size": 1, "global_batch_size": 8, "flash_attention": True,
                     "recompute": "full", **({"packed_document_tokens": doc} if doc else {}), **training},
        "parallelism": {"tensor_parallel_degree": 8, "framework": "megatron-lm"},
        "cluster": {"preset": "dgx-h100-80gb"},
    }  # fmt: skip
    return parse_scenario(data, "packed").scenario


def _core_flops(s: Scenario) -> float:
    return sum(op.flops for op in layer_forward(Shape.of(s)) if op.name == "attention")


def _step_s(s: Scenario) -> float:
    return float(simulate(s, events=False).summary["step_time_s"])


@pytest.mark.parametrize("doc", [512, 4096, 16384])
def test_the_core_computes_each_documents_causal_triangle(doc: int) -> None:
    assert _core_flops(_scenario(doc)) == pytest.approx(_core_flops(_scenario()) * (doc + 1) / (SEQ + 1))


def test_one_document_a_sequence_is_the_unpacked_plan() -> None:
    assert simulate(_scenario(SEQ), events=False).summary == simulate(_scenario(), events=False).summary


def test_shorter_documents_shorten_the_step_and_leave_mfu_flops_and_the_rest_alone() -> None:
    steps = [_step_s(_scenario(doc)) for doc in (1024, 8192, None)]
    assert steps[0] < steps[1] < steps[2]
    packed, whole = _scenario(1024), _scenario()
    assert model_flops_per_token(packed) == model_flops_per_token(whole)  # eq. 3's seq_len x seq_len
    others = {op.name: op for op in layer_forward(Shape.of(whole)) if op.name != "attention"}
    assert {op.name: op for op in layer_forward(Shape.of(packed)) if op.name != "attention"} == others


def test_windows_apply_within_each_document() -> None:
    """gpt-oss-shaped windows (128 tokens, every other layer) under a kernel that skips emptied blocks."""
    window = {"sliding_window": 128, "layer_types": ["sliding_attention", "full_attention"] * 16}
    skip = {"attention_backend": "flex", "sliding_window_skip": True}
    x = Shape.of(_scenario(4096, window, **skip))
    expected = (4096 + 1) / (SEQ + 1) * (0.5 + 0.5 * window_block_fraction(4096, 128))
    assert x.window_work == pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize(
    ("doc", "training", "model", "said"),
    [(SEQ + 1, {}, {}, "exceeds seq_len"),
     (1024, {"flash_attention": False}, {}, "the unfused core computes every score"),
     (1024, {}, {"preset": "deepseek-v3", "index_topk": 2048, "index_n_heads": 64, "index_head_dim": 128},
      "DeepSeek Sparse Attention")],
    ids=["longer-than-the-sequence", "unfused", "sparse-attention"],
)  # fmt: skip
def test_packing_the_core_cannot_price_is_refused_by_name(
    doc: int, training: dict[str, Any], model: dict[str, Any], said: str
) -> None:
    with pytest.raises(ScenarioError, match=r"training\.packed_document_tokens") as err:
        _scenario(doc, model, **training)
    assert said in str(err.value)


def test_the_runtime_refuses_packed_documents() -> None:
    with pytest.raises(PlanError, match=r"training\.packed_document_tokens = 1024"):
        check_framework_behaviour(_scenario(1024))


def test_a_packed_scenario_validates_through_the_cli(tmp_path: Path) -> None:
    scenario = tmp_path / "packed.toml"
    scenario.write_text(
        '[model]\npreset = "llama3-8b"\n[training]\nseq_len = 32768\nglobal_batch_size = 8\n'
        "flash_attention = true\npacked_document_tokens = 2048\n"
        '[parallelism]\ntensor_parallel_degree = 8\n[cluster]\npreset = "dgx-h100-80gb"\n'
    )
    code, _, stderr = cli_main("validate", str(scenario))
    assert code == 0, stderr
    scenario.write_text(scenario.read_text().replace("flash_attention = true", "flash_attention = false"))
    code, _, stderr = cli_main("validate", str(scenario))
    assert code == 2 and "training.packed_document_tokens" in stderr, stderr
