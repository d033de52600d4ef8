"""A DeepSpeed JSON config -> the scenario's training and parallelism tables."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from plancast.simulator.importers._common import ConfigImportError
from plancast.simulator.importers._common import positive_int as _positive_int

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
    return par


def _ds_offload(config: Mapping[str, Any], notes: list[str]) -> dict[str, Any]:
    """ZeRO-Offload (Ren et al. 2021; DeepSpeed `zero_optimization.offload_optimizer.device` "cpu" or
    "nvme"): the optimizer states and step on the host, training.optimizer_cpu_offload."""
    zero = config.get("zero_optimization", {})
    training: dict[str, Any] = {}
    offload = zero.get("offload_optimizer")
    if isinstance(offload, Mapping) and offload.get("device", "none") not in ("none", None):
        training["optimizer_cpu_offload"] = True
        if offload["device"] != "cpu":
            notes.append(
                f"zero_optimization.offload_optimizer.device = {offload['device']!r}: modelled as host "
                "memory (an NVMe tier's bandwidth is not)"
            )
    param = zero.get("offload_param")
    if isinstance(param, Mapping) and param.get("device", "none") not in ("none", None):
        notes.append(f"zero_optimization.offload_param to {param['device']} is not modelled (ZeRO-Infinity)")
    return training


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
    training.update(_ds_offload(config, notes))
    ignored = sorted(set(config) - _DS_MODELLED)
    if ignored:
        notes.append(f"ignored keys plancast does not model: {', '.join(ignored)}")
    return {"training": training, "parallelism": parallelism, "warnings": notes}
