"""Which cluster, how many GPUs? Search plans across GPU counts and cluster types, rank the whole run.

For each (cluster preset, GPU count) the plan search of `simulator.sweep` runs with a small number of
finalists (the work stays bounded: sizes x clusters x finalists engine runs); every finalist then gets
the run-level figures of `simulator.goodput` (goodput under failures, time to train, cost, energy) and
all of them are ranked together by step time, time to train, cost or energy. The Pareto front is the
set of plans no other plan beats on both time to train and cost.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from plancast.simulator.cluster import Cluster
from plancast.simulator.goodput import plan_run, resized
from plancast.simulator.scenario import Scenario
from plancast.simulator.sweep import MapFn, Ranked, sweep
from plancast.simulator.sweep_axes import Pins
from plancast.simulator.sweep_inputs import plan_warnings, why_empty
from plancast.simulator.sweep_space import NO_PINS

RANK_KEYS: dict[str, str] = {
    "step": "step_time_s",
    "time-to-train": "time_to_train_days",
    "cost": "cost_usd",
    "energy": "energy_MWh",
}
"""--rank-by choice -> the row key it sorts on (ascending)."""

RUN_SETTINGS = ("checkpoint_bandwidth_GBps", "restart_overhead_s", "pue")
"""Cluster keys that describe the site rather than the machine: carried over to every preset searched."""


@dataclass(frozen=True, slots=True)
class Candidate:
    """One finalist plan on one (cluster, GPU count), with its run-level figures."""

    cluster: str
    gpu: str
    gpus: int
    ranked: Ranked
    goodput: dict[str, Any] | None
    warnings: tuple[str, ...] = ()
    """What `plancast validate` warns about the plan beyond its scenario (sweep_inputs.plan_warnings)."""

    def row(self) -> dict[str, Any]:
        g = self.goodput or {}
        return {
            "cluster": self.cluster,
            "gpu": self.gpu,
            "gpus": self.gpus,
            **self.ranked.row(),
            **{k: g.get(k) for k in ("goodput_fraction", "time_to_train_days", "gpu_hours", "cost_usd")},
            "energy_MWh": g.get("energy_MWh"),
            "checkpoint_interval_s": g.get("checkpoint_interval_s"),
            "warnings": list(self.warnings),
        }


@dataclass(frozen=True)
class ClusterSearch:
    """Every finalist of every (cluster, size), ranked, and the rows on the time/cost Pareto front."""

    rank_by: str
    rows: list[dict[str, Any]]
    enumerated: int
    skipped: list[str]  # "(cluster, gpus): why" for sizes with no plan
    fits: int = 0  # plans within memory over every (cluster, size)


def with_cluster(base: Scenario, preset: str) -> Scenario:
    """`base` on the catalog cluster `preset` (the site settings of RUN_SETTINGS kept)."""
    site = {k: getattr(base.cluster, k) for k in RUN_SETTINGS}
    return base.model_copy(update={"cluster": Cluster.model_validate({"preset": preset, **site})})


def own_cluster_keys(base: Scenario, preset: str) -> list[str]:
    """The [cluster] keys (dotted) where `base`'s cluster, written over the catalog cluster `preset`,
    differs from that preset's at the same node count, site settings (RUN_SETTINGS) aside: what the
    other presets a search tries do not take (a calibrated compute model, a price, a tier)."""
    own = base.cluster
    catalog = Cluster.model_validate({"preset": preset, "num_nodes": own.num_nodes}).model_dump()
    mine = own.model_dump()
    for dump in (catalog, mine):  # resolved scenarios drop the preset name and size every tier
        dump["preset"] = None
        dump["tiers"] = [{**tier, "size": None} for tier in dump["tiers"]]
    return [k for k in _differing(mine, catalog, "cluster") if k.split(".")[1] not in RUN_SETTINGS]


def _differing(a: Any, b: Any, at: str) -> list[str]:
    """Dotted paths under `at` where the nested dumps `a` and `b` differ (lists compared whole)."""
    if isinstance(a, dict) and isinstance(b, dict):
        return [k for key in a.keys() | b.keys() for k in _differing(a.get(key), b.get(key), f"{at}.{key}")]
    return [] if a == b else [at]


def pareto_front(rows: Sequence[Mapping[str, Any]], x: str, y: str) -> list[int]:
    """Indices of the rows no other row beats on both `x` and `y` (lower is better; identical points
    kept once; rows missing either value, None or NaN, are left out)."""
    points = sorted((r[x], r[y], i) for i, r in enumerate(rows) if _known(r.get(x)) and _known(r.get(y)))
    front, best_y = [], math.inf
    for _, value_y, i in points:
        if value_y < best_y:
            front.append(i)
            best_y = value_y
    return sorted(front)


def _known(value: Any) -> bool:
    return value is not None and not (isinstance(value, float) and math.isnan(value))


def _check_rank_by(base: Scenario, rank_by: str) -> None:
    """ValueError for an unknown rank key, or a run-level key without training.total_tokens."""
    if rank_by not in RANK_KEYS:
        raise ValueError(f"--rank-by {rank_by}: choose one of {', '.join(RANK_KEYS)}")
    if rank_by != "step" and base.training.total_tokens is None:
        raise ValueError(
            f"--rank-by {rank_by} needs the size of the run: set training.total_tokens "
            "(e.g. total_tokens = 300e9) in the scenario"
        )


def search(
    base: Scenario,
    gpu_counts: Sequence[int],
    clusters: Sequence[str | None],
    *,
    rank_by: str = "step",
    finalists: int = 4,
    progress: Callable[[int, int, str], None] | None = None,
    max_memory_gib: float | None = None,
    map_fn: MapFn = map,
    pins: Pins = NO_PINS,
    own: str | None = None,
) -> ClusterSearch:
    """Search `gpu_counts` x `clusters` (None: the base scenario's own cluster) and rank every finalist;
    `max_memory_gib` caps each plan's memory per GPU and `map_fn` spreads each search as in `sweep`.
    `own`: the catalog preset the scenario's cluster is written over; a search on it keeps the keys the
    scenario sets there (own_cluster_keys), as a search on the scenario's own cluster.

    Raises ValueError for an unknown rank key, or a run-level key without training.total_tokens."""
    _check_rank_by(base, rank_by)
    combos = [(c, n) for c in clusters for n in gpu_counts]
    candidates: list[Candidate] = []
    skipped: list[str] = []
    enumerated = fits = 0
    for done, (preset, gpus) in enumerate(combos):
        name = preset or own or base.cluster.preset or "scenario cluster"
        label = f"{name} x {gpus}"
        if progress is not None:
            progress(done, len(combos), label)
        scenario = base if preset is None or preset == own else with_cluster(base, preset)
        try:
            result = sweep(
                scenario, gpus, finalists=finalists, max_memory_gib=max_memory_gib, map_fn=map_fn, pins=pins
            )
        except ValueError as e:
            skipped.append(f"{label}: {e}")
            continue
        enumerated += result.enumerated
        fits += result.fits
        if not result.finalists:
            limit = min(scenario.cluster.gpu.memory_GiB, max_memory_gib or scenario.cluster.gpu.memory_GiB)
            skipped.append(f"{label}: {why_empty(scenario, gpus, result.enumerated, limit)}")
        warned = plan_warnings(scenario, gpus, [r.plan for r in result.finalists])
        for ranked, warnings in zip(result.finalists, warned, strict=True):
            planned = ranked.plan.apply(resized(scenario, gpus))
            run = plan_run(planned, ranked.step_time_s or 0.0)
            candidates.append(Candidate(name, scenario.cluster.gpu.name, gpus, ranked, run, tuple(warnings)))
    if progress is not None:
        progress(len(combos), len(combos), "ranking")
    rows = [c.row() for c in candidates]
    key = RANK_KEYS[rank_by]
    rows.sort(key=lambda r: (math.inf if r.get(key) is None else r[key], r["step_time_s"] or math.inf))
    front = set(pareto_front(rows, "time_to_train_days", "cost_usd"))
    for i, row in enumerate(rows):
        row["pareto"] = i in front
    return ClusterSearch(rank_by, rows, enumerated, skipped, fits)
