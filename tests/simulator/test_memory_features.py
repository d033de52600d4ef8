"""The memory-saving features people plan with (issue 33): each moves time and memory the right way.

Partial recompute (Megatron-LM `--recompute-num-layers` / `--recompute-method`), optimizer offload
(ZeRO-Offload, `--optimizer-cpu-offload`), activation offload (of all blocks or the first n,
`--cpu-offloading-num-layers`), FP8 primary weights (`fp8_param`) and FP8's narrow saved GEMM inputs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from plancast.simulator.catalog.host import host_side
from plancast.simulator.costs.fp8 import RECIPES
from plancast.simulator.costs.memory import (
    GiB,
    MemoryBreakdown,
    layer_activation_bytes,
    pipelining_buffer_bytes,
    rank_memory,
)
from plancast.simulator.costs.memory_fit import memory_fit
from plancast.simulator.costs.ops import Shape
from plancast.simulator.loader import ScenarioError, parse_scenario
from plancast.simulator.predict import simulate
from plancast.simulator.scenario import Scenario
from plancast.simulator.schedules import build_schedule
from tests.cli_runner import cli_main


def scenario(training: dict[str, Any] | None = None, **parallelism: Any) -> Scenario:
    """Llama 3 8B, 4 layers a stage over pp 2 on one DGX H100, Megatron-LM."""
    data: dict[str, Any] = {
        "model": {"preset": "llama3-8b", "num_hidden_layers": 8},
        "training": {
            "seq_len": 4096,
            "micro_batch_size": 1,
            "global_batch_size": 16,
            "flash_attention": True,
            **(training or {}),
        },
        "parallelism": {
            "tensor_parallel_degree": 2,
            "pipeline_parallel_degree": 2,
            "framework": "megatron-lm",
            **parallelism,
        },
        "cluster": {"preset": "dgx-h100-80gb", "num_nodes": 1},
    }
    return parse_scenario(data).scenario


def step(s: Scenario) -> dict[str, Any]:
    return simulate(s, events=False).summary


FULL = {"recompute": "full"}


def test_block_recompute_of_some_layers_lies_between_none_and_full() -> None:
    none, full = scenario(), scenario(FULL)
    part = scenario({**FULL, "recompute_num_layers": 2, "recompute_method": "block"})
    mem = [rank_memory(s, 0).activations for s in (full, part, none)]
    assert mem[0] < mem[1] < mem[2]
    times = [step(s)["step_time_s"] for s in (none, part, full)]
    assert times[0] < times[1] < times[2]


def test_block_recompute_of_every_layer_keeps_what_full_recompute_keeps() -> None:
    """Megatron-LM checkpoints inside the transformer block: the embedding and the output layer are not
    re-run, as plancast's stage-level full recompute re-runs them."""
    full = scenario(FULL)
    every = scenario({**FULL, "recompute_num_layers": 4, "recompute_method": "block"})
    two = scenario({**FULL, "recompute_num_layers": 2, "recompute_method": "block"})
    assert rank_memory(every, 0) == rank_memory(full, 0)
    assert step(two)["step_time_s"] < step(every)["step_time_s"] < step(full)["step_time_s"]


def test_uniform_recompute_of_one_layer_is_full_recompute_and_groups_trade_checkpoints_for_rebuilds() -> None:
    full = scenario(FULL)
    one = scenario({**FULL, "recompute_num_layers": 1, "recompute_method": "uniform"})
    two = scenario({**FULL, "recompute_num_layers": 2, "recompute_method": "uniform"})
    assert rank_memory(one, 0) == rank_memory(full, 0)
    x = Shape.of(full)
    checkpoint, block = layer_activation_bytes(x, "full"), layer_activation_bytes(x, "none")
    # stage 0 of 1F1B holds pp = 2 micro-batches: 4 checkpoints each at n = 1, 2 at n = 2; n blocks rebuilt
    delta = rank_memory(two, 0).activations - rank_memory(one, 0).activations
    assert delta == pytest.approx(2 * (2 - 4) * checkpoint + (2 - 1) * block, rel=1e-12)
    every = scenario({**FULL, "recompute_num_layers": 4, "recompute_method": "block"})
    assert step(two)["step_time_s"] == pytest.approx(step(every)["step_time_s"], rel=1e-12)  # each block once


def test_optimizer_offload_moves_the_states_to_the_host_and_costs_step_time() -> None:
    base = scenario(zero_stage=1)
    off = scenario({"optimizer_cpu_offload": True}, zero_stage=1)
    on_gpu, offloaded = rank_memory(base, 0), rank_memory(off, 0)
    assert offloaded.optimizer == 0.0
    assert offloaded.host == pytest.approx(on_gpu.optimizer, rel=1e-12)
    assert offloaded.total < on_gpu.total
    a, b = step(base), step(off)
    assert b["optimizer_time_s"] > a["optimizer_time_s"]
    assert b["step_time_s"] > a["step_time_s"]
    peak_rank = rank_memory(off, b["peak_memory_pp_rank"])
    assert b["host_memory_gib"] == pytest.approx(peak_rank.host / GiB, rel=1e-12)
    assert 0 < b["host_memory_gib"] < b["host_capacity_gib"]


def test_activation_offload_keeps_two_blocks_on_the_gpu_and_costs_time_when_copies_outrun_compute() -> None:
    base, off = scenario(), scenario({"activation_offload": True})
    kept = layer_activation_bytes(Shape.of(base), "none")
    a, b = rank_memory(base, 0), rank_memory(off, 0)
    assert b.activations < a.activations
    assert b.host + b.activations == pytest.approx(a.activations, rel=1e-12)
    assert b.activations - (a.activations - 2 * 4 * kept) == pytest.approx(2 * kept, rel=1e-9)
    assert step(off)["step_time_s"] > step(base)["step_time_s"]


def test_offloading_the_first_n_blocks_keeps_the_others_and_two_in_flight() -> None:
    """Megatron-Core `--cpu-offloading-num-layers 2` on 4-block stages: pp rank 0 holds 2 micro-batches
    under 1F1B, 2 resident blocks each (4 on the GPU, against 8 without offload), and 2 x 2 blocks go to
    the host, of which the double buffer keeps 2 on the GPU at most: 2 blocks' worth end up on the host.
    Only the offloaded share of the blocks pays for the copies."""
    base, every = scenario(), scenario({"activation_offload": True})
    some = scenario({"activation_offload": True, "activation_offload_num_layers": 2})
    kept = layer_activation_bytes(Shape.of(base), "none")
    a, b, c = (rank_memory(s, 0) for s in (base, some, every))
    assert a.activations - b.activations == pytest.approx(4 * kept, rel=1e-9)
    assert b.host == pytest.approx(2 * kept, rel=1e-9)
    assert c.activations < b.activations < a.activations
    assert step(base)["step_time_s"] < step(some)["step_time_s"] < step(every)["step_time_s"]


@pytest.mark.parametrize("recipe", ["tensorwise_delayed", "blockwise"])
def test_fp8_blocks_save_their_gemm_inputs_narrow(recipe: str) -> None:
    """Transformer Engine saves the quantized QKV, FC1 and FC2 inputs (the recipe's saved_input_bytes, not
    bf16's 2), and the attention's output twice: in bf16 for the fused kernel's backward and narrow for the
    output projection's weight gradient."""
    x16, x8 = Shape.of(scenario()), Shape.of(scenario({"fp8": True, "fp8_recipe": recipe}))
    g, tokens, sp = RECIPES[recipe].saved_input_bytes, x8.s * x8.b, x8.tp if x8.sp else 1
    narrower = (2 - g) * (2 * tokens * x8.h / sp + tokens * x8.ffn / x8.tp) - g * tokens * x8.o_dim / x8.tp
    saved = layer_activation_bytes(x16, "none") - layer_activation_bytes(x8, "none")
    assert saved == pytest.approx(narrower, rel=1e-12)
    assert saved > 0


def test_fp8_primary_weights_drop_the_16_bit_copy() -> None:
    """TE's fp8_model_init: a block weight is FP8 plus its transpose (2 bytes) instead of bf16 (2) and the
    step's FP8 copies (2)."""
    fp8 = scenario({"fp8": True})
    primary = scenario({"fp8": True, "fp8_param": True})
    plain = scenario()
    saved = rank_memory(fp8, 0).parameters - rank_memory(primary, 0).parameters
    assert saved == pytest.approx(rank_memory(fp8, 0).parameters - rank_memory(plain, 0).parameters)
    assert saved > 0
    assert rank_memory(primary, 0).parameters == pytest.approx(rank_memory(plain, 0).parameters, rel=1e-12)


def test_te_fused_cross_entropy_keeps_the_logits_in_the_training_dtype() -> None:
    """Megatron-LM's vocab-parallel loss holds 8 fp32 bytes a logit; Transformer Engine's fused one the
    bf16 logits (2): on the last stage only."""
    base, fused = scenario(), scenario({"fused_cross_entropy": "te"})
    x = Shape.of(base)
    logits = x.s * x.b * x.vocab / base.vocab_tp
    saved = rank_memory(base, 1).activations - rank_memory(fused, 1).activations
    assert saved == pytest.approx((8 - 2) * logits, rel=1e-12)
    assert rank_memory(base, 0).activations == rank_memory(fused, 0).activations


def test_pipelining_keeps_a_receive_buffer_per_micro_batch_and_stage_boundary() -> None:
    """torch.distributed.pipelining as torchtitan ran it: stage 0 keeps one output-gradient buffer per
    micro-batch, the last stage one input buffer per micro-batch, of which the one in flight under 1F1B is
    already its chunk's input. A buffer per transfer (the default): none kept."""
    tt = scenario(framework="torchtitan", pipeline_receive_buffers="per_microbatch")
    x, m = Shape.of(tt), tt.num_microbatches
    boundary = x.b * x.s * x.h * x.dtype_bytes / (x.tp if x.sp else 1)
    schedule = build_schedule("1F1B", tt.pp, m)
    assert pipelining_buffer_bytes(tt, x, [0], schedule[0]) == pytest.approx(m * boundary, rel=1e-12)
    assert pipelining_buffer_bytes(tt, x, [1], schedule[1]) == pytest.approx((m - 1) * boundary, rel=1e-12)
    assert pipelining_buffer_bytes(scenario(), x, [0], schedule[0]) == 0.0


def test_grace_blackwell_gpus_offload_over_nvlink_c2c_to_their_grace() -> None:
    """A GB200/GB300 GPU's host is its superchip's Grace (half of 900 GB/s of C2C, half of its 480 GB);
    a DGX B200's is an x86 host over PCIe Gen5."""
    gb200, gb300, b200 = (host_side(name) for name in ("GB200-186GB", "GB300-279GB", "B200-SXM-180GB"))
    assert gb200 == gb300 and gb200.link_GBps == 900 / 2 / 2 > 3 * b200.link_GBps
    assert gb200.host_memory_GiB == pytest.approx(17e12 / 72 / GiB)


def test_torchao_keeps_no_fp8_weight_between_uses() -> None:
    """torchtitan's Float8Linear casts each weight inside its GEMM; Transformer Engine caches the copies."""
    plain_tt, fp8_tt = scenario(framework="torchtitan"), scenario({"fp8": True}, framework="torchtitan")
    assert rank_memory(fp8_tt, 1).parameters == rank_memory(plain_tt, 1).parameters
    assert rank_memory(scenario({"fp8": True}), 1).parameters > rank_memory(scenario(), 1).parameters


def test_fp8_weights_under_a_recipe_without_fp8_weights_exit_2_naming_both_keys(tmp_path: Path) -> None:
    path = tmp_path / "rowwise.toml"
    path.write_text(
        '[model]\npreset = "llama3-8b"\nnum_hidden_layers = 2\n[training]\nseq_len = 1024\n'
        'global_batch_size = 8\nfp8 = true\nfp8_recipe = "rowwise"\nfp8_param = true\n'
        '[cluster]\npreset = "dgx-h100-80gb"\nnum_nodes = 1\n'
    )
    code, out, err = cli_main("simulate", str(path))
    assert code == 2 and "Traceback" not in out + err
    assert "training.fp8_param" in err and "training.fp8_recipe" in err


def test_fit_is_judged_on_the_reserve_and_the_host() -> None:
    s = scenario()
    gpu = s.cluster.gpu
    usable_bytes = gpu.usable_memory_GiB * GiB
    fits = memory_fit(s, MemoryBreakdown(0.0, 0.0, 0.0, usable_bytes * 0.999))
    over = memory_fit(s, MemoryBreakdown(0.0, 0.0, 0.0, usable_bytes * 1.001))
    assert fits["fits_in_memory"] and not over["fits_in_memory"]
    assert fits["peak_reserved_gib"] + gpu.reserved_GiB <= gpu.memory_GiB
    host_full = memory_fit(s, MemoryBreakdown(0.0, 0.0, 0.0, 0.0, host=(fits["host_capacity_gib"] + 1) * GiB))
    assert not host_full["fits_in_memory"]


@pytest.mark.parametrize(
    ("training", "key"),
    [
        ({"recompute": "selective", "recompute_num_layers": 2}, "training.recompute_num_layers"),
        ({"fp8_param": True}, "training.fp8_param"),
        ({"fp8": True, "fp8_recipe": "rowwise", "fp8_param": True}, "training.fp8_param"),
        ({"activation_offload_num_layers": 2}, "training.activation_offload_num_layers"),
    ],
)
def test_a_key_without_the_one_it_needs_is_refused_by_name(training: dict[str, Any], key: str) -> None:
    with pytest.raises(ScenarioError) as err:
        scenario(training)
    assert [p.path for p in err.value.problems] == [key]


def hsdp(replicate: int, zero_stage: int = 3) -> Scenario:
    """Llama 3 8B, FSDP over 2 DGX H100 nodes (dp 16), torchtitan; HSDP keeps each shard group in a node."""
    data: dict[str, Any] = {
        "model": {"preset": "llama3-8b", "num_hidden_layers": 8},
        "training": {"seq_len": 4096, "global_batch_size": 32, "flash_attention": True},
        "parallelism": {"zero_stage": zero_stage, "data_parallel_replicate_degree": replicate},
        "cluster": {"preset": "dgx-h100-80gb", "num_nodes": 2},
    }
    return parse_scenario(data).scenario


def test_hsdp_shards_within_a_node_and_all_reduces_across_replicas() -> None:
    fsdp, hybrid = hsdp(1), hsdp(2)
    assert (fsdp.zero_dp, hybrid.zero_dp) == (16, 8)
    a, b = rank_memory(fsdp, 0), rank_memory(hybrid, 0)
    assert b.optimizer == pytest.approx(2 * a.optimizer, rel=1e-12)  # sharded over 8, not 16
    assert b.total > a.total
    events = {name: simulate(s).events for name, s in (("fsdp", fsdp), ("hsdp", hybrid))}
    dp = {name: e[(e["stream"] == "dp") & (e["rank"] == 0)] for name, e in events.items()}
    assert "all_reduce" not in set(dp["fsdp"]["kind"])
    reduces = dp["hsdp"][dp["hsdp"]["kind"] == "all_reduce"]
    assert len(reduces) == (dp["hsdp"]["kind"] == "reduce_scatter").sum() > 0
    gather = {name: f[f["kind"] == "all_gather"]["dur_us"].median() for name, f in dp.items()}
    assert gather["hsdp"] < gather["fsdp"]  # NVLink inside the node, not the network


@pytest.mark.parametrize(("replicate", "zero_stage"), [(3, 3), (2, 1), (16, 3)])
def test_hsdp_needs_fsdp_and_a_divisor_of_dp(replicate: int, zero_stage: int) -> None:
    with pytest.raises(ScenarioError) as err:
        hsdp(replicate, zero_stage)
    assert [p.path for p in err.value.problems] == ["parallelism.data_parallel_replicate_degree"]
