"""`plancast import hf` on the real config.json files of DeepSeek-V3, Kimi-K2 and Qwen3-30B-A3B (issue 31):
every key that changes time or memory is modelled (no "not modelled" or "not read" warning), and
`plancast simulate` reports the published parameter count. Sources of the files: docs/importing.md."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

import pytest

from tests.cli_runner import cli_main

DATA = Path(__file__).parent / "data" / "importers"

# (config, published total parameters, relative tolerance, source)
FRONTIER = [
    ("deepseek-v3.config.json", 671e9, 0.01, "DeepSeek-V3 technical report (arXiv 2412.19437): 671B"),
    # The Kimi K2 report (arXiv 2507.20534) says 1.04T; its checkpoint holds 1.0265T elements (scales
    # included), which plancast's count matches to 6e-5: the report's figure is 1.3% above its weights.
    ("kimi-k2.config.json", 1.02647e12, 0.01, "moonshotai/Kimi-K2-Instruct safetensors: 1,026,470,731,056"),
    ("qwen3-30b-a3b.config.json", 30.5e9, 0.01, "Qwen/Qwen3-30B-A3B model card: 30.5B"),
]


@pytest.mark.parametrize(("name", "published", "rel", "source"), FRONTIER, ids=[f[0] for f in FRONTIER])
def test_frontier_config_imports_whole_and_counts_its_parameters(
    tmp_path: Path, name: str, published: float, rel: float, source: str
) -> None:
    scenario = tmp_path / "imported.toml"
    code, _, stderr = cli_main("import", "hf", str(DATA / name), "-o", str(scenario))
    assert code == 0, stderr
    assert "not modelled" not in stderr and "not read" not in stderr, stderr
    model = tomllib.loads(scenario.read_text())["model"]
    code, stdout, stderr = cli_main("simulate", str(scenario), "--json")
    assert code == 0, stderr
    assert json.loads(stdout)["num_parameters"] == pytest.approx(published, rel=rel), source
    config = json.loads((DATA / name).read_text())
    for key in ("kv_lora_rank", "q_lora_rank", "num_nextn_predict_layers", "n_group", "topk_group"):
        assert model.get(key) == config.get(key), key  # read, not dropped
    if "head_dim" in config:
        assert model["head_dim"] == config["head_dim"]
        assert model["qk_layernorm"] is True  # Qwen3's per-head q/k RMSNorm


def test_glm_4_5_imports_as_deepseek_style_experts_over_grouped_query_attention(tmp_path: Path) -> None:
    """GLM-4.5 (Glm4MoeForCausalLM, also GLM-4.6 and 4.7: the same config keys) was refused as an
    unsupported model_type. Its experts take DeepSeek-V3's keys (160 routed, 1 shared, 3 dense layers
    first, 1 MTP depth) over grouped-query attention with 96 heads of 128 (head_dim x heads > hidden) and
    per-head q/k norms (use_qk_norm). The parameter count against the GLM-4.5 report (arXiv 2508.06471:
    355B total); the two warnings are the two keys plancast does not price: the q/k/v biases ((96 + 2 x 8) x
    128 a layer, 1.3M of 355B) and partial rotary (no parameters, elementwise work only)."""
    scenario = tmp_path / "imported.toml"
    code, _, stderr = cli_main("import", "hf", str(DATA / "glm-4.5.config.json"), "-o", str(scenario))
    assert code == 0, stderr
    warnings = [line for line in stderr.splitlines() if line.startswith("warning:")]
    assert warnings == [
        "warning: attention_bias = True is not modelled",
        "warning: partial_rotary_factor = 0.5: partial rotary is modelled as full (neither has parameters)",
    ], stderr
    model = tomllib.loads(scenario.read_text())["model"]
    experts = (model["num_local_experts"], model["n_shared_experts"], model["first_k_dense_replace"])
    assert experts == (160, 1, 3)
    assert (model["num_key_value_heads"], model["head_dim"], model["num_nextn_predict_layers"]) == (8, 128, 1)
    assert model["qk_layernorm"] is True and "kv_lora_rank" not in model  # grouped-query, not MLA
    code, stdout, stderr = cli_main("simulate", str(scenario), "--json")
    assert code == 0, stderr
    assert json.loads(stdout)["num_parameters"] == pytest.approx(355e9, rel=0.01)


def _imported_parameters(tmp_path: Path, name: str) -> tuple[dict[str, object], float, str]:
    """`import hf` of `name`, then `simulate --json`: the [model] table, its parameter count, stderr."""
    scenario = tmp_path / f"{name}.toml"
    code, _, stderr = cli_main("import", "hf", str(DATA / name), "-o", str(scenario))
    assert code == 0, stderr
    code, stdout, simulated = cli_main("simulate", str(scenario), "--json")
    assert code == 0, simulated
    return tomllib.loads(scenario.read_text())["model"], json.loads(stdout)["num_parameters"], stderr


def test_deepseek_v3_2_imports_its_sparse_attention_indexer(tmp_path: Path) -> None:
    """DeepSeek-V3.2 (DeepseekV32ForCausalLM) is DeepSeek-V3 with DeepSeek Sparse Attention: its three
    index_* keys are read (nothing warned of), and it counts V3's parameters plus one indexer a layer:
    wq_b [q_lora_rank -> 64 x 128], wk [hidden -> 128], the key's LayerNorm and weights_proj [hidden ->
    64] (costs/dsa.py), 61 x 13.96M = 0.85B, which the published "671B" (DeepSeek-V3.2 report, arXiv
    2512.02556: the same total as V3) does not resolve."""
    v3, v3_count, _ = _imported_parameters(tmp_path, "deepseek-v3.config.json")
    v32, v32_count, stderr = _imported_parameters(tmp_path, "deepseek-v3.2.config.json")
    assert "warning" not in stderr, stderr
    assert {k: v32[k] for k in ("index_topk", "index_n_heads", "index_head_dim")} == {
        "index_topk": 2048,
        "index_n_heads": 64,
        "index_head_dim": 128,
    }
    assert {k: v for k, v in v32.items() if not k.startswith("index_")} == v3
    indexer = 1536 * 64 * 128 + 7168 * 128 + 2 * 128 + 7168 * 64
    assert v32_count - v3_count == 61 * indexer
    assert v32_count == pytest.approx(671e9, rel=0.01)


def test_glm_5_imports_as_mla_with_sparse_attention(tmp_path: Path) -> None:
    """GLM-5 (GlmMoeDsaForCausalLM) was refused. Its config is DeepSeek-V3.2's shape: MLA with 64 heads
    (q_lora_rank 2048, values 256 wide), 256 routed experts over 3 dense layers, and DeepSeek Sparse
    Attention's indexer of 32 heads; rope_parameters (nested) says rotary. Counted against the GLM-5
    release's 744B total (the MTP layer left out, as for DeepSeek-V3)."""
    model, count, stderr = _imported_parameters(tmp_path, "glm-5.config.json")
    assert "warning" not in stderr, stderr
    assert model["position_embedding"] == "rope" and model["first_k_dense_replace"] == 3
    assert (model["index_topk"], model["index_n_heads"], model["index_head_dim"]) == (2048, 32, 128)
    assert count == pytest.approx(744e9, rel=0.01)


@pytest.mark.parametrize(
    ("change", "refusal"),
    [
        ({"mlp_layer_types": ["dense"] * 3 + ["sparse"] * 75}, None),
        ({"mlp_layer_types": ["dense"] * 2 + ["sparse"] * 76}, "first_k_dense_replace = 3"),
        ({"mlp_layer_types": ["dense"] * 3 + ["sparse"] * 74 + ["dense"]}, "layer 77 is dense after"),
        ({"qk_head_dim": 192}, "qk_head_dim: 192 is not qk_nope_head_dim + qk_rope_head_dim (256)"),
    ],
)
def test_glm_5_layer_types_and_head_widths_are_checked(
    tmp_path: Path, change: dict[str, object], refusal: str | None
) -> None:
    """transformers' GlmMoeDsaConfig may save `mlp_layer_types` (a "dense" / "sparse" a layer): read as
    first_k_dense_replace where the dense layers come first and agree with it, refused (exit 2) where
    not; a stated qk_head_dim must be the two widths' sum."""
    config = {**json.loads((DATA / "glm-5.config.json").read_text()), **change}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    code, _, stderr = cli_main("import", "hf", str(path), "-o", str(tmp_path / "out.toml"))
    if refusal is None:
        assert code == 0, stderr
        assert tomllib.loads((tmp_path / "out.toml").read_text())["model"]["first_k_dense_replace"] == 3
    else:
        assert code == 2 and refusal in stderr, stderr


def test_glm_5_2_index_sharing_is_read_not_warned_of(tmp_path: Path) -> None:
    """GLM-5.2's index_topk_freq (layers reusing an earlier layer's top-k) is priced now
    (tests/simulator/test_dsa_sharing.py): read into [model], no note."""
    config = {**json.loads((DATA / "glm-5.config.json").read_text()), "index_topk_freq": 4}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    code, _, stderr = cli_main("import", "hf", str(path), "-o", str(tmp_path / "out.toml"))
    assert code == 0 and "not modelled" not in stderr, stderr
    assert tomllib.loads((tmp_path / "out.toml").read_text())["model"]["index_topk_freq"] == 4


def test_qwen3_5_without_its_text_config_is_refused_naming_it(tmp_path: Path) -> None:
    """Qwen3.5 nests its language model under text_config beside a vision encoder: a config without one is
    refused with that reason, exit 2 (Qwen3.5 and Qwen3-Next import: tests/test_cli_import_linear.py)."""
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"model_type": "qwen3_5_moe", "vision_config": {"depth": 27}}))
    code, _, stderr = cli_main("import", "hf", str(path), "-o", str(tmp_path / "out.toml"))
    assert code == 2 and "text_config: a 'qwen3_5_moe' config holds its language model" in stderr, stderr
    assert not (tmp_path / "out.toml").exists()
