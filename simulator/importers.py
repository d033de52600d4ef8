"""Other tools' configurations -> scenario parts (plain dicts in the scenario TOML's shape).

- `from_hf_config`: a Hugging Face `config.json` -> the `[model]` table.
- `from_megatron_args`: a Megatron-LM `pretrain_gpt.py` command line -> model, training, parallelism.
- `from_deepspeed_config`: a DeepSpeed JSON config -> training, parallelism.
- `build_scenario_dict`: parts -> one dict that `simulator.loader.parse_scenario` accepts.
- `import_file`: read one of those files; every problem is a `ConfigImportError` naming the key.

Importers translate and check what a translation needs (a key present, a number positive, batch
sizes consistent); the plan as a whole is judged by `parse_scenario`, not here. Settings that
plancast does not model are reported in a `warnings` list, never silently dropped.
"""

from __future__ import annotations

import argparse
import copy
import json
import math
import shlex
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal, NoReturn

ImportKind = Literal["hf", "megatron", "deepspeed"]


class ConfigImportError(ValueError):
    """A configuration that cannot be translated into a scenario; the message names the key."""


# ----------------------------------------------------------------------------------- Hugging Face
# model_type -> (MLP gated, i.e. SwiGLU with silu; tie_word_embeddings default of its config class).
# Defaults from transformers' Llama/Mistral/Qwen2/GPT2/GPTNeoX configuration_*.py.
_HF_ARCHS: dict[str, tuple[bool, bool]] = {
    "llama": (True, False),
    "mistral": (True, False),
    "qwen2": (True, False),
    "gpt2": (False, True),
    "gpt_neox": (False, False),
}
_HF_ARCH_NAMES = {
    "LlamaForCausalLM": "llama",
    "MistralForCausalLM": "mistral",
    "Qwen2ForCausalLM": "qwen2",
    "GPT2LMHeadModel": "gpt2",
    "GPTNeoXForCausalLM": "gpt_neox",
}
# GPT-2 keeps its own key names (transformers GPT2Config.attribute_map).
_GPT2_KEYS = {
    "hidden_size": "n_embd",
    "num_hidden_layers": "n_layer",
    "num_attention_heads": "n_head",
    "max_position_embeddings": "n_positions",
    "intermediate_size": "n_inner",
}
# Keys that change the model in ways plancast does not represent (noted, not refused).
_HF_NOT_MODELLED = ("sliding_window", "rope_scaling", "attention_bias", "mlp_bias")


def _positive_int(value: object, key: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ConfigImportError(f"{key}: expected a positive integer, got {value!r}")
    return value


def _hf_model_type(config: Mapping[str, Any]) -> str:
    for key in ("num_local_experts", "num_experts"):
        if config.get(key):
            raise ConfigImportError(
                f"{key}: a mixture-of-experts model ({config[key]} experts); "
                "plancast models dense decoders only"
            )
    model_type = config.get("model_type")
    if model_type is None:
        archs = config.get("architectures")
        names = archs if isinstance(archs, list) else []
        known = [_HF_ARCH_NAMES[a] for a in names if isinstance(a, str) and a in _HF_ARCH_NAMES]
        if not known:
            raise ConfigImportError(
                f"model_type: missing, and architectures {archs!r} names no supported model; "
                f"supported model_type values: {sorted(_HF_ARCHS)}"
            )
        return known[0]
    if not isinstance(model_type, str) or model_type not in _HF_ARCHS:
        supported = sorted(_HF_ARCHS)
        raise ConfigImportError(f"model_type: {model_type!r} is not supported; supported: {supported}")
    return model_type


def _hf_activation(config: Mapping[str, Any], gated: bool) -> str:
    key = "activation_function" if "activation_function" in config else "hidden_act"
    act = config.get(key, "silu" if gated else "gelu")
    if gated and act in ("silu", "swish"):
        return "swiglu"  # silu gating: Shazeer 2020, "GLU Variants Improve Transformer"
    if not gated and isinstance(act, str) and act.startswith("gelu"):
        return "gelu"  # gelu, gelu_new, gelu_fast, gelu_pytorch_tanh: the same two matrices
    mlp = "gated (SwiGLU) MLP expects silu" if gated else "two-matrix MLP expects a gelu variant"
    raise ConfigImportError(f"{key}: {act!r} is not supported; this model's {mlp}")


def _hf_model(config: Mapping[str, Any]) -> tuple[dict[str, Any], list[str]]:
    model_type = _hf_model_type(config)
    gated, tie_default = _HF_ARCHS[model_type]
    names = _GPT2_KEYS if model_type == "gpt2" else {}

    def get(key: str) -> object:
        return config.get(names.get(key, key))

    model: dict[str, Any] = {}
    for key in ("hidden_size", "num_hidden_layers", "num_attention_heads", "vocab_size"):
        if get(key) is None:
            raise ConfigImportError(f"{names.get(key, key)}: required key is missing from the config")
        model[key] = _positive_int(get(key), names.get(key, key))
    for key in ("num_key_value_heads", "intermediate_size", "max_position_embeddings"):
        if get(key) is not None:  # GPT-2's n_inner = null means 4h, as plancast's default
            model[key] = _positive_int(get(key), names.get(key, key))
    model["activation"] = _hf_activation(config, gated)
    model["norm"] = "rmsnorm" if "rms_norm_eps" in config else "layernorm"
    rotary = any(k in config for k in ("rope_theta", "rotary_emb_base", "rotary_pct"))
    model["position_embedding"] = "rope" if rotary else "learned"
    tie = config.get("tie_word_embeddings", tie_default)
    if not isinstance(tie, bool):
        raise ConfigImportError(f"tie_word_embeddings: expected true or false, got {tie!r}")
    model["tie_word_embeddings"] = tie
    notes = [
        f"{k} = {config[k]!r} is not modelled" for k in _HF_NOT_MODELLED if config.get(k) not in (None, False)
    ]
    if config.get("rotary_pct", 1.0) != 1.0:
        notes.append(
            f"rotary_pct = {config['rotary_pct']!r}: partial rotary is modelled as full "
            "(neither has parameters)"
        )
    if model_type == "qwen2":
        notes.append(
            "Qwen2's query/key/value biases are not counted (plancast gives biases to LayerNorm models only)"
        )
    return model, notes


def from_hf_config(config: Mapping[str, Any]) -> dict[str, Any]:
    """The `[model]` table for a Hugging Face `config.json` (Llama, Mistral, Qwen2, GPT-2, GPT-NeoX)."""
    return _hf_model(config)[0]


# ------------------------------------------------------------------------------------- Megatron-LM
class _Parser(argparse.ArgumentParser):
    """argparse that raises instead of printing usage and exiting."""

    def error(self, message: str) -> NoReturn:
        raise ConfigImportError(f"Megatron-LM arguments: {message}")


_MEGATRON_SIZES = (
    "--num-layers",
    "--hidden-size",
    "--num-attention-heads",
    "--ffn-hidden-size",
    "--num-query-groups",
    "--seq-length",
    "--max-position-embeddings",
    "--micro-batch-size",
    "--global-batch-size",
    "--tensor-model-parallel-size",
    "--pipeline-model-parallel-size",
    "--num-layers-per-virtual-pipeline-stage",
    "--num-virtual-stages-per-pipeline-rank",
    "--vocab-size",
    "--num-experts",
    "--make-vocab-size-divisible-by",
)


def _megatron_parser() -> _Parser:
    """The subset of megatron/training/arguments.py that shapes one training step."""
    p = _Parser(prog="pretrain_gpt.py", allow_abbrev=False, add_help=False)
    for flag in _MEGATRON_SIZES:
        p.add_argument(flag, type=int)
    p.set_defaults(make_vocab_size_divisible_by=128)  # Megatron-LM's default
    p.add_argument("--seed", type=int)
    for flag in (
        "--group-query-attention",
        "--sequence-parallel",
        "--recompute-activations",
        "--fp16",
        "--bf16",
        "--swiglu",
        "--untie-embeddings-and-output-weights",
        "--use-rotary-position-embeddings",
        "--use-distributed-optimizer",
        "--overlap-grad-reduce",
        "--tp-comm-overlap",
    ):
        p.add_argument(flag, action="store_true")
    p.add_argument("--recompute-granularity", choices=["full", "selective"])
    p.add_argument("--normalization", choices=["LayerNorm", "RMSNorm"], default="LayerNorm")
    p.add_argument("--position-embedding-type", default="learned_absolute")
    p.add_argument("--tokenizer-type")
    p.add_argument("--vocab-file")
    return p


def _split_args(args: str | Sequence[str]) -> list[str]:
    if not isinstance(args, str):
        return list(args)
    # A launch script: join continued lines, drop comments.
    try:
        return shlex.split(args.replace("\\\n", " "), comments=True)
    except ValueError as err:  # unbalanced quotes
        raise ConfigImportError(f"Megatron-LM arguments: cannot split them as a shell would: {err}") from None


def _padded_vocab(ns: argparse.Namespace, notes: list[str]) -> int:
    """Megatron-LM pads the vocabulary to a multiple of make_vocab_size_divisible_by * tp
    (`_vocab_size_with_padding` in megatron/training/tokenizer)."""
    vocab = ns.vocab_size
    if vocab is None:
        if ns.vocab_file is None or ns.tokenizer_type not in (None, "GPT2BPETokenizer"):
            raise ConfigImportError(
                "--vocab-size: missing, and plancast cannot read the tokenizer; pass --vocab-size"
            )
        vocab = 50257  # the GPT-2 BPE vocabulary (Radford et al. 2019) that --vocab-file names
        notes.append(f"--vocab-file {ns.vocab_file}: assumed the GPT-2 BPE vocabulary of 50257 tokens")
    multiple = ns.make_vocab_size_divisible_by * (ns.tensor_model_parallel_size or 1)
    return math.ceil(_positive_int(vocab, "--vocab-size") / multiple) * multiple


def _megatron_model(ns: argparse.Namespace, notes: list[str]) -> dict[str, Any]:
    if ns.num_experts and ns.num_experts > 1:
        raise ConfigImportError(
            f"--num-experts: {ns.num_experts} experts; plancast models dense decoders only"
        )
    model: dict[str, Any] = {}
    for key, flag in (
        ("hidden_size", "--hidden-size"),
        ("num_hidden_layers", "--num-layers"),
        ("num_attention_heads", "--num-attention-heads"),
    ):
        value = getattr(ns, flag[2:].replace("-", "_"))
        if value is None:
            raise ConfigImportError(f"{flag}: required argument is missing")
        model[key] = _positive_int(value, flag)
    if ns.group_query_attention:
        if ns.num_query_groups is None:
            raise ConfigImportError("--num-query-groups: required with --group-query-attention")
        model["num_key_value_heads"] = _positive_int(ns.num_query_groups, "--num-query-groups")
    else:
        model["num_key_value_heads"] = model["num_attention_heads"]
        if ns.num_query_groups is not None:
            notes.append("--num-query-groups ignored without --group-query-attention (as Megatron-LM does)")
    h = model["hidden_size"]
    # Megatron-LM's default ffn_hidden_size: 4h, or int(4h * 2/3 / 64) * 64 with --swiglu.
    ffn_default = int(4 * h * 2 / 3 / 64) * 64 if ns.swiglu else 4 * h
    model["intermediate_size"] = _positive_int(ns.ffn_hidden_size or ffn_default, "--ffn-hidden-size")
    model["vocab_size"] = _padded_vocab(ns, notes)
    model["activation"] = "swiglu" if ns.swiglu else "gelu"
    model["norm"] = "rmsnorm" if ns.normalization == "RMSNorm" else "layernorm"
    kind = "rope" if ns.use_rotary_position_embeddings else ns.position_embedding_type
    if kind not in ("rope", "learned_absolute"):
        raise ConfigImportError(
            f"--position-embedding-type: {kind!r} is not supported; use rope or learned_absolute"
        )
    model["position_embedding"] = "rope" if kind == "rope" else "learned"
    positions = ns.max_position_embeddings or ns.seq_length
    if positions is not None:
        model["max_position_embeddings"] = _positive_int(positions, "--max-position-embeddings")
    model["tie_word_embeddings"] = not ns.untie_embeddings_and_output_weights
    return model


def _megatron_training(ns: argparse.Namespace, notes: list[str]) -> dict[str, Any]:
    if ns.fp16 and ns.bf16:
        raise ConfigImportError("--fp16 and --bf16: pass only one")
    training: dict[str, Any] = {"dtype": "fp16" if ns.fp16 else "bf16" if ns.bf16 else "fp32"}
    for key, flag in (
        ("seq_len", "--seq-length"),
        ("micro_batch_size", "--micro-batch-size"),
        ("global_batch_size", "--global-batch-size"),
    ):
        value = getattr(ns, flag[2:].replace("-", "_"))
        if value is not None:
            training[key] = _positive_int(value, flag)
    if "global_batch_size" not in training:
        notes.append(
            "--global-batch-size missing: Megatron-LM uses micro-batch-size * data-parallel size; "
            "set training.global_batch_size"
        )
    # --recompute-activations is Megatron-LM's shorthand for --recompute-granularity selective.
    granularity = ns.recompute_granularity or ("selective" if ns.recompute_activations else None)
    training["recompute"] = granularity or "none"
    if ns.seed is not None:
        training["seed"] = ns.seed
    return training


def _megatron_parallelism(ns: argparse.Namespace, num_layers: int, notes: list[str]) -> dict[str, Any]:
    tp = _positive_int(ns.tensor_model_parallel_size or 1, "--tensor-model-parallel-size")
    pp = _positive_int(ns.pipeline_model_parallel_size or 1, "--pipeline-model-parallel-size")
    # framework: vocab-parallel layers, fp32 gradients under bf16, scatter/gather p2p, Megatron's buckets
    par: dict[str, Any] = {
        "tensor_parallel_degree": tp,
        "pipeline_parallel_degree": pp,
        "framework": "megatron-lm",
    }
    virtual = 1
    if ns.num_layers_per_virtual_pipeline_stage is not None:
        flag = "--num-layers-per-virtual-pipeline-stage"
        per_chunk = _positive_int(ns.num_layers_per_virtual_pipeline_stage, flag)
        if num_layers % (pp * per_chunk):
            raise ConfigImportError(
                f"--num-layers-per-virtual-pipeline-stage: {per_chunk} layers per chunk on {pp} stages does "
                f"not divide --num-layers {num_layers}"
            )
        virtual = num_layers // (pp * per_chunk)
    elif ns.num_virtual_stages_per_pipeline_rank is not None:
        flag = "--num-virtual-stages-per-pipeline-rank"
        virtual = _positive_int(ns.num_virtual_stages_per_pipeline_rank, flag)
    par["virtual_stages_per_rank"] = virtual
    par["pipeline_parallel_schedule"] = "Interleaved1F1B" if virtual > 1 else "1F1B"
    if ns.sequence_parallel and tp == 1:
        notes.append("--sequence-parallel dropped: it needs tensor parallelism (Megatron-LM disables it too)")
    par["sequence_parallel"] = ns.sequence_parallel and tp > 1
    # Megatron-LM's distributed optimizer shards the optimizer state over data parallel: ZeRO-1.
    par["zero_stage"] = 1 if ns.use_distributed_optimizer else 0
    par["overlap_grad_reduce"] = ns.overlap_grad_reduce  # off unless asked, as in Megatron-LM
    par["tp_comm_overlap"] = ns.tp_comm_overlap
    return par


def from_megatron_args(args: str | Sequence[str]) -> dict[str, Any]:
    """`{"model", "training", "parallelism", "warnings"}` from Megatron-LM (`pretrain_gpt.py`) arguments.

    `args` is a command line (a string, continued lines and `#` comments allowed) or its tokens.
    Arguments that do not shape a step (learning rate, data paths, ...) are listed in `warnings`.
    The data-parallel degree is left to the cluster (Megatron-LM derives it from the world size).
    """
    ns, unknown = _megatron_parser().parse_known_args(_split_args(args))
    for flag in _MEGATRON_SIZES:  # every size is positive when given, so `or default` below is safe
        value = getattr(ns, flag[2:].replace("-", "_"))
        if value is not None:
            _positive_int(value, flag)
    notes: list[str] = []
    model = _megatron_model(ns, notes)
    training = _megatron_training(ns, notes)
    parallelism = _megatron_parallelism(ns, model["num_hidden_layers"], notes)
    ignored = [tok.split("=", 1)[0] for tok in unknown if tok.startswith("--")]
    if ignored:
        notes.append(f"ignored arguments plancast does not model: {', '.join(ignored)}")
    return {"model": model, "training": training, "parallelism": parallelism, "warnings": notes}


# --------------------------------------------------------------------------------------- DeepSpeed
# Top-level sections that shape one step; everything else (optimizer, scheduler, logging) is noted.
_DS_MODELLED = {
    "train_batch_size",
    "train_micro_batch_size_per_gpu",
    "gradient_accumulation_steps",
    "fp16",
    "bf16",
    "zero_optimization",
    "activation_checkpointing",
}


def _ds_batch(config: Mapping[str, Any], notes: list[str]) -> tuple[dict[str, Any], dict[str, Any]]:
    """DeepSpeed's identity train_batch_size = micro * gradient_accumulation_steps * data-parallel size."""
    values: dict[str, int] = {}
    for key in ("train_batch_size", "train_micro_batch_size_per_gpu", "gradient_accumulation_steps"):
        value = config.get(key)
        if value == "auto":  # the Hugging Face Trainer integration fills these in at launch
            notes.append(f"{key} = 'auto' left to the scenario")
        elif value is not None:
            values[key] = _positive_int(value, key)
    training: dict[str, Any] = {}
    parallelism: dict[str, Any] = {}
    if "train_batch_size" in values:
        training["global_batch_size"] = values["train_batch_size"]
    if "train_micro_batch_size_per_gpu" in values:
        training["micro_batch_size"] = values["train_micro_batch_size_per_gpu"]
    if len(values) == 3:
        per_replica = values["train_micro_batch_size_per_gpu"] * values["gradient_accumulation_steps"]
        dp, rest = divmod(values["train_batch_size"], per_replica)
        if rest:
            raise ConfigImportError(
                f"train_batch_size: {values['train_batch_size']} is not train_micro_batch_size_per_gpu * "
                f"gradient_accumulation_steps ({per_replica}) times a whole number of data-parallel ranks"
            )
        parallelism["data_parallel_degree"] = dp
    return training, parallelism


def _ds_enabled(config: Mapping[str, Any], key: str) -> bool | None:
    """fp16.enabled / bf16.enabled; None for 'auto' (the Hugging Face Trainer decides at launch)."""
    section = config.get(key, {})
    if not isinstance(section, Mapping):
        raise ConfigImportError(f'{key}: expected an object such as {{"enabled": true}}, got {section!r}')
    enabled = section.get("enabled", False)
    if enabled == "auto":
        return None
    if not isinstance(enabled, bool):
        raise ConfigImportError(f"{key}.enabled: expected true, false or 'auto', got {enabled!r}")
    return enabled


def _ds_zero(config: Mapping[str, Any], notes: list[str]) -> dict[str, Any]:
    zero = config.get("zero_optimization", {})
    if not isinstance(zero, Mapping):
        raise ConfigImportError(f"zero_optimization: expected an object, got {zero!r}")
    stage = zero.get("stage", 0)
    if stage not in (0, 1, 2, 3) or isinstance(stage, bool):
        raise ConfigImportError(f"zero_optimization.stage: expected 0, 1, 2 or 3, got {stage!r}")
    # DeepSpeedZeroConfig: overlap_comm defaults to true for stage 3 and false otherwise.
    overlap = zero.get("overlap_comm", stage == 3)
    if not isinstance(overlap, bool):
        raise ConfigImportError(f"zero_optimization.overlap_comm: expected true or false, got {overlap!r}")
    par: dict[str, Any] = {"zero_stage": stage, "overlap_grad_reduce": overlap, "framework": "deepspeed"}
    if stage == 3 and zero.get("stage3_prefetch_bucket_size") == 0:
        par["overlap_param_gather"] = False  # a zero prefetch bucket turns parameter prefetch off
    for key in ("offload_optimizer", "offload_param"):
        offload = zero.get(key)
        if isinstance(offload, Mapping) and offload.get("device", "none") != "none":
            notes.append(f"zero_optimization.{key} to {offload['device']} is not modelled")
    return par


def from_deepspeed_config(config: Mapping[str, Any]) -> dict[str, Any]:
    """`{"training", "parallelism", "warnings"}` from a DeepSpeed JSON config.

    With all three batch keys present the data-parallel degree follows from them and is set, so
    a cluster of the wrong size is caught by `parse_scenario`.
    """
    notes: list[str] = []
    training, parallelism = _ds_batch(config, notes)
    fp16, bf16 = _ds_enabled(config, "fp16"), _ds_enabled(config, "bf16")
    if fp16 and bf16:
        raise ConfigImportError("fp16.enabled and bf16.enabled: enable only one")
    if fp16 or bf16:
        training["dtype"] = "fp16" if fp16 else "bf16"
    elif fp16 is None or bf16 is None:
        notes.append("fp16/bf16 enabled = 'auto': training.dtype left to the scenario")
    else:
        training["dtype"] = "fp32"
    # The activation_checkpointing section configures deepspeed.checkpointing, which recomputes whole layers.
    training["recompute"] = "full" if "activation_checkpointing" in config else "none"
    parallelism.update(_ds_zero(config, notes))
    ignored = sorted(set(config) - _DS_MODELLED)
    if ignored:
        notes.append(f"ignored keys plancast does not model: {', '.join(ignored)}")
    return {"training": training, "parallelism": parallelism, "warnings": notes}


# ------------------------------------------------------------------------------------- assembling
DEFAULT_CLUSTER: Mapping[str, Any] = {"preset": "local-cpu"}


def build_scenario_dict(
    *,
    model: Mapping[str, Any] | None = None,
    training: Mapping[str, Any] | None = None,
    parallelism: Mapping[str, Any] | None = None,
    cluster: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """One scenario dict from parts (copies); the cluster defaults to `local-cpu` only when none is given."""
    parts = {
        "model": model,
        "training": training,
        "parallelism": parallelism,
        "cluster": DEFAULT_CLUSTER if cluster is None else cluster,
    }
    return {name: copy.deepcopy(dict(part)) for name, part in parts.items() if part is not None}


def _read_json(path: Path) -> Mapping[str, Any]:
    text = _read_text(path)
    try:
        data = json.loads(text)
    except json.JSONDecodeError as err:
        where = f"line {err.lineno}, column {err.colno}"
        raise ConfigImportError(f"{path}: malformed JSON at {where}: {err.msg}") from None
    if not isinstance(data, Mapping):
        raise ConfigImportError(f"{path}: expected a JSON object, got {type(data).__name__}")
    return data


def _read_text(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigImportError(f"{path}: file not found") from None
    except (OSError, UnicodeDecodeError) as err:
        raise ConfigImportError(f"{path}: cannot read it: {err}") from None


def import_file(kind: ImportKind, path: str | Path) -> dict[str, Any]:
    """Scenario parts from a file: `hf` (config.json), `megatron` (arguments text), `deepspeed` (JSON).

    Returns the parts (`model`, `training`, `parallelism` as the kind provides) plus `warnings`,
    a list of what was not modelled; pass the parts to `build_scenario_dict`.
    """
    path = Path(path)
    if kind == "hf":
        model, notes = _hf_model(_read_json(path))
        return {"model": model, "warnings": notes}
    if kind == "megatron":
        return from_megatron_args(_read_text(path))
    if kind == "deepspeed":
        return from_deepspeed_config(_read_json(path))
    raise ConfigImportError(f"kind: {kind!r} is not one of 'hf', 'megatron', 'deepspeed'")
