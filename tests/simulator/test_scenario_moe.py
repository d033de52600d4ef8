"""MoE and context-parallel scenario keys: accepted, resolved, and refused with key path + fix (exit 2)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import tomli_w

from plancast.simulator.loader import load_scenario
from tests.cli_runner import cli_main

MOE: dict[str, Any] = {
    "model": {
        "hidden_size": 64,
        "num_hidden_layers": 4,
        "num_attention_heads": 4,
        "vocab_size": 256,
        "activation": "swiglu",
        "num_local_experts": 4,
        "num_experts_per_tok": 2,
        "moe_intermediate_size": 64,
        "first_k_dense_replace": 1,
    },
    "training": {"seq_len": 128, "micro_batch_size": 1, "global_batch_size": 4, "dtype": "fp32"},
    "parallelism": {"expert_parallel_degree": 2},
    "cluster": {"preset": "local-cpu", "gpus_per_node": 4},
}


def _write(tmp_path: Path, data: dict[str, Any]) -> Path:
    path = tmp_path / "s.toml"
    path.write_text(tomli_w.dumps(data))
    return path


def _with(section: str, **keys: Any) -> dict[str, Any]:
    return {**MOE, section: {**MOE[section], **keys}}


def test_moe_and_cp_keys_resolve(tmp_path: Path) -> None:
    s = load_scenario(_write(tmp_path, MOE)).scenario
    assert (s.model.num_experts, s.model.expert_ffn_size, s.ep, s.edp, s.cp, s.dp) == (4, 64, 2, 2, 1, 4)
    assert [s.model.is_moe_layer(i) for i in range(4)] == [False, True, True, True]
    cp = load_scenario(
        _write(tmp_path, _with("parallelism", expert_parallel_degree=1, context_parallel_degree=2))
    ).scenario
    assert (cp.cp, cp.dp, cp.world_size) == (2, 2, 4)
    code, out, err = cli_main("validate", str(_write(tmp_path, MOE)))
    assert code == 0, err
    assert "expert_parallel_degree = 2" in out and "num_local_experts = 4" in out


CASES = [
    (
        _with("parallelism", expert_parallel_degree=3),
        "parallelism.expert_parallel_degree: 3 does not divide the data-parallel degree (4)",
    ),
    (
        _with("model", num_local_experts=5),
        "parallelism.expert_parallel_degree: 2 does not divide model.num_local_experts (5)",
    ),
    (
        _with("model", num_local_experts=0),
        "parallelism.expert_parallel_degree: 2 needs a mixture-of-experts model",
    ),
    (_with("model", num_experts_per_tok=5), "model.num_experts_per_tok: 5 exceeds num_local_experts (4)"),
    (_with("model", first_k_dense_replace=5), "model.first_k_dense_replace: 5 exceeds num_hidden_layers (4)"),
    (
        _with("parallelism", expert_parallel_degree=1, context_parallel_degree=3),
        "parallelism.tensor_parallel_degree: tp * pp * cp = 1 * 1 * 3 = 3 does not divide the world size 4",
    ),
    (
        _with("parallelism", expert_parallel_degree=1, context_parallel_degree=2, data_parallel_degree=4),
        "parallelism.data_parallel_degree: tp * pp * cp * dp = 1 * 1 * 2 * 4 = 8 but the cluster has "
        "4 ranks; set it to 2",
    ),
    (
        {
            **_with("parallelism", expert_parallel_degree=1, context_parallel_degree=4),
            "training": {**MOE["training"], "seq_len": 100, "global_batch_size": 1},
        },
        "training.seq_len: 100 is not divisible by 2 * context_parallel_degree = 8",
    ),
    (_with("parallelism", context_parallel_degree=0), "parallelism.context_parallel_degree"),
    (_with("model", moe_capacity_factor=-1.0), "model.moe_capacity_factor"),
]


@pytest.mark.parametrize(
    ("data", "expected"), CASES, ids=[c[1].split(":")[0] + str(i) for i, c in enumerate(CASES)]
)
def test_bad_moe_and_cp_plans_exit_2_with_key_path_and_fix(
    tmp_path: Path, data: dict[str, Any], expected: str
) -> None:
    code, _out, err = cli_main("validate", str(_write(tmp_path, data)))
    assert code == 2, err
    assert expected in err
    assert "Traceback" not in err


def test_moe_keys_on_a_dense_model_warn(tmp_path: Path) -> None:
    model = {k: v for k, v in MOE["model"].items() if k not in ("num_local_experts",)}
    data = {**MOE, "model": model, "parallelism": {}}
    code, _out, err = cli_main("validate", str(_write(tmp_path, data)))
    assert code == 0, err
    # num_experts_per_tok = 2 is its default (a resolved dense scenario writes it): the next key warns
    assert "model.moe_intermediate_size is ignored: num_local_experts is unset" in err


def test_zero_with_one_replica_but_context_parallel_does_not_warn(tmp_path: Path) -> None:
    """ZeRO shards the dense states over dp x cp: with dp 1 and cp 4 it still shards over 4 ranks."""
    data = _with("parallelism", expert_parallel_degree=1, context_parallel_degree=4, zero_stage=1)
    data["training"] = {**MOE["training"], "seq_len": 2048, "global_batch_size": 1}
    code, _out, err = cli_main("validate", str(_write(tmp_path, data)))
    assert code == 0, err
    assert "shards nothing" not in err
