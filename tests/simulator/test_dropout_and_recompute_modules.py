"""Dropout (model.hidden_dropout, model.attention_dropout) and Megatron-Core's recompute modules
(training.recompute_modules) each move memory and step time the way their mechanism says (issue 33)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from plancast.simulator.costs.memory import layer_activation_bytes, peak_inflight_layers
from plancast.simulator.costs.ops import Shape
from plancast.simulator.importers.hf import hf_model
from plancast.simulator.importers.megatron import from_megatron_args
from plancast.simulator.loader import ScenarioError, parse_scenario
from plancast.simulator.model_dropout import dropout_probabilities
from plancast.simulator.predict import simulate
from plancast.simulator.scenario import Scenario
from plancast.simulator.schedules import build_schedule
from tests.cli_runner import cli_main


def scenario(model: dict[str, Any], framework: str = "megatron-lm", **training: Any) -> Scenario:
    """Four blocks of `model` on one DGX H100, tp 2 (ep 4 for an MoE model)."""
    data: dict[str, Any] = {
        "model": {"num_hidden_layers": 4, **model},
        "training": {"seq_len": 2048, "micro_batch_size": 1, "global_batch_size": 8, **training},
        "parallelism": {"tensor_parallel_degree": 2, "framework": framework},
        "cluster": {"preset": "dgx-h100-80gb", "num_nodes": 1},
    }
    if "qwen3" in model.get("preset", "") or "deepseek" in model.get("preset", ""):
        data["parallelism"]["expert_parallel_degree"] = 4
    return parse_scenario(data).scenario


def peak_and_step(s: Scenario) -> tuple[float, float]:
    summary = simulate(s, events=False).summary
    return summary["peak_memory_gib"], summary["step_time_s"]


GPT = {"preset": "gpt3-1.3b"}


@pytest.mark.parametrize(
    ("model", "framework", "expected"),
    [
        (GPT, "megatron-lm", (0.1, 0.1)),  # megatron/training/arguments.py defaults
        (GPT, "deepspeed", (0.1, 0.1)),  # Megatron-DeepSpeed keeps Megatron's arguments
        (GPT, "torchtitan", (0.0, 0.0)),  # no dropout module in torchtitan's decoders
        ({"preset": "llama3-8b"}, "megatron-lm", (0.0, 0.0)),  # the preset's, as Bridge's LlamaModelProvider
        ({"preset": "qwen3-30b-a3b"}, "deepspeed", (0.0, 0.0)),
        ({**GPT, "hidden_dropout": 0.2}, "torchtitan", (0.2, 0.0)),  # an explicit key wins
        ({"preset": "llama3-8b", "attention_dropout": 0.1}, "megatron-lm", (0.0, 0.1)),
    ],
)
def test_dropout_is_the_keys_else_the_preset_else_the_framework(
    model: dict[str, Any], framework: str, expected: tuple[float, float]
) -> None:
    s = scenario(model, framework)
    assert dropout_probabilities(s.model, s.parallelism.framework) == expected


def test_a_zero_dropout_keeps_and_writes_no_mask() -> None:
    """Two 1-byte hidden masks per token and unit leave each block (Korthikanti et al. 2022 sec. 4.1), and
    without flash attention the mask and dropped copy of the scores; the step writes none of them."""
    on = scenario(GPT, flash_attention=False)
    off = scenario({**GPT, "hidden_dropout": 0.0, "attention_dropout": 0.0}, flash_attention=False)
    x_on, x_off = Shape.of(on), Shape.of(off)
    tokens, d = x_on.s * x_on.b, x_on.dtype_bytes
    masks = 2 * tokens * x_on.h
    scores = (d + 1) * x_on.b * x_on.heads * x_on.s * x_on.s / x_on.tp
    assert layer_activation_bytes(x_on, "none") - layer_activation_bytes(x_off, "none") == pytest.approx(
        masks + scores, rel=1e-12
    )
    hidden_off = scenario({**GPT, "hidden_dropout": 0.0}, flash_attention=False)
    kept_without_masks = layer_activation_bytes(Shape.of(hidden_off), "none")
    assert layer_activation_bytes(x_on, "none") - kept_without_masks == masks
    (peak_on, step_on), (peak_off, step_off) = peak_and_step(on), peak_and_step(off)
    assert peak_off < peak_on and step_off < step_on
    assert peak_and_step(hidden_off)[1] < step_on  # the residual adds write no mask


@pytest.mark.parametrize("value", [1.0, -0.1])
def test_a_dropout_outside_0_1_exits_2_naming_the_key(tmp_path: Path, value: float) -> None:
    path = tmp_path / "dropout.toml"
    path.write_text(
        f'[model]\npreset = "llama3-8b"\nnum_hidden_layers = 2\nhidden_dropout = {value}\n'
        '[training]\nseq_len = 1024\nglobal_batch_size = 8\n'
        '[cluster]\npreset = "dgx-h100-80gb"\nnum_nodes = 1\n'
    )
    code, out, err = cli_main("simulate", str(path))
    assert code == 2 and "Traceback" not in out + err
    assert "model.hidden_dropout" in err


def selective(model: dict[str, Any], modules: list[str] | None) -> Scenario:
    extra = {} if modules is None else {"recompute_modules": modules}
    return scenario(model, recompute="selective", flash_attention=True, **extra)


QWEN = {"preset": "qwen3-30b-a3b"}
DSV2 = {"preset": "deepseek-v2-lite"}  # MLA, routed and shared experts
LLAMA = {"preset": "llama3-8b"}


def test_the_default_modules_are_megatron_cores_core_attn() -> None:
    for model in (QWEN, LLAMA):
        assert peak_and_step(selective(model, None)) == peak_and_step(selective(model, ["core_attn"]))


@pytest.mark.parametrize(
    ("model", "module"),
    [
        (QWEN, "layernorm"),  # an MoE block's pre-MLP norm is a module of its own (TENorm)
        (QWEN, "moe_act"),
        (QWEN, "moe"),
        (DSV2, "mla_up_proj"),
        (DSV2, "shared_experts"),
        (DSV2, "layernorm"),  # MLA's input norm and the MoE norm
        (LLAMA, "mlp"),
    ],
)
def test_each_module_lowers_the_peak_and_lengthens_the_step(model: dict[str, Any], module: str) -> None:
    base_peak, base_step = peak_and_step(selective(model, ["core_attn"]))
    peak, step = peak_and_step(selective(model, ["core_attn", module]))
    assert peak < base_peak and step > base_step


def test_the_whole_moe_layer_discards_more_than_its_activation_and_costs_its_all_to_alls_again() -> None:
    act_peak, act_step = peak_and_step(selective(QWEN, ["moe_act"]))
    moe_peak, moe_step = peak_and_step(selective(QWEN, ["moe"]))
    assert moe_peak < act_peak and moe_step > act_step


def test_a_dense_blocks_norms_are_fused_so_layernorm_moves_nothing() -> None:
    """Transformer Engine fuses a dense block's norms into linear_qkv and linear_fc1
    (TELayerNormColumnParallelLinear, megatron/core/models/gpt/gpt_layer_specs.py)."""
    assert peak_and_step(selective(LLAMA, ["core_attn", "layernorm"])) == peak_and_step(
        selective(LLAMA, ["core_attn"])
    )


def test_mlp_recompute_drops_exactly_the_mlp_input_and_insides() -> None:
    x = Shape.of(selective(LLAMA, ["core_attn", "mlp"]))
    kept = layer_activation_bytes(x, "selective")
    core = layer_activation_bytes(Shape.of(selective(LLAMA, ["core_attn"])), "selective")
    tokens, d = x.s * x.b, x.dtype_bytes
    mlp = tokens * x.h * d + (2 * d + d) * tokens * x.ffn / x.tp  # FC1's input; gate, up, FC2's input
    assert core - kept == pytest.approx(mlp, rel=1e-12)


def test_without_core_attn_the_scores_stay_and_the_attention_is_not_rerun() -> None:
    unfused = {"flash_attention": False, "recompute": "selective"}
    core = scenario(LLAMA, recompute_modules=["core_attn"], **unfused)
    none = scenario(LLAMA, recompute_modules=[], **unfused)
    (core_peak, core_step), (none_peak, none_step) = peak_and_step(core), peak_and_step(none)
    assert none_peak > core_peak and none_step < core_step
    assert none_peak == peak_and_step(scenario(LLAMA, flash_attention=False))[0]


@pytest.mark.parametrize(
    ("model", "training"),
    [
        (QWEN, {"recompute": "none", "recompute_modules": ["moe_act"]}),
        (QWEN, {"recompute": "full", "recompute_modules": ["moe_act"]}),
        (LLAMA, {"recompute": "selective", "selective_recompute": "op", "recompute_modules": ["mlp"]}),
        (LLAMA, {"recompute": "selective", "recompute_modules": ["mla_up_proj"]}),
        (LLAMA, {"recompute": "selective", "recompute_modules": ["moe_act"]}),
        (QWEN, {"recompute": "selective", "recompute_modules": ["shared_experts"]}),  # no shared experts
        (QWEN, {"recompute": "selective", "recompute_modules": ["moe", "moe"]}),
    ],
)
def test_modules_outside_selective_recompute_or_the_model_are_refused_by_name(
    model: dict[str, Any], training: dict[str, Any]
) -> None:
    with pytest.raises(ScenarioError) as err:
        scenario(model, **training)
    assert "training.recompute_modules" in str(err.value)


def test_a_bad_module_name_exits_2(tmp_path: Path) -> None:
    path = tmp_path / "modules.toml"
    path.write_text(
        '[model]\npreset = "llama3-8b"\nnum_hidden_layers = 2\n[training]\nseq_len = 1024\n'
        'global_batch_size = 8\nrecompute = "selective"\nrecompute_modules = ["attn"]\n'
        '[cluster]\npreset = "dgx-h100-80gb"\nnum_nodes = 1\n'
    )
    code, out, err = cli_main("simulate", str(path))
    assert code == 2 and "Traceback" not in out + err
    assert "training.recompute_modules" in err


ARGS = "--num-layers 4 --hidden-size 1024 --num-attention-heads 16 --vocab-size 32000 --seq-length 2048"


def test_import_megatron_reads_dropout_and_recompute_modules() -> None:
    plain = from_megatron_args(ARGS)
    assert "hidden_dropout" not in plain["model"] and "attention_dropout" not in plain["model"]
    s = scenario(plain["model"], "megatron-lm")
    assert dropout_probabilities(s.model, s.parallelism.framework) == (0.1, 0.1)  # Megatron-LM's defaults
    flags = " --hidden-dropout 0 --attention-dropout 0.0 --recompute-granularity selective"
    data = from_megatron_args(ARGS + flags + " --recompute-modules moe_act layernorm --micro-batch-size 1")
    assert data["model"]["hidden_dropout"] == data["model"]["attention_dropout"] == 0.0
    assert data["training"]["recompute_modules"] == ["moe_act", "layernorm"]
    assert data["training"]["micro_batch_size"] == 1  # the list stops at the next flag


@pytest.mark.parametrize(
    ("config", "expected"),
    [
        ({"model_type": "llama", "attention_dropout": 0.0}, (0.0, 0.0)),
        ({"model_type": "gpt2"}, (0.1, 0.1)),  # GPT2Config's resid_pdrop, attn_pdrop
        ({"model_type": "gpt2", "resid_pdrop": 0.0, "attn_pdrop": 0.05}, (0.0, 0.05)),
        ({"model_type": "gpt_neox", "hidden_dropout": 0.1, "attention_dropout": 0.0}, (0.1, 0.0)),
    ],
)
def test_import_hf_reads_the_configs_dropout(config: dict[str, Any], expected: tuple[float, float]) -> None:
    shape = {"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4, "vocab_size": 256}
    if config["model_type"] == "gpt2":
        shape = {"n_embd": 64, "n_layer": 2, "n_head": 4, "vocab_size": 256}
    if config["model_type"] == "llama":
        shape["rms_norm_eps"] = 1e-5
    model, _ = hf_model({**shape, **config})
    assert (model["hidden_dropout"], model["attention_dropout"]) == expected



@pytest.mark.parametrize(
    ("framework", "training", "parallelism", "residual"),
    [
        ("torchtitan", {"dtype": "bf16"}, {}, 4),  # autocast over fp32 weights: fp32 embedding output
        ("torchtitan", {"dtype": "bf16"}, {"zero_stage": 3}, 0),  # FSDP2 casts to bf16
        ("torchtitan", {"dtype": "fp32"}, {}, 0),
        ("megatron-lm", {"dtype": "bf16"}, {}, 0),  # 16-bit weights
    ],
)
def test_autocast_over_fp32_weights_keeps_an_fp32_residual_stream(
    framework: str, training: dict[str, Any], parallelism: dict[str, Any], residual: int
) -> None:
    data: dict[str, Any] = {
        "model": {"preset": "llama3-8b", "num_hidden_layers": 2},
        "training": {"seq_len": 1024, "global_batch_size": 8, "recompute": "full", **training},
        "parallelism": {"framework": framework, **parallelism},
        "cluster": {"preset": "dgx-h100-80gb", "num_nodes": 1},
    }
    x = Shape.of(parse_scenario(data).scenario)
    assert x.residual_bytes == residual
    assert layer_activation_bytes(x, "full") == (residual or x.dtype_bytes) * x.s * x.b * x.h


@pytest.mark.parametrize(
    ("pp", "v", "m"), [(2, 2, 4), (4, 2, 4), (4, 2, 8), (4, 3, 12), (4, 4, 8), (8, 2, 16), (16, 8, 16)]
)
def test_interleaved_1f1b_keeps_megatron_cores_warm_up_plus_one_in_flight(pp: int, v: int, m: int) -> None:
    """Megatron-Core's interleaved schedule runs (pp - rank - 1) * 2 + (v - 1) * N forwards before its first
    backward, N = microbatch_group_size_per_vp_stage (default pp), all of them when that reaches m * v
    (megatron/core/pipeline_parallel/schedules.py `forward_backward_pipelining_with_interleaving`); its
    peak holds one more chunk. Llama 3 405B's paper rows (pp 16, v 8, 16 micro-batches) keep all 128."""
    schedule = build_schedule("Interleaved1F1B", pp, m, v)
    for rank in range(pp):
        expected = min((pp - rank - 1) * 2 + (v - 1) * pp + 1, m * v)
        assert peak_inflight_layers(schedule[rank], dict.fromkeys(range(v), 1)) == expected


def test_torchtitan_sequence_parallel_keeps_the_gathered_gemm_inputs_megatron_keeps_the_shard() -> None:
    """torchtitan's DTensor plan gathers a block's input before the column-parallel GEMMs, which save the
    gathered tensor; Megatron-LM saves the sequence-parallel shard and gathers it again in backward: the
    QKV and FC1 inputs differ by (1 - 1/tp) of the whole sequence."""
    def shape(framework: str) -> Shape:
        data: dict[str, Any] = {
            "model": {**LLAMA, "num_hidden_layers": 4},
            "training": {"seq_len": 2048, "global_batch_size": 8},
            "parallelism": {"tensor_parallel_degree": 2, "sequence_parallel": True, "framework": framework},
            "cluster": {"preset": "dgx-h100-80gb", "num_nodes": 1},
        }
        return Shape.of(parse_scenario(data).scenario)

    titan, megatron = shape("torchtitan"), shape("megatron-lm")
    assert titan.sp_saves_gathered and not megatron.sp_saves_gathered
    both = replace(megatron, residual_bytes=titan.residual_bytes, hidden_dropout=titan.hidden_dropout)
    g, sbh = titan.dtype_bytes, titan.s * titan.b * titan.h
    gap = layer_activation_bytes(titan, "none") - layer_activation_bytes(both, "none")
    assert gap == pytest.approx(2 * g * sbh * (1 - 1 / titan.tp), rel=1e-12)
