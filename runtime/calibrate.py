"""`plancast calibrate` at the edge: read run directories, run microbenchmarks; the fitting is pure
(plancast.simulator.calibration, which explains the method).

1. microbenchmarks (`--microbench`, or the local-cpu cache): this machine's device, link, compute
   model and host costs;
2. measured runs (two or more): compute spans refit the compute model, optimizer spans the per-tensor
   optimizer time, each only where the runs vary what it scales with; every run is then scored in-sample
   and held out (leave-one-run-out).

Runs that recorded the machine-speed probe (runtime/microbench_probe.py) are first normalised to one
speed, the median of their probes: each run's times x median / its own probe, so that a run made while
the host's other guests slowed this machine's cores down does not bend the fit (docs/accuracy.md). The
profile's notes name that probe; `plancast compare` applies it as the prediction's reference
(traces/contention.py).

The profile is a `[cluster]` table a scenario uses with `[cluster] preset = "PROFILE.toml"`.
"""

from __future__ import annotations

import dataclasses
import functools
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import tomli_w

from plancast.simulator.calibration.compute import Observation
from plancast.simulator.calibration.observations import (
    collective_means_s,
    compute_observations,
    mean_observations,
    untracked_per_step,
)
from plancast.simulator.calibration.runs import RunData, Score, evaluate, fit_runs, with_fields
from plancast.simulator.cluster import Cluster
from plancast.simulator.loader import load_scenario, parse_scenario
from plancast.simulator.scenario import Scenario
from plancast.traces.contention import machine_speed, probe_or_none
from plancast.traces.store import RunDir, TraceReadError, read_json_object, read_measured

SINGLE_RUN = (
    "calibration needs at least two measured runs that vary what each parameter scales with (e.g. the "
    "same plan at micro-batch 1 and 4): a fit that one run determines reproduces that run exactly and "
    "says nothing about other plans. Add a run, or use `plancast calibrate --microbench` alone"
)


@dataclass(frozen=True)
class Calibration:
    """The calibrated cluster, what was fitted from what, and per run the in-sample / held-out error."""

    cluster: Cluster
    notes: list[str]
    scores: list[Score]


def local_cpu_scenario(world: int = 2) -> Scenario:
    """A tiny scenario on the local-cpu preset, the base a microbenchmark-only profile starts from."""
    return parse_scenario(
        {
            "model": {"preset": "tiny-gpt"},
            "training": {"seq_len": 128, "dtype": "fp32"},
            "cluster": {"preset": "local-cpu", "gpus_per_node": world},
        }
    ).scenario


def run_data(path: Path, cluster: Cluster | None = None) -> tuple[RunData, list[str]]:
    """One run's calibration data (compute medians, measured step time), on `cluster`'s compute model
    and device when given (else the cluster the run was made with), and warnings about the run."""
    s = load_scenario(RunDir(path).scenario_toml).scenario
    if cluster is not None:
        s = s.model_copy(update={"cluster": adopt(s.cluster, cluster)})
    measured = read_measured(RunDir(path))
    if measured.events.empty:
        raise ValueError(f"{path} has no readable measured events; run `plancast run` first")
    if measured.problems:  # as compare: a fit on part of a run, or on rows contradicting their file, misleads
        raise ValueError(f"{path} cannot be fitted on: " + "; ".join(measured.problems))
    obs = mean_observations(compute_observations(measured.events))
    observations = tuple(Observation(int(r.stage), str(r.kind), float(r.seconds)) for r in obs.itertuples())
    step_s = measured_step_s(RunDir(path))
    collectives, untracked = collective_means_s(measured.events), untracked_per_step(measured.events)
    run = RunData(str(path), s, observations, step_s, collectives, untracked)
    return run, []


def measured_step_s(run: RunDir) -> float:
    """``step_time_s`` of ``measured/summary.json``; ValueError naming the file when it is not a number."""
    value = read_json_object(run.measured_summary).get("step_time_s")
    if not isinstance(value, int | float) or isinstance(value, bool) or not value > 0:
        raise ValueError(
            f"{run.measured_summary} has step_time_s {value!r}, not a positive number: the run is damaged "
            "or unfinished; run it again"
        )
    return float(value)


def run_probe(path: Path) -> dict[str, Any] | None:
    """A run's speed probe (``probe_s``, ``workload``: measured/summary.json), None where it has none."""
    try:
        summary = read_json_object(RunDir(path).measured_summary)
    except (TraceReadError, OSError):
        return None
    probe_s, workload = probe_or_none(summary.get("speed_probe_s")), summary.get("speed_probe_workload")
    return {"probe_s": probe_s, "workload": workload} if probe_s and isinstance(workload, str) else None


def runs_probe(runs: list[Path]) -> dict[str, Any] | None:
    """The median probe of the runs that ran the first probing run's workload, None where none probed:
    the one speed a calibration on them is normalised to."""
    probes = [p for p in map(run_probe, runs) if p is not None]
    same = [p["probe_s"] for p in probes if p["workload"] == probes[0]["workload"]] if probes else []
    return {"probe_s": statistics.median(same), "workload": probes[0]["workload"]} if same else None


def at_speed(run: RunData, factor: float) -> RunData:
    """`run` with every measured time x `factor`: as if made at the speed the factor converts to."""
    observations = tuple(dataclasses.replace(o, seconds=o.seconds * factor) for o in run.observations)
    untracked = None if run.untracked is None else (run.untracked[0] * factor, run.untracked[1])
    collectives = {stream: s * factor for stream, s in run.collective_s.items()}
    return dataclasses.replace(
        run,
        observations=observations,
        step_s=run.step_s * factor,
        collective_s=collectives,
        untracked=untracked,
    )


def normalise_speed(runs: list[Path], data: list[RunData]) -> tuple[list[RunData], list[str]]:
    """Each probing run at the runs' median probe (runs_probe); the others as they are; a note."""
    reference = runs_probe(runs)
    if reference is None:
        return data, []
    data, factors = list(data), []
    for i, path in enumerate(runs):
        probe = run_probe(path)
        if probe is not None and probe["workload"] == reference["workload"]:
            factors.append(speed_factor_to(path, probe, reference))
            data[i] = at_speed(data[i], factors[-1])
    return data, [
        f"speed probe: {len(factors)} of {len(runs)} runs normalised to {reference['probe_s'] * 1e3:.3f} ms "
        f"(their times x {min(factors):.3f} to {max(factors):.3f}; runtime/microbench_probe.py)"
    ]


def speed_factor_to(path: Path, probe: dict[str, Any], reference: dict[str, Any]) -> float:
    """What brings `path`'s times to `reference`'s speed: where the run read the probe between steps,
    its median step at each step's own probe over its median step (traces/contention.step_speed: one
    factor for every time of the run, the one that gives that median); else reference / its probe."""
    summary = read_json_object(RunDir(path).measured_summary)
    at_speed_s = machine_speed(summary, reference).get("step_time_at_speed_s")
    step_s = probe_or_none(summary.get("step_time_s"))
    return at_speed_s / step_s if at_speed_s and step_s else reference["probe_s"] / probe["probe_s"]


def adopt(own: Cluster, measured: Cluster) -> Cluster:
    """`own` (a run's cluster: its node shape and tier sizes) with `measured`'s device, compute model,
    innermost link speed and compute slots."""
    tiers = list(own.tiers)
    tiers[0] = tiers[0].model_copy(
        update={
            "bandwidth_GBps": measured.tiers[0].bandwidth_GBps,
            "latency_us": measured.tiers[0].latency_us,
            "efficiency": measured.tiers[0].efficiency,
        }
    )
    return own.model_copy(
        update={
            "gpu": measured.gpu,
            "compute": measured.compute,
            "tiers": tiers,
            "compute_slots_per_node": measured.compute_slots_per_node,
        }
    )


def microbench_profile(s: Scenario, *, refresh: bool = True) -> tuple[Cluster, list[str]]:
    """`s`'s cluster measured on this machine (runtime/local_profile.py; refreshed by default)."""
    from plancast.runtime.local_profile import measured_cluster

    cluster, notes = measured_cluster(s, refresh=refresh)
    return cluster, [f"microbenchmarks: {n}" for n in notes]


def calibrate(runs: list[Path], *, microbench: bool, world: int = 2) -> Calibration:
    """The calibrated cluster (the first run's, or the local-cpu preset's), notes and per-run scores.

    Raises ValueError for a single run (SINGLE_RUN) or runs that determine no parameter."""
    if len(runs) == 1:
        raise ValueError(SINGLE_RUN)
    notes: list[str] = []
    measured: Cluster | None = None
    if microbench:
        base = load_scenario(RunDir(runs[0]).scenario_toml).scenario if runs else local_cpu_scenario(world)
        measured, bench_notes = microbench_profile(base)
        notes += bench_notes
        if not runs:
            return Calibration(measured, notes, [])
    data = []
    for path in runs:
        run, warnings = run_data(path, measured)
        data.append(run)
        notes += warnings
    data, speed_notes = normalise_speed(runs, data)
    notes += speed_notes
    # the host bounds scale with the core share measured with this machine's microbenchmarks
    from plancast.runtime.local_profile import cached_core_share

    fit_on = functools.partial(fit_runs, share=cached_core_share(data[0].scenario))
    fit = fit_on(data)
    notes += fit.notes
    if not fit.fields:
        raise ValueError(
            "these runs determine no parameter, so there is nothing to calibrate:\n  "
            + "\n  ".join(fit.notes)
        )
    cluster = with_fields(data[0].scenario, fit.fields).cluster.model_copy(update={"preset": None})
    return Calibration(cluster, notes, evaluate(data, fit_on))


def write_profile(cluster: Cluster, path: Path, notes: list[str]) -> None:
    """The profile TOML: a commented header, then the [cluster] table."""
    header = "".join(
        f"# {line}\n"
        for note in ["plancast cluster profile (plancast calibrate)", *notes]
        for line in note.splitlines()
    )
    body = tomli_w.dumps({"cluster": cluster.model_dump(mode="json", exclude_none=True)})
    path.write_text(header + body, encoding="utf-8")
