"""Data parallel under a split backward (ZB-H2, ZB-V, DualPipeV): the weight pass assigns `.grad` itself, so
DDP's hooks never fire and runtime/parallel/dp.py `allreduce_split_grads` averages each chunk's gradients
after the step, one bucket per reducer: the dense ones over dp_cp, the routed experts' over edp. On 2 gloo
ranks, the exact averages and the timed `dp` all-reduce each bucket is recorded as. (AdamW hides a wrong
averaging factor from losses and parameters, so the gradients themselves are checked here; the 4-rank
DualPipeV run in test_mla_cli.py checks events and losses.)"""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist
from torch import nn

from plancast.runtime.instrument import CpuTimer, StepRecorder
from plancast.runtime.parallel.dp import allreduce_split_grads
from tests.distributed.spawn import run_ranks

pytestmark = pytest.mark.distributed


def _model(rank: int) -> nn.Module:
    """A dense and a routed-expert layer (``.experts.`` in its names), gradients rank + 1, 10 (rank + 1)."""
    layer = nn.ModuleDict(
        {"dense": nn.Linear(2, 2, bias=False), "experts": nn.ModuleDict({"0": nn.Linear(2, 2)})}
    )
    model = nn.ModuleDict({"layer": layer})
    for name, param in model.named_parameters():
        param.grad = torch.full_like(param, (10.0 if ".experts." in name else 1.0) * (rank + 1))
    return model


def _averages_each_bucket_over_its_group(rank: int, world_size: int) -> None:
    world = dist.group.WORLD
    assert world is not None
    for axis, dense, experts in (("dp_cp", 1.5, 10.0 * (rank + 1)), ("edp", rank + 1.0, 15.0)):
        model = _model(rank)
        recorder = StepRecorder(rank, CpuTimer(), "timer")
        recorder.begin_step()
        allreduce_split_grads(model, {axis: world}, recorder, stage=1, chunk=0)
        frame = recorder.finish(0).frame()
        for name, param in model.named_parameters():
            want = experts if ".experts." in name else dense
            assert param.grad is not None and torch.equal(param.grad, torch.full_like(param, want)), (
                f"rank {rank} {axis} {name}: {param.grad} != {want}"
            )
        comm = frame[frame["stream"] == "dp"]
        assert comm[["kind", "stage", "chunk", "microbatch"]].values.tolist() == [["all_reduce", 1, 0, -1]]
        assert (comm["dur_us"] > 0).all()


def test_split_backward_gradients_are_averaged_per_bucket() -> None:
    run_ranks(2, _averages_each_bucket_over_its_group)
