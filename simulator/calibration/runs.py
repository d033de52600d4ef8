"""Calibration on measured runs, and how well it generalises.

A parameter is fitted only from runs that vary what it scales with, so that the fit is a measurement
of the parameter and not of one run's leftovers:

- the compute model's efficiency scale and per-op overhead: compute spans of >= 2 runs without DTensor
  parameters at different micro-batch sizes (the FLOPs per op differ, which separates the two);
- the optimizer's per-tensor host time (plain and DTensor): optimizer spans of >= 2 runs of that kind
  whose ranks update different numbers of tensors;
- the host time per layer and micro-batch of a tensor-parallel block (tp_ / sp_layer_overhead_us) or
  an FSDP2 unit (fsdp_unit_overhead_us): what the compute spans of >= 2 such runs at different
  micro-batch sizes hold beyond the fitted compute model, per layer (per unit) and micro-batch. The
  runs' spans wrap the blocks' forward and backward, so DTensor dispatch and FSDP2 hooks are inside
  them; the sizes differ in compute per micro-batch, not in host work, which separates the two.

- the mean time a tensor-parallel collective waits for a late peer (tp_collective_wait_us): the
  measured mean collective of >= 2 tensor-parallel runs at different micro-batch sizes (so different
  collective counts per step) minus the model's mean for the same collectives (link + host overhead).
  An isolated microbenchmark has no such wait; inside a run on shared cores it is ~0.2-0.6 ms a
  collective (benchmarks/cpu_fidelity.py's runs), ~40% of a tp 2 step's collective time. The same for
  DDP's gradient all-reduces (ddp_collective_wait_us, from >= 2 such runs): they run beside the last
  backward, whose compute holds the cores gloo's threads need.

- the host time of a pipeline transfer side (p2p_overhead_us: the executor's bookkeeping and post
  between two actions, and the wait to be scheduled back): the time a rank's step holds no span in
  >= 2 pipeline runs with different transfer counts per step, beyond what the simulation of the same
  run leaves untracked without it; the slope over the transfer count, so that a fixed per-step
  remainder does not pass for a per-transfer cost. The microbenchmark measures the main thread's CPU
  time of it in isolation (~130 us); a run on shared cores leaves ~260 us per side untracked.

Host costs of collectives are never fitted to runs: they come from the microbenchmarks
(microbench.py), as do the host fields no run determines. `evaluate` scores each run in-sample (fitted on
all runs) and held out (fitted on the other runs only, leave-one-run-out).
"""

from __future__ import annotations

import dataclasses
import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from plancast.simulator.calibration.compute import (
    Measured,
    Observation,
    fit_compute,
    model_x,
    optimizer_tensor_overhead_us,
    stage_row,
)
from plancast.simulator.calibration.microbench import bounded
from plancast.simulator.calibration.observations import untracked_per_step
from plancast.simulator.cluster import Cluster
from plancast.simulator.costs.host import optimizer_tensors, rank_stages
from plancast.simulator.predict import simulate
from plancast.simulator.scenario import Scenario

COMPUTE_FIELDS = ("matmul_efficiency", "attention_efficiency", "memory_efficiency", "op_overhead_us")
HOST_FIELDS = (
    "tp_layer_overhead_us",
    "sp_layer_overhead_us",
    "fsdp_unit_overhead_us",
    "fsdp_gather_overhead_us",
    "tp_collective_wait_us",
    "ddp_collective_wait_us",
    "p2p_overhead_us",
)
_LAYER_FIELDS = HOST_FIELDS[:2]  # fitted per field (_host_fit); the FSDP2 pair together (_fsdp_fit)


@dataclass(frozen=True)
class RunData:
    """What calibration needs of one measured run (built at the edge, runtime/calibrate.py)."""

    name: str
    scenario: Scenario
    observations: tuple[Observation, ...]  # mean seconds per (stage, pass), compute only
    step_s: float  # the measured median step time
    collective_s: Mapping[str, float] = dataclasses.field(default_factory=dict)  # per stream (tp, dp)
    untracked: tuple[float, float] | None = None  # (s, transfer sides) a rank's step holds no span


@dataclass(frozen=True)
class Fit:
    """Fitted ComputeModel fields, and per parameter group what determined it or why it was not fitted."""

    fields: dict[str, float]
    notes: tuple[str, ...]


def with_fields(s: Scenario, fields: dict[str, float], cluster: Cluster | None = None) -> Scenario:
    """`s` on `cluster` (default: its own) with some ComputeModel fields replaced."""
    base = cluster or s.cluster
    compute = base.compute.model_copy(update=fields)
    return s.model_copy(update={"cluster": base.model_copy(update={"compute": compute})})


def _compute_fit(runs: Sequence[RunData]) -> tuple[dict[str, float], str]:
    usable = [r for r in runs if not r.scenario.dtensor_params and r.observations]
    sizes = {r.scenario.training.micro_batch_size for r in usable}
    if len(usable) < 2 or len(sizes) < 2:
        return {}, (
            "compute model not fitted: its efficiency scale and per-op overhead separate only over >= 2 "
            "runs without tensor parallelism or ZeRO-2/3 at different micro-batch sizes (given: "
            f"{len(usable)} such run(s), micro-batch size(s) {sorted(sizes) or '-'}); kept from the "
            "microbenchmarks"
        )
    compute = fit_compute(Measured(r.scenario, r.observations) for r in usable)
    fields = {f: float(getattr(compute, f)) for f in COMPUTE_FIELDS}
    return fields, (
        f"compute model fitted on {len(usable)} runs (micro-batch sizes {sorted(sizes)}): matmul "
        f"{compute.matmul_efficiency:.2f}, attention {compute.attention_efficiency:.2f}, memory "
        f"{compute.memory_efficiency:.2f}, {compute.op_overhead_us:.1f} us/op"
    )


def _optimizer_point(r: RunData, fields: dict[str, float]) -> tuple[float, float] | None:
    """(tensors, host us per tensor) of a run's optimizer span, the median over ranks: tensors and
    memory time are the means over pipeline ranks (compute.optimizer_tensor_overhead_us)."""
    seconds = [ob.seconds for ob in r.observations if ob.kind == "optimizer"]
    if not seconds:
        return None
    s = with_fields(r.scenario, fields)
    tensors = float(np.mean([optimizer_tensors(s, rank_stages(s, p)) for p in range(s.pp)]))
    return tensors, optimizer_tensor_overhead_us(s, statistics.median(seconds))


def _optimizer_fit(runs: Sequence[RunData], fields: dict[str, float]) -> tuple[dict[str, float], list[str]]:
    out, notes = {}, []
    for field, dtensor in (("optimizer_overhead_us", False), ("dtensor_optimizer_overhead_us", True)):
        chosen = [
            r
            for r in runs
            if r.scenario.dtensor_params == dtensor
            and not (r.scenario.dp > 1 and r.scenario.parallelism.zero_stage == 1)  # ZeRO-1 also broadcasts
        ]
        points = [p for p in (_optimizer_point(r, fields) for r in chosen) if p is not None]
        counts = {round(n, 3) for n, _ in points}
        if len(points) < 2 or len(counts) < 2:
            notes.append(
                f"{field} not fitted: needs the optimizer spans of >= 2 such runs that update different "
                f"numbers of tensors per rank (given {len(points)} run(s), {len(counts)} count(s)); kept "
                "from the microbenchmarks"
            )
            continue
        per_tensor_us = statistics.median(us for _, us in points)
        out[field], clipped = bounded(field, per_tensor_us)
        notes.append(clipped or f"{field} = {out[field]:.0f} us per tensor, from {len(chosen)} runs")
    return out, notes


def host_field(s: Scenario) -> tuple[str, int] | None:
    """The per-layer host field a run's compute spans determine, and per stage how many units beyond
    its layers carry it (an FSDP2 root unit per chunk, costs/host.py); None for plain runs or both."""
    if s.tp > 1 and not s.fsdp:
        return ("sp_layer_overhead_us" if s.parallelism.sequence_parallel else "tp_layer_overhead_us"), 0
    if s.fsdp and s.tp == 1:
        return "fsdp_unit_overhead_us", 1
    return None


def _host_point(r: RunData, fields: dict[str, float], extra_units: int) -> float | None:
    """Seconds per unit and micro-batch a run's forward + backward spans hold beyond the compute model:
    per stage, (measured - predicted) of its passes over its layers (+ root units), then the mean."""
    s = with_fields(r.scenario, fields)
    x = model_x(s.cluster.compute)
    beyond: dict[int, float] = {}
    for ob in r.observations:
        if ob.kind in ("forward", "backward") and ob.stage >= 0:
            beyond[ob.stage] = (
                beyond.get(ob.stage, 0.0) + ob.seconds - float(stage_row(s, ob.stage, ob.kind) @ x)
            )
    if not beyond:
        return None
    return float(np.mean([b / (s.layer_split[v] + extra_units) for v, b in beyond.items()]))


def _host_fit(
    runs: Sequence[RunData], fields: dict[str, float], share: float
) -> tuple[dict[str, float], list[str]]:
    out, notes = {}, []
    for field in _LAYER_FIELDS:
        chosen = [(r, kind[1]) for r in runs if (kind := host_field(r.scenario)) and kind[0] == field]
        points = [
            (r.scenario.training.micro_batch_size, p)
            for r, extra in chosen
            if (p := _host_point(r, fields, extra)) is not None
        ]
        sizes = {b for b, _ in points}
        if len(points) < 2 or len(sizes) < 2:
            notes.append(
                f"{field} not fitted: needs the compute spans of >= 2 such runs at different micro-batch "
                f"sizes (given {len(points)} run(s), size(s) {sorted(sizes) or '-'}); kept from the "
                "microbenchmarks"
            )
            continue
        value_us = statistics.median(p for _, p in points) * 1e6
        out[field], clipped = bounded(field, value_us, share)
        notes.append(
            clipped
            or f"{field} = {out[field]:.0f} us per layer and micro-batch, from {len(points)} runs "
            f"(micro-batch sizes {sorted(sizes)})"
        )
    return out, notes


def _fsdp_fit(
    runs: Sequence[RunData], fields: dict[str, float], share: float
) -> tuple[dict[str, float], list[str]]:
    """An FSDP2 unit's host time per micro-batch, beyond the compute model: hooks + unshards x the
    unshard's own (two unshards under ZeRO-3, one under ZeRO-2; costs/host.py). A stage is measured by
    >= 2 of its runs at different micro-batch sizes; both stages separate the two fields (ZeRO-3 minus
    ZeRO-2 is one unshard), one stage fits the hooks with the profile's unshard time."""
    per_unit: dict[int, float] = {}
    seen: list[str] = []
    for stage in (2, 3):
        points = [
            (r.scenario.training.micro_batch_size, p)
            for r in runs
            if host_field(r.scenario) == ("fsdp_unit_overhead_us", 1)
            and r.scenario.parallelism.zero_stage == stage
            and (p := _host_point(r, fields, 1)) is not None
        ]
        sizes = sorted({b for b, _ in points})
        seen.append(f"ZeRO-{stage}: {len(points)} run(s), micro-batch size(s) {sizes or '-'}")
        if len(points) >= 2 and len(sizes) >= 2:
            per_unit[stage] = statistics.median(p for _, p in points) * 1e6
    if not per_unit:
        return {}, [
            "fsdp_unit_overhead_us not fitted: needs the compute spans of >= 2 ZeRO-2 or ZeRO-3 runs at "
            f"different micro-batch sizes (given {'; '.join(seen)}); kept from the microbenchmarks"
        ]
    out, notes = {}, []
    if len(per_unit) == 2:
        out["fsdp_gather_overhead_us"], clipped = bounded(
            "fsdp_gather_overhead_us", per_unit[3] - per_unit[2], share
        )
        notes.append(
            clipped
            or f"fsdp_gather_overhead_us = {out['fsdp_gather_overhead_us']:.0f} us per unshard: ZeRO-3's "
            f"per-unit host ({per_unit[3]:.0f} us) minus ZeRO-2's ({per_unit[2]:.0f} us)"
        )
    else:
        notes.append(
            "fsdp_gather_overhead_us not fitted: needs runs of both ZeRO-2 and ZeRO-3 (one unshard apart) "
            f"(given {'; '.join(seen)}); kept from the profile"
        )
    gather_us = out.get("fsdp_gather_overhead_us", runs[0].scenario.cluster.compute.fsdp_gather_overhead_us)
    stage = min(per_unit)  # ZeRO-2 where measured: fewest unshards to take off
    base_us = per_unit[stage] - (2 if stage == 3 else 1) * gather_us
    out["fsdp_unit_overhead_us"], clipped = bounded("fsdp_unit_overhead_us", base_us, share)
    notes.append(
        clipped
        or f"fsdp_unit_overhead_us = {out['fsdp_unit_overhead_us']:.0f} us per unit and micro-batch beyond "
        f"its unshards, from the ZeRO-{stage} runs"
    )
    return out, notes


# stream -> (the field of its collectives' wait, what they are, which runs have them)
_WAITS: dict[str, tuple[str, str, Callable[[Scenario], bool]]] = {
    "tp": ("tp_collective_wait_us", "tensor-parallel", lambda s: s.tp > 1),
    "dp": ("ddp_collective_wait_us", "DDP all-reduce", lambda s: s.dp > 1 and not s.fsdp),
}


def _wait_fit(runs: Sequence[RunData], stream: str, share: float) -> tuple[dict[str, float], list[str]]:
    """A collective's wait in a run (_WAITS): per run, its measured mean collective on `stream` minus
    the model's mean for the same collectives without the wait, then the median over the runs."""
    name, what, has = _WAITS[stream]
    points = []
    for r in runs:
        if not has(r.scenario) or stream not in r.collective_s:
            continue
        events = simulate(with_fields(r.scenario, {name: 0.0})).events
        modelled = events.loc[(events["stream"] == stream) & ~events["kind"].isin(["send", "recv"]), "dur_us"]
        if not modelled.empty:
            points.append(
                (r.scenario.training.micro_batch_size, r.collective_s[stream] - modelled.mean() * 1e-6)
            )
    sizes = sorted({b for b, _ in points})
    if len(points) < 2 or len(sizes) < 2:
        return {}, [
            f"{name} not fitted: needs the collectives of >= 2 {what} runs at different micro-batch sizes "
            f"(given {len(points)} run(s), size(s) {sizes or '-'}); kept from the profile"
        ]
    value, clipped = bounded(name, statistics.median(p for _, p in points) * 1e6, share)
    return {name: value}, [
        clipped
        or f"{name} = {value:.0f} us per {what} collective (its measured mean beyond the link and host "
        f"model), from {len(points)} runs (micro-batch sizes {sizes})"
    ]


def _p2p_fit(
    runs: Sequence[RunData], fields: dict[str, float], share: float
) -> tuple[dict[str, float], list[str]]:
    """p2p_overhead_us: the slope of (measured - simulated) untracked time per rank step over the
    transfer sides per rank step, across pipeline runs (module docstring)."""
    points = []
    for r in runs:
        if r.scenario.pp < 2 or r.untracked is None:
            continue
        simulated = untracked_per_step(
            simulate(with_fields(r.scenario, {**fields, "p2p_overhead_us": 0.0})).events
        )
        if simulated is not None:
            points.append((r.untracked[1], r.untracked[0] - simulated[0]))
    sides = sorted({n for n, _ in points})
    if len(sides) < 2:
        return {}, [
            "p2p_overhead_us not fitted: needs >= 2 pipeline runs with different transfer counts per step "
            f"(given {len(points)} run(s), {sides or '-'} transfer sides per rank); kept from the "
            "microbenchmarks"
        ]
    slope, intercept = np.polyfit([n for n, _ in points], [x for _, x in points], 1)
    value, clipped = bounded("p2p_overhead_us", slope * 1e6, share)
    return {"p2p_overhead_us": value}, [
        clipped
        or f"p2p_overhead_us = {value:.0f} us per transfer side (untracked time beyond the simulation's, "
        f"per transfer, from {len(points)} runs with {', '.join(f'{n:g}' for n in sides)} sides per rank "
        f"step; {intercept * 1e3:+.2f} ms a step left over, not modelled)"
    ]


def fit_runs(runs: Sequence[RunData], share: float = 1.0) -> Fit:
    """Fit every parameter the runs determine (module docstring); the rest keep the clusters' values.
    `share`: the core share the host bounds are scaled by (microbench.bounded)."""
    fields, note = _compute_fit(runs)
    optimizer, notes = _optimizer_fit(runs, fields)
    host, host_notes = _host_fit(runs, fields, share)
    fsdp, fsdp_notes = _fsdp_fit(runs, fields, share)
    tp_wait, tp_notes = _wait_fit(runs, "tp", share)
    dp_wait, dp_notes = _wait_fit(runs, "dp", share)
    p2p, p2p_notes = _p2p_fit(runs, fields, share)
    return Fit(
        {**fields, **optimizer, **host, **fsdp, **tp_wait, **dp_wait, **p2p},
        (note, *notes, *host_notes, *fsdp_notes, *tp_notes, *dp_notes, *p2p_notes),
    )


@dataclass(frozen=True)
class Score:
    """One run's measured step time against its in-sample and held-out predictions."""

    name: str
    measured_s: float
    in_sample_s: float
    held_out_s: float

    @property
    def in_sample_error(self) -> float:
        return self.in_sample_s / self.measured_s - 1

    @property
    def held_out_error(self) -> float:
        return self.held_out_s / self.measured_s - 1


def predicted_step_s(s: Scenario) -> float:
    return float(simulate(s, events=False).summary["step_time_s"])


def evaluate(runs: Sequence[RunData], fit: Callable[[Sequence[RunData]], Fit] = fit_runs) -> list[Score]:
    """Each run predicted with the fit on all runs and with the fit on the other runs (held out)."""
    full = fit(runs).fields
    scores = []
    for i, r in enumerate(runs):
        others = fit([o for j, o in enumerate(runs) if j != i]).fields
        scores.append(
            Score(
                r.name,
                r.step_s,
                predicted_step_s(with_fields(r.scenario, full)),
                predicted_step_s(with_fields(r.scenario, others)),
            )
        )
    return scores


def score_table(scores: Sequence[Score]) -> list[str]:
    """Lines of a table: measured, in-sample and held-out prediction and error per run, and the means."""
    width = max([len(s.name) for s in scores] + [3])
    head = f"{'measured s':>10}  {'in-sample s':>11} {'error':>7}  {'held-out s':>10} {'error':>7}"
    lines = [f"{'run':{width}}  {head}"]
    for s in scores:
        lines.append(
            f"{s.name:{width}}  {s.measured_s:10.4f}  {s.in_sample_s:11.4f} {s.in_sample_error:+7.1%}  "
            f"{s.held_out_s:10.4f} {s.held_out_error:+7.1%}"
        )
    if scores:
        mean_in = float(np.mean([abs(s.in_sample_error) for s in scores]))
        mean_out = float(np.mean([abs(s.held_out_error) for s in scores]))
        lines.append(f"{'mean |error|':{width}}  {'':10}  {'':11} {mean_in:7.1%}  {'':10} {mean_out:7.1%}")
    return lines
