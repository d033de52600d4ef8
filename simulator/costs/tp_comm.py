"""Which collectives tensor parallelism and DDP issue, in order: one plan for simulator and runtime.

Tensor parallel follows Megatron-LM (Shoeybi et al. 2019, sec. 3, the f/g operators; with sequence
parallelism Korthikanti et al. 2022 sec. 4.2.2, g/g-bar): a block issues one collective after the
attention and one after the MLP in forward, and the mirror ones in backward. The vocab-parallel
embedding all-reduces (or reduce-scatters) its output; the column-parallel head all-reduces its input
gradient (or, with sequence parallelism, all-gathers its input and reduce-scatters the gradient).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Part = Literal["embedding", "layer", "head"]
Phase = Literal["forward", "backward"]

# torch DDP's first bucket holds 1 MiB (torch.distributed.distributed_c10d._DEFAULT_FIRST_BUCKET_BYTES).
DDP_FIRST_BUCKET_MB = 1.0


@dataclass(frozen=True, slots=True)
class TPCollective:
    """One collective over the tensor-parallel group; bytes = the full tensor entering it, per rank."""

    kind: str
    bytes: int


def tp_collectives(part: Part, phase: Phase, *, sequence_parallel: bool, micro_batch_size: int, seq_len: int,
                   hidden_size: int, vocab_size: int, tp: int, dtype_bytes: int) -> tuple[TPCollective, ...]:
    """Ordered tensor-parallel collectives of one part of the model, for one micro-batch."""
    del vocab_size  # the vocab-parallel cross-entropy's reductions are [b, s] scalars; folded into the head
    if tp <= 1:
        return ()
    act = micro_batch_size * seq_len * hidden_size * dtype_bytes
    if part == "layer":
        if sequence_parallel:
            pair = (TPCollective("all_gather", act), TPCollective("reduce_scatter", act))
            return pair * 2
        return (TPCollective("all_reduce", act),) * 2
    if part == "embedding":
        if phase == "backward":
            return ()
        return (TPCollective("reduce_scatter" if sequence_parallel else "all_reduce", act),)
    if sequence_parallel:
        return (TPCollective("all_gather" if phase == "forward" else "reduce_scatter", act),)
    return () if phase == "forward" else (TPCollective("all_reduce", act),)


def ddp_bucket_bytes(param_bytes: list[int], bucket_cap_mb: float,
                     first_bucket_mb: float = DDP_FIRST_BUCKET_MB) -> list[int]:
    """Gradient buckets as torch DDP forms them: parameters in reverse registration order, a bucket
    closes once it reaches its cap (the first one 1 MiB, the rest bucket_cap_mb MiB); no parameter is
    split (torch/csrc/distributed/c10d/reducer.cpp, compute_bucket_assignment_by_size)."""
    buckets: list[int] = []
    current = 0
    cap = first_bucket_mb * 1024 * 1024
    for nbytes in reversed(param_bytes):
        current += nbytes
        if current >= cap:
            buckets.append(current)
            current = 0
            cap = bucket_cap_mb * 1024 * 1024
    if current:
        buckets.append(current)
    return buckets
