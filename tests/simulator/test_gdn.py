"""Gated DeltaNet layers (model.linear_* keys, layer_types 'linear_attention'; costs/gdn.py) and the full
attention's output gate (model.attn_output_gate): a Gated DeltaNet layer does the work Megatron-Bridge
counts, a hybrid block is the mean of its layer types, each key moves the prediction the way its
mechanism says, the keys are checked together, context parallel is refused, and the sweep stays exact."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from plancast.runtime.model_support import ShapeSupportError, check_model_shape_support
from plancast.simulator.costs.efficiency import op_seconds
from plancast.simulator.costs.memory import gemm_input_bytes, layer_activation_bytes
from plancast.simulator.costs.op import pass_multiple
from plancast.simulator.costs.ops import Shape, layer_forward
from plancast.simulator.costs.params import count_parameters, layer_params
from plancast.simulator.loader import ScenarioError, parse_scenario
from plancast.simulator.predict import simulate
from plancast.simulator.scenario import Scenario
from plancast.simulator.sweep import sweep
from plancast.simulator.sweep_floor import compute_floor_s
from tests.cli_runner import cli_main
from tests.simulator.test_sweep import exhaustive_best, small

FULL = ["full_attention"] * 48
GDN_KEYS = ("linear_num_key_heads", "linear_num_value_heads", "linear_key_head_dim", "linear_value_head_dim",
            "linear_conv_kernel_dim")  # fmt: skip


def _scenario(seq: int = 4096, model: dict[str, Any] | None = None, cp: int = 1, **training: Any) -> Scenario:
    """Qwen3-Next-80B-A3B on 16 H100 (ep 16, tp 2), with `model` keys over the preset's."""
    data = {
        "model": {"preset": "qwen3-next-80b-a3b", **(model or {})},
        "training": {"seq_len": seq, "micro_batch_size": 1, "global_batch_size": 16, "recompute": "full",
                     "flash_attention": True, **training},
        "parallelism": {"tensor_parallel_degree": 2, "expert_parallel_degree": 8 // cp,
                        "context_parallel_degree": cp, "framework": "megatron-lm", "sequence_parallel": True},
        "cluster": {"preset": "dgx-h100-80gb", "num_nodes": 2},
    }  # fmt: skip
    return parse_scenario(data, "qwen3-next").scenario


def _all_full() -> dict[str, Any]:
    """The preset with every layer full attention: no Gated DeltaNet keys."""
    return {"layer_types": FULL, **dict.fromkeys(GDN_KEYS)}


def _step_s(s: Scenario) -> float:
    return float(simulate(s, events=False).summary["step_time_s"])


def _megatron_bridge_gdn_flops_per_token(h: int, nk: int, nv: int, dk: int, dv: int, conv: int) -> float:
    """Megatron-Bridge's count of one GDN layer, forward and backward, per token (flop_utils.py at 067f987,
    `gdn_self_attn_per_layer`: 3 x 2 x (h in_proj + conv (2 qk + v) + 4 nv dv^2 + h v))."""
    qk, v = nk * dk, nv * dv
    return 3 * 2 * (h * (2 * qk + 2 * v + 2 * nv) + conv * (2 * qk + v) + nv * dv**2 * 4 + h * v)


@pytest.mark.parametrize("seq", [4096, 65536])
def test_a_gated_deltanet_layer_does_the_work_megatron_bridge_counts(seq: int) -> None:
    s = _scenario(seq)
    x = Shape.of(s)
    assert x.gdn is not None and x.gdn.share == 0.75
    x = replace(x, gdn=replace(x.gdn, share=1.0), tp=1, sp=False)
    ours = sum(op.flops * pass_multiple(op) for op in layer_forward(x) if op.name.startswith("gdn_")) / seq
    assert ours == pytest.approx(_megatron_bridge_gdn_flops_per_token(2048, 16, 32, 128, 128, 4), rel=1e-12)


def test_a_hybrid_block_is_the_mean_of_its_layer_types() -> None:
    """Time (within a GEMM's per-call term at the blended size), activations and parameters of the mean
    block: three quarters of a Gated DeltaNet block and one of a gated full-attention block."""
    s = _scenario()
    x = Shape.of(s)
    assert x.gdn is not None
    linear, full = replace(x, gdn=replace(x.gdn, share=1.0)), replace(x, gdn=replace(x.gdn, share=0.0))
    gpu, compute, dtype = s.cluster.gpu, s.cluster.compute, s.training.dtype

    def seconds(shape: Shape) -> float:
        return sum(op_seconds(op, gpu, compute, dtype) * pass_multiple(op) for op in layer_forward(shape))

    assert seconds(x) == pytest.approx(0.75 * seconds(linear) + 0.25 * seconds(full), rel=1e-3)
    assert layer_activation_bytes(x, "none") == pytest.approx(
        0.75 * layer_activation_bytes(linear, "none") + 0.25 * layer_activation_bytes(full, "none"), rel=1e-12
    )
    hybrid, dense = layer_params(s.model).total, layer_params(_scenario(model=_all_full()).model).total
    assert dense < hybrid  # a Gated DeltaNet mixer (33.7M) outweighs a gated full attention (27.3M)


def test_gated_deltanet_is_cheaper_than_full_attention_at_long_context_only() -> None:
    """Its work is linear in the sequence, attention's quadratic: at 4k tokens Qwen3-Next's hybrid costs
    more than the same model all full attention (its projections and state traffic are wider), at 64k
    less."""
    assert _step_s(_scenario(4096)) > _step_s(_scenario(4096, _all_full()))
    assert _step_s(_scenario(65536)) < _step_s(_scenario(65536, _all_full()))


@pytest.mark.parametrize(
    ("key", "low", "high"),
    [("linear_num_value_heads", 16, 32), ("linear_value_head_dim", 64, 128), ("linear_key_head_dim", 64, 128),
     ("linear_conv_kernel_dim", 2, 8), ("linear_num_key_heads", 8, 16)],
)  # fmt: skip
def test_each_gated_deltanet_width_raises_the_step_time_and_memory_as_it_grows(
    key: str, low: int, high: int
) -> None:
    small_, large = _scenario(model={key: low}), _scenario(model={key: high})
    assert _step_s(small_) < _step_s(large)
    x_small, x_large = Shape.of(small_), Shape.of(large)
    assert layer_activation_bytes(x_small, "none") <= layer_activation_bytes(x_large, "none")
    assert count_parameters(small_.model) < count_parameters(large.model)


def test_the_output_gate_adds_its_projection_and_its_multiply() -> None:
    gated, plain = _scenario(), _scenario(model={"attn_output_gate": False})
    assert _step_s(plain) < _step_s(gated)
    assert count_parameters(plain.model) + 12 * 2048 * 16 * 256 == count_parameters(gated.model)
    assert layer_activation_bytes(Shape.of(plain), "none") < layer_activation_bytes(Shape.of(gated), "none")


def test_more_linear_layers_move_the_block_toward_gated_deltanet() -> None:
    """layer_types decides the share: one in two linear layers sits between one in four and three in four."""
    half = {"layer_types": ["linear_attention", "full_attention"] * 24}
    quarter = {"layer_types": (["linear_attention"] + ["full_attention"] * 3) * 12}
    steps = [_step_s(_scenario(model=m)) for m in (quarter, half, {})]
    assert steps[0] < steps[1] < steps[2]  # at 4k tokens a Gated DeltaNet layer costs more


@pytest.mark.parametrize(
    ("model", "path"),
    [({"linear_conv_kernel_dim": None}, "model.linear_conv_kernel_dim"),
     ({"layer_types": FULL}, "model.layer_types"),
     ({**dict.fromkeys(GDN_KEYS)}, "model.linear_num_key_heads"),
     ({"linear_num_value_heads": 24}, "model.linear_num_value_heads"),
     ({"sliding_window": 128}, "model.sliding_window")],
    ids=["partial", "no-linear-layer", "no-widths", "uneven-heads", "beside-windows"],
)  # fmt: skip
def test_gated_deltanet_keys_that_cannot_apply_are_refused_by_name(model: dict[str, Any], path: str) -> None:
    with pytest.raises(ScenarioError, match=path):
        _scenario(model=model)


def test_the_output_gate_over_mla_is_refused_by_name() -> None:
    """plancast gates grouped-query attention only: over MLA the key would change nothing."""
    with pytest.raises(ScenarioError, match=r"model\.attn_output_gate"):
        model = {"preset": "deepseek-v2-lite", "attn_output_gate": True}
        data = {"model": model, "cluster": {"preset": "dgx-h100-80gb"}}
        parse_scenario(data, "mla-gate")


def test_the_per_op_recompute_policy_is_refused_on_a_hybrid() -> None:
    with pytest.raises(ScenarioError, match=r"training\.selective_recompute"):
        _scenario(recompute="selective", selective_recompute="op")


def test_context_parallel_is_refused_and_never_searched() -> None:
    with pytest.raises(ScenarioError, match="context_parallel_degree"):
        _scenario(65536, cp=2)
    with pytest.raises(ScenarioError, match="Gated DeltaNet heads"):
        _scenario(model={"linear_num_key_heads": 3, "linear_num_value_heads": 9})


def test_the_runtime_refuses_gated_deltanet_it_does_not_run() -> None:
    with pytest.raises(ShapeSupportError, match="Gated DeltaNet"):
        check_model_shape_support(_scenario(model={"qk_layernorm": False}))


def test_plancast_run_refuses_a_gated_deltanet_plan_before_it_starts_a_rank(tmp_path: Path) -> None:
    """The tiny MoE example with a Gated DeltaNet layer in two: refused by name, exit 2, no run folder."""
    example = (Path(__file__).parents[2] / "examples" / "tiny-moe-cpu.toml").read_text()
    keys = (
        'preset = "tiny-gpt"\nlinear_num_key_heads = 2\nlinear_num_value_heads = 2\n'
        'linear_key_head_dim = 16\nlinear_value_head_dim = 16\nlinear_conv_kernel_dim = 4\n'
        'layer_types = ["linear_attention", "full_attention", "linear_attention", "full_attention"]\n'
    )
    scenario = tmp_path / "tiny-gdn.toml"
    scenario.write_text(example.replace('preset = "tiny-gpt"\n', keys, 1))
    code, _, stderr = cli_main("run", str(scenario), "--out", str(tmp_path / "run"), "--steps", "2")
    assert code == 2 and "Gated DeltaNet layers" in stderr, stderr
    assert not (tmp_path / "run").exists()


def test_the_sweep_compute_floor_stays_under_the_engine() -> None:
    s = _scenario(65536)
    assert 0.0 < compute_floor_s(s, s.world_size) <= _step_s(s)


def test_the_sweep_finds_the_exhaustive_best_of_a_hybrid_model() -> None:
    """A tiny MoE with one Gated DeltaNet layer in two on 4 toy GPUs at 8k tokens (where the sweep would
    search context parallel for attention): the exact sweep's best is what simulating every plan that fits
    finds, and no plan of it splits the sequence."""
    gdn = {"linear_num_key_heads": 2, "linear_num_value_heads": 4, "linear_key_head_dim": 16,
           "linear_value_head_dim": 16, "linear_conv_kernel_dim": 4, "attn_output_gate": True,
           "layer_types": ["linear_attention", "full_attention"] * 2}  # fmt: skip
    base = small(4, 1.0, preset="tiny-moe", model=gdn, training={"flash_attention": True, "seq_len": 8192})
    step, plan = exhaustive_best(base, 4)
    result = sweep(base, 4, finalists=4)
    assert result.finalists[0].step_time_s == pytest.approx(step, rel=1e-12)
    assert result.finalists[0].plan == plan
    assert all(f.plan.cp == 1 for f in result.finalists)


def test_a_partial_gated_deltanet_table_is_refused_through_the_cli(tmp_path: Path) -> None:
    scenario = tmp_path / "partial.toml"
    scenario.write_text(
        '[model]\npreset = "qwen3-next-80b-a3b"\nlinear_conv_kernel_dim = 4\n'
        '[cluster]\npreset = "dgx-h100-80gb"\nnum_nodes = 2\n'
        "[parallelism]\ntensor_parallel_degree = 2\nexpert_parallel_degree = 8\n"
    )
    code, _, stderr = cli_main("validate", str(scenario))
    assert code == 0, stderr  # the preset's keys complete the table
    scenario.write_text(scenario.read_text().replace("linear_conv_kernel_dim = 4", "layer_types = []"))
    code, _, stderr = cli_main("validate", str(scenario))
    assert code == 2 and "model.layer_types" in stderr, stderr


def test_gemm_inputs_of_the_out_projection_are_saved_at_the_gemm_input_width() -> None:
    """Under FP8 out_proj's saved input narrows with every other GEMM input (costs/memory.py)."""
    bf16, fp8 = _scenario(), _scenario(fp8=True, fp8_recipe="tensorwise_delayed")
    assert gemm_input_bytes(Shape.of(fp8)) < gemm_input_bytes(Shape.of(bf16))
    assert layer_activation_bytes(Shape.of(fp8), "none") < layer_activation_bytes(Shape.of(bf16), "none")
