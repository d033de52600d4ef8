"""One layer key's per-micro-batch costs (`Layer`), and the packed form a sweep's grouping tasks send them
back in (`pack` / `unpack`).

A grouping task (simulator/sweep.py `_group_tp_degree`) works out the costs of every layer key its families'
floors need: 25,882 layers on DeepSeek-V3 on 2,048 H800, of which the search reads 3,490 (the keys of the
families it opens). As objects they pickled to 101 MB, 0.8 s to dump in the workers and 1.35 s to load in
the main process, on the search's path. Packed, each is one `bytes` of its floats in a fixed order (a
pool's pipe copies it as it is), unpacked only when the search first reads it (sweep_estimate.Estimator
`packed`). The floats are the ones the task computed, so an unpacked layer equals it exactly (a round
trip is tested, tests/simulator/test_sweep_layer.py).
"""

from __future__ import annotations

from array import array
from dataclasses import dataclass, field
from typing import Any

from plancast.simulator.costs.stage import Segment
from plancast.simulator.sweep_segments import Passes, SegmentTimes, segment_passes, segment_times


@dataclass(frozen=True, slots=True)
class Layer:
    """Per-micro-batch times of the three segment kinds for one (tp, micro-batch, SP, recompute)."""

    layer_s: float  # forward + backward (+ recompute) of one block, tp traffic included
    layer_w_s: float  # its weight-gradient part (zero bubble defers it)
    embedding_s: float
    head_s: float
    segments: SegmentTimes  # every segment's times, for the lower bound


_HEAD = 17
"""Floats before the columns: the four scalars of `Layer`, recompute_full, the column length, whether the
hidden all-to-all columns are there, embedding (3), head (3), embedding_compute (2), head_compute (2)."""


def pack(layer: Layer) -> bytes:
    """`layer` as the bytes of its floats (`unpack` turns them back into an equal `Layer`)."""
    seg = layer.segments
    n, alone = len(seg.forward_s), bool(seg.alone_forward_s)
    values = array("d", (layer.layer_s, layer.layer_w_s, layer.embedding_s, layer.head_s))
    values.extend((float(seg.recompute_full), float(n), float(alone)))
    for part in (seg.embedding, seg.head, seg.embedding_compute, seg.head_compute):
        values.extend(part)
    columns = [seg.forward_s, seg.backward_input_s, seg.backward_weight_s, seg.compute_forward_s]
    columns += [seg.compute_backward_s, *((seg.alone_forward_s, seg.alone_backward_s) if alone else ())]
    for column in columns:
        if len(column) != n:
            raise ValueError("a layer's prefix-sum columns differ in length")
        values.extend(column)
    return values.tobytes()


def unpack(data: bytes) -> Layer:
    """The `Layer` that `pack` gave `data` for."""
    values = array("d")
    values.frombytes(data)
    n, alone = int(values[5]), bool(values[6])
    cols = [tuple(values[_HEAD + i * n : _HEAD + (i + 1) * n]) for i in range(7 if alone else 5)]
    segments = SegmentTimes(
        cols[0],
        cols[1],
        cols[2],
        (values[7], values[8], values[9]),
        (values[10], values[11], values[12]),
        bool(values[4]),
        cols[3],
        cols[4],
        (values[13], values[14]),
        (values[15], values[16]),
        cols[5] if alone else (),
        cols[6] if alone else (),
    )
    return Layer(values[0], values[1], values[2], values[3], segments)


@dataclass
class Shared:
    """Per-key work that layer keys pricing their segments alike share (sweep_estimate.Estimator.layer):
    keys differing only in recompute none / full or ZeRO 0 / 3 often get the very same one-stage segments
    (sweep_keys.alike), and those with the same dispatcher and overlap the same all-to-alls. Each entry
    keeps the objects its key names by id alive (and checks them), so an id is never another object's."""

    repriced: dict[tuple[int, Any, bool], tuple[tuple[Segment, ...], tuple[Segment, ...]]] = field(
        default_factory=dict
    )
    """(id of the raw segments, their ep/cp collectives, ep overlap) -> (raw, repriced segments)."""
    sums: dict[tuple[int, bool, bool], tuple[tuple[Segment, ...], list[Passes], SegmentTimes]] = field(
        default_factory=dict
    )
    """(id of the segments, tp overlap, full recompute) -> (segments, passes, SegmentTimes)."""

    def segment_sums(
        self, segments: tuple[Segment, ...], tp_overlap: bool, recompute_full: bool
    ) -> tuple[list[Passes], SegmentTimes]:
        """sweep_segments.segment_passes and segment_times of `segments`, once per segments object."""
        key = (id(segments), tp_overlap, recompute_full)
        hit = self.sums.get(key)
        if hit is None or hit[0] is not segments:
            passes = segment_passes(segments, tp_overlap)
            hit = self.sums[key] = (
                segments,
                passes,
                segment_times(segments, tp_overlap, recompute_full, passes),
            )
        return hit[1], hit[2]
