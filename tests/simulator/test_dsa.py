"""DeepSeek Sparse Attention (model.index_topk, index_n_heads, index_head_dim; training.dsa_indexer_loss):
the lightning indexer and the top-k sparse core over absorbed MLA (costs/dsa.py). Each key moves the
prediction the way its mechanism says; the keys are checked together; the runtime refuses what it does not
run; the sweep's floor stays under the engine."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from plancast.runtime.model_support import ShapeSupportError, check_model_shape_support
from plancast.simulator.costs.dsa import dense_context, sparse_context
from plancast.simulator.costs.memory import layer_activation_bytes
from plancast.simulator.costs.mla import cp_kv_elements_per_token, mla_saved_elements
from plancast.simulator.costs.op import backward_multiples, pass_multiple
from plancast.simulator.costs.ops import Shape, layer_forward
from plancast.simulator.costs.params import layer_params
from plancast.simulator.costs.recompute import _matmul_outputs, discarded_block_bytes
from plancast.simulator.loader import ScenarioError, parse_scenario
from plancast.simulator.predict import simulate
from plancast.simulator.scenario import Scenario
from plancast.simulator.sweep import sweep
from plancast.simulator.sweep_floor import compute_floor_s
from tests.cli_runner import cli_main
from tests.simulator.test_sweep import exhaustive_best, small

DSA = {"index_topk": 2048, "index_n_heads": 64, "index_head_dim": 128}
"""DeepSeek-V3.2's config.json (deepseek-ai/DeepSeek-V3.2-Exp)."""


def _scenario(
    seq: int = 32768, model: dict[str, Any] | None = None, preset: str = "deepseek-v2-lite", **training: Any
) -> Scenario:
    """DeepSeek-V2-Lite (MLA without query compression) on 8 H100, or `preset` (DeepSeek-V3: 64 GPUs, ep
    64), with the given DSA keys."""
    gpus = 8 if preset == "deepseek-v2-lite" else 64
    data = {
        "model": {"preset": preset, **(DSA if model is None else model)},
        "training": {"seq_len": seq, "micro_batch_size": 1, "global_batch_size": gpus, "recompute": "full",
                     "flash_attention": True, **training},
        "parallelism": {"expert_parallel_degree": gpus, "framework": "megatron-lm"},
        "cluster": {"preset": "dgx-h100-80gb", "num_nodes": gpus // 8},
    }  # fmt: skip
    return parse_scenario(data, "dsa").scenario


def _step_s(s: Scenario) -> float:
    return float(simulate(s, events=False).summary["step_time_s"])


def test_the_sparse_context_is_the_mean_of_min_position_topk() -> None:
    for seq, k in ((4096, 2048), (5000, 2048), (2048, 2048), (100, 2048), (131072, 2048)):
        brute = sum(min(i, k) for i in range(1, seq + 1)) / seq
        assert sparse_context(seq, k) == pytest.approx(brute, rel=1e-12)
    assert dense_context(4096) == pytest.approx(sum(range(1, 4097)) / 4096)


def test_sparse_attention_is_cheaper_than_dense_at_long_context_only() -> None:
    """DeepSeek-V3 (128 heads): at 128k tokens the top-2048 core reads 1/32 of the causal keys (the
    indexer still scores them all): DSA wins; at 4k the absorbed core's wider heads (kv_lora_rank + rope,
    kv_lora_rank) cost more than the dense core saves, as Megatron-Bridge's FLOP count says too. (On
    DeepSeek-V2-Lite's 16 heads the 64-head indexer's scores outweigh what the core saves.)"""
    v3 = "deepseek-v3"
    long_dense, long_sparse = _step_s(_scenario(131072, {}, v3)), _step_s(_scenario(131072, preset=v3))
    short_dense, short_sparse = _step_s(_scenario(4096, {}, v3)), _step_s(_scenario(4096, preset=v3))
    assert long_sparse < 0.6 * long_dense
    assert short_sparse > short_dense


@pytest.mark.parametrize(
    ("key", "low", "high"),
    [("index_topk", 1024, 4096), ("index_n_heads", 32, 64), ("index_head_dim", 64, 128)],
)
def test_each_dsa_key_raises_the_step_time_as_it_grows(key: str, low: int, high: int) -> None:
    """More keys read, more indexer heads, wider indexer heads: more work, never less."""
    small, large = _scenario(model={**DSA, key: low}), _scenario(model={**DSA, key: high})
    assert _step_s(large) > _step_s(small)
    if key != "index_topk":  # the indexer's projections grow with its heads and their width
        assert layer_params(large.model).total > layer_params(small.model).total


def test_the_indexer_loss_orders_off_sparse_dense() -> None:
    """Untrained, the indexer runs forward only; the sparse KL loss back-propagates over the top-k pairs
    and adds its target's Q.K; the dense loss over every causal pair."""
    steps = [_step_s(_scenario(dsa_indexer_loss=loss)) for loss in ("off", "sparse", "dense")]
    assert steps[0] < steps[1] < steps[2]


def test_the_indexer_projections_back_propagate_to_their_weights_only() -> None:
    ops = {op.name: op for op in layer_forward(Shape.of(_scenario()))}
    for name in ("index_q", "index_k", "index_weights"):
        assert backward_multiples(ops[name]) == (0.0, 1.0)  # detached inputs: no input gradient
    assert backward_multiples(ops["attention"]) == (2.0, 0.0)  # the sparse core's, as any core's
    off = {op.name: op for op in layer_forward(Shape.of(_scenario(dsa_indexer_loss="off")))}
    assert backward_multiples(off["index_q"]) == backward_multiples(off["index_scores"]) == (0.0, 0.0)
    assert "index_target" not in off


def test_the_indexer_counts_its_parameters_duplicated_over_tensor_parallel() -> None:
    """wq_b [hidden -> 64 x 128] (DeepSeek-V2-Lite has no query latent), wk [hidden -> 128], the key's
    LayerNorm (weight and bias) and weights_proj [hidden -> 64], on every tp rank alike."""
    dense, sparse = _scenario(model={}), _scenario()
    h = sparse.model.hidden_size
    added = layer_params(sparse.model).replicated - layer_params(dense.model).replicated
    assert added == h * 64 * 128 + h * 128 + 2 * 128 + h * 64
    assert layer_params(sparse.model).sharded == layer_params(dense.model).sharded


@pytest.mark.parametrize(
    ("model", "training", "path"),
    [
        ({"index_topk": 2048}, {}, "model.index_n_heads"),
        ({**DSA, "kv_lora_rank": None, "q_lora_rank": None, "qk_nope_head_dim": None,
          "qk_rope_head_dim": None, "v_head_dim": None}, {}, "model.index_topk"),
        ({}, {"dsa_indexer_loss": "sparse"}, "training.dsa_indexer_loss"),
    ],
)  # fmt: skip
def test_dsa_keys_that_cannot_apply_are_refused_by_name(
    model: dict[str, Any], training: dict[str, Any], path: str
) -> None:
    with pytest.raises(ScenarioError) as refused:
        _scenario(model=model, **training)
    assert f"- {path}:" in str(refused.value)


def test_the_runtime_refuses_sparse_attention_it_does_not_run() -> None:
    with pytest.raises(ShapeSupportError, match="index_topk"):
        check_model_shape_support(_scenario(4096))


@pytest.mark.parametrize("loss", ["off", "sparse", "dense"])
def test_the_sweep_compute_floor_stays_under_the_engine(loss: str) -> None:
    """The sweep's floor prices each op's backward with the engine's multiples (costs/op.py): the
    indexer's backward is less than twice its forward, and a floor counting 3x would overshoot."""
    s = _scenario(131072, dsa_indexer_loss=loss)
    assert 0.0 < compute_floor_s(s, s.world_size) <= _step_s(s)


def test_the_sweep_finds_the_exhaustive_best_of_a_sparse_attention_model() -> None:
    """A tiny MLA MoE with DSA (top-16 of 64 tokens, so the sparse core reads fewer keys than causal) on
    4 toy GPUs: the exact sweep's best is what simulating every plan that fits finds, its bounds built
    from the same per-op backward multiples as the engine."""
    mla = {"kv_lora_rank": 16, "q_lora_rank": 32, "qk_nope_head_dim": 16, "qk_rope_head_dim": 8,
           "v_head_dim": 16, "index_topk": 16, "index_n_heads": 4, "index_head_dim": 16}  # fmt: skip
    base = small(4, 1.0, preset="tiny-moe", model=mla, training={"flash_attention": True})
    step, plan = exhaustive_best(base, 4)
    found = sweep(base, 4, finalists=4).finalists[0]
    assert found.step_time_s == pytest.approx(step, rel=1e-12)
    assert found.plan == plan


def test_mla_up_projection_recompute_discards_what_the_absorbed_form_keeps() -> None:
    """Under DSA there are no per-head keys and values to rebuild (one latent a key is kept instead):
    recomputing the up-projections frees the queries and their absorbed form, never more than the block
    keeps of its attention's projections (costs/mla.py mla_saved_elements)."""
    keep = {"recompute": "selective", "recompute_modules": ["mla_up_proj"]}
    x = Shape.of(_scenario(**keep))
    assert x.mla is not None
    projections, _ = mla_saved_elements(x, x.mla)
    freed = discarded_block_bytes(x, moe=False)
    assert 0.0 < freed < x.dtype_bytes * x.s * x.b * projections
    assert 0.0 < layer_activation_bytes(x, "selective") < layer_activation_bytes(x, "none")


def test_a_partial_dsa_table_is_refused_through_the_cli(tmp_path: Path) -> None:
    """`plancast validate` names the missing key and exits 2, as for every bad scenario."""
    scenario = tmp_path / "partial.toml"
    scenario.write_text(
        '[model]\npreset = "deepseek-v2-lite"\nindex_topk = 2048\n\n[cluster]\npreset = "dgx-h100-80gb"\n'
    )
    code, _, stderr = cli_main("validate", str(scenario))
    assert code == 2
    assert "model.index_n_heads" in stderr and "model.index_head_dim" in stderr


def test_the_per_op_policy_saves_the_indexer_outputs_at_their_own_widths() -> None:
    """torchtitan's per-op recompute policy saves every other matmul output: the indexer's are 64 x 128,
    128 and 64 features a token, not the hidden size."""
    x = Shape.of(_scenario())
    ops = {op.name: op for op in layer_forward(x)}
    widths = [_matmul_outputs(ops[name], x) for name in ("index_q", "index_k", "index_weights")]
    assert widths == [(64.0 * 128,), (128.0,), (64.0,)]


def test_context_parallel_gathers_the_indexer_keys_with_the_latents() -> None:
    """Under cp each rank's queries score every earlier token, so its indexer keys (128 a token) are
    exchanged with MLA's latent (512 + 64): more cp traffic than the same plan with dense MLA."""
    sparse, dense = _scenario().model, _scenario(model={}).model
    assert cp_kv_elements_per_token(sparse, 1) - cp_kv_elements_per_token(dense, 1) == 128


def _megatron_bridge_dsa_flops(seq: int, loss: str) -> float:
    """Forward-plus-backward FLOPs a token of one GLM-5 attention block, as Megatron-Bridge counts DSA
    (src/megatron/bridge/training/utils/flop_utils.py, `experimental_attention_variant == "dsa"`, at
    067f987), its terms written out: MLA's projections 3 x 2 x (q, kv, out) (less its two norms' "+1",
    which plancast prices as memory-bound ops), the absorbed sparse core, the indexer's projections (4x
    trained: forward + weight gradient; 2x not), the dense index scores with their backward over the
    pairs the loss reads, and the sparse loss's forward-only target."""
    h, heads, q_lora, kv_lora, nope, rope, v = 6144, 64, 2048, 512, 192, 64, 256
    index_heads, index_dim, topk = 32, 128, 2048
    dense = (seq + 1) / 2
    sparse = dense if seq <= topk else topk - topk * (topk - 1) / (2 * seq)
    projections = 6 * (q_lora * (h + heads * (nope + rope)) + kv_lora * (h + heads * (nope + v)) + h * rope)
    projections += 6 * heads * v * h
    core = 6 * sparse * heads * (2 * kv_lora + rope)
    trains, read = loss != "off", sparse if loss == "sparse" else dense
    indexer = (4 if trains else 2) * (q_lora * index_heads * index_dim + h * index_dim + h * index_heads)
    unit = index_heads * (index_dim + 1)
    scores = 2 * dense * unit + (4 * read * unit if trains else 0.0)
    target = 2 * read * heads * (kv_lora + rope) if trains else 0.0
    return projections + core + indexer + scores + target


@pytest.mark.parametrize("seq", [4096, 32768, 131072])
@pytest.mark.parametrize("loss", ["sparse", "dense", "off"])
def test_the_dsa_block_does_the_work_megatron_bridge_counts(seq: int, loss: str) -> None:
    """plancast's ops of one GLM-5 attention block (tp 1, the whole sequence), each with its own backward
    multiple, add up to Megatron-Bridge's DSA FLOP count per token."""
    data = {
        "model": {"preset": "glm-5"},
        "training": {"seq_len": seq, "micro_batch_size": 1, "global_batch_size": 8, "dsa_indexer_loss": loss},
        "cluster": {"preset": "dgx-h100-80gb"},
    }
    x = Shape.of(parse_scenario(data, "glm-5").scenario)
    attention = {"q_down", "q_up", "kv_down", "kv_up", "out_proj", "index_q", "index_k", "index_weights",
                 "index_scores", "index_target", "attention"}  # fmt: skip
    ours = sum(op.flops * pass_multiple(op) for op in layer_forward(x) if op.name in attention) / seq
    assert ours == pytest.approx(_megatron_bridge_dsa_flops(seq, loss), rel=1e-12)


def test_plancast_run_refuses_a_dsa_plan_before_it_starts_a_rank(tmp_path: Path) -> None:
    """The tiny MLA example with an indexer: refused by name, exit 2, no run folder made."""
    example = (Path(__file__).parents[2] / "examples" / "tiny-mla-moe-cpu.toml").read_text()
    keys = "v_head_dim = 16\nindex_topk = 16\nindex_n_heads = 2\nindex_head_dim = 16\n"
    scenario = tmp_path / "tiny-dsa.toml"
    scenario.write_text(example.replace("v_head_dim = 16\n", keys, 1))
    code, _, stderr = cli_main("run", str(scenario), "--out", str(tmp_path / "run"), "--steps", "2")
    assert code == 2 and "model.index_topk = 16 (DeepSeek Sparse Attention)" in stderr, stderr
    assert not (tmp_path / "run").exists()
