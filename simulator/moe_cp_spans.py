"""Expert- and context-parallel collective events inside the compute spans, and each rank's time in them.

The engine runs each pipeline action as one compute span whose duration already holds its blocking ep
and cp collectives (costs/stage.py); as for the tensor-parallel ones (predict.py), they are laid out
here, at their place inside the span, so they cost no SimPy events. Streams "ep" (kind all_to_all) and
"cp" (all_gather forward, reduce_scatter backward), with the issue order and `index` numbering of
docs/moe.md: per (rank, stream, kind, stage, chunk, micro-batch) the forward's collectives count
0..n-1, a full recompute's continue, then the backward's.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from plancast.simulator.costs.stage import StageCost

if TYPE_CHECKING:
    import pandas as pd

PHASES = frozenset({"forward", "recompute", "backward", "backward_input"})
OVERLAP_SUFFIX = "_overlap"
"""An overlapped all-to-all (parallelism.moe_overlap_ep_comm) is two events: what the pass waits for on
stream "ep" (blocking, with the bytes), the rest on "ep_overlap", a communication stream beside the
compute that hides it (traces/breakdown.py counts it exposed only where no compute covers it)."""

Layout = list[tuple[str, str, int, float, float, float]]  # stream, kind, bytes, offset_s, dur_s, waited_s


def _layout(cost: StageCost, phase: str, alone: bool = False) -> Layout:
    """Each segment's ep/cp collectives spread evenly over its own time (backward: segments reversed).
    `alone`: a pass no pass of the other kind overlaps (engine/plan.py `alone`): each all-to-all blocks
    for all of its seconds."""
    backward = phase in ("backward", "backward_input")
    out: Layout = []
    t = 0.0
    for g in reversed(cost.segments) if backward else cost.segments:
        colls = g.ep_cp_backward if backward else g.ep_cp_forward
        if backward:
            own = g.backward_input_s + (0.0 if phase == "backward_input" else g.backward_weight_s)
            own += 0.0 if cost.tp_overlap else g.tp_backward_s
        else:
            own = g.forward_s + (0.0 if cost.tp_overlap else g.tp_forward_s)
        share = own / (len(colls) + 1)
        for c in colls:
            t += share
            waited = c.seconds if alone else c.blocking_s
            out.append((c.stream, c.kind, c.bytes, t, waited, waited))
            t += waited
            if c.seconds > waited:  # overlapped: the rest runs on beside the compute that follows
                out.append((f"{c.stream}{OVERLAP_SUFFIX}", c.kind, 0, t, c.seconds - c.blocking_s, 0.0))
        t += share
    return [_inside(e, t) for e in out]


def _inside(
    entry: tuple[str, str, int, float, float, float], span_s: float
) -> tuple[str, str, int, float, float, float]:
    """An overlapped remainder kept inside its span (moved earlier, at most the span long): it hides
    behind this span's compute; what a longer one hides behind another micro-batch's span is not drawn."""
    stream, kind, nbytes, offset, dur, waited = entry
    if not stream.endswith(OVERLAP_SUFFIX) or offset + dur <= span_s:
        return entry
    dur = min(dur, span_s)
    return (stream, kind, nbytes, span_s - dur, dur, waited)


def _indexed(cost: StageCost, alone: bool = False) -> dict[str, tuple[Layout, list[int]]]:
    """Per span kind: its layout and each entry's index (continuing forward -> recompute -> backward).
    An overlapped all-to-all keeps its index alone or not: its remainder event is the one left out."""
    forward = _layout(cost, "forward", alone)
    per_key: dict[tuple[str, str], int] = {}
    for stream, kind, *_ in forward:
        per_key[(stream, kind)] = per_key.get((stream, kind), 0) + 1
    rounds = {"forward": 0, "recompute": 1, "backward": 2 if cost.recompute_full else 1}
    rounds["backward_input"] = rounds["backward"]
    out = {}
    for phase, offset_rounds in rounds.items():
        layout = forward if phase in ("forward", "recompute") else _layout(cost, phase, alone)
        seen: dict[tuple[str, str], int] = {}
        index = []
        for stream, kind, *_ in layout:
            key = (stream, kind)
            index.append(per_key.get(key, 0) * offset_rounds + seen.get(key, 0))
            seen[key] = seen.get(key, 0) + 1
        out[phase] = (layout, index)
    return out


def _has_any(costs: tuple[StageCost, ...]) -> bool:
    return any(g.ep_cp_forward or g.ep_cp_backward for c in costs for g in c.segments)


PASS_KEYS = {"forward": "F", "backward": "B", "backward_input": "B"}
"""A span kind's action kind in engine/plan.py's `alone` keys (a recompute is never one)."""

Alone = frozenset[tuple[str, int, int]]


def _is_alone(sp: tuple[Any, ...], alone: Alone) -> bool:
    """Whether the compute span `sp` is a pass no pass of the other kind overlaps (engine/plan.py)."""
    return bool(alone) and (PASS_KEYS.get(sp[2], ""), sp[3], sp[5]) in alone


def ep_cp_events(
    spans: Sequence[tuple[Any, ...]], costs: tuple[StageCost, ...], alone: Alone = frozenset()
) -> pd.DataFrame:
    """Span rows (engine column order, seconds) of every ep/cp collective inside the compute spans;
    `alone`: engine/plan.py's unpaired passes, whose all-to-alls block in full."""
    import pandas as pd  # only when events are built: `simulate --json` stays free of pandas

    if not _has_any(costs):
        return pd.DataFrame()
    layouts = [_indexed(c) for c in costs]
    lone = [_indexed(c, alone=True) for c in costs] if alone else layouts
    rows: list[tuple[Any, ...]] = []
    for sp in spans:
        if sp[1] != "compute" or sp[2] not in PHASES:
            continue
        layout, index = (lone if _is_alone(sp, alone) else layouts)[sp[3]][sp[2]]
        rank, stage, chunk, mb, start = sp[0], sp[3], sp[4], sp[5], sp[8]
        for (stream, kind, nbytes, offset, dur, _), i in zip(layout, index, strict=True):
            rows.append((rank, stream, kind, stage, chunk, mb, i, -1, start + offset, dur, nbytes, 0.0))
    columns = ["rank", "stream", "kind", "stage", "chunk", "microbatch", "index", "peer"]
    return pd.DataFrame.from_records(rows, columns=[*columns, "start_s", "dur_s", "bytes", "flops"])


def ep_cp_times(
    spans: Sequence[tuple[Any, ...]], costs: tuple[StageCost, ...], alone: Alone = frozenset()
) -> dict[str, dict[int, float]]:
    """{"ep": {rank: seconds}, "cp": {...}}: each rank's blocking ep / cp time inside its compute spans
    (of an overlapped all-to-all, the part compute does not hide; all of it in an `alone` pass)."""
    out: dict[str, dict[int, float]] = {"ep": {}, "cp": {}}
    if not _has_any(costs):
        return out
    per: dict[tuple[int, str, bool], dict[str, float]] = {}
    for sp in spans:
        if sp[1] != "compute" or sp[2] not in PHASES:
            continue
        key = (sp[3], "forward" if sp[2] == "recompute" else sp[2], _is_alone(sp, alone))
        if key not in per:
            layout = _layout(costs[key[0]], key[1], key[2])
            per[key] = {k: float(np.sum([c[5] for c in layout if c[0] == k])) for k in out}
        for stream, seconds in per[key].items():
            if seconds:
                out[stream][sp[0]] = out[stream].get(sp[0], 0.0) + seconds
    return out
