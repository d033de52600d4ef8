"""Where one step goes on each rank, and the pipeline bubble: one definition for every report.

``simulate`` (simulator/summary.py), ``compare`` (reconcile.py) and every dashboard page read the
bubble from here, for predicted and measured events alike, so they show one number for one step:

- a rank's **compute** is the union of its compute spans (forward, backward, recompute, optimizer)
  less the blocking collectives inside them: the tensor-, expert- and context-parallel ones
  (``BLOCKING_STREAMS``: the pass waits for each before it goes on; tensor-parallel ones hidden by
  ``tp_comm_overlap`` excepted, the prediction's ``overlapped_streams``);
- its **exposed communication** is the time of those blocking collectives, and the time its
  data-parallel collectives are not hidden under compute or under them;
- its **bubble** is the rest of the step (``pipeline_bubble``): the rank waits on the pipeline. That
  includes the pipeline's own point-to-point spans (stream ``pp``: receives, sends, the tied-embedding
  sum) outside compute: a rank's own trace cannot tell waiting for another stage's compute from
  waiting for the transfer (a measured receive lasts from its post until the data lands), so the
  prediction counts them the same way;
- the step's figures are those of the **critical rank**, the one whose pipeline passes keep its
  compute stream busiest (the pipeline's bottleneck); ties go to the lowest rank.

With uniform stages, free links and no optimizer this is GPipe's (p - 1)/(m + p - 1) (Huang et al.
2019 sec. 2.3). Lives in traces (pandas and numpy only) so that the simulator and the reports share
it without traces importing the simulator.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import TYPE_CHECKING

import numpy as np

from plancast.traces import schema

if TYPE_CHECKING:  # pandas only where a measured frame is broken down: `simulate --json` stays light
    import pandas as pd

PIPELINE_KINDS = ("forward", "backward", "backward_input", "backward_weight", "recompute")
"""Compute kinds of the pipeline passes (the optimizer is compute, but not a pipeline pass)."""
NOISE = 1e-9
"""Relative size below which a difference of sums is float rounding, shown as 0 (not 2e-16 of a step)."""
PIPELINE_STREAM = "pp"
"""Its spans outside compute are part of the bubble, not exposed communication."""
BLOCKING_STREAMS = frozenset({"tp", "ep", "cp"})
"""Collectives a pass waits for where they sit (DTensor's and Megatron-LM's tensor-parallel ones, MoE
all-to-alls, context-parallel K/V exchanges): exposed even inside a compute span, as the simulator's
summary counts them (simulator/summary.py)."""


def pipeline_bubble(step_time_s: float, compute_s: float, exposed_comm_s: float) -> tuple[float, float]:
    """(bubble_time_s, bubble_fraction) of one rank: the one definition of the pipeline bubble.

    The bubble is the part of the step in which the rank neither computes (forward, backward,
    recompute, optimizer: ``compute_s``) nor waits on tensor/data-parallel communication that nothing
    hides (``exposed_comm_s``). bubble_fraction = bubble_time_s / step_time_s. Works in any unit."""
    bubble_s = step_time_s - compute_s - exposed_comm_s
    if bubble_s <= NOISE * step_time_s:  # float rounding of sums over thousands of spans is not a bubble
        bubble_s = 0.0
    return bubble_s, (bubble_s / step_time_s if step_time_s > 0 else 0.0)


def merge_intervals(starts_us: np.ndarray, ends_us: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Union of intervals as sorted disjoint ``(starts, ends)`` (touching intervals merge)."""
    if len(starts_us) == 0:
        return np.empty(0), np.empty(0)
    order = np.argsort(starts_us, kind="stable")
    starts, ends = np.asarray(starts_us, float)[order], np.asarray(ends_us, float)[order]
    reach = np.maximum.accumulate(ends)
    # an interval opens a new group when it starts after everything before it has ended
    new_group = np.concatenate(([True], starts[1:] > reach[:-1]))
    return starts[new_group], np.maximum.reduceat(ends, np.flatnonzero(new_group))


def union_us(starts_us: np.ndarray, ends_us: np.ndarray) -> float:
    """Total length covered by a set of intervals."""
    merged_starts, merged_ends = merge_intervals(starts_us, ends_us)
    return float((merged_ends - merged_starts).sum())


def exposed_us(comm: pd.DataFrame, compute: pd.DataFrame) -> float:
    """Time covered by ``comm`` spans and not by ``compute`` spans: |C ∪ K| - |K|."""
    import pandas as pd

    both = _covered_us(pd.concat([comm, compute]))
    exposed = both - _covered_us(compute)
    return exposed if exposed > NOISE * both else 0.0


def rank_breakdown_us(
    step_frame: pd.DataFrame, step_time_us: float, overlapped: Collection[str] = ()
) -> pd.DataFrame:
    """Per rank of one step (µs): ``rank, compute, exposed_comm, exposed_comm:STREAM..., bubble, pipeline``.

    ``pipeline`` is the rank's time in pipeline passes (the critical-rank rule); the other columns
    follow the module docstring, so compute + exposed_comm + bubble = step time on every rank.
    ``overlapped``: blocking streams whose collectives this source hides under compute (a prediction
    with ``tp_comm_overlap``: its summary's ``overlapped_streams``)."""
    import pandas as pd

    blocking = BLOCKING_STREAMS - set(overlapped)
    is_compute = step_frame["kind"].isin(schema.COMPUTE_KINDS)
    exposed_streams = sorted(set(step_frame.loc[~is_compute, "stream"].tolist()) - {PIPELINE_STREAM})
    rows = []
    for rank, events in step_frame.groupby("rank", sort=True):
        compute = events[events["kind"].isin(schema.COMPUTE_KINDS)]
        comm = events[~events["kind"].isin(schema.COMPUTE_KINDS) & (events["stream"] != PIPELINE_STREAM)]
        waits = comm[comm["stream"].isin(blocking)]
        busy = pd.concat([compute, waits])  # the pass computing or waiting on a blocking collective
        busy_us = _covered_us(busy)
        row = {"rank": int(rank), "compute": busy_us - _covered_us(waits)}
        for stream in exposed_streams:
            mine = comm[comm["stream"] == stream]
            if stream in blocking:
                row[f"exposed_comm:{stream}"] = _covered_us(mine)
            else:  # data parallel: exposed where neither compute nor a blocking wait hides it
                row[f"exposed_comm:{stream}"] = exposed_us(mine, busy)
        row["exposed_comm"] = sum(row[f"exposed_comm:{stream}"] for stream in exposed_streams)
        row["bubble"] = pipeline_bubble(step_time_us, row["compute"], row["exposed_comm"])[0]
        row["pipeline"] = float(compute.loc[compute["kind"].isin(PIPELINE_KINDS), "dur_us"].sum())
        rows.append(row)
    return pd.DataFrame(rows, columns=["rank", "compute", *[f"exposed_comm:{x}" for x in exposed_streams],
                                       "exposed_comm", "bubble", "pipeline"])


def _covered_us(spans: pd.DataFrame) -> float:
    """Length of the union of ``spans``."""
    return union_us(spans["start_us"].to_numpy(), (spans["start_us"] + spans["dur_us"]).to_numpy())


def critical_rank(per_rank: pd.DataFrame) -> int:
    """The rank whose pipeline passes keep it busiest (``rank_breakdown_us`` rows); lowest on a tie."""
    return int(per_rank.loc[per_rank["pipeline"].idxmax(), "rank"])


def step_bubble(step_frame: pd.DataFrame, overlapped: Collection[str] = ()) -> tuple[float, float]:
    """(bubble_time_us, bubble_fraction) of one step of one source: its critical rank's."""
    if len(step_frame) == 0:
        return 0.0, 0.0
    step_us = float((step_frame["start_us"] + step_frame["dur_us"]).max())
    per_rank = rank_breakdown_us(step_frame, step_us, overlapped)
    row = per_rank[per_rank["rank"] == critical_rank(per_rank)].iloc[0]
    return pipeline_bubble(step_us, float(row["compute"]), float(row["exposed_comm"]))
