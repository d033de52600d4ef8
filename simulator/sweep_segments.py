"""Per-segment pass times of a whole model on one rank, as the sweep's lower bound reads them
(simulator/sweep_bound.py, sweep_chain.py): each segment's terms as a StageCost sums them, and their
prefix sums, so that a stage's time is one difference; and a plan's per-stage times from them
(`stage_times`)."""

from __future__ import annotations

from itertools import accumulate
from typing import NamedTuple

from plancast.simulator.costs.moe_overlap import segment_hidden_seconds
from plancast.simulator.costs.stage import Segment, StageCost


class SegmentTimes(NamedTuple):
    """Per-micro-batch pass times of every segment of the model on one rank (costs/stage.py), for the
    lower bound (simulator/sweep_bound.py): blocks as prefix sums, so a stage's sum is one difference."""

    forward_s: tuple[float, ...]  # [0, block 0, blocks 0-1, ...]: forward + blocking tp/ep/cp comm
    backward_input_s: tuple[float, ...]
    backward_weight_s: tuple[float, ...]
    embedding: tuple[float, float, float]  # (forward, backward input, backward weight)
    head: tuple[float, float, float]
    recompute_full: bool
    compute_forward_s: tuple[float, ...]  # prefix sums of the blocks' own forward (no communication)
    compute_backward_s: tuple[float, ...]  # ... backward (input + weight)
    embedding_compute: tuple[float, float]  # (forward, backward) of its own
    head_compute: tuple[float, float]
    alone_forward_s: tuple[float, ...] = ()  # prefix sums of the blocks' hidden ep all-to-all seconds
    alone_backward_s: tuple[float, ...] = ()  # (costs/moe_overlap.py hidden_seconds); () where none


Passes = tuple[float, float, float, float, float, float, float]
"""One segment's (forward, backward input, backward weight) as a one-segment StageCost sums them (tp and
blocking ep/cp communication included), its own (forward, backward) compute, and the (forward,
backward) seconds of its ep all-to-alls that an overlapped pass hides and an unpaired one pays
(costs/moe_overlap.py hidden_seconds, summed per segment)."""


def segment_passes(segments: tuple[Segment, ...], tp_overlap: bool) -> list[Passes]:
    """`Passes` of each segment. A StageCost's sums are these terms added in segment order, so summing
    them gives its forward_s, backward_input_s and backward_weight_s to the last bit."""
    passes = []
    seen: dict[int, Passes] = {}  # a model repeats one block object
    for g in segments:
        times = seen.get(id(g))
        if times is None:
            one = StageCost(0, (g,), 0.0, tp_overlap, False)
            times = seen[id(g)] = (
                one.forward_s,
                one.backward_input_s,
                one.backward_weight_s,
                g.forward_s,
                g.backward_input_s + g.backward_weight_s,
                *segment_hidden_seconds(g),
            )
        passes.append(times)
    return passes


def segment_times(
    segments: tuple[Segment, ...], tp_overlap: bool, recompute_full: bool, passes: list[Passes] | None = None
) -> SegmentTimes:
    """`SegmentTimes` of a whole model's segments (embedding, blocks, head), as StageCost sums them; the
    segments' own compute apart, which sizes FSDP units' shares (simulator/units.py). The embedding and
    the output layer hold no expert all-to-all (costs/stage.py): only the blocks carry hidden seconds."""
    passes = passes or segment_passes(segments, tp_overlap)
    columns = list(zip(*passes[1:-1], strict=True)) or [()] * 7  # per term, the blocks' values
    forward, backward_input, backward_weight, own_forward, own_backward, hid_f, hid_b = (
        tuple(accumulate(column, initial=0.0)) for column in columns
    )
    emb, head = passes[0], passes[-1]
    assert not (emb[5] or emb[6] or head[5] or head[6]), "an all-to-all outside the blocks"
    hidden = hid_f[-1] > 0.0 or hid_b[-1] > 0.0
    return SegmentTimes(
        forward,
        backward_input,
        backward_weight,
        (emb[0], emb[1], emb[2]),
        (head[0], head[1], head[2]),
        recompute_full,
        own_forward,
        own_backward,
        (emb[3], emb[4]),
        (head[3], head[4]),
        hid_f if hidden else (),
        hid_b if hidden else (),
    )


class StageTimes(NamedTuple):
    """One virtual stage's pass times for one micro-batch (costs/stage.py `Durations`, unsplit)."""

    forward_s: float
    recompute_s: float
    backward_input_s: float
    backward_weight_s: float
    alone_forward_s: float = 0.0
    """What an unpaired forward adds: its overlapped ep all-to-alls' hidden seconds (engine/plan.py)."""
    alone_backward_s: float = 0.0
    """What an unpaired backward adds (to its W where the split backward leaves B empty)."""

    @property
    def total_s(self) -> float:
        return self.forward_s + self.recompute_s + self.backward_input_s + self.backward_weight_s


def pays_alone(times: tuple[StageTimes, ...]) -> bool:
    """Whether an unpaired pass runs longer than a paired one (overlapped ep all-to-alls: engine/plan.py)."""
    return any(st.alone_forward_s or st.alone_backward_s for st in times)


def stage_times(seg: SegmentTimes, split: tuple[int, ...]) -> tuple[StageTimes, ...]:
    """Per virtual stage of `split`, the sums of its segments (embedding on the first, head and the
    multi-token-prediction blocks on the last, costs/mtp.py).

    Under ZeRO-2/3 the engine runs a pass as its FSDP units, each its own block's share of the stage's
    time (simulator/units.py dp_plan: the shares sum to 1), so the stage's time is the same sum.

    The sweep calls it hundreds of thousands of times on a large MoE space, so the fields are read into
    locals once (tests/simulator/test_sweep_bound.py checks the bound against the engine)."""
    out, start, last = [], 0, len(split) - 1
    forward, backward, weight = seg.forward_s, seg.backward_input_s, seg.backward_weight_s
    embedding, head, recompute = seg.embedding, seg.head, seg.recompute_full
    alone_f, alone_b = seg.alone_forward_s, seg.alone_backward_s
    blocks = len(forward) - 1
    for v, n in enumerate(split):
        end = start + n
        stop = blocks if v == last else end
        f = forward[stop] - forward[start]
        b = backward[stop] - backward[start]
        w = weight[stop] - weight[start]
        if v == 0:
            f, b, w = f + embedding[0], b + embedding[1], w + embedding[2]
        if v == last:
            f, b, w = f + head[0], b + head[1], w + head[2]
        af = alone_f[stop] - alone_f[start] if alone_f else 0.0
        ab = alone_b[stop] - alone_b[start] if alone_b else 0.0
        out.append(StageTimes(f, f if recompute else 0.0, b, w, af, ab))
        start = end
    return tuple(out)


def model_total_s(seg: SegmentTimes) -> float:
    """The sum of `total_s` over the stages of any split of `seg` (`stage_times`): every segment's
    forward, backward and weight time once, and the forward again under full recompute. A pipeline's
    ranks together run that many seconds per micro-batch, so its busiest rank at least a pp-th of it
    (sweep_groups.Family)."""
    forward = seg.forward_s[-1] + seg.embedding[0] + seg.head[0]
    total = forward + seg.backward_input_s[-1] + seg.backward_weight_s[-1]
    total += seg.embedding[1] + seg.embedding[2] + seg.head[1] + seg.head[2]
    return total + (forward if seg.recompute_full else 0.0)
