"""Which collectives a plan issues, as pure data: tensor-parallel per layer part, DDP gradient buckets.

These lists mirror what the runtime's torch plans issue (runtime/parallel/tp.py, torch DDP) and
tests check them against the profiler's view of a real run; the simulator costs each entry.
``bytes`` is the per-rank payload of the tensor entering the collective: the full activation for an
all-reduce or reduce-scatter, one rank's shard for an all-gather.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from plancast.simulator.scenario import Scenario

Part = Literal["embedding", "layer", "head"]
Phase = Literal["forward", "backward"]

DDP_FIRST_BUCKET_MB = 1.0
"""torch DDP's first bucket (``torch.distributed._DEFAULT_FIRST_BUCKET_BYTES`` = 1 MiB)."""


@dataclass(frozen=True, slots=True)
class TPCollective:
    """One tensor-parallel collective: its kind (trace schema name) and per-rank payload."""

    kind: str
    bytes: int


def tp_collectives(
    part: Part,
    phase: Phase,
    *,
    sequence_parallel: bool,
    micro_batch_size: int,
    seq_len: int,
    hidden_size: int,
    vocab_size: int,
    tp: int,
    dtype_bytes: int,
    vocab_parallel: bool = False,
    learned_positions: bool = False,
) -> tuple[TPCollective, ...]:
    """Ordered tensor-parallel collectives of one micro-batch through ``part`` in ``phase``.

    Megatron-LM (Shoeybi et al. 2019, arXiv 1909.08053 fig. 3): a layer's forward all-reduces after
    the attention and MLP row-parallel GEMMs, its backward all-reduces the input gradients of the two
    column-parallel GEMMs (MLP first). With sequence parallelism (Korthikanti et al. 2022, arXiv
    2205.05198 fig. 5) each all-reduce is an all-gather before and a reduce-scatter after the
    sub-layer, and the replicated embedding/head gather the sequence at their boundary. Full
    recompute repeats the forward list. ``vocab_size`` is unused: embedding and head are either
    replicated or, with ``vocab_parallel``, split over the vocabulary (``_vocab_parallel``).
    """
    if part not in ("embedding", "layer", "head") or phase not in ("forward", "backward"):
        raise ValueError(
            f"part must be embedding|layer|head and phase forward|backward, got {part!r}, {phase!r}"
        )
    if tp < 1 or min(micro_batch_size, seq_len, hidden_size, vocab_size, dtype_bytes) < 1:
        raise ValueError(
            "tp, micro_batch_size, seq_len, hidden_size, vocab_size and dtype_bytes must be >= 1"
        )
    if tp == 1:
        return ()
    full = micro_batch_size * seq_len * hidden_size * dtype_bytes
    gather, scatter, reduce = (
        TPCollective("all_gather", full // tp),
        TPCollective("reduce_scatter", full),
        TPCollective("all_reduce", full),
    )
    if part == "layer":
        return (gather, scatter, gather, scatter) if sequence_parallel else (reduce, reduce)
    if vocab_parallel:
        tokens = micro_batch_size * seq_len
        sides = (gather, scatter, reduce)
        return _vocab_parallel(part, phase, sequence_parallel, learned_positions, tokens, *sides)
    if not sequence_parallel:
        return ()
    boundary = {("embedding", "backward"), ("head", "forward")}
    return (gather,) if (part, phase) in boundary else ()


LOSS_REDUCTIONS = 3
"""All-reduces of a vocab-parallel cross-entropy's forward, one fp32 value per token each: the logits'
max, the target logit and the sum of exponentials (Megatron-LM ``vocab_parallel_cross_entropy``,
megatron/core/tensor_parallel/cross_entropy.py; torch ``loss_parallel``,
torch/distributed/tensor/parallel/loss.py: ``_log_softmax`` twice, ``_nll_loss_forward`` once). Its
backward is local."""


def _vocab_parallel(
    part: Part,
    phase: Phase,
    sequence_parallel: bool,
    learned_positions: bool,
    tokens: int,
    gather: TPCollective,
    scatter: TPCollective,
    reduce: TPCollective,
) -> tuple[TPCollective, ...]:
    """Embedding and output layer split over the vocabulary (Megatron-LM ``VocabParallelEmbedding`` and
    ``ColumnParallelLinear``; torchtitan ``RowwiseParallel`` / ``ColwiseParallel`` + ``loss_parallel``).

    Embedding: the masked partial lookups are all-reduced; under sequence parallelism reduce-scattered
    when no learned position table is added afterwards (Megatron-LM ``reduce_scatter_embeddings``),
    else all-reduced and sliced; the backward all-gathers the sequence shards' gradients. Head: the
    column-parallel output layer's input gradient is all-reduced (reduce-scattered under sequence
    parallelism, whose forward all-gathers its input), then the loss's reductions."""
    if part == "embedding":
        if phase == "backward":
            return (gather,) if sequence_parallel else ()
        return (scatter,) if sequence_parallel and not learned_positions else (reduce,)
    if phase == "backward":
        return (scatter,) if sequence_parallel else (reduce,)
    loss = (TPCollective("all_reduce", tokens * 4),) * LOSS_REDUCTIONS  # fp32 logits (loss_fn)
    return (gather, *loss) if sequence_parallel else loss


def scenario_tp_collectives(
    s: Scenario, part: Part, phase: Phase, dtype_bytes: int, *, moe: bool = False
) -> tuple[TPCollective, ...]:
    """``tp_collectives`` of one micro-batch of scenario ``s`` (the simulator and the runtime's expected
    events read the plan through this one call). ``moe``: an MoE block; on a folded expert grid with
    etp < tp under sequence parallelism its experts work on the rank's sequence shard (Megatron-Core MoE
    parallel folding; runtime/parallel/tp.py), so only the attention's gather and scatter remain. Under
    context parallelism a rank holds seq_len / cp of each sequence, and that is what its tensor-parallel
    group gathers and scatters (Megatron-Core splits the batch over cp first, get_batch_on_this_cp_rank;
    runtime/trainer.py the same)."""
    m, t = s.model, s.training
    if moe and part == "layer" and moe_on_sequence_shards(s):
        return scenario_tp_collectives(s, part, phase, dtype_bytes)[:2]
    return tp_collectives(
        part,
        phase,
        sequence_parallel=s.parallelism.sequence_parallel,
        micro_batch_size=t.micro_batch_size,
        seq_len=t.seq_len // s.cp,
        hidden_size=m.hidden_size,
        vocab_size=m.vocab_size,
        tp=s.tp,
        dtype_bytes=dtype_bytes,
        vocab_parallel=s.vocab_tp > 1,
        learned_positions=m.position_embedding == "learned",
    )


def moe_on_sequence_shards(s: Scenario) -> bool:
    """Whether MoE blocks run on each rank's sequence shard without tensor-parallel collectives: a folded
    expert grid whose experts are split over fewer ranks than tp, under sequence parallelism."""
    etp = s.parallelism.expert_tensor_parallel_degree
    return etp is not None and etp < s.tp and s.parallelism.sequence_parallel


def sp_grad_all_reduce_bytes(
    num_layers: int, hidden_size: int, *, layernorm: bool, dtype_bytes: int = 4
) -> int:
    """Bytes of the one all-reduce per chunk and step that sums sequence-parallel norm gradients over tp.

    Each layer has two norms (weight, plus bias for LayerNorm); Megatron-LM reduces them once per step.
    """
    return num_layers * 2 * (2 if layernorm else 1) * hidden_size * dtype_bytes


def folded_router_grad_bytes(s: Scenario, first_layer: int, layers: int, dtype_bytes: int = 4) -> int:
    """Router gradients (fp32, h x E per MoE block) the sequence-parallel all-reduce also sums when MoE
    blocks run on sequence shards (``moe_on_sequence_shards``): the router is replicated over tp."""
    if not moe_on_sequence_shards(s):
        return 0
    m = s.model
    moe = sum(1 for i in range(first_layer, first_layer + layers) if m.is_moe_layer(i))
    return moe * m.hidden_size * m.num_experts * dtype_bytes


def ddp_bucket_bytes(
    param_bytes_in_registration_order: list[int],
    bucket_cap_mb: float | None,
    first_bucket_mb: float = DDP_FIRST_BUCKET_MB,
) -> list[int]:
    """Bytes of each data-parallel gradient bucket, in reduction order.

    ``bucket_cap_mb=None``: torch DDP as plancast's runtime drives it. The reducer's first assignment
    (torch/nn/parallel/distributed.py, ``BucketCapacityConfig.compute_bucket_size_limits``) uses one
    unlimited bucket when ``find_unused_parameters`` is False, and only a forward through DDP
    rebuilds the buckets; gradient accumulation through the bare module never does, so all of a
    chunk's gradients form one bucket. A cap: buckets filled in reverse registration order up to
    ``first_bucket_mb`` for the first, ``bucket_cap_mb`` after (MiB; torch's rebuilt buckets,
    ``_compute_bucket_assignment_by_size``; Megatron-core and DeepSpeed fill fixed-size buckets the
    same way, with a first bucket as large as the others).
    """
    if (bucket_cap_mb is not None and bucket_cap_mb <= 0) or first_bucket_mb <= 0:
        raise ValueError("bucket_cap_mb and first_bucket_mb must be > 0")
    if any(b < 0 for b in param_bytes_in_registration_order):
        raise ValueError("parameter byte counts must be >= 0")
    if bucket_cap_mb is None:
        total = sum(param_bytes_in_registration_order)
        return [total] if total else []
    limits = [int(first_bucket_mb * 1024 * 1024), int(bucket_cap_mb * 1024 * 1024)]
    buckets: list[int] = []
    current, limit = 0, limits[0]
    for nbytes in reversed(param_bytes_in_registration_order):
        current += nbytes
        if current >= limit:
            buckets.append(current)
            current, limit = 0, limits[1]
    if current:
        buckets.append(current)
    return buckets
