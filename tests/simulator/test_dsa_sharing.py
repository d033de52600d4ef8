"""DeepSeek Sparse Attention's index sharing (model.index_topk_freq, index_skip_topk_offset; GLM-5.2): the
layers that reuse an earlier layer's top-k have no indexer, so a mean block carries the indexer's work,
parameters, saved tensors and context-parallel key in the share of layers that keep one, counted as
Megatron-Bridge counts them; the keys are refused where they would change nothing, and import hf reads
them."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path
from typing import Any

import pytest

from plancast.simulator.costs.memory import layer_activation_bytes
from plancast.simulator.costs.mla import cp_kv_elements_per_token
from plancast.simulator.costs.op import pass_multiple
from plancast.simulator.costs.ops import Shape, layer_forward
from plancast.simulator.costs.params import count_parameters
from plancast.simulator.loader import ScenarioError, parse_scenario
from plancast.simulator.model_sparse import indexer_layer_share
from plancast.simulator.predict import simulate
from plancast.simulator.scenario import Scenario
from tests.cli_runner import cli_main
from tests.simulator.test_dsa import _megatron_bridge_dsa_flops

SHARING = {"index_topk_freq": 4, "index_skip_topk_offset": 3}
"""GLM-5.2's (zai-org/GLM-5.2 config.json; Megatron-Bridge glm5_bridge.py reads both)."""
INDEXER = {"index_q", "index_k", "index_weights", "index_scores", "index_target"}


def _scenario(seq: int = 32768, **model: Any) -> Scenario:
    data = {
        "model": {"preset": "glm-5", **model},
        "training": {"seq_len": seq, "micro_batch_size": 1, "global_batch_size": 8},
        "cluster": {"preset": "dgx-h100-80gb"},
    }
    return parse_scenario(data, "glm-5.2").scenario


def test_the_share_counts_the_layers_megatron_bridge_counts() -> None:
    """78 layers, one in four from the offset: layers 1-3, then 7, 11, ..., 75 (21 of 78); 1 without
    sharing; with no offset (taken as 1) layers 1, 5, ..., 77 (20)."""
    assert indexer_layer_share(_scenario(**SHARING).model, 78) == pytest.approx(21 / 78)
    assert indexer_layer_share(_scenario().model, 78) == 1.0
    assert indexer_layer_share(_scenario(index_topk_freq=4).model, 78) == pytest.approx(20 / 78)


@pytest.mark.parametrize("seq", [4096, 131072])
def test_a_sharing_block_does_the_work_megatron_bridge_counts(seq: int) -> None:
    """The mean block: MLA's projections and the sparse core every layer, the indexer's projections,
    scores and the loss's target in 21 of 78 (flop_utils.py multiplies those terms by its
    num_indexer_layers)."""
    x = Shape.of(_scenario(seq, **SHARING))
    ops = [op for op in layer_forward(x) if op.name in INDEXER | {"q_down", "q_up", "kv_down", "kv_up",
                                                                    "out_proj", "attention"}]  # fmt: skip
    ours = sum(op.flops * pass_multiple(op) for op in ops) / seq
    whole, without = _megatron_bridge_dsa_flops(seq, "sparse"), _megatron_bridge_dsa_flops(seq, "off")
    indexer_off = _indexer_terms_off(seq)
    shared = without - indexer_off  # projections and core alone
    expected = shared + 21 / 78 * (whole - shared)
    assert ours == pytest.approx(expected, rel=1e-12)


def _indexer_terms_off(seq: int) -> float:
    """The untrained indexer's terms of `_megatron_bridge_dsa_flops`: its projections (2x) and the dense
    scores' forward."""
    h, q_lora, index_heads, index_dim = 6144, 2048, 32, 128
    return 2 * (q_lora * index_heads * index_dim + h * index_dim + h * index_heads) + 2 * (seq + 1) / 2 * (
        index_heads * (index_dim + 1)
    )


def test_sharing_saves_time_parameters_memory_and_the_cp_key() -> None:
    own, shared = _scenario(131072), _scenario(131072, **SHARING)
    step = [float(simulate(s, events=False).summary["step_time_s"]) for s in (shared, own)]
    assert step[0] < step[1]
    assert count_parameters(shared.model) < count_parameters(own.model)
    assert layer_activation_bytes(Shape.of(shared), "none") < layer_activation_bytes(Shape.of(own), "none")
    assert cp_kv_elements_per_token(shared.model, 1) == 512 + 64 + round(128 * 21 / 78)
    assert cp_kv_elements_per_token(own.model, 1) == 512 + 64 + 128


@pytest.mark.parametrize("key", ["index_topk_freq", "index_skip_topk_offset"])
def test_sharing_keys_without_an_indexer_are_refused_by_name(key: str) -> None:
    no_dsa = {"index_topk": None, "index_n_heads": None, "index_head_dim": None}
    with pytest.raises(ScenarioError, match=rf"model\.{key}"):
        _scenario(**no_dsa, **{key: 4})


def test_import_hf_reads_glm_5_2_index_sharing(tmp_path: Path) -> None:
    config = json.loads((Path(__file__).parents[1] / "data" / "importers" / "glm-5.config.json").read_text())
    path, out = tmp_path / "config.json", tmp_path / "out.toml"
    path.write_text(json.dumps({**config, **SHARING}))
    code, _, stderr = cli_main("import", "hf", str(path), "-o", str(out))
    assert code == 0 and "index_topk_freq" not in stderr, stderr
    model = tomllib.loads(out.read_text())["model"]
    assert (model["index_topk_freq"], model["index_skip_topk_offset"]) == (4, 3)
    path.write_text(json.dumps({**config, "index_topk_freq": 0}))
    code, _, stderr = cli_main("import", "hf", str(path), "-o", str(tmp_path / "refused.toml"))
    assert code == 2 and "index_topk_freq: 0; give a whole number of layers, at least 1" in stderr, stderr
    assert not (tmp_path / "refused.toml").exists()
