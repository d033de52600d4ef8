"""Importers: other tools' configs become scenario parts that `parse_scenario` accepts unchanged."""

from __future__ import annotations

import contextlib
import json
from pathlib import Path
from typing import Any

import pytest
import tomli_w
from hypothesis import given, settings
from hypothesis import strategies as st

from plancast.simulator.costs.params import count_parameters
from plancast.simulator.importers import (
    ConfigImportError,
    build_scenario_dict,
    from_deepspeed_config,
    from_hf_config,
    from_megatron_args,
    import_file,
)
from plancast.simulator.loader import load_scenario, parse_scenario
from plancast.simulator.scenario import Model

DATA = Path(__file__).parent.parent / "data" / "importers"
EXAMPLES = Path(__file__).parents[2] / "examples"


def _json(name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((DATA / name).read_text())
    return data


# ---------------------------------------------------------------------------------- Hugging Face
# Published sizes: Llama 3 8B model card (8.03B); Mistral 7B (7,241,732,096 in the safetensors index);
# GPT-2 small (124,439,808 parameters in the Hugging Face checkpoint).
HF_CASES = [
    ("llama3-8b.config.json", 8.03e9, {
        "hidden_size": 4096, "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8,
        "intermediate_size": 14336, "vocab_size": 128256, "activation": "swiglu", "norm": "rmsnorm",
        "position_embedding": "rope", "max_position_embeddings": 8192, "tie_word_embeddings": False,
        "hidden_dropout": 0.0, "attention_dropout": 0.0}),
    ("mistral-7b.config.json", 7_241_732_096, {
        "hidden_size": 4096, "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8,
        "intermediate_size": 14336, "vocab_size": 32000, "activation": "swiglu", "norm": "rmsnorm",
        "position_embedding": "rope", "max_position_embeddings": 32768, "tie_word_embeddings": False,
        "hidden_dropout": 0.0, "attention_dropout": 0.0, "sliding_window": 4096}),
    ("gpt2.config.json", 124_439_808, {
        "hidden_size": 768, "num_hidden_layers": 12, "num_attention_heads": 12, "vocab_size": 50257,
        "activation": "gelu", "norm": "layernorm", "position_embedding": "learned",
        "max_position_embeddings": 1024, "tie_word_embeddings": True,
        "hidden_dropout": 0.1, "attention_dropout": 0.1}),  # GPT-2's resid_pdrop, attn_pdrop
]


@pytest.mark.parametrize(("name", "published", "expected"), HF_CASES, ids=[c[0] for c in HF_CASES])
def test_hf_config_becomes_the_model_table(name: str, published: float, expected: dict[str, Any]) -> None:
    assert from_hf_config(_json(name)) == expected


@pytest.mark.parametrize(("name", "published", "expected"), HF_CASES, ids=[c[0] for c in HF_CASES])
def test_hf_round_trip_parameter_count(name: str, published: float, expected: dict[str, Any]) -> None:
    """config.json -> scenario -> count_parameters lands within 0.5% of the published size."""
    parts = import_file("hf", DATA / name)
    data = build_scenario_dict(model=parts["model"], training={"seq_len": 1024, "global_batch_size": 2})
    scenario = parse_scenario(data).scenario
    assert count_parameters(scenario.model) == pytest.approx(published, rel=0.005)


def test_hf_llama3_8b_matches_the_catalog_preset() -> None:
    imported = Model.model_validate(from_hf_config(_json("llama3-8b.config.json")))
    assert imported == Model.model_validate({"preset": "llama3-8b"}).model_copy(update={"preset": None})


def test_hf_gpt2_without_n_inner_gets_4h() -> None:
    model = Model.model_validate(from_hf_config(_json("gpt2.config.json")))
    assert model.ffn_size == 4 * 768


def test_hf_notes_what_it_does_not_model() -> None:
    gpt_oss = import_file("hf", DATA / "gpt-oss-120b.config.json")
    assert "attention_bias = True is not modelled" in gpt_oss["warnings"]
    assert import_file("hf", DATA / "llama3-8b.config.json")["warnings"] == []


QWEN2_7B = {  # Qwen/Qwen2-7B config.json
    "architectures": ["Qwen2ForCausalLM"], "hidden_act": "silu", "hidden_size": 3584,
    "intermediate_size": 18944, "max_position_embeddings": 131072, "model_type": "qwen2",
    "num_attention_heads": 28, "num_hidden_layers": 28, "num_key_value_heads": 4, "rms_norm_eps": 1e-06,
    "rope_theta": 1000000.0, "tie_word_embeddings": False, "vocab_size": 152064,
}
PYTHIA_410M = {  # EleutherAI/pythia-410m config.json
    "architectures": ["GPTNeoXForCausalLM"], "hidden_act": "gelu", "hidden_size": 1024,
    "intermediate_size": 4096, "layer_norm_eps": 1e-05, "max_position_embeddings": 2048,
    "model_type": "gpt_neox", "num_attention_heads": 16,
    "num_hidden_layers": 24, "rotary_emb_base": 10000, "rotary_pct": 0.25, "tie_word_embeddings": False,
    "use_parallel_residual": True, "vocab_size": 50304,
}

NEMOTRON = {  # the keys of transformers' NemotronConfig (configuration_nemotron.py), Minitron-8B-sized
    "architectures": ["NemotronForCausalLM"], "model_type": "nemotron", "hidden_act": "relu2",
    "hidden_size": 4096, "intermediate_size": 16384, "num_hidden_layers": 32, "num_attention_heads": 48,
    "head_dim": 128, "num_key_value_heads": 8, "vocab_size": 256000, "max_position_embeddings": 4096,
    "norm_eps": 1e-05, "partial_rotary_factor": 0.5, "rope_theta": 10000, "tie_word_embeddings": False,
    "attention_bias": False, "mlp_bias": False,
}


@pytest.mark.parametrize(("config", "expected"), [
    (NEMOTRON, {"activation": "relu2", "norm": "layernorm", "position_embedding": "rope", "head_dim": 128,
                "intermediate_size": 16384}),
    (QWEN2_7B, {"activation": "swiglu", "norm": "rmsnorm", "position_embedding": "rope",
                "num_key_value_heads": 4, "tie_word_embeddings": False}),
    (PYTHIA_410M, {"activation": "gelu", "norm": "layernorm", "position_embedding": "rope",
                   "tie_word_embeddings": False, "intermediate_size": 4096}),
    # no model_type: recognised from "architectures"
    ({k: v for k, v in QWEN2_7B.items() if k != "model_type"}, {"activation": "swiglu"}),
], ids=["nemotron", "qwen2-7b", "pythia-410m", "architectures-only"])
def test_hf_other_architectures(config: dict[str, Any], expected: dict[str, Any]) -> None:
    model = from_hf_config(config)
    assert {k: model[k] for k in expected} == expected
    Model.model_validate(model)


@pytest.mark.parametrize(("config", "key"), [
    ({**_json("llama3-8b.config.json"), "num_local_experts": 8}, "num_local_experts"),
    ({**_json("mixtral-8x7b.config.json"), "num_experts_per_tok": 0}, "num_experts_per_tok"),
    ({**_json("qwen1.5-moe-a2.7b.config.json"), "shared_expert_intermediate_size": 1000},
     "shared_expert_intermediate_size"),
    ({"model_type": "t5", "d_model": 512}, "model_type"),
    ({"architectures": ["BertModel"]}, "model_type"),
    ({**QWEN2_7B, "hidden_act": "gelu"}, "hidden_act"),
    ({k: v for k, v in QWEN2_7B.items() if k != "hidden_size"}, "hidden_size"),
    ({k: v for k, v in _json("gpt2.config.json").items() if k != "n_layer"}, "n_layer"),
    ({**QWEN2_7B, "num_hidden_layers": 0}, "num_hidden_layers"),
    ({**QWEN2_7B, "vocab_size": "152064"}, "vocab_size"),
    ({**QWEN2_7B, "tie_word_embeddings": "no"}, "tie_word_embeddings"),
    ({**_json("gpt2.config.json"), "activation_function": "relu"}, "activation_function"),
], ids=["llama-with-experts", "mixtral-top0", "qwen-shared-width", "t5", "bert", "gated-gelu", "no-hidden",
        "gpt2-no-n_layer", "zero-layers", "string-vocab", "tie-string", "relu"])
def test_hf_unsupported_configs_name_the_key(config: dict[str, Any], key: str) -> None:
    with pytest.raises(ConfigImportError, match=f"^{key}: "):
        from_hf_config(config)


# ----------------------------------------------------------------------------------- Megatron-LM
def test_megatron_gpt3_175b_is_the_design_example() -> None:
    """The Megatron-LM GPT-3 175B command line resolves to examples/gpt3-175b-dgx-a100.toml exactly, but
    for its `--use-distributed-optimizer`: the import keeps it as parallelism.distributed_optimizer, which
    the example leaves off (its plans are the reference of tests/data/sweep/gpt3-175b-1536-a100.json)."""
    example = load_scenario(EXAMPLES / "gpt3-175b-dgx-a100.toml").scenario
    parts = import_file("megatron", DATA / "gpt3-175b.megatron.sh")
    assert parts["parallelism"].pop("distributed_optimizer") is True
    cluster = {"preset": "dgx-a100-80gb", "num_nodes": 192}
    imported = parse_scenario(build_scenario_dict(
        model=parts["model"], training=parts["training"], parallelism=parts["parallelism"], cluster=cluster
    )).scenario
    assert imported == example
    assert (imported.dp, imported.num_microbatches, imported.layer_split) == (24, 64, (12,) * 8)


def test_megatron_reports_ignored_arguments() -> None:
    notes = import_file("megatron", DATA / "gpt3-175b.megatron.sh")["warnings"]
    assert "--vocab-file $VOCAB_FILE: assumed the GPT-2 BPE vocabulary of 50257 tokens" in notes
    (ignored,) = [n for n in notes if n.startswith("ignored arguments")]
    for flag in ("--rampup-batch-size", "--train-iters", "--lr", "--data-path", "--split"):
        assert flag in ignored.split(": ", 1)[1].split(", ")
    assert "--num-layers" not in ignored
    assert "--recompute-method" not in ignored  # partial recompute is modelled (issue 33)


SMALL = "--num-layers 2 --hidden-size 64 --num-attention-heads 4 --vocab-size 256"
PP2 = SMALL.replace("--num-layers 2", "--num-layers 8") + " --pipeline-model-parallel-size 2"

LLAMA3_70B_ARGS = (
    "--num-layers 80 --hidden-size 8192 --num-attention-heads 64 "
    "--group-query-attention --num-query-groups 8 "
    "--ffn-hidden-size 28672 --swiglu --normalization RMSNorm --position-embedding-type rope "
    "--untie-embeddings-and-output-weights --vocab-size 128256 --make-vocab-size-divisible-by 16 "
    "--seq-length 8192 --max-position-embeddings 8192 --micro-batch-size 1 --global-batch-size 512 --bf16 "
    "--tensor-model-parallel-size 8 --pipeline-model-parallel-size 4 "
    "--num-layers-per-virtual-pipeline-stage 5 "
    "--sequence-parallel --recompute-activations --use-distributed-optimizer --overlap-grad-reduce"
)


def test_megatron_llama3_70b_interleaved() -> None:
    parts = from_megatron_args(LLAMA3_70B_ARGS)
    assert parts["model"] == {
        "hidden_size": 8192, "num_hidden_layers": 80, "num_attention_heads": 64, "num_key_value_heads": 8,
        "intermediate_size": 28672, "vocab_size": 128256, "activation": "swiglu", "norm": "rmsnorm",
        "position_embedding": "rope", "max_position_embeddings": 8192, "tie_word_embeddings": False,
    }
    assert parts["training"] == {"dtype": "bf16", "seq_len": 8192, "micro_batch_size": 1,
                                 "global_batch_size": 512, "recompute": "selective"}
    assert parts["parallelism"] == {
        "tensor_parallel_degree": 8, "pipeline_parallel_degree": 4,
        "virtual_stages_per_rank": 4,  # 80 layers / (4 stages * 5 layers per chunk)
        "pipeline_parallel_schedule": "Interleaved1F1B", "sequence_parallel": True, "zero_stage": 1,
        "distributed_optimizer": True, "overlap_grad_reduce": True, "tp_comm_overlap": False,
        "framework": "megatron-lm",
    }
    assert parts["warnings"] == []
    scenario = parse_scenario(build_scenario_dict(
        model=parts["model"], training=parts["training"], parallelism=parts["parallelism"],
        cluster={"preset": "dgx-h100-80gb", "num_nodes": 64},
    )).scenario
    assert (scenario.dp, scenario.layer_split) == (16, (5,) * 16)
    assert count_parameters(scenario.model) == pytest.approx(70.55e9, rel=0.005)


@pytest.mark.parametrize(("args", "path", "expected"), [
    ("--num-layers 2 --hidden-size 64 --num-attention-heads 4 --vocab-size 50257", "model.vocab_size", 50304),
    ("--num-layers 2 --hidden-size 64 --num-attention-heads 4 --vocab-size 50257 "
     "--tensor-model-parallel-size 8", "model.vocab_size", 51200),
    (f"{SMALL} --swiglu", "model.intermediate_size", 128),  # int(4 * 64 * 2/3 / 64) * 64
    (SMALL, "model.num_key_value_heads", 4),
    (f"{SMALL} --seq-length 512", "model.max_position_embeddings", 512),
    (SMALL, "training.dtype", "fp32"),
    (f"{SMALL} --recompute-activations --recompute-granularity full", "training.recompute", "full"),
    (f"{SMALL} --use-rotary-position-embeddings", "model.position_embedding", "rope"),
    (f"{SMALL} --sequence-parallel", "parallelism.sequence_parallel", False),
    (f"{PP2} --num-virtual-stages-per-pipeline-rank 2", "parallelism.pipeline_parallel_schedule",
     "Interleaved1F1B"),
    (f"{PP2} --num-layers-per-virtual-pipeline-stage 4", "parallelism.virtual_stages_per_rank", 1),
    (f"{SMALL} --seed 7", "training.seed", 7),
], ids=["pad-128", "pad-tp8", "swiglu-ffn", "mha", "positions-from-seq", "fp32", "granularity-wins",
        "legacy-rope", "sp-needs-tp", "vpp-direct", "vpp-one", "seed"])
def test_megatron_defaults_follow_megatron(args: str, path: str, expected: object) -> None:
    part, key = path.split(".")
    assert from_megatron_args(args)[part][key] == expected


def test_megatron_accepts_a_token_list() -> None:
    tokens = ["--num-layers", "2", "--hidden-size", "64", "--num-attention-heads", "4", "--vocab-size", "256"]
    assert from_megatron_args(tokens)["model"]["hidden_size"] == 64


@pytest.mark.parametrize(("args", "flag"), [
    ("--hidden-size 64 --num-attention-heads 4 --vocab-size 256", "--num-layers"),
    ("--num-layers 2 --hidden-size 64 --num-attention-heads 4", "--vocab-size"),
    (f"{SMALL} --data-path 'unclosed", "cannot split them"),
    ("--num-layers 2 --hidden-size sixty --num-attention-heads 4 --vocab-size 256", "--hidden-size"),
    ("--num-layers 0 --hidden-size 64 --num-attention-heads 4 --vocab-size 256", "--num-layers"),
    (f"{SMALL} --fp16 --bf16", "--fp16"),
    (f"{SMALL} --group-query-attention", "--num-query-groups"),
    (f"{SMALL} --normalization BatchNorm", "--normalization"),
    (f"{SMALL} --position-embedding-type none", "--position-embedding-type"),
    (f"{SMALL} --recompute-granularity all", "--recompute-granularity"),
    (f"{SMALL} --num-experts 8", "--num-experts"),
    (SMALL.replace("--num-layers 2", "--num-layers 10") + " --pipeline-model-parallel-size 2 "
     "--num-layers-per-virtual-pipeline-stage 3", "--num-layers-per-virtual-pipeline-stage"),
], ids=["no-layers", "no-vocab", "unbalanced-quote", "not-int", "zero-layers", "two-dtypes", "gqa-no-groups",
        "bad-norm", "no-positions", "bad-granularity", "moe", "vpp-not-dividing"])
def test_megatron_errors_name_the_flag(args: str, flag: str) -> None:
    with pytest.raises(ConfigImportError, match=flag):
        from_megatron_args(args)


# ------------------------------------------------------------------------------------- DeepSpeed
def test_deepspeed_zero3() -> None:
    parts = import_file("deepspeed", DATA / "zero3.deepspeed.json")
    assert parts["training"] == {"global_batch_size": 1024, "micro_batch_size": 4, "dtype": "bf16",
                                 "recompute": "full"}
    assert parts["parallelism"] == {
        "data_parallel_degree": 64, "zero_stage": 3, "overlap_grad_reduce": True, "framework": "deepspeed"
    }
    assert parts["warnings"] == [
        "ignored keys plancast does not model: "
        "gradient_clipping, optimizer, steps_per_print, wall_clock_breakdown"
    ]


def test_deepspeed_zero3_with_llama3_8b_is_a_valid_scenario() -> None:
    """An HF model + a DeepSpeed plan + a cluster of 64 GPUs: dp 64 = 1024 / (4 * 4)."""
    ds = import_file("deepspeed", DATA / "zero3.deepspeed.json")
    model = import_file("hf", DATA / "llama3-8b.config.json")["model"]
    cluster = {"preset": "dgx-h100-80gb", "num_nodes": 8}
    data = build_scenario_dict(model=model, training={**ds["training"], "seq_len": 8192},
                               parallelism=ds["parallelism"], cluster=cluster)
    scenario = parse_scenario(data).scenario
    assert (scenario.dp, scenario.num_microbatches, scenario.parallelism.zero_stage) == (64, 4, 3)


@pytest.mark.parametrize(("config", "part", "expected"), [
    ({"zero_optimization": {"stage": 3}}, "parallelism",
     {"zero_stage": 3, "overlap_grad_reduce": True, "framework": "deepspeed"}),
    ({"zero_optimization": {"stage": 2}}, "parallelism",
     {"zero_stage": 2, "overlap_grad_reduce": False, "framework": "deepspeed"}),
    ({}, "parallelism", {"zero_stage": 0, "overlap_grad_reduce": False, "framework": "deepspeed"}),
    ({"zero_optimization": {"stage": 3, "stage3_prefetch_bucket_size": 0}}, "parallelism",
     {"zero_stage": 3, "overlap_grad_reduce": True, "overlap_param_gather": False, "framework": "deepspeed"}),
    ({"fp16": {"enabled": True}}, "training", {"dtype": "fp16", "recompute": "none"}),
    ({"train_batch_size": 64, "train_micro_batch_size_per_gpu": 2}, "training",
     {"global_batch_size": 64, "micro_batch_size": 2, "dtype": "fp32", "recompute": "none"}),
    ({"train_batch_size": "auto", "bf16": {"enabled": "auto"}}, "training", {"recompute": "none"}),
    ({"bf16": {"enabled": True}, "fp16": {"enabled": "auto"}}, "training",
     {"dtype": "bf16", "recompute": "none"}),
], ids=["zero3-overlaps", "zero2-does-not", "empty", "no-prefetch", "fp16", "no-gas", "auto",
        "bf16-and-auto"])
def test_deepspeed_defaults_follow_deepspeed(
    config: dict[str, Any], part: str, expected: dict[str, Any]
) -> None:
    assert from_deepspeed_config(config)[part] == expected


def test_deepspeed_notes_offload_and_auto() -> None:
    offload = {"stage": 3, "offload_param": {"device": "cpu"}}
    config = {"train_batch_size": "auto", "bf16": {"enabled": "auto"}, "zero_optimization": offload}
    notes = from_deepspeed_config(config)["warnings"]
    assert notes == ["train_batch_size = 'auto' left to the scenario",
                     "fp16/bf16 enabled = 'auto': training.dtype left to the scenario",
                     "zero_optimization.offload_param to cpu is not modelled (ZeRO-Infinity)"]


def test_deepspeed_optimizer_offload_is_modelled() -> None:
    config = {"zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu"}}}
    imported = from_deepspeed_config(config)
    assert imported["training"]["optimizer_cpu_offload"] is True
    assert not [n for n in imported["warnings"] if "offload" in n]


@pytest.mark.parametrize(("config", "key"), [
    ({"train_batch_size": 100, "train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 8},
     "train_batch_size"),
    ({"train_batch_size": 0}, "train_batch_size"),
    ({"train_micro_batch_size_per_gpu": 2.5}, "train_micro_batch_size_per_gpu"),
    ({"gradient_accumulation_steps": True}, "gradient_accumulation_steps"),
    ({"fp16": {"enabled": True}, "bf16": {"enabled": True}}, "fp16.enabled and bf16.enabled"),
    ({"bf16": True}, "bf16"),
    ({"bf16": {"enabled": "yes"}}, "bf16.enabled"),
    ({"zero_optimization": {"stage": 4}}, "zero_optimization.stage"),
    ({"zero_optimization": 3}, "zero_optimization"),
    ({"zero_optimization": {"stage": 1, "overlap_comm": "true"}}, "zero_optimization.overlap_comm"),
], ids=["inconsistent-batch", "zero-batch", "float-micro", "bool-gas", "two-dtypes", "bf16-not-object",
        "enabled-string", "stage-4", "zero-not-object", "overlap-string"])
def test_deepspeed_errors_name_the_key(config: dict[str, Any], key: str) -> None:
    with pytest.raises(ConfigImportError, match=f"^{key}: "):
        from_deepspeed_config(config)


# -------------------------------------------------------------------------------- files, assembly
def test_build_scenario_dict_defaults_the_cluster_only_when_none_is_given() -> None:
    model = {"preset": "tiny-gpt"}
    assert build_scenario_dict(model=model) == {"model": model, "cluster": {"preset": "local-cpu"}}
    cluster = {"preset": "dgx-a100-80gb"}
    assert build_scenario_dict(model=model, cluster=cluster)["cluster"] == cluster


def test_build_scenario_dict_copies_its_parts() -> None:
    model = {"preset": "tiny-gpt"}
    built = build_scenario_dict(model=model)
    built["model"]["hidden_size"] = 1
    assert model == {"preset": "tiny-gpt"}


def test_built_scenario_survives_a_toml_round_trip(tmp_path: Path) -> None:
    """What the CLI writes with tomli_w loads back as the same scenario."""
    parts = import_file("hf", DATA / "gpt2.config.json")
    data = build_scenario_dict(model=parts["model"], training={"seq_len": 1024, "global_batch_size": 2,
                                                               "dtype": "fp32"})
    path = tmp_path / "scenario.toml"
    path.write_text(tomli_w.dumps(data))
    assert load_scenario(path).scenario == parse_scenario(data).scenario


@pytest.mark.parametrize(("kind", "name", "message"), [
    ("hf", "missing.json", "file not found"),
    ("deepspeed", "malformed.deepspeed.json", "malformed JSON at line 3"),
    ("megatron", "missing.sh", "file not found"),
    ("hf", "gpt3-175b.megatron.sh", "malformed JSON at line 1"),
], ids=["missing-json", "malformed", "missing-args", "args-as-json"])
def test_import_file_errors(kind: Any, name: str, message: str) -> None:
    with pytest.raises(ConfigImportError, match=message) as info:
        import_file(kind, DATA / name)
    assert name in str(info.value)


def test_import_file_rejects_json_that_is_not_an_object(tmp_path: Path) -> None:
    path = tmp_path / "list.json"
    path.write_text("[1, 2]")
    with pytest.raises(ConfigImportError, match="expected a JSON object, got list"):
        import_file("deepspeed", path)


def test_import_file_rejects_an_unknown_kind() -> None:
    with pytest.raises(ConfigImportError, match=r"^kind: "):
        import_file("nemo", DATA / "gpt2.config.json")  # type: ignore[arg-type]


# -------------------------------------------------------------------------------------- fuzzing
# Whatever the input, an importer returns parts or raises ConfigImportError, nothing else.
_FLAGS = ["--num-layers", "--hidden-size", "--num-attention-heads", "--ffn-hidden-size", "--num-query-groups",
          "--seq-length", "--max-position-embeddings", "--micro-batch-size", "--global-batch-size",
          "--tensor-model-parallel-size", "--pipeline-model-parallel-size", "--vocab-size",
          "--num-layers-per-virtual-pipeline-stage", "--num-virtual-stages-per-pipeline-rank",
          "--make-vocab-size-divisible-by", "--normalization", "--position-embedding-type",
          "--recompute-granularity", "--group-query-attention", "--sequence-parallel", "--fp16", "--bf16",
          "--swiglu", "--num-experts", "--vocab-file", "--tokenizer-type", "--unknown-flag"]
_tokens = st.lists(st.one_of(st.sampled_from(_FLAGS), st.integers(-2, 300).map(str), st.text(max_size=5)),
                   max_size=24)
_scalars = st.one_of(st.none(), st.booleans(), st.integers(-2, 2048), st.floats(allow_nan=False),
                     st.just("auto"))
_inner_keys = st.sampled_from(["stage", "enabled", "overlap_comm", "device", "offload_param", "x"])
_json_values = st.recursive(
    _scalars,
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(_inner_keys, inner, max_size=3)),
    max_leaves=6,
)
_ds_keys = st.sampled_from(["train_batch_size", "train_micro_batch_size_per_gpu",
                            "gradient_accumulation_steps", "fp16", "bf16", "zero_optimization",
                            "activation_checkpointing", "optimizer"])
_hf_keys = st.sampled_from(["model_type", "architectures", "hidden_size", "num_hidden_layers",
                            "num_attention_heads", "num_key_value_heads", "intermediate_size", "vocab_size",
                            "hidden_act", "n_embd", "rms_norm_eps", "rope_theta", "tie_word_embeddings",
                            "num_local_experts"])
_hf_values = _json_values | st.sampled_from(["llama", "gpt2", "silu", "gelu_new", ["GPT2LMHeadModel"]])


@settings(max_examples=200, deadline=None)
@given(tokens=_tokens)
def test_fuzz_megatron_args(tokens: list[str]) -> None:
    with contextlib.suppress(ConfigImportError):
        parts = from_megatron_args(tokens)
        assert set(parts) == {"model", "training", "parallelism", "warnings"}


@settings(max_examples=200, deadline=None)
@given(config=st.dictionaries(_ds_keys, _json_values, max_size=6))
def test_fuzz_deepspeed_config(config: dict[str, Any]) -> None:
    with contextlib.suppress(ConfigImportError):
        from_deepspeed_config(config)


@settings(max_examples=200, deadline=None)
@given(edits=st.dictionaries(_hf_keys, _hf_values, max_size=4))
def test_fuzz_hf_config(edits: dict[str, Any]) -> None:
    with contextlib.suppress(ConfigImportError):
        from_hf_config({**QWEN2_7B, **edits})
