"""One published training run as the validation set writes it (benchmarks/published_data.py): the record,
the step time derived from what the source reports, and the builders of the scenario tables."""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any, Literal

from plancast.simulator import catalog

Framework = Literal["megatron-lm", "torchtitan", "deepspeed", "fsdp", "other"]
Unit = Literal["s", "TFLOP/s/GPU", "tokens/s/GPU", "tokens/s", "GPU-h/1T tokens"]
FlopFormula = Literal["narayanan2021-eq3", "palm-appendix-b", "megatron-core-2025"]


@dataclass(frozen=True)
class Reported:
    """The figure as the source prints it."""

    value: float
    unit: Unit
    flop_formula: FlopFormula | None = None
    """For TFLOP/s: the source's FLOPs per step (see `step_flops`)."""
    num_parameters: float | None = None
    """N of the PaLM formula, as the source states the model size."""


@dataclass(frozen=True)
class PublishedRun:
    """One published training run and its measured step time."""

    name: str
    source: str
    citation: str
    model: dict[str, Any] = field(hash=False)
    """[model] table: a preset and/or Hugging Face config keys (read-only; `scenario_dict` copies)."""
    training: dict[str, Any] = field(hash=False)
    parallelism: dict[str, Any] = field(hash=False)
    cluster: dict[str, Any] = field(hash=False)
    framework: Framework
    measured_step_time_s: float
    reported: Reported
    assumptions: tuple[str, ...] = ()
    measured_memory_gib: float | None = None
    """Peak memory per GPU as the source reports it (its `memory_metric`), where it does."""
    memory_metric: str = ""

    @property
    def num_gpus(self) -> int:
        preset = catalog.CLUSTERS[self.cluster["preset"]]
        per_node = int(self.cluster.get("gpus_per_node", preset["gpus_per_node"]))
        return int(self.cluster["num_nodes"]) * per_node

    @property
    def tokens_per_step(self) -> int:
        return int(self.training["global_batch_size"]) * int(self.training["seq_len"])

    @property
    def measured_tokens_per_s(self) -> float:
        return self.tokens_per_step / self.measured_step_time_s


def model_table(run: PublishedRun) -> dict[str, Any]:
    """The [model] table with its preset expanded (explicit keys override, as parse_scenario does)."""
    preset = run.model.get("preset")
    base = catalog.lookup(catalog.MODELS, preset, "model") if preset else {}
    return {**base, **{k: v for k, v in run.model.items() if k != "preset"}}


def step_flops(run: PublishedRun) -> float:
    """FLOPs of one step by the formula the source used to report its TFLOP/s."""
    m, r = model_table(run), run.reported
    s, B = int(run.training["seq_len"]), int(run.training["global_batch_size"])
    h, layers, V = m["hidden_size"], m["num_hidden_layers"], m["vocab_size"]
    if r.flop_formula == "narayanan2021-eq3":
        # Narayanan et al. 2021, eq. 3: 96 B s l h^2 (1 + s/6h + V/16lh), recompute forward included.
        return 96 * B * s * layers * h**2 * (1 + s / (6 * h) + V / (16 * layers * h))
    if r.flop_formula == "palm-appendix-b" and r.num_parameters is not None:
        # Chowdhery et al. 2022 (PaLM), appendix B: 6N + 12 L H Q T per token.
        heads = m["num_attention_heads"]
        return run.tokens_per_step * (6 * r.num_parameters + 12 * layers * heads * (h // heads) * s)
    if r.flop_formula == "megatron-core-2025":
        return run.tokens_per_step * megatron_core_flops_per_token(m, s)
    raise ValueError(f"{run.name}: no FLOP formula for {r.unit}")


def megatron_core_flops_per_token(m: dict[str, Any], s: int) -> float:
    """FLOPs per token as Megatron-Core's TFLOP/s/GPU counts them (megatron/training/training.py,
    num_floating_point_operations -> transformer_flops, 2025: the causal attention's scores and values
    counted at half): 12 L h (the MLPs: dense, routed top-k, shared; x 3/2 gated) + 12 L h^2 (1 + g/n
    + s/2h) x (n d / h) (attention) + 6 h V (logits), shared experts as n_shared_experts x the expert width
    (DeepSeek's keys). Models with grouped-query or multi-head attention; MLA and MTP blocks have terms of
    their own there, not written here."""
    if m.get("kv_lora_rank") or m.get("num_nextn_predict_layers"):
        raise ValueError("megatron_core_flops_per_token: MLA and MTP terms are not written here")
    h, layers, vocab = m["hidden_size"], m["num_hidden_layers"], m["vocab_size"]
    heads = m["num_attention_heads"]
    groups = m.get("num_key_value_heads") or heads
    query_ratio = (m.get("head_dim") or h // heads) * heads / h
    experts = m.get("num_local_experts") or 0
    dense = min(m.get("first_k_dense_replace") or 0, layers) if experts else layers
    gated = 1.5 if (m.get("hidden_act") or "silu") in ("silu", "swiglu") else 1.0  # SwiGLU: 3 GEMMs
    moe_ffn = m.get("moe_intermediate_size") or m["intermediate_size"]
    mlp = gated * (
        m["intermediate_size"] * dense
        + moe_ffn * (m.get("num_experts_per_tok") or 0) * (layers - dense)
        + moe_ffn * (m.get("n_shared_experts") or 0) * (layers - dense)
    )
    attention = 12 * layers * h * h * (1 + groups / heads + s / (2 * h)) * query_ratio
    return 12 * h * mlp + attention + 6 * h * vocab


def derive_step_time_s(run: PublishedRun) -> float:
    """Step time from the reported figure: s as is; tokens/s -> tokens per step / rate; TFLOP/s ->
    step FLOPs / (TFLOP/s x GPUs); GPU-hours per 10^12 tokens -> tokens per step x that / GPUs."""
    r = run.reported
    if r.unit == "s":
        return r.value
    if r.unit == "tokens/s":
        return run.tokens_per_step / r.value
    if r.unit == "tokens/s/GPU":
        return run.tokens_per_step / (r.value * run.num_gpus)
    if r.unit == "GPU-h/1T tokens":
        return run.tokens_per_step * r.value * 3600 / (1e12 * run.num_gpus)
    return step_flops(run) / (r.value * 1e12 * run.num_gpus)


def scenario_dict(run: PublishedRun) -> dict[str, Any]:
    """The scenario tables for parse_scenario (the consumer adds `parallelism.framework`)."""
    return copy.deepcopy(
        {"model": run.model, "training": run.training, "parallelism": run.parallelism, "cluster": run.cluster}
    )


def plan_table(tp: int = 1, pp: int = 1, v: int = 1, **extra: Any) -> dict[str, Any]:
    plan: dict[str, Any] = {"tensor_parallel_degree": tp, "pipeline_parallel_degree": pp, **extra}
    if pp > 1:
        plan["pipeline_parallel_schedule"] = "Interleaved1F1B" if v > 1 else "1F1B"
        plan["virtual_stages_per_rank"] = v
    return plan


def training_table(seq: int, mbs: int, gbs: int, dtype: str, recompute: str, **extra: Any) -> dict[str, Any]:
    return {
        "seq_len": seq,
        "micro_batch_size": mbs,
        "global_batch_size": gbs,
        "dtype": dtype,
        "recompute": recompute,
        **extra,
    }


def cluster_table(preset: str, gpus: int, **extra: Any) -> dict[str, Any]:
    return {"preset": preset, "num_nodes": gpus // 8, **extra}
