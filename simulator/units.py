"""Data-parallel communication units of one virtual stage: DDP gradient buckets and FSDP units.

ZeRO-0/1 (DDP): the stage's gradients go out in DDP buckets (simulator/costs/tp_comm.py,
`ddp_bucket_bytes`) once its last micro-batch's backward produces them.
ZeRO-2/3 (FSDP2 `fully_shard`, as torchtitan wraps a model): one unit per transformer block plus a
root unit for the embedding and head. Forward all-gathers every unit (root first); ZeRO-3 reshards
after forward, so backward all-gathers the blocks again (the root stays unsharded, as FSDP2 does for
the root module); every unit reduce-scatters its gradients after its backward (blocks in reverse,
root last).
"""

from __future__ import annotations

from dataclasses import dataclass

from simulator.costs.ops import DTYPE_BYTES
from simulator.costs.params import layer_params, layer_tensor_sizes
from simulator.costs.stage import StageCost
from simulator.costs.tp_comm import ddp_bucket_bytes
from simulator.scenario import Scenario


@dataclass(frozen=True, slots=True)
class Step:
    """Compute `share` of a phase, after waiting for `gather_bytes` to be all-gathered (None: no wait)."""

    gather_bytes: float | None
    share: float


@dataclass(frozen=True, slots=True)
class UnitPlan:
    """The data-parallel traffic of one virtual stage."""

    bucket_bytes: tuple[int, ...]  # DDP buckets, in the order they are reduced
    forward: tuple[Step, ...]  # FSDP: the forward phase as gather-then-compute steps
    backward: tuple[Step, ...]
    reduce_bytes: tuple[float, ...]  # FSDP reduce-scatters, in issue order

    def steps(self, kind: str) -> tuple[Step, ...]:
        return self.forward if kind in ("forward", "recompute") else self.backward


def _vocab_tensors(s: Scenario, first: bool, last: bool, pipelined: bool) -> tuple[list[int], list[int]]:
    """Element counts of the (embedding, head) tensors this stage holds on one tp rank."""
    m, tp = s.model, s.tp
    vocab = m.vocab_size * m.hidden_size // tp
    emb: list[int] = []
    head: list[int] = []
    if first:
        emb.append(vocab)
        if m.position_embedding == "learned":
            emb.append(m.max_position_embeddings * m.hidden_size)
    if last:
        head += [m.hidden_size, m.hidden_size] if m.norm == "layernorm" else [m.hidden_size]
        if not m.tie_word_embeddings or (pipelined and not first):
            head.append(vocab)
    return emb, head


def dp_plan(s: Scenario, cost: StageCost) -> UnitPlan:
    """Buckets and FSDP steps of one virtual stage on one rank."""
    stages = s.pp * s.vpp
    first, last = cost.stage == 0, cost.stage == stages - 1
    layers = sum(1 for g in cost.segments if g.part == "layer")
    emb, head = _vocab_tensors(s, first, last, stages > 1)
    grad_bytes = (
        4
        if s.training.grad_accumulation_fp32 or s.training.dtype == "fp32"
        else DTYPE_BYTES[s.training.dtype]
    )
    tensors = emb + list(layer_tensor_sizes(s.model, s.tp)) * layers + head
    buckets = tuple(ddp_bucket_bytes([n * grad_bytes for n in tensors], s.parallelism.ddp_bucket_cap_MB))

    dtype_bytes = DTYPE_BYTES[s.training.dtype]
    layer_bytes = layer_params(s.model).per_rank(s.tp) * dtype_bytes
    root_bytes = (sum(emb) + sum(head)) * dtype_bytes
    total = sum(g.forward_s for g in cost.segments) or 1.0
    shares = [g.forward_s / total for g in cost.segments]
    parts = [g.part for g in cost.segments]
    has_root = root_bytes > 0
    # FSDP2 all-gathers the root unit in the root's pre-forward hook, before any block runs.
    forward = [Step(root_bytes, 0.0)] if has_root else []
    forward += [
        Step(layer_bytes if part == "layer" else None, share)
        for part, share in zip(parts, shares, strict=True)
    ]
    reshard = s.parallelism.zero_stage >= 3
    backward = [
        Step(layer_bytes if (part == "layer" and reshard) else None, share)
        for part, share in zip(reversed(parts), reversed(shares), strict=True)
    ]
    reduce = [layer_bytes] * layers + ([root_bytes] if has_root else [])
    return UnitPlan(buckets, tuple(forward), tuple(backward), tuple(reduce))
