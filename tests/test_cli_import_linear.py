"""`plancast import hf` of Qwen3-Next and Qwen3.5 (Gated DeltaNet layers, simulator/model_linear.py) through
the CLI: every key that changes time or memory is read, `simulate` counts the published parameters, and a
config that leaves its layer types unsaid, or gives them wrong, is refused (exit 2, nothing written).
Both config.json files are written by hand (docs/importing.md)."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

import pytest

from tests.cli_runner import cli_main

CONFIG = Path(__file__).parent / "data" / "importers" / "qwen3-next-80b-a3b.config.json"
QWEN3_5 = Path(__file__).parent / "data" / "importers" / "qwen3.5-35b-a3b.config.json"


def test_qwen3_next_imports_its_gated_deltanet_layers_and_counts_80b(tmp_path: Path) -> None:
    scenario = tmp_path / "imported.toml"
    code, _, stderr = cli_main("import", "hf", str(CONFIG), "-o", str(scenario))
    assert code == 0, stderr
    assert "not read" not in stderr, stderr
    # the one "not modelled" note is partial rotary, which has no parameters and no GEMM
    assert [line for line in stderr.splitlines() if "not modelled" in line] == [], stderr
    model = tomllib.loads(scenario.read_text())["model"]
    types = model["layer_types"]
    assert types.count("linear_attention") == 36 and types[3] == "full_attention"
    assert model["attn_output_gate"] is True and model["qk_layernorm"] is True and model["head_dim"] == 256
    assert (model["linear_num_key_heads"], model["linear_num_value_heads"]) == (16, 32)
    code, stdout, stderr = cli_main("simulate", str(scenario), "--json")
    assert code == 0, stderr
    # Qwen/Qwen3-Next-80B-A3B-Instruct model card: "80B in total"
    assert json.loads(stdout)["num_parameters"] == pytest.approx(80e9, rel=0.01)


def test_an_explicit_layer_types_list_is_read_as_given(tmp_path: Path) -> None:
    config = json.loads(CONFIG.read_text())
    del config["full_attention_interval"]
    config["layer_types"] = ["linear_attention", "full_attention"] * 24
    path, out = tmp_path / "config.json", tmp_path / "out.toml"
    path.write_text(json.dumps(config))
    code, _, stderr = cli_main("import", "hf", str(path), "-o", str(out))
    assert code == 0, stderr
    assert tomllib.loads(out.read_text())["model"]["layer_types"] == config["layer_types"]


@pytest.mark.parametrize(
    ("change", "said"),
    [
        ({"full_attention_interval": None}, "full_attention_interval: required"),
        ({"layer_types": ["linear_attention"] * 47}, "layer_types: expected 48 entries"),
        ({"linear_conv_kernel_dim": None}, "linear_conv_kernel_dim: required key"),
        ({"attn_output_gate": "yes"}, "attn_output_gate: expected true or false"),
    ],
    ids=["no-interval", "short-layer-types", "no-conv-width", "gate-not-bool"],
)
def test_a_config_that_leaves_the_layers_unsaid_is_refused(tmp_path: Path, change: dict, said: str) -> None:
    config = json.loads(CONFIG.read_text())
    for key, value in change.items():
        if value is None:
            config.pop(key)
        else:
            config[key] = value
    path, out = tmp_path / "config.json", tmp_path / "out.toml"
    path.write_text(json.dumps(config))
    code, _, stderr = cli_main("import", "hf", str(path), "-o", str(out))
    assert code == 2 and said in stderr, stderr
    assert not out.exists()


def test_qwen3_5_imports_its_language_model_and_says_the_vision_encoder_is_left_out(tmp_path: Path) -> None:
    scenario = tmp_path / "imported.toml"
    code, _, stderr = cli_main("import", "hf", str(QWEN3_5), "-o", str(scenario))
    assert code == 0, stderr
    assert "not read" not in stderr and "vision encoder (vision_config) is not modelled" in stderr, stderr
    model = tomllib.loads(scenario.read_text())["model"]
    assert model["num_nextn_predict_layers"] == 1 and model["attn_output_gate"] is True
    assert model["layer_types"].count("full_attention") == 10 and model["num_local_experts"] == 256
    code, stdout, stderr = cli_main("simulate", str(scenario), "--json")
    assert code == 0, stderr
    # llama.cpp's llama-bench prints the language model of Qwen3.5-35B-A3B's GGUF at 34.66 B parameters
    # (its MTP layer and vision encoder apart, as plancast's count)
    assert json.loads(stdout)["num_parameters"] == pytest.approx(34.66e9, rel=0.001)


def test_a_dense_qwen3_5_imports_without_experts(tmp_path: Path) -> None:
    """Qwen3.5's dense models (`qwen3_5`, text_config `qwen3_5_text`): the same layers, a SwiGLU MLP."""
    config = json.loads(QWEN3_5.read_text())
    text = {k: v for k, v in config["text_config"].items() if "expert" not in k and k != "norm_topk_prob"}
    config = {**config, "model_type": "qwen3_5", "text_config": {**text, "intermediate_size": 17408}}
    path, out = tmp_path / "config.json", tmp_path / "out.toml"
    path.write_text(json.dumps(config))
    code, _, stderr = cli_main("import", "hf", str(path), "-o", str(out))
    assert code == 0 and "not read" not in stderr, stderr
    model = tomllib.loads(out.read_text())["model"]
    assert "num_local_experts" not in model and model["intermediate_size"] == 17408
    assert model["linear_num_value_heads"] == 32 and model["num_nextn_predict_layers"] == 1
