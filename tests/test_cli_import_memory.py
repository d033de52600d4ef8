"""`plancast import` of the memory-saving features (issue 33): a ZeRO-Offload DeepSpeed config and
Megatron-LM's partial recompute and optimizer offload become scenario keys that simulate the feature,
with no "not modelled" note, and each moves memory and step time the right way."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path
from typing import Any

from tests.cli_runner import cli_main

DATA = Path(__file__).parent / "data" / "importers"
LLAMA_MEGATRON = (
    "torchrun pretrain_gpt.py --num-layers 32 --hidden-size 4096 --num-attention-heads 32 "
    "--group-query-attention --num-query-groups 8 --ffn-hidden-size 14336 --swiglu --normalization RMSNorm "
    "--position-embedding-type rope --seq-length 4096 --micro-batch-size 1 --global-batch-size 64 --bf16 "
    "--tensor-model-parallel-size 2 --pipeline-model-parallel-size 2 --vocab-size 128256 "
    "--use-distributed-optimizer "
)


def _import(tmp_path: Path, kind: str, source: Path, *flags: str) -> tuple[dict[str, Any], str]:
    out = tmp_path / f"{source.stem}.toml"
    code, _, stderr = cli_main("import", kind, str(source), "-o", str(out), *flags)
    assert code == 0, stderr
    return tomllib.loads(out.read_text()), stderr


def _simulate(tmp_path: Path, scenario: dict[str, Any], name: str) -> dict[str, Any]:
    import tomli_w

    path = tmp_path / f"{name}.toml"
    path.write_text(tomli_w.dumps(scenario))
    code, stdout, stderr = cli_main("simulate", str(path), "--json")
    assert code == 0, stderr
    return json.loads(stdout)


def test_deepspeed_zero_offload_imports_as_optimizer_offload(tmp_path: Path) -> None:
    data, stderr = _import(
        tmp_path, "deepspeed", DATA / "zero-offload.deepspeed.json", "--model", "llama3-8b"
    )
    assert data["training"]["optimizer_cpu_offload"] is True
    assert data["parallelism"]["zero_stage"] == 2
    assert "not modelled" not in stderr
    offloaded = _simulate(tmp_path, data, "offload")
    data["training"]["optimizer_cpu_offload"] = False
    on_gpu = _simulate(tmp_path, data, "gpu")
    assert offloaded["memory_gib"]["optimizer"] == 0 < on_gpu["memory_gib"]["optimizer"]
    assert offloaded["host_memory_gib"] > 0 == on_gpu["host_memory_gib"]
    assert offloaded["peak_memory_gib"] < on_gpu["peak_memory_gib"]
    assert offloaded["step_time_s"] > on_gpu["step_time_s"]


def test_megatron_partial_recompute_and_optimizer_offload(tmp_path: Path) -> None:
    flags = "--recompute-granularity full --recompute-method block --recompute-num-layers 4 "
    flags += "--optimizer-cpu-offload"
    script = tmp_path / "partial.sh"
    script.write_text(LLAMA_MEGATRON + flags + "\n")
    data, stderr = _import(tmp_path, "megatron", script, "--num-nodes", "1")
    keys = ("recompute", "recompute_method", "recompute_num_layers", "optimizer_cpu_offload")
    assert [data["training"][k] for k in keys] == ["full", "block", 4, True]
    unmodelled = [line for line in stderr.splitlines() if "not model" in line]
    assert not [line for line in unmodelled if "--recompute" in line or "--optimizer-cpu-offload" in line]
    part = _simulate(tmp_path, data, "part")
    full = _simulate(tmp_path, {**data, "training": {**data["training"], "recompute_num_layers": 16}}, "full")
    assert part["memory_gib"]["activations"] > full["memory_gib"]["activations"]
    assert part["step_time_s"] < full["step_time_s"]
    assert part["memory_gib"]["optimizer"] == 0 < part["host_memory_gib"]


def test_megatron_cpu_offloading_of_some_layers(tmp_path: Path) -> None:
    script = tmp_path / "offload.sh"
    script.write_text(LLAMA_MEGATRON + "--cpu-offloading --cpu-offloading-num-layers 6\n")
    data, stderr = _import(tmp_path, "megatron", script, "--num-nodes", "1")
    assert [data["training"][k] for k in ("activation_offload", "activation_offload_num_layers")] == [True, 6]
    assert not [line for line in stderr.splitlines() if "not model" in line and "--cpu-offloading" in line]
    some = _simulate(tmp_path, data, "some")
    plain = {**data["training"], "activation_offload": False}
    del plain["activation_offload_num_layers"]
    none = _simulate(tmp_path, {**data, "training": plain}, "none")
    assert some["memory_gib"]["activations"] < none["memory_gib"]["activations"]
    assert some["host_memory_gib"] > 0 == none["host_memory_gib"]
