"""Megatron-LM `pretrain_gpt.py` arguments -> the scenario's model, training and parallelism tables."""

from __future__ import annotations

import argparse
import math
import shlex
from collections.abc import Sequence
from typing import Any, NoReturn, get_args

from plancast.simulator.importers._common import ConfigImportError
from plancast.simulator.importers._common import positive_int as _positive_int
from plancast.simulator.scenario_memory import RecomputeModule


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
    "--recompute-num-layers",
    "--cpu-offloading-num-layers",
)


_SWITCHES = (
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
    "--overlap-param-gather",
    "--tp-comm-overlap",
    "--optimizer-cpu-offload",
    "--cpu-offloading",
    "--use-precision-aware-optimizer",
    "--activation-func-fp8-input-store",
)
_VALUE_FLAGS = (
    *_MEGATRON_SIZES,
    "--seed",
    "--transformer-impl",
    "--recompute-granularity",
    "--recompute-method",
    "--normalization",
    "--position-embedding-type",
    "--tokenizer-type",
    "--vocab-file",
    "--hidden-dropout",
    "--attention-dropout",
    "--attention-backend",
    "--exp-avg-dtype",
    "--exp-avg-sq-dtype",
)
_LIST_FLAGS = ("--recompute-modules",)  # nargs="*": the values up to the next flag


def _megatron_parser() -> _Parser:
    """The subset of megatron/training/arguments.py that shapes one training step."""
    p = _Parser(prog="pretrain_gpt.py", allow_abbrev=False, add_help=False)
    for flag in _MEGATRON_SIZES:
        p.add_argument(flag, type=int)
    p.set_defaults(make_vocab_size_divisible_by=128)  # Megatron-LM's default
    p.add_argument("--seed", type=int)
    for flag in (*_SWITCHES, *UNFUSING_FLAGS):
        p.add_argument(flag, action="store_true")
    p.add_argument(
        "--transformer-impl", choices=["local", "transformer_engine"], default="transformer_engine"
    )
    p.add_argument("--recompute-granularity", choices=["full", "selective"])
    p.add_argument("--recompute-method", choices=["uniform", "block"])
    p.add_argument("--optimizer-offload-fraction", type=float, default=1.0)
    p.add_argument("--normalization", choices=["LayerNorm", "RMSNorm"], default="LayerNorm")
    p.add_argument("--position-embedding-type", default="learned_absolute")
    p.add_argument("--tokenizer-type")
    p.add_argument("--vocab-file")
    # arguments.py `_add_regularization_args`: both default to 0.1, as framework megatron-lm resolves an
    # unset key (simulator/model_dropout.py)
    p.add_argument("--hidden-dropout", type=float)
    p.add_argument("--attention-dropout", type=float)
    p.add_argument("--recompute-modules", nargs="*", choices=get_args(RecomputeModule))
    p.add_argument("--attention-backend", choices=ATTENTION_BACKENDS, default="auto")
    for flag in ("--exp-avg-dtype", "--exp-avg-sq-dtype"):  # arguments.py `_add_training_args`
        p.add_argument(flag, choices=["fp32", "fp16", "bf16", "fp8"])
    return p


# Megatron-Core's --attention-backend (megatron/core/transformer/enums.py AttnBackend; default auto, where
# Transformer Engine picks): fused is TE's cuDNN kernel, flash TE's FlashAttention backend, unfused
# (TE's) and local (Megatron's own DotProductAttention) keep the s x s scores in memory.
ATTENTION_BACKENDS = ("flash", "fused", "unfused", "local", "auto")


def _attention(ns: argparse.Namespace, notes: list[str]) -> dict[str, Any]:
    """training.flash_attention and training.attention_backend from --attention-backend (auto: neither)."""
    backend = ns.attention_backend
    if backend == "fused":
        return {"flash_attention": True, "attention_backend": "te"}
    if backend == "flash":
        notes.append(
            "--attention-backend flash: FlashAttention through Transformer Engine, priced as "
            "FlashAttention-2 (training.attention_backend 'sdpa': the full count at attention_efficiency)"
        )
        return {"flash_attention": True, "attention_backend": "sdpa"}
    return {"flash_attention": False} if backend in ("unfused", "local") else {}


def _known_tokens(tokens: list[str]) -> tuple[list[str], list[str]]:
    """(the tokens of the flags the parser knows, last occurrence of each; every other token), in one
    pass: argparse's parse_known_args takes time quadratic in the tokens (seconds for 10^4), and its
    last-one-wins for repeated flags is kept by keeping only the last."""
    last: dict[str, list[str]] = {}
    unknown: list[str] = []
    switches = {*_SWITCHES, *UNFUSING_FLAGS}
    i = 0
    while i < len(tokens):
        name = tokens[i].split("=", 1)[0]
        if name in _LIST_FLAGS and "=" not in tokens[i]:
            end = next((j for j in range(i + 1, len(tokens)) if tokens[j].startswith("-")), len(tokens))
            last[name] = tokens[i:end]
            i = end
            continue
        if name in _VALUE_FLAGS and "=" not in tokens[i]:
            last[name] = tokens[i : i + 2]  # the flag and its value
            i += 2
            continue
        if name in _VALUE_FLAGS or name in _LIST_FLAGS or name in switches:
            last[name] = [tokens[i]]
        else:
            unknown.append(tokens[i])
        i += 1
    return [token for group in last.values() for token in group], unknown


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
    for key, flag in (("hidden_dropout", "--hidden-dropout"), ("attention_dropout", "--attention-dropout")):
        p = getattr(ns, key)
        if p is not None and not 0 <= p < 1:
            raise ConfigImportError(f"{flag}: {p:g} is not a dropout probability; pass a value in [0, 1)")
        if p is not None:
            model[key] = p
    return model


# Megatron-LM fuses these elementwise ops unless told not to (megatron/training/arguments.py, store_false
# flags); the norms are Transformer Engine's fused kernels unless --transformer-impl local, whose RMSNorm
# falls back to torch's ("Apex does not support RMSNorm", megatron/core/models/gpt/gpt_layer_specs.py).
# (--no-bias-gelu-fusion and --no-bias-dropout-fusion unfuse ops plancast prices alike either way: they
# stay among the arguments reported as not modelled.)
UNFUSING_FLAGS = ("--no-bias-swiglu-fusion", "--no-rope-fusion")


def _elementwise(ns: argparse.Namespace, model: dict[str, Any], notes: list[str]) -> str | None:
    """training.elementwise from Megatron-LM's fusion flags: "eager" when every op that plancast's eager
    model prices (RMSNorm, RoPE, SwiGLU: simulator/costs/eager.py) runs unfused; None (the framework's
    "fused") otherwise, with a note when only some are unfused."""
    ops = {  # op: (the model has it, it runs unfused)
        "RMSNorm": (model["norm"] == "rmsnorm", ns.transformer_impl == "local"),
        "RoPE": (model["position_embedding"] == "rope", ns.no_rope_fusion),
        "SwiGLU": (model["activation"] == "swiglu", ns.no_bias_swiglu_fusion),
    }
    unfused = [op for op, (here, off) in ops.items() if here and off]
    fused = [op for op, (here, off) in ops.items() if here and not off]
    if unfused and not fused:
        notes.append(
            f"{', '.join(unfused)} unfused (fusion flags, --transformer-impl local): elementwise 'eager'"
        )
        return "eager"
    if unfused:
        notes.append(
            f"{', '.join(unfused)} unfused but {', '.join(fused)} fused: modelled as training.elementwise "
            "'fused' (plancast prices all or none of them eagerly)"
        )
    return None


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
    training.update(_megatron_memory(ns, granularity, notes))
    if ns.seed is not None:
        training["seed"] = ns.seed
    return training


def _megatron_memory(ns: argparse.Namespace, granularity: str | None, notes: list[str]) -> dict[str, Any]:
    """Partial recompute, activation and optimizer offload (megatron/training/arguments.py:
    `--recompute-method`, `--recompute-num-layers` apply to `--recompute-granularity full`;
    `--cpu-offloading-num-layers` (default 0) blocks offload under `--cpu-offloading`;
    `--optimizer-cpu-offload` with `--optimizer-offload-fraction`, default 1.0; `--exp-avg-dtype`,
    `--exp-avg-sq-dtype` under `--use-precision-aware-optimizer`; `--activation-func-fp8-input-store`,
    store_true, read by the fused SwiGLU only)."""
    out: dict[str, Any] = {}
    every_layer = ns.recompute_method in (None, "uniform") and ns.recompute_num_layers in (None, 1)
    if granularity == "full" and not every_layer:  # uniform, 1 layer: plancast's full recompute as it is
        out["recompute_method"] = ns.recompute_method or "uniform"
        if ns.recompute_num_layers is not None:
            out["recompute_num_layers"] = ns.recompute_num_layers
    elif ns.recompute_method is not None or ns.recompute_num_layers is not None:
        notes.append("--recompute-method, --recompute-num-layers dropped: need --recompute-granularity full")
    if ns.recompute_modules is not None and granularity == "selective":
        out["recompute_modules"] = list(dict.fromkeys(ns.recompute_modules))
    elif ns.recompute_modules is not None:
        notes.append("--recompute-modules dropped: it needs --recompute-granularity selective")
    if ns.cpu_offloading_num_layers:  # Megatron-Core offloads the first n blocks' activations
        out["activation_offload"] = True
        out["activation_offload_num_layers"] = ns.cpu_offloading_num_layers
    elif ns.cpu_offloading:
        notes.append("--cpu-offloading dropped: it offloads --cpu-offloading-num-layers blocks, here 0")
    moments = {ns.exp_avg_dtype or "fp32", ns.exp_avg_sq_dtype or "fp32"}
    if ns.use_precision_aware_optimizer and moments == {"bf16"}:  # TE FusedAdam's bf16 moments
        out["optimizer_moment_dtype"] = "bf16"
    elif moments != {"fp32"}:
        why = "both bf16" if ns.use_precision_aware_optimizer else "--use-precision-aware-optimizer"
        notes.append(f"--exp-avg-dtype, --exp-avg-sq-dtype {sorted(moments)}: modelled as fp32 (needs {why})")
    if ns.activation_func_fp8_input_store and ns.swiglu:  # Megatron-Core stores only SwiGLU's input in FP8
        out["activation_input_store"] = "fp8"
    elif ns.activation_func_fp8_input_store:
        notes.append("--activation-func-fp8-input-store dropped: Megatron-Core applies it to --swiglu only")
    if ns.optimizer_cpu_offload:
        out["optimizer_cpu_offload"] = True
        if ns.optimizer_offload_fraction != 1.0:
            notes.append(
                f"--optimizer-offload-fraction {ns.optimizer_offload_fraction:g}: modelled as the whole "
                "optimizer offloaded (fraction 1.0)"
            )
    return out


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
    # Megatron-LM's distributed optimizer shards the optimizer state over data parallel: ZeRO-1, its
    # gradients reduce-scattered and its parameters all-gathered once (param_and_grad_buffer.py).
    par["zero_stage"] = 1 if ns.use_distributed_optimizer else 0
    if ns.use_distributed_optimizer:
        par["distributed_optimizer"] = True
    par["overlap_grad_reduce"] = ns.overlap_grad_reduce  # off unless asked, as in Megatron-LM
    if ns.overlap_param_gather:  # the parameter all-gather beside the next forward (engine/param_gather.py)
        if not (ns.use_distributed_optimizer and ns.overlap_grad_reduce):  # arguments.py asserts both
            raise ConfigImportError(
                "--overlap-param-gather: Megatron-LM needs --use-distributed-optimizer and "
                "--overlap-grad-reduce with it; add them, or drop --overlap-param-gather"
            )
        par["overlap_param_gather"] = True
    par["tp_comm_overlap"] = ns.tp_comm_overlap
    return par


def from_megatron_args(args: str | Sequence[str]) -> dict[str, Any]:
    """`{"model", "training", "parallelism", "warnings"}` from Megatron-LM (`pretrain_gpt.py`) arguments.

    `args` is a command line (a string, continued lines and `#` comments allowed) or its tokens.
    Arguments that do not shape a step (learning rate, data paths, ...) are listed in `warnings`.
    The data-parallel degree is left to the cluster (Megatron-LM derives it from the world size).
    """
    known, unknown = _known_tokens(_split_args(args))
    ns, rest = _megatron_parser().parse_known_args(known)
    unknown += rest
    for flag in _MEGATRON_SIZES:  # every size is positive when given, so `or default` below is safe
        value = getattr(ns, flag[2:].replace("-", "_"))
        if value is not None:
            _positive_int(value, flag)
    notes: list[str] = []
    model = _megatron_model(ns, notes)
    training = {**_megatron_training(ns, notes), **_attention(ns, notes)}
    elementwise = _elementwise(ns, model, notes)
    if elementwise is not None:
        training["elementwise"] = elementwise
    parallelism = _megatron_parallelism(ns, model["num_hidden_layers"], notes)
    ignored = list(dict.fromkeys(tok.split("=", 1)[0] for tok in unknown if tok.startswith("--")))
    if ignored:
        more = f" and {len(ignored) - 40} more" if len(ignored) > 40 else ""
        notes.append(f"ignored arguments plancast does not model: {', '.join(ignored[:40])}{more}")
    return {"model": model, "training": training, "parallelism": parallelism, "warnings": notes}
