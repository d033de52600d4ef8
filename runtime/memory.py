"""Peak memory of one rank: CUDA allocator statistics on GPU, a byte account on CPU.

On CPU there is no allocator to ask, so the account is built from what training holds: parameter,
gradient and optimizer-state bytes (local shards only) plus the peak bytes of activations saved for
backward, counted by autograd's saved-tensor hooks (parameters excluded). The trainer counts them in its
first step only: every step has the same shapes and schedule, and the hooks' Python cost per saved
tensor (12-18% of a tiny model's forward on one CPU core) would otherwise be measured as compute.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn
from torch.distributed.tensor import DTensor


def _local(t: torch.Tensor) -> torch.Tensor:
    return t.to_local() if isinstance(t, DTensor) else t


def _nbytes(t: torch.Tensor) -> int:
    t = _local(t)
    return t.numel() * t.element_size()


class _Held:
    """A saved activation; its destruction (graph freed) returns its bytes to the account."""

    __slots__ = ("account", "nbytes", "tensor")

    def __init__(self, tensor: torch.Tensor, account: ActivationAccount) -> None:
        self.tensor, self.account, self.nbytes = tensor, account, _nbytes(tensor)
        account.add(self.nbytes)

    def __del__(self) -> None:
        self.account.add(-self.nbytes)


@dataclass
class ActivationAccount:
    """Bytes of activations currently saved for backward, and their peak."""

    current: int = 0
    peak: int = 0
    _params: set[int] = field(default_factory=set)

    def add(self, nbytes: int) -> None:
        self.current += nbytes
        self.peak = max(self.peak, self.current)

    @contextmanager
    def track(self, params: Iterable[torch.Tensor]) -> Iterator[None]:
        """Count tensors autograd saves inside the block (parameters are not activations)."""
        self._params = {id(p) for p in params}

        def pack(t: torch.Tensor) -> Any:
            if id(t) in self._params or isinstance(t, nn.Parameter):
                return t
            return _Held(t, self)

        def unpack(obj: Any) -> torch.Tensor:
            return obj.tensor if isinstance(obj, _Held) else obj

        with torch.autograd.graph.saved_tensors_hooks(pack, unpack):
            yield


def state_bytes(modules: Iterable[nn.Module], optimizers: Iterable[torch.optim.Optimizer]) -> dict[str, int]:
    """Parameter, gradient and optimizer-state bytes held by this rank (local shards)."""
    params = [p for m in modules for p in m.parameters()]
    unique = {id(p): p for p in params}.values()
    out = {
        "parameters": sum(_nbytes(p) for p in unique),
        "gradients": sum(_nbytes(p.grad) for p in unique if p.grad is not None),
        "optimizer": 0,
    }
    for opt in optimizers:
        inner = getattr(opt, "optim", opt)  # ZeroRedundancyOptimizer keeps its shard's states in .optim
        for state in inner.state.values():
            out["optimizer"] += sum(
                _nbytes(v) for v in state.values() if isinstance(v, torch.Tensor) and v.dim() > 0
            )
    return out


def peak_memory(
    device: torch.device,
    modules: Iterable[nn.Module],
    optimizers: Iterable[torch.optim.Optimizer],
    activations: ActivationAccount,
) -> dict[str, int]:
    """Peak bytes of this rank: ``{"peak_bytes", ...components}``."""
    parts = state_bytes(modules, optimizers)
    parts["activations"] = activations.peak
    if device.type == "cuda":
        parts["peak_bytes"] = int(torch.cuda.max_memory_allocated(device))
        parts["reserved_bytes"] = int(torch.cuda.max_memory_reserved(device))
    else:
        parts["peak_bytes"] = sum(parts.values())
    return parts


def bytes_now(device: torch.device, activations: ActivationAccount) -> float:
    """What the memory timeline reads after each compute span: the CUDA allocator's allocated bytes on GPU;
    on CPU the activations saved for backward so far (the trainer adds the model states, which CPU runs
    cannot read per span without adding Python work to the step)."""
    if device.type == "cuda":
        return float(torch.cuda.memory_allocated(device))
    return float(activations.current)


TIMELINE_KINDS = frozenset({"forward", "backward", "backward_input", "backward_weight", "optimizer"})


def memory_timeline_points(points: Iterable[tuple[Any, float]]) -> list[list[Any]]:
    """The recorder's (span key, bytes) readings as [kind, stage, chunk, microbatch, bytes], for the kinds
    the simulator's timeline has (simulator/costs/memory_timeline.py; a recompute is part of its backward)."""
    return [[k.kind, k.stage, k.chunk, k.microbatch, b] for k, b in points if k.kind in TIMELINE_KINDS]
