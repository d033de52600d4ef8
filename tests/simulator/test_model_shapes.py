"""Model shapes of 2025-2026 (docs/models.md): each new key moves the prediction the way its mechanism
says, the ideal-case identities hold exactly, and bad combinations are refused with key path and fix."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import tomli_w

from plancast.simulator.costs.cp import kv_shard_bytes
from plancast.simulator.costs.memory import peak_memory
from plancast.simulator.costs.mla import mla_saved_elements
from plancast.simulator.costs.model_flops import model_flops_per_token
from plancast.simulator.costs.ops import Shape
from plancast.simulator.costs.params import count_parameters, layer_params, mtp_parameters
from plancast.simulator.costs.routing import nodes_spanned, scale_out_factor
from plancast.simulator.loader import ScenarioError, parse_scenario
from plancast.simulator.predict import simulate
from plancast.simulator.scenario import Model, Scenario
from plancast.simulator.sweep_axes import Plan
from plancast.simulator.sweep_estimate import Estimator
from tests.cli_runner import cli_main

MLA = {
    "kv_lora_rank": 64,
    "q_lora_rank": 96,
    "qk_nope_head_dim": 32,
    "qk_rope_head_dim": 16,
    "v_head_dim": 32,
}
BASE: dict[str, Any] = {
    "model": {
        "hidden_size": 256,
        "num_hidden_layers": 4,
        "num_attention_heads": 8,
        "vocab_size": 1024,
        "activation": "swiglu",
        "norm": "rmsnorm",
        "position_embedding": "rope",
        "tie_word_embeddings": False,
    },
    "training": {"seq_len": 512, "micro_batch_size": 1, "global_batch_size": 8, "dtype": "bf16"},
    "parallelism": {"pipeline_parallel_degree": 2},
    "cluster": {"preset": "dgx-h100-80gb", "num_nodes": 1},
}
MOE = {"num_local_experts": 8, "num_experts_per_tok": 4, "moe_intermediate_size": 128}


def _scenario(model: dict[str, Any] | None = None, **sections: dict[str, Any]) -> Scenario:
    data = {**BASE, "model": {**BASE["model"], **(model or {})}}
    for name, keys in sections.items():
        data[name] = {**BASE[name], **keys}
    return parse_scenario(data).scenario


def _activations(s: Scenario) -> float:
    return peak_memory(s)[1].activations


def test_head_dim_wider_than_hidden_over_heads_adds_flops_and_parameters() -> None:
    plain, wide = _scenario(), _scenario({"head_dim": 64})  # 8 heads of 64 = 512 > hidden 256
    assert plain.model.head_dim == 32 and wide.model.qk_head_dim == 64
    assert model_flops_per_token(wide) > model_flops_per_token(plain)
    assert count_parameters(wide.model) > count_parameters(plain.model)
    assert _activations(wide) > _activations(plain)
    # Q and O grow with heads * head_dim, K and V with kv heads * head_dim: 4 * h * 512 per layer
    assert layer_params(wide.model).sharded - layer_params(plain.model).sharded == 4 * 256 * (512 - 256)


def test_declared_head_dim_equal_to_the_default_changes_nothing() -> None:
    plain, same = _scenario(), _scenario({"head_dim": 32})
    assert simulate(same, events=False).summary == simulate(plain, events=False).summary


def test_deepseek_v3_mla_parameters_are_the_checkpoints() -> None:
    """q_a 7168x1536, q_a_layernorm 1536, q_b 1536x(128 x 192), kv_a 7168x576, kv_a_layernorm 512,
    kv_b 512x(128 x 256), o 16384x7168 (HF modeling_deepseek_v3 shapes): 187,107,328 a layer."""
    m = Model.model_validate({"preset": "deepseek-v3"})
    attention = layer_params(m).total - 3 * 7168 * 18432 - 2 * 7168  # less the dense MLP and the 2 norms
    assert (
        attention == 7168 * 1536 + 1536 + 1536 * 128 * 192 + 7168 * 576 + 512 + 512 * 128 * 256 + 16384 * 7168
    )
    assert attention == 187_107_328


@pytest.mark.parametrize(
    ("key", "small", "large"),
    [
        ("kv_lora_rank", 32, 128),
        ("q_lora_rank", 48, 192),
        ("qk_rope_head_dim", 8, 32),
        ("v_head_dim", 16, 64),
    ],
)
def test_mla_widths_move_work_and_memory_with_them(key: str, small: int, large: int) -> None:
    lo, hi = _scenario({**MLA, key: small}), _scenario({**MLA, key: large})
    assert count_parameters(lo.model) < count_parameters(hi.model)
    assert model_flops_per_token(lo) < model_flops_per_token(hi)
    assert _activations(lo) < _activations(hi)


def test_query_compression_saves_work_against_a_full_query_projection() -> None:
    compressed = _scenario({**MLA, "q_lora_rank": 32})
    full = _scenario({k: v for k, v in MLA.items() if k != "q_lora_rank"})
    assert count_parameters(compressed.model) < count_parameters(full.model)
    assert model_flops_per_token(compressed) < model_flops_per_token(full)


def test_context_parallel_exchanges_the_compressed_latent() -> None:
    """MLA's exchange is kv_lora_rank + qk_rope_head_dim per token, whole on every tp rank."""
    cp = {"context_parallel_degree": 2, "pipeline_parallel_degree": 1, "tensor_parallel_degree": 2}
    mha, mla = _scenario(parallelism=cp), _scenario(MLA, parallelism=cp)
    tokens = 512 // 2
    assert kv_shard_bytes(mla) == tokens * (64 + 16) * 2
    assert kv_shard_bytes(mha) == tokens * 2 * (8 * 32 // 2) * 2
    smaller = _scenario({**MLA, "kv_lora_rank": 32}, parallelism=cp)
    assert kv_shard_bytes(smaller) < kv_shard_bytes(mla)


def test_mla_under_context_parallel_keeps_the_gathered_keys_and_values() -> None:
    """Per local token, a cp rank keeps K, V and the up-projection's input for every gathered token."""
    one, two = (
        _scenario(MLA, parallelism={"context_parallel_degree": cp, "pipeline_parallel_degree": 1})
        for cp in (1, 2)
    )
    x1, x2 = Shape.of(one), Shape.of(two)
    assert x1.mla is not None and x2.mla is not None
    per_kv_token = 64 + (8 * 48 + 8 * 32)  # kv_lora_rank + K (8 heads of 32 + 16) + V (8 heads of 32)
    assert mla_saved_elements(x2, x2.mla)[0] - mla_saved_elements(x1, x1.mla)[0] == per_kv_token


def test_mtp_depth_adds_time_memory_and_model_flops_on_the_last_stage() -> None:
    plain, mtp = _scenario(MOE), _scenario({**MOE, "num_nextn_predict_layers": 1})
    assert count_parameters(mtp.model) == count_parameters(plain.model)  # published counts leave it out
    assert mtp_parameters(mtp.model) > 0 == mtp_parameters(plain.model)
    assert model_flops_per_token(mtp) > model_flops_per_token(plain)
    slow, fast = simulate(mtp, events=False).summary, simulate(plain, events=False).summary
    assert slow["step_time_s"] > fast["step_time_s"]
    first, last = (peak_memory(s) for s in (plain, mtp))
    assert last[1].total > first[1].total and last[0] == plain.pp - 1


def test_node_limited_routing_cuts_scale_out_all_to_all() -> None:
    """Expert parallel 16 over two 8-GPU nodes, top-4 of 16 experts: unrestricted a token reaches
    2 x (1 - (1/2)^4) = 1.875 nodes; limited to one group of two, one node."""
    moe = {**MOE, "num_local_experts": 16}
    plan = {"pipeline_parallel_degree": 1, "expert_parallel_degree": 16}
    wide = {
        "cluster": {**BASE["cluster"], "num_nodes": 2},
        "training": {**BASE["training"], "global_batch_size": 16},
    }
    free = _scenario(moe, parallelism=plan, **wide)
    limited = _scenario({**moe, "n_group": 2, "topk_group": 1}, parallelism=plan, **wide)
    assert scale_out_factor(limited.model, 2) == pytest.approx(1 / 1.875)
    ep = [simulate(s, events=False).summary["exposed_comm_s"]["ep"] for s in (free, limited)]
    assert ep[1] < ep[0]
    untouched = _scenario({**moe, "n_group": 2, "topk_group": 2}, parallelism=plan, **wide)
    assert simulate(untouched, events=False).summary == simulate(free, events=False).summary


@pytest.mark.parametrize(
    ("top_k", "nodes", "n_group", "topk_group", "spanned"),
    [
        (8, 1, 8, 4, 1.0),  # one node: nothing crosses
        (8, 8, None, None, 8 * (1 - (7 / 8) ** 8)),  # DeepSeek-V3 EP64 over 8 nodes, unrestricted: 5.25
        (8, 8, 8, 4, 4.0),  # DeepSeek-V3's limit: at most 4 nodes
        (8, 4, 8, 4, 4 * (1 - (3 / 4) ** 8)),  # groups finer than nodes: 4 groups may span all 4 nodes
        (2, 8, 8, 4, 8 * (1 - (7 / 8) ** 2)),  # top-2 reaches fewer nodes than the limit allows
        (8, 16, 8, 2, 4.0),  # groups of two nodes each: 2 groups, 4 nodes
    ],
)
def test_nodes_spanned(
    top_k: int, nodes: int, n_group: int | None, topk_group: int | None, spanned: float
) -> None:
    assert nodes_spanned(top_k, nodes, n_group, topk_group) == pytest.approx(spanned)


def test_qk_layernorm_adds_a_norm_its_weights_and_its_saved_inputs() -> None:
    plain, normed = _scenario({"head_dim": 64}), _scenario({"head_dim": 64, "qk_layernorm": True})
    assert count_parameters(normed.model) - count_parameters(plain.model) == 4 * 2 * 64  # 4 layers
    assert _activations(normed) > _activations(plain)
    slow, fast = simulate(normed, events=False).summary, simulate(plain, events=False).summary
    assert slow["step_time_s"] > fast["step_time_s"]


def test_squared_relu_prices_two_matrices() -> None:
    """relu2 (Nemotron) has GELU's two matrices, fewer than SwiGLU's three at the same width."""
    width = {"intermediate_size": 1024}
    relu2, gelu, swiglu = (_scenario({**width, "activation": a}) for a in ("relu2", "gelu", "swiglu"))
    assert count_parameters(relu2.model) == count_parameters(gelu.model) < count_parameters(swiglu.model)
    assert model_flops_per_token(relu2) == model_flops_per_token(gelu) < model_flops_per_token(swiglu)
    assert _activations(relu2) == _activations(gelu) < _activations(swiglu)
    assert _scenario({"activation": "relu2"}).model.ffn_size == 4 * 256  # default width as GELU's


@pytest.mark.parametrize(
    ("model", "path", "fix"),
    [
        ({"kv_lora_rank": 64, "qk_nope_head_dim": 32, "qk_rope_head_dim": 16}, "model.v_head_dim", "set it"),
        ({"v_head_dim": 32}, "model.v_head_dim", "set kv_lora_rank or remove it"),
        ({**MOE, "n_group": 2}, "model.topk_group", "set both"),
        ({**MOE, "n_group": 2, "topk_group": 3}, "model.topk_group", "exceeds n_group"),
        ({**MOE, "n_group": 3, "topk_group": 1}, "model.n_group", "divide"),
        ({"head_dim": 0}, "model.head_dim", "greater than 0"),
        ({**MLA, "qk_layernorm": True}, "model.qk_layernorm", "set qk_layernorm = false"),
    ],
)
def test_bad_shape_keys_name_the_key_and_the_fix(model: dict[str, Any], path: str, fix: str) -> None:
    with pytest.raises(ScenarioError) as err:
        _scenario(model)
    assert path in str(err.value) and fix in str(err.value)


def test_heads_need_not_divide_hidden_when_head_dim_is_declared() -> None:
    s = _scenario({"num_attention_heads": 6, "num_key_value_heads": 2, "head_dim": 48})
    assert s.model.qk_head_dim == 48
    with pytest.raises(ScenarioError, match=r"declare model\.head_dim"):
        _scenario({"num_attention_heads": 6, "num_key_value_heads": 2})


def test_cli_refuses_an_incomplete_mla_with_exit_code_2(tmp_path: Path) -> None:
    data = {**BASE, "model": {**BASE["model"], "kv_lora_rank": 64, "qk_rope_head_dim": 16}}
    path = tmp_path / "mla.toml"
    path.write_text(tomli_w.dumps(data))
    code, _, err = cli_main("validate", str(path))
    assert code == 2
    assert "model.qk_nope_head_dim" in err and "model.v_head_dim" in err and "Traceback" not in err


def test_the_sweep_estimate_prices_mtp_with_the_head_not_the_mean_block() -> None:
    """The sweep's closed form (simulator/sweep_estimate.py) keeps a block's time a block's and puts the
    multi-token-prediction depth on the last stage with the head, as the full simulation does."""
    plan = Plan(1, 2, 4, 1, "1F1B", 1, "none", False, 0)
    plain, mtp = (
        Estimator(_scenario({**MOE, "num_nextn_predict_layers": depth}), 8).layer(plan) for depth in (0, 1)
    )
    assert mtp.layer_s == plain.layer_s and mtp.embedding_s == plain.embedding_s
    assert mtp.head_s > plain.head_s
