"""Per-segment pass times of a whole model on one rank, as the sweep's lower bound reads them
(simulator/sweep_bound.py, sweep_chain.py): each segment's terms as a StageCost sums them, and their
prefix sums, so that a stage's time is one difference."""

from __future__ import annotations

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
    prefix: list[list[float]] = [[0.0] for _ in range(7)]
    for times in passes[1:-1]:
        for acc, t in zip(prefix, times, strict=True):
            acc.append(acc[-1] + t)
    forward, backward_input, backward_weight, own_forward, own_backward, hid_f, hid_b = (
        tuple(p) for p in prefix
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
