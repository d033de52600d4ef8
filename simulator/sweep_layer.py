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
from dataclasses import dataclass, field, replace
from typing import Any

from plancast.simulator.costs.moe import sorts_by_expert
from plancast.simulator.costs.moe_cp_comm import EpCp, layer_collectives
from plancast.simulator.costs.stage import DenseSegments, Segment, ep_overlapped, stage_costs
from plancast.simulator.scenario import Scenario
from plancast.simulator.sweep_axes import Plan
from plancast.simulator.sweep_keys import LayerKey, alike, shared_key
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


class Pricing:
    """The model's segments on one rank for each layer key (costs/stage.py, stage_costs of the key's
    one-stage plan: sweep_estimate.Estimator._flat), with what keys pricing alike share (`shared`), and
    each key's scenario built only where something is worked out for it.

    - Another dispatcher or ep overlap changes only the MoE blocks' all-to-alls: the default's segments
      with those priced again by the calls stage_costs makes (costs/moe_cp_comm.py layer_collectives,
      costs/stage.py ep_overlapped). Partial recompute folds them into a backward: priced in full. The
      alltoall dispatcher sorts by local expert (costs/moe.py), so the others derive from deepep's.
    - Keys differing only in recompute none / full or ZeRO 0 / 3 often price alike (sweep_keys.alike).
    - The ep/cp collectives depend on the grid, the batch shape and the dispatcher, not on recompute,
      ZeRO or overlap; the dense block, embedding and head (costs/stage.py DenseSegments) on no
      expert-parallel choice: each worked out once for the keys that share them.
    tests/simulator/test_sweep_layer.py compares every key's segments with stage_costs' own."""

    def __init__(self, base: Scenario) -> None:
        self.base = base
        self.shared = Shared()
        self._raw: dict[LayerKey, tuple[Segment, ...]] = {}
        self._dense: dict[tuple[object, ...], DenseSegments] = {}
        self._collectives: dict[tuple[object, ...], EpCp] = {}

    def segments(self, key: LayerKey, flat: Plan, tp_levels: tuple[Any, ...]) -> tuple[Segment, ...]:
        """`flat`'s segments; `key` is its layer key, `tp_levels` its tensor-parallel group's tiers."""
        twin = "alltoall" if sorts_by_expert(key[7]) else "deepep"
        plain: LayerKey = (*key[:7], twin, False, *key[9:])
        if key == plain or self.base.training.recompute_num_layers is not None:
            return self._stage_segments(key, flat, tp_levels)
        raw = self._raw.get(plain)
        if raw is None:
            raw = self._stage_segments(plain, replace(flat, dispatcher=twin, overlap_ep=False), tp_levels)
        where = (*key[:3], key[4], key[5], key[7], key[9])  # tp, mbs, SP, ep, cp, dispatcher, etp
        ep_cp = self._collectives.get(where)
        if ep_cp is None:
            ep_cp = self._collectives[where] = layer_collectives(flat.apply(self.base), moe=True)
        # the repricing's inputs: keys that price alike share them
        shared = (id(raw), ep_cp, flat.overlap_ep)
        hit = self.shared.repriced.get(shared)
        if hit is not None and hit[0] is raw:
            return hit[1]
        priced: dict[int, Segment] = {}
        for g in {id(g): g for g in raw}.values():  # a few distinct blocks, each many times in `raw`
            if any(c.stream == "ep" for c in g.ep_cp_forward):
                fwd, bwd = ep_overlapped(ep_cp, g.windows if flat.overlap_ep else None)
                priced[id(g)] = replace(g, ep_cp_forward=fwd, ep_cp_backward=bwd)
        segments = tuple(priced.get(id(g), g) for g in raw)
        self.shared.repriced[shared] = (raw, segments)
        return segments

    def _stage_segments(self, key: LayerKey, flat: Plan, levels: tuple[Any, ...]) -> tuple[Segment, ...]:
        """stage_costs' segments once per key: `shared_key`'s where alike (sweep_keys.alike)."""
        cached = self._raw.get(key)
        if cached is None:
            s = flat.apply(self.base)
            other = shared_key(key)
            twin = replace(flat, zero_stage=0, recompute=other[3])
            if other != key and alike(s, twin.apply(self.base)):
                cached = self._stage_segments(other, twin, levels)
            else:
                where = (*key[:4], *key[5:7])  # tp, mbs, SP, recompute, cp, FSDP stage
                dense = self._dense.get(where)
                if dense is None:
                    dense = self._dense[where] = DenseSegments.of(s, levels)
                cached = stage_costs(s, levels, dense)[0].segments
            self._raw[key] = cached
        return cached
