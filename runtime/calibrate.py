"""`plancast calibrate`: a cluster profile fitted to this machine and/or a measured run.

1. microbenchmarks (optional, this machine): peak FLOP/s, memory bandwidth, gloo link latency and
   bandwidth, and the cores ranks share;
2. a measured run (optional): its compute spans refit the compute model (simulator.calibration),
   its collectives (bytes from the prediction, seconds from the measurement) refit the links when
   they span enough message sizes.

The profile is a `[cluster]` table a scenario uses with `[cluster] preset = "PROFILE.toml"`.
"""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import tomli_w

from plancast.simulator.calibration import (
    Measured,
    Observation,
    calibrated_cluster,
    fit_compute,
    optimizer_tensor_overhead_us,
)
from plancast.simulator.cluster import GPU, Cluster
from plancast.simulator.loader import load_scenario, parse_scenario
from plancast.simulator.predict import simulate
from plancast.simulator.scenario import Scenario
from plancast.traces.calibrate import compute_observations, fit_link, median_observations
from plancast.traces.schema import ALIGNMENT_KEY
from plancast.traces.store import RunDir, read_json, read_measured


def local_cpu_scenario(world: int = 2) -> Scenario:
    """A tiny scenario on the local-cpu preset, the base a microbenchmark-only profile starts from."""
    return parse_scenario(
        {
            "model": {"preset": "tiny-gpt"},
            "training": {"seq_len": 128, "dtype": "fp32"},
            "cluster": {"preset": "local-cpu", "gpus_per_node": world},
        }
    ).scenario


def apply_microbench(
    cluster: Cluster, device: dict[str, Any], links: list[dict[str, Any]], cores: int
) -> Cluster:
    """The cluster with this machine's measured peak, memory bandwidth, innermost link and cores."""
    peak_tflops = device["peak_flops"] / 1e12
    gpu = GPU(
        name=f"{cluster.gpu.name} (measured)",
        peak_tflops=dict.fromkeys(cluster.gpu.peak_tflops, peak_tflops),
        hbm_GBps=device["memory_Bps"] / 1e9,
        memory_GiB=cluster.gpu.memory_GiB,
    )
    latency_s, bandwidth = fit_link(pd.DataFrame(links))
    # GEMM size at which efficiency halves, from e(F) = F / (F + F_half) at the two smallest sizes
    # (the small-GEMM regime is what the fit needs; larger sizes mostly show cache effects and noise)
    sizes = sorted(device["matmul_flops"].items())[:2]
    halves = [2.0 * n**3 * max(device["peak_flops"] / f - 1, 0.0) for n, f in sizes]
    half_gflop = statistics.median(halves) / 1e9
    compute = cluster.compute.model_copy(update={"matmul_half_gflop": half_gflop})
    tiers = list(cluster.tiers)
    tiers[0] = tiers[0].model_copy(
        update={"bandwidth_GBps": bandwidth / 1e9, "latency_us": latency_s * 1e6, "efficiency": 1.0}
    )
    return cluster.model_copy(
        update={
            "gpu": gpu,
            "tiers": tiers,
            "compute_slots_per_node": cores,
            "compute": compute,
            "preset": None,
        }
    )


def run_links(predicted: pd.DataFrame, measured: pd.DataFrame, s: Scenario) -> pd.DataFrame:
    """Collective samples from a run: predicted bytes (measured traces carry none) and measured seconds."""
    group = {"tp": s.tp, "dp": s.dp, "pp": 2}
    key = list(ALIGNMENT_KEY)
    comm = measured[measured["stream"] != "compute"]
    steps = sorted(comm["step"].unique())
    pred = predicted[predicted["stream"] != "compute"].drop(columns=["step"])
    rows = []
    for step in steps[1:] or steps:
        joined = comm[comm["step"] == step].merge(
            pred, on=[k for k in key if k != "step"], suffixes=("", "_predicted")
        )
        for r in joined.itertuples(index=False):
            if r.kind == "recv" or r.bytes_predicted <= 0:
                continue  # a recv's span is mostly waiting for its sender
            rows.append(
                {
                    "kind": r.kind,
                    "ranks": group.get(r.stream, 2),
                    "bytes": r.bytes_predicted,
                    "seconds": r.dur_us * 1e-6,
                }
            )
    return pd.DataFrame(rows, columns=["kind", "ranks", "bytes", "seconds"])


def calibrate(runs: list[Path], *, microbench: bool, world: int = 2) -> tuple[Cluster, list[str]]:
    """A calibrated cluster (based on the first run's, or the local-cpu preset) and notes on what was
    fitted from what. Every run's compute spans feed one compute-model fit."""
    notes: list[str] = []
    scenarios = [load_scenario(RunDir(r).scenario_toml).scenario for r in runs]
    base = scenarios[0] if scenarios else local_cpu_scenario(world)
    cluster = base.cluster
    if microbench:
        from plancast.runtime import microbench as mb

        device, links = mb.measure_device(), mb.measure_links(world=max(2, min(world, mb.cores())))
        cluster = apply_microbench(cluster, device, links, mb.cores())
        notes.append(
            f"microbenchmarks: peak {device['peak_flops'] / 1e9:.1f} GFLOP/s, memory "
            f"{device['memory_Bps'] / 1e9:.1f} GB/s, link {cluster.tiers[0].latency_us:.0f} us + "
            f"{cluster.tiers[0].bandwidth_GBps:.2f} GB/s, {mb.cores()} compute slots per node"
        )
    if not runs:
        return cluster, notes
    # every run is refitted on the same (possibly microbenchmarked) cluster
    scenarios = [s.model_copy(update={"cluster": cluster}) for s in scenarios]
    measured_runs, samples = [], []
    optimizer_steps: list[tuple[Scenario, float]] = []
    for path, s in zip(runs, scenarios, strict=True):
        measured = read_measured(RunDir(path))
        notes += [f"warning: {p}" for p in measured.problems]
        if measured.events.empty:
            raise ValueError(f"{path} has no readable measured events; run `plancast run` first")
        obs = median_observations(compute_observations(measured.events))
        observations = tuple(
            Observation(int(r.stage), str(r.kind), float(r.seconds)) for r in obs.itertuples()
        )
        # compute spans are compute only without DTensors: tensor-parallel collectives and FSDP2's
        # gathers run inside them on CPU, so those runs fit the per-collective overheads instead
        if not s.dtensor_params:
            measured_runs.append(Measured(s, observations))
        if not (s.dp > 1 and s.parallelism.zero_stage == 1):  # ZeRO-1's step also broadcasts
            optimizer_steps += [(s, ob.seconds) for ob in observations if ob.kind == "optimizer"]
        samples.append(run_links(simulate(s).events, measured.events, s))
    if not measured_runs:
        raise ValueError(
            "the compute model needs a run without tensor parallelism or ZeRO-2/3 (their compute "
            "spans include collective waits): add e.g. a data- or pipeline-parallel run"
        )
    compute = fit_compute(measured_runs)
    count = sum(len(m.observations) for m in measured_runs)
    notes.append(
        f"compute model fitted on {count} (stage, pass) medians of {len(runs)} run(s): matmul "
        f"{compute.matmul_efficiency:.2f}, attention {compute.attention_efficiency:.2f}, memory "
        f"{compute.memory_efficiency:.2f}, overhead {compute.op_overhead_us:.1f} us/op"
    )
    links_fit: dict[int, tuple[float, float]] = {}
    if len(cluster.tiers) == 1 and not microbench:
        try:
            links_fit[0] = fit_link(pd.concat(samples, ignore_index=True))
            notes.append(
                f"link fitted on the runs' collectives: {links_fit[0][0] * 1e6:.0f} us + "
                f"{links_fit[0][1] / 1e9:.2f} GB/s"
            )
        except ValueError as e:
            notes.append(f"link kept as it was ({e})")
    cluster = calibrated_cluster(scenarios[0], compute, links_fit)
    cluster, optimizer_notes = _fit_optimizer(cluster, optimizer_steps)
    notes += optimizer_notes
    # host overheads, each fitted on the step times of the runs that have the collectives it prices;
    # pipeline transfers first (their runs have clean compute), then the tp and ZeRO-2/3 collectives
    for fields, wanted in (
        (("p2p_overhead_us",), lambda s: s.pp > 1),
        (
            ("tp_collective_overhead_us", "tp_step_overhead_us"),
            lambda s: s.tp > 1 and not s.parallelism.sequence_parallel,
        ),
        (
            ("sp_collective_overhead_us", "sp_step_overhead_us"),
            lambda s: s.tp > 1 and s.parallelism.sequence_parallel,
        ),
        (("dp_collective_overhead_us", "fsdp_step_overhead_us"), lambda s: s.fsdp),
    ):
        chosen = [
            (path, s.model_copy(update={"cluster": cluster}))
            for path, s in zip(runs, scenarios, strict=True)
            if wanted(s)
        ]
        if not chosen:
            continue
        counts = {s.num_microbatches for _, s in chosen}
        if len(fields) == 2 and len(counts) > 1:
            fitted = fit_two_overheads(fields, chosen)
        else:  # one field per family (a second one needs runs that differ in their micro-batch count)
            fitted = {fields[0]: statistics.median(fit_overhead(fields[0], s, path) for path, s in chosen)}
        cluster = cluster.model_copy(update={"compute": cluster.compute.model_copy(update=fitted)})
        notes += [
            f"{field} = {value:.0f} us, fitted on the step time of {len(chosen)} run(s)"
            for field, value in fitted.items()
        ]
    return cluster, notes


def simulated_step_s(s: Scenario, overheads: dict[str, float]) -> float:
    """The simulated step time of `s` with some ComputeModel fields replaced."""
    compute = s.cluster.compute.model_copy(update=overheads)
    scenario = s.model_copy(update={"cluster": s.cluster.model_copy(update={"compute": compute})})
    return float(simulate(scenario, events=False).summary["step_time_s"])


def fit_two_overheads(fields: tuple[str, str], chosen: list[tuple[Path, Scenario]]) -> dict[str, float]:
    """A per-collective and a per-step host overhead (us) together, from the runs' measured median step
    times: Gauss-Newton on the simulated step times (slopes by finite differences, since overlap makes
    them only piecewise linear); runs with different micro-batch counts separate the two. A negative
    solution falls back to the per-collective overhead alone."""
    probes = np.array([1_000.0, 10_000.0])  # finite-difference steps (us), about a tenth of typical values
    measured = np.array(
        [float(read_json(RunDir(path).measured_summary)["step_time_s"]) for path, _ in chosen]
    )

    def steps(x: np.ndarray) -> np.ndarray:
        values = dict(zip(fields, map(float, x), strict=True))
        return np.array([simulated_step_s(s, values) for _, s in chosen])

    x = np.zeros(2)
    for _ in range(8):
        base = steps(x)
        jacobian = np.column_stack([(steps(x + probes * np.eye(2)[i]) - base) / probes[i] for i in range(2)])
        delta, *_ = np.linalg.lstsq(jacobian, measured - base, rcond=None)
        x = np.maximum(x + delta, 0.0)
        if np.all(np.abs(delta) < 1.0):  # converged to within a microsecond
            break
    if not np.any(x):
        return {fields[0]: statistics.median(fit_overhead(fields[0], s, path) for path, s in chosen)}
    return {fields[0]: float(x[0]), fields[1]: float(x[1])}


def _fit_optimizer(cluster: Cluster, steps: list[tuple[Scenario, float]]) -> tuple[Cluster, list[str]]:
    """The optimizer's per-tensor host times, plain and DTensor, each the median over the runs of its
    kind (simulator.calibration.optimizer_tensor_overhead_us); a kind without runs keeps its value."""
    notes, update = [], {}
    for field, dtensor in (("optimizer_overhead_us", False), ("dtensor_optimizer_overhead_us", True)):
        samples = [
            optimizer_tensor_overhead_us(s.model_copy(update={"cluster": cluster}), seconds)
            for s, seconds in steps
            if s.dtensor_params == dtensor
        ]
        if samples:
            update[field] = statistics.median(samples)
            notes.append(
                f"{field} = {update[field]:.0f} us per tensor, from the optimizer spans of "
                f"{len(samples)} (rank, run) median(s)"
            )
    compute = cluster.compute.model_copy(update=update)
    return cluster.model_copy(update={"compute": compute}), notes


def fit_overhead(field: str, s: Scenario, run_path: Path, high_us: float = 50_000.0) -> float:
    """The per-collective host overhead (us) that makes the simulated step time equal the run's measured
    median step time: bisection, since the step time grows with it. 0 when the run is faster anyway."""
    measured = float(read_json(RunDir(run_path).measured_summary)["step_time_s"])

    def step(overhead_us: float) -> float:
        return simulated_step_s(s, {field: overhead_us})

    low, high = 0.0, high_us
    if step(low) >= measured:
        return 0.0
    for _ in range(30):
        mid = (low + high) / 2
        low, high = (mid, high) if step(mid) < measured else (low, mid)
    return (low + high) / 2


def write_profile(cluster: Cluster, path: Path, notes: list[str]) -> None:
    """The profile TOML: a commented header, then the [cluster] table."""
    header = "".join(f"# {line}\n" for line in ["plancast cluster profile (plancast calibrate)", *notes])
    body = tomli_w.dumps({"cluster": cluster.model_dump(mode="json", exclude_none=True)})
    path.write_text(header + body, encoding="utf-8")
