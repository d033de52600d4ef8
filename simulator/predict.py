"""`simulate(scenario)`: run the engine, expand its spans into trace events, summarise.

The engine records compute spans; the tensor-parallel collectives inside them are laid out here,
at their place within each span, so a plan with thousands of layers x micro-batches costs one SimPy
event per pipeline action rather than one per collective. Events of representative ranks are copied
to their symmetric peers (same pipeline position, other tp/dp coordinates) up to `expand_limit` ranks.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from plancast.simulator.costs.stage import StageCost
from plancast.simulator.engine import Engine, Span, StepPlan
from plancast.simulator.engine.fast import Ambiguous, FastEngine, blocker
from plancast.simulator.mesh import Coord
from plancast.simulator.moe_cp_spans import ep_cp_events, ep_cp_times
from plancast.simulator.scenario import Scenario
from plancast.simulator.summary import summarize
from plancast.traces.schema import COLUMNS, SCHEMA_VERSION

if TYPE_CHECKING:  # imported where events are built: a summary alone never loads pandas
    import numpy as np
    import pandas as pd

EXPAND_LIMIT = 256

EngineChoice = Literal["auto", "simpy", "event-free"]
ENGINE_ENV = "PLANCAST_ENGINE"
"""Environment variable choosing the engine where a caller does not: `simpy` keeps the SimPy engine for
every plan, `event-free` refuses a plan the event-free path cannot run; default `auto`."""
ENGINES: tuple[EngineChoice, ...] = ("auto", "simpy", "event-free")


class EngineRefusedError(ValueError):
    """`engine="event-free"` asked for a plan the event-free path cannot run (the message says why)."""


@dataclass(frozen=True)
class Prediction:
    """What the simulator predicts for one step of a scenario."""

    scenario: Scenario
    summary: dict[str, Any]
    built_events: pd.DataFrame | None = None  # None: not requested

    @property
    def events(self) -> pd.DataFrame:
        """Trace schema rows (source "predicted", step 0); an empty table if events were not requested."""
        if self.built_events is not None:
            return self.built_events
        import pandas as pd

        return pd.DataFrame(columns=list(COLUMNS))


def _tp_layout(cost: StageCost, phase: str) -> list[tuple[str, int, float, float]]:
    """(kind, bytes, offset_s, dur_s) of the tp collectives inside one span of `phase`.

    Segments run in order (reverse for backward); each segment's collectives are spread evenly over
    its compute, the first after its first share (Megatron: after attention, after the MLP)."""
    out: list[tuple[str, int, float, float]] = []
    t = 0.0
    backward = phase in ("backward", "backward_input")
    segments = reversed(cost.segments) if backward else cost.segments
    for g in segments:
        colls = g.tp_backward if backward else g.tp_forward
        compute = (
            (g.backward_input_s + (0 if phase == "backward_input" else g.backward_weight_s))
            if backward
            else g.forward_s
        )
        share = compute / max(len(colls), 1)
        for c in colls:
            t += share
            out.append((c.kind, c.bytes, t, c.seconds))
            t += 0.0 if cost.tp_overlap else c.seconds
        if not colls:
            t += compute
    return out


def _phase_layouts(cost: StageCost) -> dict[str, tuple[np.ndarray, ...]]:
    """Per span kind: arrays (kind, bytes, offset_s, dur_s, index) of its tp collectives.

    `index` continues across the phases of one (stage, micro-batch): forward, recompute, backward."""
    import numpy as np

    out: dict[str, tuple[np.ndarray, ...]] = {}
    forward = _tp_layout(cost, "forward")
    per_kind = {k: sum(1 for c in forward if c[0] == k) for k in {c[0] for c in forward}}
    phases = [("forward", forward, 0), ("recompute", forward, 1)]
    phases += [
        (p, _tp_layout(cost, p), 2 if cost.recompute_full else 1) for p in ("backward", "backward_input")
    ]
    for phase, layout, rounds in phases:
        seen: dict[str, int] = {}
        index = []
        for kind, *_ in layout:
            index.append(per_kind.get(kind, 0) * rounds + seen.get(kind, 0))
            seen[kind] = seen.get(kind, 0) + 1
        out[phase] = (
            np.array([c[0] for c in layout], dtype=object),
            np.array([c[1] for c in layout], dtype=np.int64),
            np.array([c[2] for c in layout]),
            np.array([c[3] for c in layout]),
            np.array(index, dtype=np.int64),
        )
    return out


def _tp_events(spans: list[Span], costs: tuple[StageCost, ...]) -> tuple[pd.DataFrame, dict[int, float]]:
    """Tensor-parallel collective events inside the compute spans (vectorised), and each rank's tp time."""
    import numpy as np
    import pandas as pd

    tp_time: dict[int, float] = {}
    if all(not g.tp_forward and not g.tp_backward for c in costs for g in c.segments):
        return pd.DataFrame(), tp_time
    layouts = [_phase_layouts(c) for c in costs]
    pieces = []
    compute = [sp for sp in spans if sp.stream == "compute" and sp.kind in _TP_PHASES]
    by_key: dict[tuple[int, str], list[Span]] = {}
    for sp in compute:
        by_key.setdefault((sp.stage, sp.kind), []).append(sp)
    for (stage, phase), rows in by_key.items():
        kinds, nbytes, offsets, durs, index = layouts[stage][phase]
        if len(kinds) == 0:
            continue
        arr = np.array([(sp.rank, sp.chunk, sp.microbatch, sp.start_s) for sp in rows])
        n, k = len(rows), len(kinds)
        ranks = arr[:, 0].astype(np.int64)
        pieces.append(
            pd.DataFrame(
                {
                    "rank": np.repeat(ranks, k),
                    "stream": "tp",
                    "kind": np.tile(kinds, n),
                    "stage": stage,
                    "chunk": np.repeat(arr[:, 1].astype(np.int64), k),
                    "microbatch": np.repeat(arr[:, 2].astype(np.int64), k),
                    "index": np.tile(index, n),
                    "peer": -1,
                    "start_s": np.repeat(arr[:, 3], k) + np.tile(offsets, n),
                    "dur_s": np.tile(durs, n),
                    "bytes": np.tile(nbytes, n),
                    "flops": 0.0,
                }
            )
        )
        if not costs[stage].tp_overlap:
            for rank, count in zip(*np.unique(ranks, return_counts=True), strict=True):
                tp_time[int(rank)] = tp_time.get(int(rank), 0.0) + float(count) * float(durs.sum())
    return (pd.concat(pieces, ignore_index=True) if pieces else pd.DataFrame()), tp_time


_TP_PHASES = frozenset({"forward", "recompute", "backward", "backward_input"})


_SPAN_COLUMNS = [
    "rank",
    "stream",
    "kind",
    "stage",
    "chunk",
    "microbatch",
    "index",
    "peer",
    "start_s",
    "dur_s",
    "bytes",
    "flops",
]


def _frame(spans: list[Span], tp: pd.DataFrame) -> pd.DataFrame:
    import pandas as pd

    df = pd.DataFrame.from_records(spans, columns=_SPAN_COLUMNS)
    if len(tp):
        df = pd.concat([df, tp[_SPAN_COLUMNS]], ignore_index=True)
    df["start_us"] = df.pop("start_s") * 1e6
    df["dur_us"] = df.pop("dur_s") * 1e6
    df["source"] = "predicted"
    df["step"] = 0
    return df


def _expand(df: pd.DataFrame, s: Scenario, plan: StepPlan) -> pd.DataFrame:
    """Copy representative ranks' events to every symmetric rank (other dp/cp/tp coordinates)."""
    import pandas as pd

    if plan.full_fidelity or s.dp * s.cp * s.tp == 1:
        return df
    grid = plan.grid
    pieces = []
    pp_of = {r: grid.coord(r).pp for r in plan.ranks}
    for dp, cp, tp in ((d, c, t) for d in range(s.dp) for c in range(s.cp) for t in range(s.tp)):
        part = df.copy()
        rank_map = {r: grid.rank(Coord(pp_of[r], dp, tp, cp=cp)) for r in plan.ranks}
        peer_map = {-1: -1, **rank_map}
        part["rank"] = part["rank"].map(rank_map)
        part["peer"] = part["peer"].map(peer_map)
        pieces.append(part)
    return pd.concat(pieces, ignore_index=True)


def _hardware_flops(s: Scenario, costs: tuple[StageCost, ...]) -> float:
    """FLOPs all ranks execute in one step: per micro-batch forward x (1 + 2 backward + recompute)."""
    per_mb = sum(c.forward_flops * (4 if c.recompute_full else 3) for c in costs)
    return per_mb * s.num_microbatches * s.dp * s.cp * s.tp


def _tp_time(passes: dict[tuple[int, str, int], int], costs: tuple[StageCost, ...]) -> dict[int, float]:
    """Each rank's tensor-parallel time inside its compute spans, without building the events: the
    engine's pass counts per (rank, kind, stage) (`Engine.passes`), each kind of pass priced once."""
    per_pass: dict[tuple[int, str], float] = {}
    tp_time: dict[int, float] = {}
    for (rank, kind, stage), count in passes.items():
        if kind not in _TP_PHASES:
            continue
        dur = per_pass.get((stage, kind))
        if dur is None:
            cost = costs[stage]
            layout = _tp_layout(cost, "forward" if kind == "recompute" else kind)
            dur = per_pass[(stage, kind)] = 0.0 if cost.tp_overlap else sum(c[3] for c in layout)
        if dur:
            tp_time[rank] = tp_time.get(rank, 0.0) + dur * count
    return tp_time


def engine_choice(engine: str | None) -> EngineChoice:
    """The engine asked for: `engine`, else $PLANCAST_ENGINE, else auto; a ValueError names the choices."""
    name = engine or os.environ.get(ENGINE_ENV) or "auto"
    for choice in ENGINES:
        if name == choice:
            return choice
    raise ValueError(f"engine {name!r} (${ENGINE_ENV} or --engine): choose one of {', '.join(ENGINES)}")


def run_engine(s: Scenario, full_fidelity: bool = False, engine: str | None = None) -> Engine | FastEngine:
    """One step of `s` through the event-free path where it applies (engine/fast.py), else SimPy; both
    record the same spans (tests/simulator/test_engine_fast.py). Returns the engine, run."""
    choice = engine_choice(engine)
    plan = StepPlan.of(s, full_fidelity)
    if choice != "simpy":
        reason = blocker(plan)
        if reason is None:
            fast = FastEngine(plan)
            try:
                fast.run()
                return fast
            except Ambiguous:
                reason = "the compute and a dp collective meet on the link at one undecidable instant"
        if choice == "event-free":
            raise EngineRefusedError(f"the event-free engine does not apply: {reason}; use --engine auto")
    slow = Engine(s, plan=plan)
    slow.run()
    return slow


def simulate(
    s: Scenario,
    *,
    full_fidelity: bool = False,
    events: bool = True,
    expand_limit: int = EXPAND_LIMIT,
    engine: str | None = None,
) -> Prediction:
    """Predict one training step of `s`. Deterministic: the same scenario gives identical events.
    `engine`: auto (the event-free path where it applies), simpy or event-free (see `engine_choice`)."""
    ran = run_engine(s, full_fidelity, engine)
    plan = ran.plan
    work = ran.spans  # the pipeline transfers apart: the summary needs only their ends
    if events:
        tp_events, tp_time = _tp_events(work, plan.costs)
    else:
        tp_events, tp_time = None, _tp_time(ran.passes, plan.costs)
    summary = summarize(
        s,
        work,
        tp_time,
        plan.p2p_seconds,
        _hardware_flops(s, plan.costs),
        plan.schedule,
        dp_wait_s=ran.dp_wait_s,
        stream_comm_s=ep_cp_times(work, plan.costs, plan.alone),
        transfers=ran.transfers,
    )
    summary["schema_version"] = SCHEMA_VERSION
    summary["simulated_ranks"] = len(plan.ranks)
    if tp_events is None:
        return Prediction(s, summary)
    import pandas as pd

    spans = ran.spans + ran.transfers
    df = _frame(spans, pd.concat([tp_events, ep_cp_events(spans, plan.costs, plan.alone)], ignore_index=True))
    if s.world_size <= expand_limit:
        df = _expand(df, s, plan)
    df = df.sort_values(["rank", "start_us", "stream", "kind", "stage", "microbatch", "index"], kind="stable")
    df = df[list(COLUMNS)].astype(COLUMNS).reset_index(drop=True)
    return Prediction(s, summary, df)


__all__ = [
    "ENGINES",
    "ENGINE_ENV",
    "EngineRefusedError",
    "Prediction",
    "engine_choice",
    "run_engine",
    "simulate",
]
