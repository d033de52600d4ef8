"""Cross-entropy over logits split along the vocabulary (tensor parallel), without gathering them.

Megatron-LM's ``vocab_parallel_cross_entropy`` (megatron/core/tensor_parallel/cross_entropy.py; the
same three reductions as torch's ``loss_parallel``, torch/distributed/tensor/parallel/loss.py): each
rank holds ``vocab / tp`` logits per token and the loss needs three all-reduces of one fp32 value per
token: the max (for a stable softmax), the target's logit (held by one rank, zero elsewhere) and the
sum of exponentials. The backward is local: softmax minus the one-hot target, on this rank's slice.

Written out rather than run under ``loss_parallel()``: torch issues those reductions inside the
DTensor dispatch of ``aten._log_softmax`` / ``nll_loss_forward``, where plancast's CPU capture
(a dispatch mode, runtime/instrument/spy.py) cannot see them, and its context must also be open
around every backward call of the pipeline. Here they are plain functional collectives, issued and
recorded inside the forward span like DTensor's own; ``simulator/costs/tp_comm.py`` predicts them.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed._functional_collectives as funcol
from torch.distributed.device_mesh import DeviceMesh
from torch.distributed.tensor import DTensor, Shard


def vocab_parallel_cross_entropy(logits: DTensor, targets: torch.Tensor) -> torch.Tensor:
    """Mean token cross-entropy of ``logits`` (b, s, vocab) sharded on the vocabulary over a 1-D mesh.

    Returns a plain scalar tensor, the same on every rank of the mesh; its gradient flows back into
    ``logits`` as this rank's slice (``Shard(-1)``)."""
    placements = tuple(logits.placements)
    if len(placements) != 1 or not isinstance(placements[0], Shard) or placements[0].dim % logits.ndim != 2:
        raise ValueError(f"logits must be sharded on the vocabulary over one mesh dim, got {placements}")
    local = logits.to_local().float()
    per_token = _VocabParallelCrossEntropy.apply(
        local.reshape(-1, local.shape[-1]), targets.reshape(-1), logits.device_mesh
    )
    return per_token.mean()


class _VocabParallelCrossEntropy(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, logits: torch.Tensor, targets: torch.Tensor, mesh: DeviceMesh) -> torch.Tensor:
        group = (mesh, 0)
        logits_max = funcol.all_reduce(logits.amax(dim=-1), "max", group)
        shifted = logits - logits_max.unsqueeze(-1)
        first = mesh.get_local_rank() * logits.shape[-1]  # this rank's first vocabulary row
        outside = (targets < first) | (targets >= first + logits.shape[-1])
        local_targets = (targets - first).masked_fill(outside, 0)
        target_logit = shifted.gather(-1, local_targets.unsqueeze(-1)).squeeze(-1).masked_fill(outside, 0.0)
        target_logit = funcol.all_reduce(target_logit, "sum", group)
        exp = shifted.exp()
        sum_exp = funcol.all_reduce(exp.sum(dim=-1), "sum", group)
        ctx.save_for_backward(exp.div_(sum_exp.unsqueeze(-1)), local_targets, outside)
        return torch.log(sum_exp) - target_logit

    @staticmethod
    def backward(ctx: Any, grad_loss: torch.Tensor) -> tuple[torch.Tensor, None, None]:
        softmax, local_targets, outside = ctx.saved_tensors
        grad = softmax.clone()
        rows = torch.arange(grad.shape[0], device=grad.device)
        grad[rows, local_targets] -= (~outside).to(grad.dtype)
        return grad * grad_loss.unsqueeze(-1), None, None
