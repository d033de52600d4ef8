"""Context parallelism: the sequence split over ``cp`` ranks, attention over every rank's K and V.

Split: the sequence is cut into ``2 * cp`` equal chunks and rank ``i`` holds chunks ``i`` and
``2cp - 1 - i``, so every rank gets the same share of causal-attention work (Megatron-LM
context_parallel; Llama 3 paper, arXiv 2407.21783 section 3.3.2). Positions (learned or rotary) are
the tokens' global positions. Each attention layer all-gathers K and V of every rank (packed in one
tensor, before GQA expansion; Llama 3's all-gather CP) and masks causally in global positions; its
backward reduce-scatters dK and dV back to their owners. Both are blocking ``cp`` events of the
compute span they run in (docs/moe.md). Dense gradients are then averaged over the data- and
context-parallel ranks together (Megatron ``with_context_parallel=True``): each rank's loss is the
mean over its equal share of the tokens, so the mean of the ranks' losses is the sequence's.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist

from plancast.runtime.instrument import StepRecorder
from plancast.runtime.model import Attention, Decoder


def local_positions(seq_len: int, cp: int, cp_rank: int) -> torch.Tensor:
    """Global positions of the tokens rank ``cp_rank`` holds: chunks ``cp_rank`` and ``2cp-1-cp_rank``."""
    if seq_len % (2 * cp):
        raise ValueError(
            f"training.seq_len ({seq_len}) must be divisible by 2 * context_parallel_degree ({2 * cp})"
        )
    size = seq_len // (2 * cp)
    first, second = cp_rank * size, (2 * cp - 1 - cp_rank) * size
    return torch.cat([torch.arange(first, first + size), torch.arange(second, second + size)])


def shard_sequence(tokens: torch.Tensor, cp: int, cp_rank: int) -> torch.Tensor:
    """Columns of ``tokens`` (batch, seq) that rank ``cp_rank`` holds (``local_positions``)."""
    if cp == 1:
        return tokens
    return tokens[:, local_positions(tokens.shape[1], cp, cp_rank).to(tokens.device)]


class _GatherKV(torch.autograd.Function):
    """All-gather along dim 0 of a new leading axis; backward reduce-scatters the gradient."""

    @staticmethod
    def forward(ctx: Any, packed: torch.Tensor, exchange: ContextExchange) -> torch.Tensor:
        ctx.exchange = exchange
        return exchange.all_gather(packed)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None]:
        return ctx.exchange.reduce_scatter(grad), None


class ContextExchange:
    """One rank's sequence shard (``ContextHook`` of runtime/model.py) over the cp process group."""

    def __init__(
        self, group: dist.ProcessGroup, seq_len: int, recorder: StepRecorder | None, device: torch.device
    ) -> None:
        self.group, self.recorder = group, recorder
        self.cp, self.cp_rank = group.size(), group.rank()
        self.positions = local_positions(seq_len, self.cp, self.cp_rank).to(device)
        keys = torch.cat([local_positions(seq_len, self.cp, r) for r in range(self.cp)]).to(device)
        self.mask = self.positions[:, None] >= keys[None, :]  # causal in global positions

    def _record(self, kind: str, x: torch.Tensor) -> Any:
        rec = self.recorder
        if rec is None or not rec.enabled:
            return None
        return rec.collective("cp", kind, x.numel() * x.element_size())

    def all_gather(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        out = x.new_empty((self.cp * x.shape[0], *x.shape[1:]))  # gloo wants the ranks' blocks on dim 0
        timed = self._record("all_gather", x)
        if timed is None:
            dist.all_gather_into_tensor(out, x, group=self.group)
        else:
            with timed:
                dist.all_gather_into_tensor(out, x, group=self.group)
        return out.view(self.cp, *x.shape)

    def reduce_scatter(self, grad: torch.Tensor) -> torch.Tensor:
        grad = grad.flatten(0, 1).contiguous()
        out = grad.new_empty((grad.shape[0] // self.cp, *grad.shape[1:]))
        timed = self._record("reduce_scatter", grad)
        if timed is None:
            dist.reduce_scatter_tensor(out, grad, group=self.group)
        else:
            with timed:
                dist.reduce_scatter_tensor(out, grad, group=self.group)
        return out

    def gather_kv(self, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """K, V (b, heads, s/cp, d) of this rank -> (b, heads, s, d) of every rank, in rank order."""
        gathered = _GatherKV.apply(torch.stack((k, v)), self)  # (cp, 2, b, heads, s/cp, d)
        cp, two, b, heads, local, d = gathered.shape
        kv = gathered.permute(1, 2, 3, 0, 4, 5).reshape(two, b, heads, cp * local, d)
        return kv[0], kv[1]


def apply_context_parallel(
    model: Decoder,
    group: dist.ProcessGroup,
    seq_len: int,
    recorder: StepRecorder | None,
    device: torch.device,
) -> ContextExchange:
    """Make every attention layer (and the learned positions) of ``model`` work on this rank's shard."""
    exchange = ContextExchange(group, seq_len, recorder, device)
    for module in model.modules():
        if isinstance(module, Attention):
            module.context = exchange
    if model.embed is not None:
        model.embed.positions = exchange.positions
    return exchange
