"""Data parallelism: DDP gradient buckets (ZeRO-0) and ZeRO-1 optimizer-state sharding.

Gradient accumulation follows torch pipelining's use of DDP: micro-batches run through the bare
module (so the reducer neither expects hooks nor rebuilds buckets), and only the chunk's last backward
is announced to the reducer (``prepare_for_backward``), which then all-reduces each bucket as its
gradients become ready. Buckets therefore keep DDP's initial order (reverse registration order,
``ddp_bucket_bytes`` in simulator/costs/tp_comm.py predicts them). A comm hook identical to DDP's
default (average, then all-reduce) times each bucket for the instrumentation: a mark when it is
issued, a mark in the completion callback of its future (which DDP's own default hook chains too),
``index`` = bucket in issue order. ZeRO-1 times its per-owner broadcasts the same way. No profiler is
needed for either; only when the recorder captures library collectives anyway (tensor parallelism,
FSDP2) do they leave the timing to it and only attribute themselves (``StepRecorder.comm_scope``).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.device_mesh import DeviceMesh
from torch.distributed.optim import ZeroRedundancyOptimizer
from torch.distributed.tensor import DTensor, Placement, Shard
from torch.nn.parallel import DistributedDataParallel
from torch.nn.utils import parametrize

from plancast.runtime.instrument import StepRecorder


class BucketTiming:
    """State of the timed all-reduce hook: the group, where to record, and the chunk it belongs to."""

    def __init__(self, group: dist.ProcessGroup, recorder: StepRecorder, stage: int, chunk: int) -> None:
        self.group, self.recorder, self.stage, self.chunk = group, recorder, stage, chunk
        self.size = group.size()


def _first(fut: torch.futures.Future[Any]) -> torch.Tensor:
    return fut.value()[0]


def timed_allreduce_hook(state, bucket):
    """DDP's default hook (average, then all-reduce), with the bucket timed as a ``dp`` all-reduce.

    Unannotated: DDP checks a hook's annotations and this module's are strings (future import).
    """
    tensor = bucket.buffer().div_(state.size)
    rec = state.recorder
    if rec.profiling:  # the recorder captures it; the scope attributes it to this chunk
        with rec.comm_scope("dp", state.stage, state.chunk):
            work = dist.all_reduce(tensor, group=state.group, async_op=True)
        assert work is not None  # async_op=True always returns a Work
        return work.get_future().then(_first)
    done = rec.open_collective("dp", "all_reduce", state.stage, state.chunk)
    work = dist.all_reduce(tensor, group=state.group, async_op=True)
    assert work is not None
    return work.get_future().then(done.value)


def wrap_ddp(
    module: nn.Module,
    group: dist.ProcessGroup,
    *,
    bucket_cap_mb: float | None,
    stage: int,
    chunk: int,
    device_ids: list[int] | None = None,
    recorder: StepRecorder | None = None,
) -> DistributedDataParallel:
    """DDP over ``group`` with the scenario's bucket size; buckets timed into ``recorder``.

    Without a recorder (or a disabled one) DDP keeps its built-in C++ all-reduce: nothing recorded.
    """
    ddp = DistributedDataParallel(
        module, process_group=group, bucket_cap_mb=bucket_cap_mb, device_ids=device_ids, init_sync=False
    )
    if recorder is not None and recorder.enabled:
        ddp.register_comm_hook(BucketTiming(group, recorder, stage, chunk), timed_allreduce_hook)
    return ddp


def backward_with_sync(
    ddps: list[DistributedDataParallel], output: torch.Tensor, grad: torch.Tensor | None
) -> None:
    """The chunk's last backward: let the reducers all-reduce every bucket as gradients become ready."""
    for ddp in ddps:
        ddp.reducer.prepare_for_backward([output])
    torch.autograd.backward(output, grad)


def allreduce_split_grads(
    model: nn.Module,
    groups: dict[str, dist.ProcessGroup],
    recorder: StepRecorder,
    stage: int,
    chunk: int,
) -> None:
    """A chunk's gradients averaged over data parallel after a split backward, one bucket per reducer: the
    dense ones over ``dp_cp``, the routed experts' over ``edp``, as the two DDP reducers would (the dense
    bucket first). The weight pass of a zero-bubble schedule assigns ``.grad`` itself (torch pipelining's
    ``stage_backward_weight``), so DDP's hooks never fire; Megatron-LM likewise reduces after the
    pipeline's last weight pass (megatron/core/distributed/finalize_model_grads.py). Each bucket is DDP's
    default hook (divide by the group size, then all-reduce), timed as a ``dp`` all-reduce of the chunk."""
    from plancast.runtime.moe import is_expert_param

    named = list(model.named_parameters())
    for axis, expert in (("dp_cp", False), ("edp", True)):
        params = [p for name, p in named if is_expert_param(name) == expert]
        if axis not in groups or not params:
            continue
        grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in params]
        flat = torch._utils._flatten_dense_tensors(grads).div_(groups[axis].size())
        _timed_allreduce(flat, groups[axis], recorder, stage, chunk)
        for p, reduced in zip(params, torch._utils._unflatten_dense_tensors(flat, grads), strict=True):
            p.grad = reduced


def _timed_allreduce(
    flat: torch.Tensor, group: dist.ProcessGroup, recorder: StepRecorder, stage: int, chunk: int
) -> None:
    """``all_reduce`` of ``flat`` over ``group``, timed as a ``dp`` all-reduce (``timed_allreduce_hook``)."""
    if recorder.profiling:
        with recorder.comm_scope("dp", stage, chunk):
            dist.all_reduce(flat, group=group)
        return
    if not recorder.enabled:
        dist.all_reduce(flat, group=group)
        return
    done = recorder.open_collective("dp", "all_reduce", stage, chunk)
    dist.all_reduce(flat, group=group)  # blocking: ends here
    done.done(None)


class TimedZeroRedundancyOptimizer(ZeroRedundancyOptimizer):
    """ZeRO-1 whose per-owner parameter broadcasts are timed as ``dp`` broadcasts of one chunk.

    ``step`` broadcasts each owner's updated shard through ``_broadcast_params_from_rank`` (one
    bucket per owner with ``parameters_as_bucket_view``); this times each call from its issue to
    its future's completion, ``index`` = owner in issue order.
    """

    def __init__(
        self,
        params: list[nn.Parameter],
        group: dist.ProcessGroup,
        lr: float,
        recorder: StepRecorder,
        stage: int,
        chunk: int,
        fused: bool = False,
    ) -> None:
        super().__init__(
            params,
            optimizer_class=torch.optim.AdamW,
            process_group=group,
            parameters_as_bucket_view=True,
            lr=lr,
            fused=fused,
        )
        self._plancast = (recorder, stage, chunk)

    def _broadcast_params_from_rank(self, rank: int) -> list[Any]:
        recorder, stage, chunk = self._plancast
        if recorder.profiling:  # attributed by the profiler (the trainer's label around ``step``)
            return super()._broadcast_params_from_rank(rank)  # type: ignore[misc]  # private in torch
        done = recorder.open_collective("dp", "broadcast", stage, chunk)
        handles: list[Any] = super()._broadcast_params_from_rank(rank)  # type: ignore[misc]
        for work in handles:
            work.get_future().add_done_callback(done.done)
        return handles


def zero1_optimizer(
    params: Iterable[nn.Parameter],
    group: dist.ProcessGroup,
    lr: float,
    *,
    recorder: StepRecorder | None = None,
    stage: int = 0,
    chunk: int = 0,
    fused: bool = False,
) -> ZeroRedundancyOptimizer:
    """AdamW with optimizer states sharded over ``group`` (ZeRO stage 1, Rajbhandari et al. 2020).

    With ``parameters_as_bucket_view`` each rank broadcasts its updated shard as one bucket, so a step
    issues one broadcast per data-parallel rank, in rank order; timed into ``recorder`` if given.
    ``fused``: AdamW's one-kernel CUDA update (runtime/precision.py ``fused_adamw``).
    """
    if recorder is not None and recorder.enabled:
        return TimedZeroRedundancyOptimizer(list(params), group, lr, recorder, stage, chunk, fused)
    return ZeroRedundancyOptimizer(
        list(params),
        optimizer_class=torch.optim.AdamW,
        process_group=group,
        parameters_as_bucket_view=True,
        lr=lr,
        fused=fused,
    )


class _AsDTensor(nn.Module):
    """Parametrization: plain local shard (seen by DDP, optimizer) -> the DTensor TP uses."""

    def __init__(self, mesh: DeviceMesh, placements: tuple[Placement, ...]) -> None:
        super().__init__()
        self.mesh, self.placements = mesh, placements

    def forward(self, local: torch.Tensor) -> torch.Tensor:
        return DTensor.from_local(local, self.mesh, self.placements, run_check=False)


def localize_dtensor_params(model: nn.Module) -> None:
    """Make tensor-parallel DTensor parameters plain local tensors for DDP (which cannot bucket DTensors).

    Each becomes ``<module>.parametrizations.<name>.original``; ``canonical_name`` strips that again.
    A parameter shared by two modules (a tied, vocab-parallel embedding and output layer) stays shared.
    """
    local: dict[int, nn.Parameter] = {}
    for module in list(model.modules()):
        for name, param in list(module.named_parameters(recurse=False)):
            if not isinstance(param, DTensor):
                continue
            if any(not isinstance(p, Shard) for p in param.placements):
                raise ValueError(
                    f"{name}: DDP with tensor parallel needs sharded parameters, got {param.placements}"
                )
            mesh, placements = param.device_mesh, tuple(param.placements)
            if id(param) not in local:
                local[id(param)] = nn.Parameter(param.to_local().detach().clone())
            setattr(module, name, local[id(param)])
            parametrize.register_parametrization(module, name, _AsDTensor(mesh, placements), unsafe=True)


def canonical_name(name: str) -> str:
    """Name without parametrization (``a.parametrizations.weight.original`` -> ``a.weight``)."""
    return name.replace("parametrizations.", "").replace(".original", "")
