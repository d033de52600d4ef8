"""The GPU paths: CUDA-event timing, NCCL, NVML telemetry and a measured run on GPUs.

Every test here needs CUDA and is skipped cleanly without it (``-m gpu`` selects them).
"""

from __future__ import annotations

import json
import os
import time
import tomllib
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import tomli_w
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from plancast.runtime.instrument import CudaTimer
from plancast.runtime.telemetry import COLUMNS, NvmlSampler, make_sampler
from tests.distributed.spawn import free_port

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA"),
]

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "tiny-local-cpu.toml"


def gpu_count() -> int:
    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def test_cuda_timer_times_a_matmul() -> None:
    timer = CudaTimer()
    a = torch.randn(2048, 2048, device="cuda")
    start = timer.mark()
    b = a @ a
    end = timer.mark()
    timer.synchronize()
    assert timer.elapsed_us(start, end) > 0
    assert b.shape == (2048, 2048)


def test_one_rank_nccl_all_reduce() -> None:
    device = torch.device("cuda", 0)
    torch.cuda.set_device(device)
    dist.init_process_group("nccl", store=dist.HashStore(), rank=0, world_size=1, device_id=device)
    try:
        t = torch.full((4,), 3.0, device=device)
        dist.all_reduce(t)
        torch.cuda.synchronize()
        assert t.tolist() == [3.0] * 4
    finally:
        dist.destroy_process_group()


def _nccl_rank(rank: int, world_size: int, port: int) -> None:
    os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = "127.0.0.1", str(port)
    device = torch.device("cuda", rank)
    torch.cuda.set_device(device)
    dist.init_process_group("nccl", rank=rank, world_size=world_size, device_id=device)
    try:
        t = torch.full((4,), float(rank + 1), device=device)
        dist.all_reduce(t)
        torch.cuda.synchronize()
        assert t.tolist() == [3.0] * 4, f"rank {rank}: {t.tolist()}"
    finally:
        dist.destroy_process_group()


@pytest.mark.skipif(gpu_count() < 2, reason="needs 2 GPUs")
def test_two_rank_nccl_all_reduce() -> None:
    mp.start_processes(_nccl_rank, args=(2, free_port()), nprocs=2, join=True, start_method="spawn")


def test_nvml_sampler_returns_rows_for_every_gpu() -> None:
    sampler = make_sampler(node=0, interval_s=0.05)
    assert isinstance(sampler, NvmlSampler), "NVML should see the GPUs CUDA sees"
    sampler.start()
    time.sleep(0.3)
    table = sampler.stop()
    assert list(table.columns) == list(COLUMNS)
    assert set(table["gpu"]) == set(range(len(sampler.handles)))
    assert (table["memory_used_MiB"] > 0).all()
    assert table["sm_clock_MHz"].notna().all()


@pytest.mark.distributed
def test_a_measured_run_on_gpus(tmp_path: Path) -> None:
    from plancast.runtime.expected import KEY_COLUMNS, expected_event_keys
    from plancast.runtime.launch import launch
    from plancast.simulator.loader import load_scenario
    from plancast.traces.store import RunDir, read_measured

    ranks = min(gpu_count(), 2)
    data = tomllib.loads(EXAMPLE.read_text())
    data["training"].update(steps=3)
    data["parallelism"]["pipeline_parallel_degree"] = ranks
    data["cluster"]["gpus_per_node"] = ranks
    path = tmp_path / "scenario.toml"
    path.write_text(tomli_w.dumps(data))
    run = RunDir(tmp_path / "run")
    assert launch(path, run.path, timeout_s=300) == 0
    env = json.loads(run.env_json.read_text())
    assert env["backend"] == "nccl" and env["nccl"]
    assert json.loads(run.measured_summary.read_text())["status"] == "ok"
    assert pq.read_table(run.telemetry).num_rows > 0
    events = read_measured(run).events
    columns = [c for c in KEY_COLUMNS if c != "step"]
    expected = expected_event_keys(load_scenario(run.scenario_toml).scenario)
    got = events[events["step"] == 1][columns].astype(str).to_numpy().tolist()
    assert sorted(map(tuple, got)) == sorted(map(tuple, expected[columns].astype(str).to_numpy().tolist()))


def _moe_layer_on_cuda(activation: str) -> tuple[torch.nn.Module, torch.Tensor, torch.Tensor]:
    """A 16-expert top-2 layer of hidden 256 / width 128 on CUDA (fp32 master weights), 600 tokens."""
    from plancast.runtime.model import MLP, ModelConfig
    from plancast.runtime.moe import MoE, MoEConfig

    cfg = ModelConfig(256, 1, 4, 4, 512, 64, activation, "rmsnorm", "rope", 64, False)
    torch.manual_seed(0)
    moe = MoE(256, MoEConfig(16, 2, 128), lambda ffn: MLP(cfg, ffn), activation=activation).cuda()
    for p in moe.experts.parameters():
        torch.nn.init.normal_(p, std=0.05)
    return moe, torch.randn(600, 256, device="cuda"), torch.randn(600, 256, device="cuda")


def _grads(moe: torch.nn.Module, x: torch.Tensor, grad: torch.Tensor) -> list[torch.Tensor]:
    x = x.clone().requires_grad_()
    moe.zero_grad()
    with torch.autocast("cuda", dtype=torch.bfloat16):
        out = moe(x)
    out.float().backward(grad)
    return [out.float().detach(), x.grad] + [p.grad.clone() for p in moe.parameters()]


@pytest.mark.parametrize("activation", ["swiglu", "gelu"])
def test_grouped_mm_experts_match_the_per_expert_loop_in_bf16(
    activation: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The dropless layer's CUDA bf16 path (one torch._grouped_mm per projection, runtime/moe_experts.py)
    against its per-expert matmul loop on the same inputs and weights, forward and backward."""
    from plancast.runtime import moe_experts

    moe, x, grad = _moe_layer_on_cuda(activation)
    probe = torch.zeros(8, 256, device="cuda", dtype=torch.bfloat16)
    assert moe_experts.grouped_mm_available(probe, probe.new_zeros(2, 256, 128)), "kernel path not taken"
    grouped = _grads(moe, x, grad)
    monkeypatch.setattr(moe_experts, "grouped_mm_available", lambda x, w: False)
    loop = _grads(moe, x, grad)
    for i, (g, w) in enumerate(zip(grouped, loop, strict=True)):
        torch.testing.assert_close(g, w, rtol=2e-2, atol=2e-2 * w.abs().max().item(), msg=f"tensor {i}")


def test_grouped_mm_experts_never_wait_for_the_host() -> None:
    """The dropless layer's forward and backward issue no host synchronisation (torch's sync debug mode
    raises on one), as torchtitan's GroupedExperts with device-side offsets."""
    moe, x, grad = _moe_layer_on_cuda("swiglu")
    _grads(moe, x, grad)  # warm-up: lazy CUDA initialisation may synchronise once
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        _grads(moe, x, grad)
    finally:
        torch.cuda.set_sync_debug_mode("default")
