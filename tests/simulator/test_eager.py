"""Eager vs fused elementwise ops (training.elementwise, simulator/costs/eager.py)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from benchmarks.fit_published import run_scenario
from benchmarks.published_data import RUNS
from plancast.simulator.costs import eager
from plancast.simulator.costs.ops import Shape, layer_forward
from plancast.simulator.loader import parse_scenario
from plancast.simulator.predict import simulate
from plancast.simulator.scenario import Scenario
from tests.cli_runner import cli_main


def scenario(preset: str, framework: str = "torchtitan", **training: Any) -> Scenario:
    data = {
        "model": {"preset": preset, "num_hidden_layers": 4},
        "training": {"seq_len": 2048, "micro_batch_size": 2, "global_batch_size": 16, **training},
        "parallelism": {"framework": framework},
        "cluster": {"preset": "dgx-h100-80gb"},
    }
    return parse_scenario(data).scenario


def step(s: Scenario) -> float:
    return float(simulate(s, events=False).summary["step_time_s"])


def test_each_framework_sets_its_default_and_a_written_key_wins() -> None:
    assert scenario("llama3-8b", "torchtitan").training.elementwise == "eager"
    assert scenario("llama3-8b", "megatron-lm").training.elementwise == "fused"
    assert scenario("llama3-8b", "deepspeed").training.elementwise == "fused"
    assert scenario("llama3-8b", "torchtitan", elementwise="fused").training.elementwise == "fused"


def test_the_kernel_sequences_move_the_bytes_their_kernels_read_and_write() -> None:
    assert eager.rms_norm(2) == 36.0  # casts 12 + pow 8 + mean 4 + rsqrt multiply 8 + weight 4
    assert eager.rms_norm(4) == 28.0  # fp32: no casts
    assert eager.rope(2) == 20.0 and eager.swiglu(2) == 10.0
    assert eager.attention_layout(2, 4096, 1024) == 2 * 2 * 4096 + 2 * 2 * (1024 + 4096)
    assert eager.attention_layout(2, 4096, 4096) == 2 * 2 * 4096  # no grouped-query copies


def test_eager_llama_is_slower_and_a_gpt_block_moves_only_by_its_layout_copy() -> None:
    llama_eager, llama_fused = (step(scenario("llama3-8b", elementwise=e)) for e in ("eager", "fused"))
    assert llama_eager > 1.03 * llama_fused  # RMSNorm, RoPE and SwiGLU sequences (4 layers + the head)
    gpt = scenario("gpt3-1.3b", elementwise="eager")
    ops = {op.name: op for op in layer_forward(Shape.of(gpt))}
    fused = {op.name: op for op in layer_forward(Shape.of(scenario("gpt3-1.3b", elementwise="fused")))}
    assert set(ops) - set(fused) == {"attn_layout"}  # LayerNorm and GELU are one kernel either way
    assert all(ops[n].bytes == fused[n].bytes for n in fused)


def test_eager_moe_experts_run_silu_and_multiply_apart() -> None:
    moe = {"preset": "mixtral-8x7b", "num_hidden_layers": 2}
    data = {
        "model": moe,
        "training": {"seq_len": 2048, "global_batch_size": 8},
        "parallelism": {"expert_parallel_degree": 8},
        "cluster": {"preset": "dgx-h100-80gb"},
    }
    times = []
    for mode in ("fused", "eager"):
        s = parse_scenario({**data, "training": {**data["training"], "elementwise": mode}}).scenario
        times.append(step(s))
    assert times[1] > times[0]


def test_the_predicted_compile_speedup_is_the_measured_one() -> None:
    """torchtitan's H100 Tables 1 and 3 ran the same plan with and without torch.compile; the eager
    sequences were derived from the kernels, never fitted, so the ratio is a held-out check."""
    by_name = {r.name: r for r in RUNS}
    for gpus in (8, 128):
        eager_run, fused_run = (
            by_name[f"torchtitan-h100-llama3-8b-{gpus}gpu{tail}"] for tail in ("", "-compile")
        )
        measured = eager_run.measured_step_time_s / fused_run.measured_step_time_s
        predicted = step(run_scenario(eager_run)) / step(run_scenario(fused_run))
        assert predicted == pytest.approx(measured, rel=0.03), (gpus, predicted, measured)


def test_simulate_through_the_cli_reads_the_key(tmp_path: Path) -> None:
    times = {}
    for mode in ("eager", "fused"):
        path = tmp_path / f"{mode}.toml"
        path.write_text(
            '[model]\npreset = "llama3-8b"\nnum_hidden_layers = 2\n'
            f'[training]\nseq_len = 4096\nglobal_batch_size = 8\nelementwise = "{mode}"\n'
            '[cluster]\npreset = "dgx-h100-80gb"\n'
        )
        code, out, err = cli_main("simulate", str(path), "--json")
        assert code == 0, err
        times[mode] = json.loads(out)["step_time_s"]
    assert times["eager"] > times["fused"]
    bad = tmp_path / "bad.toml"
    bad.write_text(
        '[model]\npreset = "llama3-8b"\n[training]\nelementwise = "compiled"\n'
        '[cluster]\npreset = "dgx-h100-80gb"\n'
    )
    code, _, err = cli_main("simulate", str(bad))
    assert code == 2 and "elementwise" in err
