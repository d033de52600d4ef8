"""Usable memory per GPU type (context, NCCL buffers, fragmentation) in fits_in_memory and the sweep, and
ZeRO-3's gathered working unit as its own memory category (issue 9, defects 5 and 9)."""

from __future__ import annotations

from typing import Any

import pytest

from plancast.simulator.catalog import GPUS
from plancast.simulator.costs.memory import GiB, peak_memory, rank_memory
from plancast.simulator.costs.params import stage_parameters
from plancast.simulator.loader import parse_scenario
from plancast.simulator.predict import simulate
from plancast.simulator.sweep import _base_for, sweep
from tests.simulator.test_sweep import exhaustive_best, small


@pytest.mark.parametrize("name", sorted(set(GPUS) - {"cpu-core"}))
def test_every_gpu_keeps_headroom(name: str) -> None:
    gpu = GPUS[name]
    assert 1.0 <= float(gpu["reserved_GiB"]) <= 4.0  # type: ignore[arg-type]
    assert 0.0 < float(gpu["fragmentation"]) < 0.2  # type: ignore[arg-type]


def gpt3(memory_GiB: float, **gpu: float) -> dict[str, Any]:
    return {
        "model": {"preset": "gpt3-175b"},
        "training": {"global_batch_size": 64, "dtype": "fp16", "recompute": "full"},
        "parallelism": {
            "tensor_parallel_degree": 8,
            "pipeline_parallel_degree": 8,
            "framework": "megatron-lm",
        },
        "cluster": {
            "preset": "dgx-a100-80gb",
            "num_nodes": 8,
            "gpu": {"peak_tflops": 312.0, "hbm_GBps": 2039.0, "memory_GiB": memory_GiB, **gpu},
        },
    }


def test_fits_in_memory_counts_the_headroom() -> None:
    peak = simulate(parse_scenario(gpt3(80.0)).scenario, events=False).summary["peak_memory_gib"]
    # a [cluster.gpu] table over a preset keeps the preset GPU's other keys (headroom included): zero it
    bare = simulate(
        parse_scenario(gpt3(peak + 0.5, reserved_GiB=0.0, fragmentation=0.0)).scenario, events=False
    ).summary
    assert bare["fits_in_memory"]
    tight = gpt3(peak + 0.5, reserved_GiB=1.7, fragmentation=0.05)
    summary = simulate(parse_scenario(tight).scenario, events=False).summary
    assert not summary["fits_in_memory"]
    assert summary["usable_memory_gib"] == pytest.approx((peak + 0.5 - 1.7) * 0.95)


def test_sweep_never_ranks_a_plan_above_usable_memory() -> None:
    """Reserve all but 90% of what the best plan without headroom needs: it must drop out of the ranking,
    and every ranked plan fits in what is left."""
    roomy = small(4, 1.0)
    _, best_without_headroom = exhaustive_best(roomy, 4)
    best_gib = peak_memory(best_without_headroom.apply(_base_for(roomy, 4)))[1].total / GiB
    data = roomy.model_dump(mode="json", exclude_none=True)
    data["cluster"]["gpu"]["reserved_GiB"] = 1.0 - 0.9 * best_gib
    tight = parse_scenario(data).scenario
    result = sweep(tight, 4, finalists=16)
    usable = tight.cluster.gpu.usable_memory_GiB
    assert result.finalists
    assert all(r.memory_gib <= usable + 1e-12 for r in result.finalists)
    assert result.finalists[0].plan != best_without_headroom  # the headroom binds


def test_zero3_categories_keep_their_identities() -> None:
    """ZeRO-3 over N = 8: parameters + gradients + optimizer = 16P/N = 2 bytes per parameter exactly;
    the gathered unit (two blocks in full) is reported beside them, and the total still includes it."""
    data = {
        "model": {"preset": "llama3-8b"},
        "training": {"dtype": "bf16", "global_batch_size": 8, "seq_len": 1024},
        "parallelism": {"zero_stage": 3, "framework": "torchtitan"},
        "cluster": {"preset": "dgx-a100-80gb", "num_nodes": 1},
    }
    s = parse_scenario(data).scenario
    mem = rank_memory(s, 0)
    params = stage_parameters(
        s.model, s.model.num_hidden_layers, first=True, last=True, tp=1, pipelined=False, vocab_tp=1
    )
    assert (mem.parameters + mem.gradients + mem.optimizer) / params == pytest.approx(16 / 8, rel=1e-12)
    assert mem.gathered > 0
    assert mem.total == pytest.approx(
        mem.parameters + mem.gradients + mem.optimizer + mem.activations + mem.gathered
    )
    assert set(mem.gib()) == {"parameters", "gradients", "optimizer", "activations", "gathered"}
    assert mem.gib()["gathered"] == pytest.approx(mem.gathered / GiB)
