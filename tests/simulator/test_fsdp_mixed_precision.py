"""FSDP reducing gradients in a wider dtype than the compute (parallelism.fsdp_reduce_dtype; torchtitan's
and Composer's default fp32 under bf16): each reduce-scatter moves 4 bytes per parameter, and each unit's
backward first casts its gradient (simulator/costs/mixed_precision.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from plancast.simulator.costs.mixed_precision import fsdp_cast_ops
from plancast.simulator.costs.params import layer_params
from plancast.simulator.costs.stage import stage_costs
from plancast.simulator.engine import Topology
from plancast.simulator.loader import parse_scenario
from plancast.simulator.predict import simulate
from plancast.simulator.scenario import Scenario
from tests.cli_runner import cli_main


def llama8b_fsdp(**parallelism: Any) -> Scenario:
    """Llama-3-8B under FSDP (ZeRO-3) on two DGX H100 nodes: the reduce-scatters cross the NICs."""
    data: dict[str, Any] = {
        "model": {"preset": "llama3-8b"},
        "training": {"seq_len": 4096, "global_batch_size": 16, "dtype": "bf16", "flash_attention": True},
        "parallelism": {"zero_stage": 3, **parallelism},
        "cluster": {"preset": "dgx-h100-80gb", "num_nodes": 2},
    }
    return parse_scenario(data).scenario


def dp_bytes(s: Scenario, kind: str) -> int:
    events = simulate(s).events
    return int(events[(events["stream"] == "dp") & (events["kind"] == kind)]["bytes"].sum())


def test_the_default_reduces_in_the_training_dtype() -> None:
    s = llama8b_fsdp()
    assert s.parallelism.fsdp_reduce_dtype is None and s.fsdp_reduce_dtype == "bf16"
    assert fsdp_cast_ops(s, 1e9) == ()


def test_fp32_reduce_scatters_move_twice_the_bytes_and_gathers_keep_bf16() -> None:
    bf16, fp32 = llama8b_fsdp(), llama8b_fsdp(fsdp_reduce_dtype="fp32")
    assert dp_bytes(fp32, "reduce_scatter") == pytest.approx(2 * dp_bytes(bf16, "reduce_scatter"), rel=1e-6)
    assert dp_bytes(fp32, "all_gather") == dp_bytes(bf16, "all_gather") > 0


def test_each_unit_backward_casts_its_gradient_once() -> None:
    """One read in bf16 and one write in fp32 per parameter, in the weight-gradient work only."""
    bf16, fp32 = llama8b_fsdp(), llama8b_fsdp(fsdp_reduce_dtype="fp32")
    params = layer_params(fp32.model).per_rank(fp32.tp)
    (cast,) = fsdp_cast_ops(fp32, params)
    assert (cast.category, cast.bytes) == ("memory", params * (2 + 4))
    layers = [
        next(g for g in stage_costs(s, Topology.of(s).levels("tp"))[0].segments if g.part == "layer")
        for s in (bf16, fp32)
    ]
    assert layers[1].forward_s == layers[0].forward_s
    assert layers[1].backward_input_s == layers[0].backward_input_s
    assert layers[1].backward_weight_s > layers[0].backward_weight_s


def test_no_cast_without_fsdp() -> None:
    """ZeRO-1 and a single data-parallel rank keep DDP's buckets: the key does not apply."""
    zero1 = llama8b_fsdp(zero_stage=1, fsdp_reduce_dtype="fp32")
    assert fsdp_cast_ops(zero1, 1e9) == ()


def test_the_wider_reduction_never_shortens_the_step() -> None:
    bf16 = simulate(llama8b_fsdp(), events=False).summary["step_time_s"]
    fp32 = simulate(llama8b_fsdp(fsdp_reduce_dtype="fp32"), events=False).summary["step_time_s"]
    assert fp32 > bf16


def test_simulate_reads_the_key_and_validate_rejects_a_bad_dtype(tmp_path: Path) -> None:
    scenario = tmp_path / "fsdp.toml"
    body = (
        '[model]\npreset = "llama3-8b"\n[training]\nseq_len = 4096\nglobal_batch_size = 16\ndtype = "bf16"\n'
        '[parallelism]\nzero_stage = 3\nfsdp_reduce_dtype = "{dtype}"\n'
        '[cluster]\npreset = "dgx-h100-80gb"\nnum_nodes = 2\n'
    )
    scenario.write_text(body.format(dtype="fp32"))
    code, out, _ = cli_main("validate", str(scenario))
    assert code == 0 and "fsdp_reduce_dtype" in out and "fp32" in out
    scenario.write_text(body.format(dtype="fp64"))
    code, out, err = cli_main("validate", str(scenario))
    assert code == 2 and "parallelism.fsdp_reduce_dtype" in out + err and "Traceback" not in out + err
