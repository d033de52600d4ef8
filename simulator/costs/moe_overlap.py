"""Which compute hides each expert all-to-all when they overlap (parallelism.moe_overlap_ep_comm).

Megatron-Core's EP overlap ("combined 1F1B", `--overlap-moe-expert-parallel-comm`) runs one micro-batch's
layer forward beside another's layer backward and lays their sub-modules on two streams
(megatron/core/models/common/model_chunk_schedule_plan.py, TransformerLayerSchedulePlan.run):

    comm stream:    combine_bwd      | dispatch_fwd -> dispatch_bwd          | combine_fwd
    compute stream: pre_dispatch_fwd | mlp_bwd -> mlp_bwd_dw -> mlp_fwd      | pre_dispatch_bwd

so each transfer hides behind one window of the other pass, not behind the whole pass: the forward's
dispatch behind the experts' input-gradient GEMMs, its combine behind the attention's backward, the
backward's combine-grad behind the attention's forward (with the router and permutation: everything
before the dispatch), its dispatch-grad behind the experts' weight gradients and forward. DualPipe pairs
a forward and a backward chunk the same way (DeepSeek-V3 report, arXiv 2412.19437, Figure 4). Each
transfer exposes `max(f, 1 - window / transfer)` of itself (moe_dispatch.exposed_fraction: its kernels
hold f of the SMs while the window runs).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, NamedTuple

from plancast.simulator.costs.moe_dispatch import exposed_fraction
from plancast.simulator.costs.ops import Op
from plancast.simulator.schedule_action import Schedule

if TYPE_CHECKING:  # costs/stage.py imports this module
    from plancast.simulator.costs.stage import Segment, StageCost

MLP_OP_PREFIXES = ("expert_", "shared_")
"""costs/moe.py's routed and shared expert ops: Megatron-Core's `mlp` sub-module; everything before the
dispatch (norms, attention, router, permutation) is its `pre_dispatch_computation`."""

PhaseSeconds = Callable[[tuple[Op, ...]], tuple[float, float, float]]
"""(forward, backward-input, backward-weight) seconds of a list of ops (costs/stage.py)."""


class Windows(NamedTuple):
    """Compute seconds of one MoE block's parts, one micro-batch, that the other pass's transfers hide
    behind."""

    pre_forward_s: float
    pre_backward_s: float  # input and weight gradients
    mlp_forward_s: float
    mlp_backward_input_s: float
    mlp_backward_weight_s: float

    @classmethod
    def of(cls, ops: tuple[Op, ...], phase_seconds: PhaseSeconds) -> Windows:
        mlp = tuple(op for op in ops if op.name.startswith(MLP_OP_PREFIXES))
        # not in `mlp`, by name: an op equal to one of `mlp` has its name (a linear scan of `mlp` per op
        # compared every field of every pair)
        pre = tuple(
            op for op in ops if not op.name.startswith(MLP_OP_PREFIXES) and op.name not in POST_COMBINE_OPS
        )
        pre_f, pre_bi, pre_bw = phase_seconds(pre)
        mlp_f, mlp_bi, mlp_bw = phase_seconds(mlp)
        return cls(pre_f, pre_bi + pre_bw, mlp_f, mlp_bi, mlp_bw)

    def forward_pairs(self) -> tuple[float, float]:
        """Windows of the forward's (dispatch, combine)."""
        return self.mlp_backward_input_s, self.pre_backward_s

    def backward_pairs(self) -> tuple[float, float]:
        """Windows of the backward's (combine-grad, dispatch-grad)."""
        return self.pre_forward_s, self.mlp_backward_weight_s + self.mlp_forward_s


POST_COMBINE_OPS = frozenset({"unpermute", "dropout_residual2"})
"""Ops after the combine (its unpermutation and the residual add): in neither window."""


def exposed_seconds(transfers: Sequence[float], windows: Sequence[float]) -> tuple[float, ...]:
    """Seconds the pass waits for each of its all-to-alls (in issue order), each beside its window."""
    return tuple(t * exposed_fraction(t, w) for t, w in zip(transfers, windows, strict=True))


def unpaired_passes(schedule: Schedule) -> frozenset[tuple[str, int, int]]:
    """(kind, stage, micro-batch) of the passes that run without a pass of the other kind beside them, so
    their all-to-alls hide behind nothing. Megatron-Core pairs a forward with a backward only inside the
    1F1B steady state (pipeline_parallel/combined_1f1b.py: with no pipeline "the forward step for the first
    microbatch is executed alone, no a2a overlapping" and so is the last backward; with interleaving the
    warm-up forwards and cool-down backwards call combined_forward_backward_step with one side None);
    DualPipe overlaps only its F&B chunks (DeepSeek-V3 report, arXiv 2412.19437, Figure 5). Read from each
    rank's action order: a forward is paired when a backward follows it and it is not the rank's first
    action (where the schedule marks its F&B pairs, DualPipeV's `Action.paired`, only those), a backward
    when a paired forward precedes it; an unpaired backward's W (split backward)
    is listed too, for the first stage whose W carries its whole backward (costs/stage.py Durations)."""
    out: set[tuple[str, int, int]] = set()
    for actions in schedule:
        marked = any(a.paired for a in actions)
        paired_forward = False
        for i, a in enumerate(actions):
            if a.kind == "F":
                follows = i + 1 < len(actions) and actions[i + 1].kind == "B"
                paired_forward = follows and i > 0 and (a.paired or not marked)
                if not paired_forward:
                    out.add(("F", a.stage, a.microbatch))
            elif a.kind == "B" and not (i > 0 and actions[i - 1].kind == "F" and paired_forward):
                out.update({("B", a.stage, a.microbatch), ("W", a.stage, a.microbatch)})
    return frozenset(out)


Unpaired = tuple[frozenset[tuple[str, int, int]], tuple[tuple[int, int], ...]]
"""`unpaired_passes` of a schedule and its `unpaired_counts`."""


def unpaired_counts(passes: frozenset[tuple[str, int, int]], stages: int) -> tuple[tuple[int, int], ...]:
    """Per stage, how many forwards and backwards of `unpaired_passes` it has (the sweep's bound adds
    their hidden seconds to their rank's work, simulator/sweep_chain.py chain_bound)."""
    counts = [[0, 0] for _ in range(stages)]
    for kind, stage, _ in passes:
        if kind != "W":
            counts[stage][kind == "B"] += 1
    return tuple((f, b) for f, b in counts)


def hidden_seconds(cost: StageCost) -> tuple[float, float]:
    """(forward, backward) seconds of one stage's ep all-to-alls, one micro-batch, that an overlapped pass
    hides (Collective.seconds - blocking_s): what an unpaired pass pays on top of its steady-state price."""
    per_segment = [segment_hidden_seconds(g) for g in cost.segments]
    return sum(f for f, _ in per_segment), sum(b for _, b in per_segment)


def segment_hidden_seconds(g: Segment) -> tuple[float, float]:
    """`hidden_seconds` of one segment (the sweep's bound reads them per block, sweep_segments.py)."""
    return (
        sum(c.seconds - c.blocking_s for c in g.ep_cp_forward if c.stream == "ep"),
        sum(c.seconds - c.blocking_s for c in g.ep_cp_backward if c.stream == "ep"),
    )
