"""Other tools' configurations -> scenario parts (plain dicts in the scenario TOML's shape).

- `from_hf_config` (`hf.py`): a Hugging Face `config.json` -> the `[model]` table.
- `from_megatron_args` (`megatron.py`): a Megatron-LM `pretrain_gpt.py` command line -> model,
  training, parallelism.
- `from_deepspeed_config` (`deepspeed.py`): a DeepSpeed JSON config -> training, parallelism.
- `build_scenario_dict`: parts -> one dict that `simulator.loader.parse_scenario` accepts.
- `import_file`: read one of those files; every problem is a `ConfigImportError` naming the key.
- `imported_scenario`: what `plancast import` writes: a file's parts, a model for DeepSpeed, and a
  cluster preset sized to the plan, with the importer's notes kept apart as warnings.

Importers translate and check what a translation needs (a key present, a number positive, batch
sizes consistent); the plan as a whole is judged by `parse_scenario`, not here. Settings that
plancast does not model are reported in a `warnings` list, never silently dropped.
"""

from __future__ import annotations

import copy
import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from plancast.simulator import catalog
from plancast.simulator.importers._common import ConfigImportError
from plancast.simulator.importers.deepspeed import from_deepspeed_config
from plancast.simulator.importers.hf import from_hf_config, hf_model
from plancast.simulator.importers.megatron import from_megatron_args
from plancast.simulator.scenario import Training
from plancast.traces import bounded
from plancast.traces.bounded import BoundedReadError, load_json, read_text

__all__ = [
    "ConfigImportError",
    "Imported",
    "build_scenario_dict",
    "from_deepspeed_config",
    "from_hf_config",
    "from_megatron_args",
    "import_file",
    "imported_scenario",
]

ImportKind = Literal["hf", "megatron", "deepspeed"]
IMPORT_KINDS: tuple[ImportKind, ...] = ("hf", "megatron", "deepspeed")
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
        data = load_json(text, str(path))
    except BoundedReadError as err:
        raise ConfigImportError(str(err)) from None
    except json.JSONDecodeError as err:
        where = f"line {err.lineno}, column {err.colno}"
        raise ConfigImportError(f"{path}: malformed JSON at {where}: {err.msg}") from None
    if not isinstance(data, Mapping):
        raise ConfigImportError(f"{path}: expected a JSON object, got {type(data).__name__}")
    return data


def _read_text(path: Path) -> str:
    """The text of a config file: a regular file of at most bounded.MAX_CONFIG_BYTES, as UTF-8."""
    try:
        return read_text(path, bounded.MAX_CONFIG_BYTES, "an imported config")
    except BoundedReadError as err:
        raise ConfigImportError(str(err)) from None


def import_file(kind: ImportKind, path: str | Path) -> dict[str, Any]:
    """Scenario parts from a file: `hf` (config.json), `megatron` (arguments text), `deepspeed` (JSON).

    Returns the parts (`model`, `training`, `parallelism` as the kind provides) plus `warnings`,
    a list of what was not modelled; pass the parts to `build_scenario_dict`.
    """
    path = Path(path)
    if kind == "hf":
        model, notes = hf_model(_read_json(path))
        return {"model": model, "warnings": notes}
    if kind == "megatron":
        return from_megatron_args(_read_text(path))
    if kind == "deepspeed":
        return from_deepspeed_config(_read_json(path))
    raise ConfigImportError(f"kind: {kind!r} is not one of 'hf', 'megatron', 'deepspeed'")


@dataclass(frozen=True, slots=True)
class Imported:
    """A scenario dict ready for `parse_scenario`, and what the importer could not carry over."""

    scenario: dict[str, Any]
    warnings: tuple[str, ...]


def _model_for(kind: ImportKind, parts: Mapping[str, Any], model: str | None) -> dict[str, Any]:
    """The `[model]` table: from the file, or (DeepSpeed) from `--model`, a config.json path or a preset."""
    if kind != "deepspeed":
        if model is not None:
            raise ConfigImportError(f"--model: only `import deepspeed` takes it; {kind} files name the model")
        return dict(parts["model"])
    if model is None:
        presets = ", ".join(sorted(catalog.MODELS))
        raise ConfigImportError(
            "--model: a DeepSpeed config does not describe the model; pass --model with a Hugging Face "
            f"config.json or a model preset ({presets})"
        )
    if model.endswith(".json") or Path(model).is_file():
        return hf_model(_read_json(Path(model)))[0]
    return {"preset": model}


def _sized_cluster(
    cluster: str, parallelism: Mapping[str, Any], num_nodes: int | None
) -> tuple[dict[str, Any], str]:
    """`[cluster]`: the preset, with nodes for tp * pp * dp GPUs (dp 1 where the file leaves it open)."""
    table: dict[str, Any] = {"preset": cluster}
    if num_nodes is not None:
        table["num_nodes"] = num_nodes
        return table, ""
    preset = catalog.CLUSTERS.get(cluster)
    if preset is None:  # a calibrated profile file, or a name parse_scenario will reject with a hint
        return table, ""
    per_node = int(str(preset["gpus_per_node"]))
    dp = parallelism.get("data_parallel_degree", -1)
    gpus = parallelism.get("tensor_parallel_degree", 1) * parallelism.get("pipeline_parallel_degree", 1)
    gpus *= max(dp, 1)
    if gpus <= per_node:
        if dp > 0 and gpus < per_node:  # an explicit dp must match the world size exactly
            table["gpus_per_node"] = gpus
        return table, ""
    table["num_nodes"] = math.ceil(gpus / per_node)
    note = (
        f"cluster: {table['num_nodes']} nodes of {cluster} for the plan's {gpus} GPUs"
        + ("" if dp > 0 else " (data parallel 1)")
        + "; pass --num-nodes to plan for more"
    )
    return table, note


def _fit_sequence(
    model: Mapping[str, Any], training: Mapping[str, Any] | None, warnings: list[str]
) -> Mapping[str, Any] | None:
    """A learned position table shorter than the default sequence (GPT-2: 1024 < 2048) sets seq_len."""
    positions = model.get("max_position_embeddings")
    default_seq = Training.model_fields["seq_len"].default
    if (training and "seq_len" in training) or model.get("position_embedding", "learned") != "learned":
        return training
    if positions is None or positions >= default_seq:
        return training
    warnings.append(f"training.seq_len set to {positions}, the model's max_position_embeddings")
    return {**(training or {}), "seq_len": positions}


def imported_scenario(
    kind: ImportKind,
    path: str | Path,
    *,
    cluster: str = "dgx-a100-80gb",
    model: str | None = None,
    num_nodes: int | None = None,
) -> Imported:
    """The scenario `plancast import KIND PATH` writes (validate it with `parse_scenario`)."""
    if kind not in IMPORT_KINDS:
        raise ConfigImportError(f"kind: {kind!r} is not one of 'hf', 'megatron', 'deepspeed'")
    parts = import_file(kind, path)
    warnings = list(parts.pop("warnings", []))
    parallelism = parts.get("parallelism", {})
    cluster_table, note = _sized_cluster(cluster, parallelism, num_nodes)
    if note:
        warnings.append(note)
    model_table = _model_for(kind, parts, model)
    training = _fit_sequence(model_table, parts.get("training"), warnings)
    data = build_scenario_dict(
        model=model_table,
        training=training,
        parallelism=parts.get("parallelism"),
        cluster=cluster_table,
    )
    return Imported(data, tuple(warnings))
