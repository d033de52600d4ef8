"""Data parallelism: DDP gradient buckets (ZeRO-0) and ZeRO-1 optimizer-state sharding.

Gradient accumulation follows torch pipelining's use of DDP: micro-batches run through the bare
module (so the reducer neither expects hooks nor rebuilds buckets), and only the chunk's last backward
is announced to the reducer (``prepare_for_backward``), which then all-reduces each bucket as its
gradients become ready. Buckets therefore keep DDP's initial order (reverse registration order,
``ddp_bucket_bytes`` in simulator/costs/tp_comm.py predicts them). A comm hook identical to DDP's
default (average, then all-reduce) marks each bucket for the instrumentation.
"""

from __future__ import annotations

from collections.abc import Iterable

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.device_mesh import DeviceMesh
from torch.distributed.optim import ZeroRedundancyOptimizer
from torch.distributed.tensor import DTensor, Placement, Shard
from torch.nn.parallel import DistributedDataParallel
from torch.nn.utils import parametrize
from torch.profiler import record_function

COMM_MARKER = "plancast-comm|"


def comm_label(stream: str, stage: int, chunk: int, microbatch: int) -> str:
    """Profiler label attributing the collectives issued inside it to (stream, stage, chunk, microbatch)."""
    return f"{COMM_MARKER}{stream}|{stage}|{chunk}|{microbatch}"


def wrap_ddp(
    module: nn.Module,
    group: dist.ProcessGroup,
    *,
    bucket_cap_mb: float,
    stage: int,
    chunk: int,
    device_ids: list[int] | None = None,
) -> DistributedDataParallel:
    """DDP over ``group`` with the scenario's bucket size and an instrumented default all-reduce hook."""
    ddp = DistributedDataParallel(
        module, process_group=group, bucket_cap_mb=bucket_cap_mb, device_ids=device_ids, init_sync=False
    )
    label = comm_label("dp", stage, chunk, -1)

    def hook(pg, bucket):  # DDP checks real (not string) annotations, so none here
        with record_function(label):
            tensor = bucket.buffer().div_(pg.size())
            work = dist.all_reduce(tensor, group=pg, async_op=True)
        assert work is not None  # async_op=True always returns a Work
        return work.get_future().then(lambda fut: fut.value()[0])

    ddp.register_comm_hook(group, hook)
    return ddp


def backward_with_sync(ddp: DistributedDataParallel, output: torch.Tensor, grad: torch.Tensor | None) -> None:
    """The chunk's last backward: let the reducer all-reduce every bucket as gradients become ready."""
    ddp.reducer.prepare_for_backward([output])
    torch.autograd.backward(output, grad)


def zero1_optimizer(
    params: Iterable[nn.Parameter], group: dist.ProcessGroup, lr: float
) -> ZeroRedundancyOptimizer:
    """AdamW with optimizer states sharded over ``group`` (ZeRO stage 1, Rajbhandari et al. 2020).

    With ``parameters_as_bucket_view`` each rank broadcasts its updated shard as one bucket, so a step
    issues one broadcast per data-parallel rank, in rank order.
    """
    return ZeroRedundancyOptimizer(
        list(params),
        optimizer_class=torch.optim.AdamW,
        process_group=group,
        parameters_as_bucket_view=True,
        lr=lr,
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
    """
    for module in list(model.modules()):
        for name, param in list(module.named_parameters(recurse=False)):
            if not isinstance(param, DTensor):
                continue
            if any(not isinstance(p, Shard) for p in param.placements):
                raise ValueError(
                    f"{name}: DDP with tensor parallel needs sharded parameters, got {param.placements}"
                )
            mesh, placements = param.device_mesh, tuple(param.placements)
            setattr(module, name, nn.Parameter(param.to_local().detach().clone()))
            parametrize.register_parametrization(module, name, _AsDTensor(mesh, placements), unsafe=True)


def canonical_name(name: str) -> str:
    """Name without parametrization (``a.parametrizations.weight.original`` -> ``a.weight``)."""
    return name.replace("parametrizations.", "").replace(".original", "")
