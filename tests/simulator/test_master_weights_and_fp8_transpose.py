"""Pure 16-bit training (training.master_weights = false, NeMo AutoModel) and per-tensor FP8 weights without a
transpose on Blackwell (cluster.gpu.compute_capability) each move memory, and time where they do, the way
their mechanism says (issue 33)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from plancast.simulator.costs.memory import rank_memory
from plancast.simulator.costs.optimizer import optimizer_bytes_per_param
from plancast.simulator.costs.params import rank_parameters
from plancast.simulator.loader import ScenarioError, parse_scenario
from plancast.simulator.predict import simulate
from plancast.simulator.scenario import Scenario
from tests.cli_runner import cli_main


def scenario(training: dict[str, Any] | None = None, **parallelism: Any) -> Scenario:
    """Two Llama 3 8B blocks on one DGX H100, bf16 under torchtitan unless told otherwise."""
    data: dict[str, Any] = {
        "model": {"preset": "llama3-8b", "num_hidden_layers": 2},
        "training": {
            "seq_len": 2048,
            "micro_batch_size": 1,
            "global_batch_size": 8,
            "dtype": "bf16",
            **(training or {}),
        },
        "parallelism": {"framework": "torchtitan", **parallelism},
        "cluster": {"preset": "dgx-h100-80gb", "num_nodes": 1},
    }
    return parse_scenario(data).scenario


def _local_params(s: Scenario) -> float:
    return rank_parameters(s.model, s.layer_split, (0,), tp=s.tp, vocab_tp=s.vocab_tp, ep=s.ep, etp=s.etp)[0]


@pytest.mark.parametrize("zero_stage", [0, 1, 2, 3])
def test_pure_bf16_keeps_two_two_and_four_bytes_a_parameter(zero_stage: int) -> None:
    """Parameters, gradients and the two Adam moments in bf16, each sharded from its ZeRO stage on, against
    torchtitan's fp32 master parameters (4 + 2 bf16 copy, 4, 8)."""
    pure = scenario({"master_weights": False}, zero_stage=zero_stage)
    mixed = scenario(zero_stage=zero_stage)
    n, dp = _local_params(pure), pure.zero_dp
    mem = rank_memory(pure, 0)
    assert mem.parameters == pytest.approx(2 * n / (dp if zero_stage >= 3 else 1))
    assert mem.gradients == pytest.approx(2 * n / (dp if zero_stage >= 2 else 1))
    assert mem.optimizer == pytest.approx(4 * n / (dp if zero_stage >= 1 else 1))
    states = rank_memory(mixed, 0)
    assert (
        mem.parameters + mem.gradients + mem.optimizer
        < states.parameters + states.gradients + states.optimizer
    )


def test_pure_bf16_lowers_peak_memory_and_the_optimizer_step() -> None:
    pure, mixed = scenario({"master_weights": False}), scenario()
    assert optimizer_bytes_per_param(pure) == 16.0 < optimizer_bytes_per_param(mixed)
    p, m = simulate(pure, events=False).summary, simulate(mixed, events=False).summary
    assert p["peak_memory_gib"] < m["peak_memory_gib"]
    assert p["step_time_s"] < m["step_time_s"]  # a 16-bit optimizer step, no autocast weight casts


@pytest.mark.parametrize(
    ("training", "parallelism", "says"),
    [
        ({"dtype": "fp32"}, {}, 'training.dtype = "bf16"'),
        ({}, {"framework": "megatron-lm"}, "fp32 main parameters"),
        ({}, {"framework": "deepspeed"}, "fp32 main parameters"),
    ],
)
def test_pure_bf16_where_it_means_nothing_is_refused(
    training: dict[str, Any], parallelism: dict[str, Any], says: str
) -> None:
    with pytest.raises(ScenarioError) as err:
        scenario({"master_weights": False, **training}, **parallelism)
    assert "training.master_weights" in str(err.value) and says in str(err.value)


def test_pure_bf16_under_fp32_exits_2_naming_the_key(tmp_path: Path) -> None:
    path = tmp_path / "pure.toml"
    path.write_text(
        '[model]\npreset = "llama3-8b"\nnum_hidden_layers = 2\n[training]\nseq_len = 1024\n'
        'global_batch_size = 8\ndtype = "fp32"\nmaster_weights = false\n'
        '[cluster]\npreset = "dgx-h100-80gb"\nnum_nodes = 1\n'
    )
    code, out, err = cli_main("simulate", str(path))
    assert code == 2 and "Traceback" not in out + err
    assert "training.master_weights" in err


def fp8(gpu: dict[str, Any], recipe: str, **training: Any) -> Scenario:
    """Two Llama 3 8B blocks in FP8 under Megatron-LM (Transformer Engine caches the FP8 weights)."""
    data: dict[str, Any] = {
        "model": {"preset": "llama3-8b", "num_hidden_layers": 2},
        "training": {
            "seq_len": 2048,
            "micro_batch_size": 1,
            "global_batch_size": 8,
            "dtype": "bf16",
            "fp8": True,
            "fp8_recipe": recipe,
            **training,
        },
        "parallelism": {"framework": "megatron-lm"},
        "cluster": {"preset": "gb200-nvl72", "num_nodes": 1, "gpu": gpu},
    }
    return parse_scenario(data).scenario


BLACKWELL = {"name": "GB200-186GB"}
AS_HOPPER = {"name": "GB200-186GB", "compute_capability": 9.0}


@pytest.mark.parametrize("fp8_param", [False, True])
@pytest.mark.parametrize("recipe", ["tensorwise_delayed", "tensorwise_current"])
def test_per_tensor_fp8_weights_keep_no_transpose_on_blackwell(recipe: str, fp8_param: bool) -> None:
    """One byte a block weight less than the same GPU read as Hopper (TE's create_transpose is false where
    cuBLASLt runs non-TN FP8 GEMMs), and no other change."""
    new, old = fp8(BLACKWELL, recipe, fp8_param=fp8_param), fp8(AS_HOPPER, recipe, fp8_param=fp8_param)
    assert new.cluster.gpu.compute_capability == 10.0
    blocks = (
        _local_params(new)
        - rank_parameters(new.model, [0] * len(new.layer_split), (0,), tp=1, vocab_tp=1, ep=1, etp=1)[0]
    )
    a, b = rank_memory(new, 0), rank_memory(old, 0)
    assert b.parameters - a.parameters == pytest.approx(blocks)
    assert (a.gradients, a.optimizer, a.activations) == (b.gradients, b.optimizer, b.activations)


def test_block_scaled_fp8_keeps_both_orientations_on_blackwell() -> None:
    assert (
        rank_memory(fp8(BLACKWELL, "mxfp8"), 0).parameters
        == rank_memory(fp8(AS_HOPPER, "mxfp8"), 0).parameters
    )
