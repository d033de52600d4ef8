"""Expert parallelism: the MoE slot buffer moves between ranks with one all-to-all each way.

Each MoE layer's ``(experts, capacity, hidden)`` buffer is laid out by destination expert and the
experts are split evenly over the ``ep`` ranks of the expert-parallel group, so dispatch is one
``all_to_all_single`` with equal splits, and so is combine (GShard, Lepikhin et al. 2020, arXiv
2006.16668 section 3.2; Megatron-Core's ``MoEAlltoAllTokenDispatcher`` with a fixed capacity). Their
backward passes are all-to-alls too (the transpose of an all-to-all is the reverse all-to-all), so a
layer issues dispatch, combine in forward and combine-grad, dispatch-grad in backward: each one a
blocking ``ep``/``all_to_all`` event of the compute span it runs in (docs/moe.md).

Gradients: routed-expert parameters differ between the ranks of the expert-parallel group, so they
are reduced over the expert-data-parallel group (same ``ep`` index) by a second DDP reducer, and
scaled by ``1 / dp`` rather than ``1 / edp`` (Megatron-Core ``DistributedDataParallel``:
``expert_gradient_scaling_factor = 1 / data_parallel_world_size``): each expert already summed the
gradients of the ``ep`` ranks whose tokens it served.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from plancast.runtime.instrument import StepRecorder
from plancast.runtime.moe import is_expert_param, moe_layers


class _AllToAll(torch.autograd.Function):
    """Equal-split all-to-all over dim 0 whose backward is the same all-to-all of the gradient."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, exchange: AllToAllExchange) -> torch.Tensor:
        ctx.exchange = exchange
        return exchange.all_to_all(x)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None]:
        return ctx.exchange.all_to_all(grad), None


class AllToAllExchange:
    """``ExpertExchange`` over the expert-parallel process group, recorded into ``recorder``."""

    def __init__(self, group: dist.ProcessGroup, recorder: StepRecorder | None) -> None:
        self.group, self.recorder = group, recorder
        self.ep = group.size()

    def all_to_all(self, x: torch.Tensor) -> torch.Tensor:
        """Block ``i`` of ``x`` (dim 0 split into ``ep`` equal blocks) goes to group rank ``i``."""
        x = x.contiguous()
        out = torch.empty_like(x)
        rec = self.recorder
        if rec is None or not rec.enabled:
            dist.all_to_all_single(out, x, group=self.group)
            return out
        with rec.collective("ep", "all_to_all", x.numel() * x.element_size()):
            dist.all_to_all_single(out, x, group=self.group)
        return out

    def dispatch(self, slots: torch.Tensor) -> torch.Tensor:
        experts, capacity, hidden = slots.shape
        local = experts // self.ep
        return _AllToAll.apply(slots.view(self.ep, local, capacity, hidden), self)

    def combine(self, slots: torch.Tensor) -> torch.Tensor:
        ep, local, capacity, hidden = slots.shape
        return _AllToAll.apply(slots, self).view(ep * local, capacity, hidden)


def apply_expert_parallel(model: nn.Module, group: dist.ProcessGroup, recorder: StepRecorder | None) -> None:
    """Route every MoE layer of ``model`` over ``group`` (which holds its ``ep`` ranks, in ep order)."""
    exchange = AllToAllExchange(group, recorder)
    for layer in moe_layers(model):
        if layer.moe.num_experts // exchange.ep != len(layer.experts):
            raise ValueError(
                f"the model holds {len(layer.experts)} experts per layer; {layer.moe.num_experts} experts "
                f"over an expert-parallel group of {exchange.ep} ranks means "
                f"{layer.moe.num_experts // exchange.ep}"
            )
        layer.exchange = exchange


class ExpertParams(nn.Module):
    """The routed experts of a model, as one module for their own DDP reducer (registration = layer order)."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.experts = nn.ModuleList(layer.experts for layer in moe_layers(model))


def expert_parameters(model: nn.Module) -> list[nn.Parameter]:
    return [p for name, p in model.named_parameters() if is_expert_param(name)]


def scale_expert_grads(model: nn.Module, factor: float) -> None:
    """Multiply every routed expert's gradient by ``factor`` (``edp / dp``, i.e. ``1 / ep`` unfolded: see
    the module docstring)."""
    if factor == 1.0:
        return
    for p in expert_parameters(model):
        if p.grad is not None:
            p.grad.mul_(factor)
