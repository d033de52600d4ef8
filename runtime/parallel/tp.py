"""Megatron-style tensor parallelism with DTensor (Shoeybi et al. 2019, arXiv 1909.08053 section 3).

Per block: q/k/v and the MLP's up/gate projections are column-parallel, the attention output and
the MLP down projection row-parallel, so each block costs one all-reduce per sub-layer forward and
one backward (the "g" and "f" functions of Megatron-LM). Each sub-layer's input is turned into a
DTensor once (``PrepareModuleInput``) so the column-parallel projections share one backward
all-reduce, as Megatron's fused QKV GEMM does. With sequence parallelism (Korthikanti et al. 2022,
arXiv 2205.05198 section 4.2.2) the norms run on sequence shards and each all-reduce becomes an
all-gather before and a reduce-scatter after the sub-layer.

With ``parallelism.vocab_parallel`` the embedding and the output layer are split over the vocabulary
as torchtitan's ``parallelize_llama`` does (``tok_embeddings: RowwiseParallel``, ``output:
ColwiseParallel(use_local_output=not loss_parallel)``, Megatron-LM's ``VocabParallelEmbedding`` and
``ColumnParallelLinear``): each rank looks up its vocab/tp rows (masked) and the partial embeddings are
all-reduced (reduce-scattered under sequence parallelism when no learned position table is added after
the lookup, as Megatron-LM's ``reduce_scatter_embeddings``); the logits stay sharded over the vocabulary
and the loss is a vocab-parallel cross-entropy (runtime/parallel/loss.py: three all-reduces of one
value per token, as Megatron-LM's ``vocab_parallel_cross_entropy`` and torch's ``loss_parallel``).
Without it the embedding and head stay replicated (every tensor-parallel rank computes them in full),
free of collectives except the sequence-parallel scatter/gather at their boundaries.
``simulator/costs/tp_comm.py`` lists the collectives this plan issues; a test checks them.
"""

from __future__ import annotations

from torch.distributed.device_mesh import DeviceMesh
from torch.distributed.tensor import Replicate, Shard
from torch.distributed.tensor.parallel import (
    ColwiseParallel,
    PrepareModuleInput,
    PrepareModuleOutput,
    RowwiseParallel,
    SequenceParallel,
    parallelize_module,
)
from torch.distributed.tensor.parallel.style import ParallelStyle

from plancast.runtime.model import Decoder
from plancast.runtime.moe import MoE


def _block_plan(swiglu: bool, sequence_parallel: bool) -> dict[str, ParallelStyle]:
    act_in = Shard(1) if sequence_parallel else Replicate()
    plan: dict[str, ParallelStyle] = {
        "attn": PrepareModuleInput(
            input_layouts=(act_in,), desired_input_layouts=(Replicate(),), use_local_output=False
        ),
        "attn.wq": ColwiseParallel(),
        "attn.wk": ColwiseParallel(),
        "attn.wv": ColwiseParallel(),
        "attn.wo": RowwiseParallel(output_layouts=act_in),
        "mlp": PrepareModuleInput(
            input_layouts=(act_in,), desired_input_layouts=(Replicate(),), use_local_output=False
        ),
        "mlp.up": ColwiseParallel(),
        "mlp.down": RowwiseParallel(output_layouts=act_in),
    }
    if swiglu:
        plan["mlp.gate"] = ColwiseParallel()
    if sequence_parallel:
        plan["attn_norm"] = SequenceParallel(use_local_output=True)
        plan["mlp_norm"] = SequenceParallel(use_local_output=True)
    return plan


def _moe_block_plan(swiglu: bool) -> dict[str, ParallelStyle]:
    """An MoE block under MoE parallel folding (etp 1, sequence parallel): attention as in a dense block;
    the MoE routes this rank's sequence shard to whole experts over its ep group (runtime/moe.py), its
    router replicated with a Partial gradient that the step's sequence-parallel all-reduce sums
    (Megatron-Core marks the router weight sequence-parallel for the same reduction)."""
    plan = {k: v for k, v in _block_plan(swiglu, sequence_parallel=True).items() if not k.startswith("mlp")}
    plan["mlp_norm"] = SequenceParallel(use_local_output=True)
    plan["mlp.router"] = SequenceParallel(sequence_dim=0, use_local_output=True)
    return plan


def apply_tensor_parallel(
    model: Decoder,
    tp_mesh: DeviceMesh,
    *,
    sequence_parallel: bool,
    vocab_parallel: bool = False,
    moe_on_shards: bool = False,
) -> Decoder:
    """Shard ``model``'s blocks (and with ``vocab_parallel`` its embedding and head) over ``tp_mesh``.
    ``moe_on_shards``: MoE blocks run on sequence shards (simulator/costs/tp_comm.py
    ``moe_on_sequence_shards``)."""
    swiglu = model.cfg.activation == "swiglu"
    for block in model.layers.values():
        is_moe = isinstance(block.mlp, MoE)
        if is_moe and not moe_on_shards:
            raise ValueError("an MoE block under tensor parallel needs moe_on_shards (runtime/plan.py)")
        plan = _moe_block_plan(swiglu) if is_moe else _block_plan(swiglu, sequence_parallel)
        parallelize_module(block, tp_mesh, plan)
    if vocab_parallel:
        _shard_vocabulary(model, tp_mesh, sequence_parallel)
    elif sequence_parallel:
        _sequence_boundaries(model, tp_mesh)
    return model


def _sequence_boundaries(model: Decoder, tp_mesh: DeviceMesh) -> None:
    """Replicated embedding and head around sequence-parallel blocks: slice after, gather before."""
    if model.embed is not None:
        # Replicated embedding output -> this rank's sequence shard (slice; all-gather in backward).
        parallelize_module(model.embed, tp_mesh, _to_sequence_shard())
    if model.head is not None:
        # Sequence shards -> the full sequence for the replicated head (all-gather; slice in backward).
        parallelize_module(
            model.head,
            tp_mesh,
            PrepareModuleInput(
                input_layouts=(Shard(1),), desired_input_layouts=(Replicate(),), use_local_output=True
            ),
        )


def _to_sequence_shard() -> PrepareModuleOutput:
    return PrepareModuleOutput(
        output_layouts=(Replicate(),), desired_output_layouts=(Shard(1),), use_local_output=True
    )


def _shard_vocabulary(model: Decoder, tp_mesh: DeviceMesh, sequence_parallel: bool) -> None:
    """torchtitan's plan for ``tok_embeddings`` and ``output`` (torchtitan/models/llama3/infra/
    parallelize.py, ``apply_tp``); a tied output weight is tied again to the sharded embedding rows."""
    if model.embed is not None:
        # A learned position table is added to the full sequence after the lookup, so the lookup is
        # all-reduced and then sliced (Megatron-LM reduce-scatters only without position embeddings).
        scatter = sequence_parallel and model.embed.pos is None
        parallelize_module(
            model.embed.tok,
            tp_mesh,
            RowwiseParallel(input_layouts=Replicate(), output_layouts=Shard(1) if scatter else Replicate()),
        )
        if sequence_parallel and not scatter:
            parallelize_module(model.embed, tp_mesh, _to_sequence_shard())
    if model.head is not None:
        plan: dict[str, ParallelStyle] = {
            "output": ColwiseParallel(
                input_layouts=Shard(1) if sequence_parallel else Replicate(),
                output_layouts=Shard(-1),
                use_local_output=False,  # sharded logits: loss_fn takes the vocab-parallel loss
            )
        }
        if sequence_parallel:
            plan["norm"] = SequenceParallel()
        parallelize_module(model.head, tp_mesh, plan)
        if model.embed is not None and model.cfg.tie_embeddings:
            model.head.output.weight = model.embed.tok.weight


def local_seq_len(seq_len: int, tp: int, sequence_parallel: bool) -> int:
    """Sequence length of the activations passed between pipeline stages on one tp rank."""
    return seq_len // tp if sequence_parallel else seq_len
