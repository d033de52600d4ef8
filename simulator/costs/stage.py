"""Durations of one (virtual) pipeline stage's work for one micro-batch, computed once per stage.

A stage is a list of segments (the embedding on the first stage, its transformer blocks, the head on
the last). Each segment carries its compute time per phase and its tensor-parallel collectives,
which sit on the critical path inside the compute span unless `tp_comm_overlap` hides them.
Backward costs twice the forward's FLOPs (input and weight gradients, Narayanan et al. 2021 sec. 3.3);
memory-bound ops read the gradient and the saved input and write one gradient (1.5x their traffic).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Literal, NamedTuple, cast

from plancast.simulator.costs.collectives import CollectiveKind, Level, collective_seconds
from plancast.simulator.costs.efficiency import op_seconds, ops_seconds
from plancast.simulator.costs.host import HostCosts
from plancast.simulator.costs.memory import layer_activation_bytes
from plancast.simulator.costs.mixed_precision import param_pass_ops
from plancast.simulator.costs.moe import moe_activation_bytes, scenario_moe_layer
from plancast.simulator.costs.moe_cp_comm import EpCp, InnerCollective, layer_collectives
from plancast.simulator.costs.moe_overlap import Windows, exposed_seconds
from plancast.simulator.costs.mtp import mtp_forward, mtp_is_moe
from plancast.simulator.costs.offload import activation_offload_s
from plancast.simulator.costs.op import backward_multiples
from plancast.simulator.costs.ops import (
    DTYPE_BYTES,
    Op,
    Shape,
    embedding_forward,
    head_forward,
    layer_forward,
)
from plancast.simulator.costs.params import expert_params, head_params, layer_params, stage_parameters
from plancast.simulator.costs.recompute import moe_rerun_s, recomputed_layers, selective_recompute
from plancast.simulator.costs.tp_comm import scenario_tp_collectives
from plancast.simulator.scenario import Scenario

Part = Literal["embedding", "layer", "head"]


@dataclass(frozen=True, slots=True)
class Collective:
    """One collective inside a compute span: tensor parallel, or (stream "ep"/"cp") an MoE all-to-all
    or a context-parallel K/V exchange, which always block (costs/moe_cp_comm.py)."""

    kind: str
    bytes: int
    seconds: float
    stream: str = "tp"
    exposed_s: float | None = None
    """Seconds the pass waits for it; None: all of them. An ep all-to-all overlapped with compute
    (parallelism.moe_overlap_ep_comm) waits only for what the compute beside it does not hide."""

    @property
    def blocking_s(self) -> float:
        return self.seconds if self.exposed_s is None else self.exposed_s


@dataclass(frozen=True, slots=True)
class Segment:
    """One block (or the embedding or head) on one rank, one micro-batch."""

    part: Part
    forward_s: float
    backward_input_s: float  # input-gradient GEMMs, attention and memory-op backward (+ selective recompute)
    backward_weight_s: float  # weight-gradient GEMMs
    tp_forward: tuple[Collective, ...]
    tp_backward: tuple[Collective, ...]
    forward_flops: float = 0.0
    ep_cp_forward: tuple[Collective, ...] = ()  # in issue order: cp all-gather, ep dispatch, ep combine
    ep_cp_backward: tuple[Collective, ...] = ()  # ep combine-grad, ep dispatch-grad, cp reduce-scatter
    windows: Windows | None = None  # an MoE block's, overlapped or not: sweep_estimate re-prices variants

    @property
    def tp_forward_s(self) -> float:
        return sum(c.seconds for c in self.tp_forward)

    @property
    def tp_backward_s(self) -> float:
        return sum(c.seconds for c in self.tp_backward)

    def stream_s(self, stream: str, phase: Literal["forward", "backward"]) -> float:
        """Seconds of this segment's blocking ep or cp collectives in one phase."""
        colls = self.ep_cp_forward if phase == "forward" else self.ep_cp_backward
        return sum(c.blocking_s for c in colls if c.stream == stream)


@dataclass(frozen=True, slots=True)
class StageCost:
    """Everything the engine needs about one virtual stage."""

    stage: int
    segments: tuple[Segment, ...]
    params: float  # parameters on one rank (before ZeRO sharding)
    tp_overlap: bool
    recompute_full: bool
    host_s: tuple[float, float] = (0.0, 0.0)
    """(forward, backward) host time per micro-batch beyond the blocks' own: an FSDP2 chunk's root
    unit (costs/host.py)."""

    def _comm(self, seconds: float) -> float:
        return 0.0 if self.tp_overlap else seconds

    @property
    def forward_s(self) -> float:
        return self.host_s[0] + sum(
            g.forward_s + self._comm(g.tp_forward_s) + _blocking(g.ep_cp_forward) for g in self.segments
        )

    @property
    def forward_flops(self) -> float:
        """FLOPs of one micro-batch's forward on one rank (backward does twice as many)."""
        return sum(g.forward_flops for g in self.segments)

    @property
    def recompute_s(self) -> float:
        return self.forward_s if self.recompute_full else 0.0

    def _recomputed(self) -> tuple[Segment, ...]:
        """The segments whose forward a separate recompute pass re-runs (stage-level full recompute)."""
        return self.segments if self.recompute_full else ()

    @property
    def backward_input_s(self) -> float:
        return self.host_s[1] + sum(
            g.backward_input_s + self._comm(g.tp_backward_s) + _blocking(g.ep_cp_backward)
            for g in self.segments
        )

    @property
    def backward_weight_s(self) -> float:
        return sum(g.backward_weight_s for g in self.segments)

    @property
    def backward_s(self) -> float:
        return self.backward_input_s + self.backward_weight_s

    @property
    def compute_only_s(self) -> float:
        """Forward + backward (+ recompute) compute time without tensor-parallel communication."""
        fwd = sum(g.forward_s for g in self.segments)
        bwd = sum(g.backward_input_s + g.backward_weight_s for g in self.segments)
        return fwd + bwd + sum(g.forward_s for g in self._recomputed())

    def stream_comm_s(self, stream: str) -> float:
        """Blocking ep or cp communication per micro-batch (forward, recompute, backward)."""
        fwd = sum(g.stream_s(stream, "forward") for g in (*self.segments, *self._recomputed()))
        return fwd + sum(g.stream_s(stream, "backward") for g in self.segments)

    @property
    def tp_comm_s(self) -> float:
        """Tensor-parallel communication per micro-batch (forward, recompute, backward)."""
        fwd = sum(g.tp_forward_s for g in (*self.segments, *self._recomputed()))
        return fwd + sum(g.tp_backward_s for g in self.segments)


def _blocking(colls: tuple[Collective, ...]) -> float:
    return sum(c.blocking_s for c in colls)


def _phase_seconds(ops: tuple[Op, ...], s: Scenario) -> tuple[float, float, float]:
    """(forward, backward-input, backward-weight) seconds of a list of ops."""
    gpu, compute, dtype = s.cluster.gpu, s.cluster.compute, s.training.dtype
    fwd = bwd_in = bwd_w = 0.0
    for op in ops:
        t = op_seconds(op, gpu, compute, dtype)
        grad_in, grad_w = backward_multiples(op)
        fwd += t
        bwd_in += grad_in * t
        bwd_w += grad_w * t
    return fwd, bwd_in, bwd_w


def _collectives(
    part: Part, phase: Literal["forward", "backward"], s: Scenario, levels: tuple[Level, ...], moe: bool
) -> tuple[Collective, ...]:
    if s.tp == 1:
        return ()
    plan = scenario_tp_collectives(s, part, phase, DTYPE_BYTES[s.training.dtype], moe=moe)
    # tp_comm gives an all-gather's per-rank shard; the cost formulas take the gathered tensor.
    compute = s.cluster.compute
    sp = s.parallelism.sequence_parallel

    def host_s(kind: str) -> float:
        """Host time of one collective (sequence parallelism's gathers/scatters have their own rate),
        and its mean wait for a late peer in a run (cluster.ComputeModel.tp_collective_wait_us)."""
        sp_kind = sp and kind in ("all_gather", "reduce_scatter")
        overhead_us = compute.sp_collective_overhead_us if sp_kind else compute.tp_collective_overhead_us
        return (overhead_us + compute.tp_collective_wait_us) * 1e-6

    return tuple(
        Collective(
            c.kind,
            c.bytes,
            host_s(c.kind)
            + collective_seconds(
                cast(CollectiveKind, c.kind), levels, c.bytes * (s.tp if c.kind == "all_gather" else 1)
            ),
        )
        for c in plan
    )


def _segment(
    part: Part,
    ops: tuple[Op, ...],
    s: Scenario,
    tp_levels: tuple[Level, ...],
    ep_cp: EpCp = ((), ()),
    cast_params: float = 0.0,
    weights: float = 0.0,
    host_s: tuple[float, float] = (0.0, 0.0),
    moe: bool = False,
    offload_bytes: float = 0.0,
) -> Segment:
    """`moe`: an MoE block (its tensor-parallel collectives, costs/tp_comm.py).
    `cast_params`: the segment's parameters on this rank, whose gradient FSDP casts to its reduce dtype
    or autograd accumulates; `weights`: its GEMM weights, which autocast casts (costs/mixed_precision.py).
    Both passes are part of the weight-gradient work; autocast's forward cast is part of the forward.
    `host_s`: the block's host time a micro-batch, (forward, backward) (costs/host.py); `offload_bytes`:
    what the block keeps for backward, sent to the host and back (activation_offload, costs/offload.py)."""
    fwd, bwd_in, bwd_w = _phase_seconds(ops, s)
    exposed = activation_offload_s(s, offload_bytes, fwd)
    fwd, bwd_in = fwd + exposed + host_s[0], bwd_in + exposed + host_s[1]
    if part == "layer" and s.training.recompute == "selective":  # a checkpointed "moe" all-to-alls again
        recomputed = selective_recompute(ops, x := Shape.of(s), s.training.selective_recompute)
        bwd_in += _phase_seconds(recomputed, s)[0] + moe_rerun_s(x, ep_cp[0])
    gpu, compute, dtype = s.cluster.gpu, s.cluster.compute, s.training.dtype
    forward_passes, weight_passes = param_pass_ops(s, cast_params, weights)
    fwd += ops_seconds(forward_passes, gpu, compute, dtype)
    bwd_w += ops_seconds(weight_passes, gpu, compute, dtype)
    fwd_tp, bwd_tp = (_collectives(part, phase, s, tp_levels, moe) for phase in ("forward", "backward"))
    if s.parallelism.tp_comm_overlap:  # hidden tp collectives slow the GEMMs beside them (overlap_slowdown)
        fwd += compute.overlap_slowdown * min(sum(c.seconds for c in fwd_tp), fwd)
        bwd_in += compute.overlap_slowdown * min(sum(c.seconds for c in bwd_tp), bwd_in + bwd_w)
    ep = any(c.stream == "ep" for c in ep_cp[0])
    windows = Windows.of(ops, lambda o: _phase_seconds(o, s)) if ep else None
    return Segment(
        part,
        fwd,
        bwd_in,
        bwd_w,
        fwd_tp,
        bwd_tp,
        sum(op.flops for op in ops),
        *ep_overlapped(ep_cp, windows if s.parallelism.moe_overlap_ep_comm else None),
        windows,
    )


def ep_overlapped(
    ep_cp: EpCp, windows: Windows | None
) -> tuple[tuple[Collective, ...], tuple[Collective, ...]]:
    """The block's (forward, backward) ep/cp collectives. With `windows` (moe_overlap_ep_comm) each
    ep all-to-all waits only for what its window of the other pass does not hide (costs/moe_overlap.py)."""
    pairs = (windows.forward_pairs(), windows.backward_pairs()) if windows else ((), ())
    return _overlapped(ep_cp[0], pairs[0]), _overlapped(ep_cp[1], pairs[1])


def _overlapped(colls: tuple[InnerCollective, ...], windows: tuple[float, ...]) -> tuple[Collective, ...]:
    ep = [c.seconds for c in colls if c.stream == "ep"]
    exposed = iter(exposed_seconds(ep, windows)) if windows and len(ep) == len(windows) else None
    return tuple(
        Collective(
            c.kind, c.bytes, c.seconds, c.stream, next(exposed) if exposed and c.stream == "ep" else None
        )
        for c in colls
    )


def _layer_segment(s: Scenario, x: Shape, tp_levels: tuple[Level, ...], host: HostCosts) -> Segment:
    """One dense transformer block (an MoE block: _moe_segment)."""
    return _segment(
        "layer",
        layer_forward(x),
        s,
        tp_levels,
        layer_collectives(s, moe=False),
        *segment_params(s, "layer"),
        host_s=(host.layer_forward_s, host.layer_backward_s),
        offload_bytes=_kept_bytes(s, x, None),
    )


def _recomputing(block: Segment, s: Scenario) -> Segment:
    """A block whose backward first re-runs its forward, as a checkpointed block does inside autograd's
    backward (torch.utils.checkpoint; Megatron-LM's per-layer `tensor_parallel.checkpoint`). Its forward's
    tensor-parallel and blocking ep/cp collectives are counted in that time (as events they stay the
    forward's: the runtime records a checkpointed block's recompute inside its backward span)."""
    comm = (0.0 if s.parallelism.tp_comm_overlap else block.tp_forward_s) + _blocking(block.ep_cp_forward)
    return replace(block, backward_input_s=block.backward_input_s + block.forward_s + comm)


def _kept_bytes(s: Scenario, x: Shape, mlp: float | None) -> float:
    """What one block keeps for backward (the bytes activation offload moves; none without it)."""
    if not s.training.activation_offload:
        return 0.0
    return layer_activation_bytes(x, s.training.recompute, mlp, s.training.selective_recompute)


def segment_params(s: Scenario, part: Part, moe: bool = False) -> tuple[float, float]:
    """(parameters, GEMM weights) of one block, the embedding or the head on one rank: what FSDP's
    gradient cast, autocast's weight casts and gradient accumulation pass over (costs/mixed_precision.py)."""
    m = s.model
    embedding = m.vocab_size * m.hidden_size / s.vocab_tp
    if part == "embedding":
        return embedding, 0.0
    if part == "head":  # the output GEMM's weight (the embedding's when tied) is cast in the head
        projection = 0 if m.tie_word_embeddings else m.vocab_size * m.hidden_size  # split like the vocab
        return projection / s.vocab_tp + head_params(m) - projection, embedding
    block = layer_params(m, moe=moe)
    experts = expert_params(m) / (s.ep * s.etp) if moe else 0.0
    return block.per_rank(s.tp) + experts, block.sharded / s.tp + experts


def _folded_etp(s: Scenario) -> int | None:
    """etp when the expert grid is folded (simulator/mesh.py), else None (experts over tp)."""
    return s.etp if s.parallelism.expert_tensor_parallel_degree is not None else None


def _moe_segment(
    s: Scenario, x: Shape, tp_levels: tuple[Level, ...], host: HostCosts, ops: tuple[Op, ...], ep_cp: EpCp
) -> Segment:
    """A block whose MLP is an MoE block (costs/moe.py scenario_moe_layer's `ops`), with its all-to-alls
    (costs/moe_cp_comm.py layer_collectives' `ep_cp`)."""
    return _segment(
        "layer",
        ops,
        s,
        tp_levels,
        ep_cp,
        *segment_params(s, "layer", moe=True),
        host_s=(host.layer_forward_s, host.layer_backward_s),
        moe=True,
        offload_bytes=_kept_bytes(s, x, _moe_kept(s, x)),
    )


def _moe_kept(s: Scenario, x: Shape) -> float:
    """An MoE block's expert activations per token slot as memory.py counts them (costs/moe.py)."""
    t = s.training
    return moe_activation_bytes(x, s.model, t.moe_routing_imbalance, _folded_etp(s))


class DenseSegments(NamedTuple):
    """The segments of `stage_costs` that no expert-parallel choice changes (ep, etp, the MoE dispatcher
    and its overlap): the dense block, the embedding and the head. A sweep works them out once for the
    plans that differ only in those (simulator/sweep_layer.py; tests/simulator/test_sweep_layer.py
    compares them over a sweep's plans)."""

    layer: Segment
    embedding: Segment
    head: Segment

    @classmethod
    def of(cls, s: Scenario, tp_levels: tuple[Level, ...]) -> DenseSegments:
        x, host = Shape.of(s), HostCosts.of(s)
        params, weights = segment_params(s, "embedding")
        embedding = _segment(
            "embedding", embedding_forward(x), s, tp_levels, cast_params=params, weights=weights
        )
        params, weights = segment_params(s, "head")
        head = _segment("head", head_forward(x), s, tp_levels, cast_params=params, weights=weights)
        return cls(_layer_segment(s, x, tp_levels, host), embedding, head)


def stage_costs(
    s: Scenario, tp_levels: tuple[Level, ...], dense: DenseSegments | None = None
) -> tuple[StageCost, ...]:
    """One StageCost per virtual stage (pp * v of them), in stage order. An MoE model's layers from
    first_k_dense_replace on carry the MoE block and its all-to-alls (costs/moe.py). `dense`: `s`'s
    DenseSegments when already worked out."""
    x = Shape.of(s)
    m = s.model
    host = HostCosts.of(s)
    layer, embedding, head = dense or DenseSegments.of(s, tp_levels)
    # the MoE block's ops and all-to-alls, which an MoE multi-token-prediction block runs too
    moe_ops = scenario_moe_layer(x, s, _folded_etp(s)) if m.is_moe else ()
    ep_cp = layer_collectives(s, moe=True) if m.is_moe else None
    moe_layer = _moe_segment(s, x, tp_levels, host, moe_ops, ep_cp) if ep_cp is not None else layer
    mtp = _mtp_segments(s, x, tp_levels, host, moe_ops, ep_cp)
    split = s.layer_split
    last = len(split) - 1
    out = []
    for v, n_layers in enumerate(split):
        start = sum(split[:v])
        blocks = tuple(moe_layer if m.is_moe_layer(i) else layer for i in range(start, start + n_layers))
        recomputed = recomputed_layers(s, n_layers)  # partial recompute: inside those blocks' backward
        blocks = tuple(_recomputing(b, s) if i < recomputed else b for i, b in enumerate(blocks))
        segments = ((embedding,) if v == 0 else ()) + blocks + ((*mtp, head) if v == last else ())
        params = stage_parameters(
            m,
            n_layers,
            first=v == 0,
            last=v == last,
            tp=s.tp,
            pipelined=last > 0,
            vocab_tp=s.vocab_tp,
            first_layer=start,
            ep=s.ep,
            etp=s.etp,
        )
        out.append(
            StageCost(
                v,
                segments,
                params,
                s.parallelism.tp_comm_overlap,
                s.training.recompute == "full" and s.training.recompute_num_layers is None,
                (host.unit_forward_s, host.unit_backward_s),
            )
        )
    return tuple(out)


def _mtp_segments(
    s: Scenario,
    x: Shape,
    tp_levels: tuple[Level, ...],
    host: HostCosts,
    moe_ops: tuple[Op, ...],
    ep_cp: EpCp | None,
) -> tuple[Segment, ...]:
    """The multi-token-prediction depths, each a block's segment on the last stage (costs/mtp.py); an MoE
    one runs the MoE block stage_costs built (`moe_ops`, `ep_cp`: the same calls, made once)."""
    depth = s.model.num_nextn_predict_layers
    if not depth:
        return ()
    moe = mtp_is_moe(s.model)
    load, dispatcher = s.training.moe_routing_imbalance, s.parallelism.moe_token_dispatcher
    block = moe_ops if moe else None
    segment = _segment(
        "layer",
        mtp_forward(x, s.model, s.ep, etp=_folded_etp(s), imbalance=load, dispatcher=dispatcher, block=block),
        s,
        tp_levels,
        ep_cp if moe and ep_cp is not None else layer_collectives(s, moe=moe),
        *segment_params(s, "layer", moe=moe),
        host_s=(host.layer_forward_s, host.layer_backward_s),
        moe=moe,
    )
    return (segment,) * depth
