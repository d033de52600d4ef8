"""A cluster profile from this machine's microbenchmarks (the dict runtime/microbench.py measures).

Pure: every number comes from the measurement dict; nothing is fitted to a step time.

- GPU entry: peak = the best fp32 matmul FLOP/s at the scenario's GEMM shapes, HBM bandwidth = a
  64 MiB copy; `matmul_half_gflop` from how much slower the smaller GEMMs run (e(F) = F / (F + F_half)).
- Link (innermost tier): alpha-beta fitted on gloo all-reduce / all-gather / send timings (links.py).
- Compute model: efficiency scale and per-op overhead fitted (compute.fit_compute) on the plain model's
  forward and backward with 1 and with 3 blocks: two "runs" that differ in what the overhead scales
  with (op count) and what the efficiencies scale with (FLOPs, bytes).
- Host costs (simulator/costs/host.py), each from the microbenchmark that isolates it; a difference of
  two measurements (3 blocks minus 1, 32 tensors minus 8) so the fixed parts cancel, minus what the
  simulator already charges for the same work (the plain block's compute, measured alongside, and the
  collectives), clipped to its bound.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Any

import pandas as pd

from plancast.simulator.calibration.compute import Measured, Observation, fit_compute, layer_row, model_x
from plancast.simulator.calibration.links import fit_link, ring_terms
from plancast.simulator.cluster import GPU, Cluster, ComputeModel
from plancast.simulator.costs.ops import DTYPE_BYTES
from plancast.simulator.costs.params import chunk_tensor_bytes
from plancast.simulator.costs.tp_comm import tp_collectives
from plancast.simulator.engine import optimizer_bytes_per_param
from plancast.simulator.scenario import Scenario


@dataclass(frozen=True, slots=True)
class Bound:
    """The physically possible range of a host parameter (us) and why."""

    high_us: float
    why: str


# Upper bounds for host costs, CPU time on one core (a Python-level op ~10-50 us idle), loose enough for
# noise and tight enough to catch a value that is not the cost it names (e.g. a step's leftovers); on a
# shared core they scale with the measured core share (`bounded`); a value beyond one is clipped, reported.
BOUNDS: dict[str, Bound] = {
    "op_overhead_us": Bound(500.0, "a PyTorch CPU operator's dispatch costs ~5-50 us (torch dispatcher)"),
    "p2p_overhead_us": Bound(
        1_000.0, "the executor's bookkeeping and gloo post per transfer side: ~0.1 ms of Python, never 1 ms"
    ),
    "p2p_thread_us": Bound(1_000.0, "an event loop's wake-ups and a message's copy: ~0.1 ms, never 1 ms"),
    "p2p_busy_delay_us": Bound(
        12_000.0,
        "a runnable thread waits at most one scheduler period for its slice: Linux CFS sched_latency 6 ms "
        "x (1 + log2 cores) (kernel/sched/fair.c), 12 ms on two cores",
    ),
    "tp_collective_overhead_us": Bound(10_000.0, "one DTensor redistribute: ~50 Python-level ops"),
    "tp_collective_wait_us": Bound(
        12_000.0,
        "a peer ready to run waits at most one scheduler period for its slice: Linux CFS sched_latency "
        "6 ms x (1 + log2 cores) (kernel/sched/fair.c), 12 ms on two cores",
    ),
    "ddp_collective_wait_us": Bound(
        12_000.0,
        "a transport thread ready to run waits at most one scheduler period for its slice: Linux CFS "
        "sched_latency 6 ms x (1 + log2 cores) (kernel/sched/fair.c), 12 ms on two cores",
    ),
    "sp_collective_overhead_us": Bound(10_000.0, "one DTensor redistribute: ~50 Python-level ops"),
    "tp_layer_overhead_us": Bound(
        100_000.0, "a block's forward + backward: ~100 DTensor ops at <= 1 ms each"
    ),
    "sp_layer_overhead_us": Bound(100_000.0, "as tp_layer_overhead_us"),
    "fsdp_unit_overhead_us": Bound(50_000.0, "four hooks per unit, each ~100 Python-level ops"),
    "fsdp_gather_overhead_us": Bound(20_000.0, "one unshard hook: ~50 Python-level ops and a copy-out"),
    "optimizer_overhead_us": Bound(1_000.0, "AdamW's per-tensor loop: ~10 ops per tensor"),
    "dtensor_optimizer_overhead_us": Bound(10_000.0, "the same ~10 ops, each through DTensor dispatch"),
}


MIN_CORE_SHARE = 1 / 32  # a rank sharing its core with at most 31 other runnable threads


def core_share(record: dict[str, Any]) -> float:
    """The share of a core a microbenchmark rank got: its compute thread's CPU time over wall time
    (runtime/microbench.py), in [MIN_CORE_SHARE, 1]; 1 for a record from before it was measured."""
    return min(max(float(record.get("cpu_share", 1.0)), MIN_CORE_SHARE), 1.0)


def bounded(field: str, value_us: float, share: float = 1.0) -> tuple[float, str | None]:
    """`value_us` within [0, BOUNDS[field] / share]; a note when it had to be clipped.

    The bounds are CPU time on a core of one's own; a rank that gets `share` of its core (measured,
    core_share) takes 1/share of the wall time for the same work, so the bound scales with it."""
    high_us = BOUNDS[field].high_us / max(share, MIN_CORE_SHARE)
    if value_us > high_us:
        return (
            high_us,
            f"{field}: measured {value_us:.0f} us > bound {high_us:.0f} us ({BOUNDS[field].why}; "
            f"at a core share of {share:.2f}); clipped",
        )
    return max(value_us, 0.0), None


def _variant(s: Scenario, layers: int, tp: int = 1) -> Scenario:
    """`s` as the microbenchmark's single-process model: `layers` blocks, no parallelism but `tp`."""
    model = s.model.model_copy(update={"num_hidden_layers": layers})
    parallelism = s.parallelism.model_copy(
        update={
            "tensor_parallel_degree": tp,
            "pipeline_parallel_degree": 1,
            "data_parallel_degree": 1,
            "virtual_stages_per_rank": 1,
            "pipeline_layer_split": None,
            "zero_stage": 0,
        }
    )
    return s.model_copy(update={"model": model, "parallelism": parallelism})


MEASURED = " (measured)"
"""Appended to the device's name by a profile measured on this machine (`is_measured`)."""


def is_measured(cluster: Cluster) -> bool:
    """Whether `cluster` is a profile the microbenchmarks measured (profile_cluster), not a preset's."""
    return cluster.gpu.name.endswith(MEASURED)


def _gpu(cluster: Cluster, device: dict[str, Any]) -> tuple[GPU, float]:
    """The measured device and the GEMM size (GFLOP) at which a GEMM reaches half the peak."""
    peak = float(device["peak_flops"])
    gpu = GPU(
        name=f"{cluster.gpu.name}{MEASURED}",
        peak_tflops=dict.fromkeys(cluster.gpu.peak_tflops, peak / 1e12),
        hbm_GBps=float(device["memory_Bps"]) / 1e9,
        memory_GiB=cluster.gpu.memory_GiB,
    )
    halves = []
    for shape, flops in device["matmul_flops"].items():
        m, k, n = (int(d) for d in shape.split("x"))
        size = 2.0 * m * k * n
        if flops < peak:  # e(F) = F / (F + F_half) relative to the best shape
            halves.append(size * (peak / flops - 1))
    return gpu, (statistics.median(halves) / 1e9 if halves else 0.0)


def _fit_compute(s: Scenario, compute: dict[str, dict[str, float]]) -> ComputeModel:
    runs = [
        Measured(
            _variant(s, int(layers)),
            tuple(Observation(0, kind, float(seconds)) for kind, seconds in passes.items()),
        )
        for layers, passes in compute.items()
    ]
    return fit_compute(runs)


def _link_s(kind: str, ranks: int, nbytes: float, link: tuple[float, float]) -> float:
    steps, volume = ring_terms(kind, ranks, nbytes)
    return steps * link[0] + volume / link[1]


def _slope_s(by_count: dict[str, float]) -> float:
    """Seconds per extra unit between the two counts measured (e.g. blocks 1 and 3)."""
    (n0, t0), (n1, t1) = sorted((int(n), float(t)) for n, t in by_count.items())
    return (t1 - t0) / (n1 - n0)


def _layer_s(s: Scenario, compute: ComputeModel, tp: int) -> float:
    """The simulator's compute seconds of one block, forward + backward, on one of `tp` ranks."""
    variant = _variant(s, 1, tp)
    x = model_x(compute)
    return float((layer_row(variant, "forward") + layer_row(variant, "backward")) @ x)


def host_costs(
    s: Scenario, host: dict[str, Any], compute: ComputeModel, link: tuple[float, float], world: int
) -> dict[str, float]:
    """Every host-cost field (us) from the host microbenchmarks, before bounds (module docstring)."""
    coll = host["collective_s"]
    blocks = {variant: _slope_s(by) for variant, by in host["block_s"].items()}

    def plain_s(tp: int) -> float:
        """A block's compute on one of `tp` ranks: the plain block measured in the same interleaved
        samples as the others (a shared machine's load moves between microbenchmarks by more than
        the host costs sought), scaled by the simulator's ratio of sharded to whole compute."""
        return blocks["plain"] * _layer_s(s, compute, tp) / _layer_s(s, compute, 1)

    dtype_bytes = DTYPE_BYTES[s.training.dtype]
    shape = {
        "micro_batch_size": s.training.micro_batch_size,
        "seq_len": s.training.seq_len,
        "hidden_size": s.model.hidden_size,
        "vocab_size": s.model.vocab_size,
        "tp": world,
        "dtype_bytes": dtype_bytes,
    }
    fields = {
        "p2p_overhead_us": host["transfer_host_s"] * 1e6,
        "p2p_busy_delay_us": host.get("busy_send_s", 0.0) * 1e6,  # absent from profiles before it
        "p2p_thread_us": host.get("transfer_thread_s", 0.0) * 1e6,  # 0 where /proc has no schedstat
        "tp_collective_overhead_us": (coll["dtensor_all_reduce"] - coll["all_reduce"]) * 1e6,
        "sp_collective_overhead_us": (coll["dtensor_all_gather"] - coll["all_gather"]) * 1e6,
    }
    for name, sp in (("tp", False), ("sp", True)):
        collectives = [
            c
            for phase in ("forward", "backward")
            for c in tp_collectives("layer", phase, sequence_parallel=sp, **shape)  # type: ignore[arg-type]
        ]
        per = fields[f"{name}_collective_overhead_us"] * 1e-6
        comm_s = sum(_link_s(c.kind, world, c.bytes, link) + per for c in collectives)
        fields[f"{name}_layer_overhead_us"] = (blocks[name] - plain_s(world) - comm_s) * 1e6
    # one FSDP2 unit per block, measured under ZeRO-3: it gathers its parameters twice (forward and
    # backward) and reduce-scatters the gradients once (gloo runs it as an all-reduce, runtime/parallel/
    # fsdp.py); ZeRO-2 plans use the same per-unit host time until calibration on runs of both stages
    # separates the unshards (fsdp_gather_overhead_us, simulator/calibration/runs.py)
    unit_bytes = sum(chunk_tensor_bytes(s.model, 1, layers=1, has_embedding=False, has_head=False))
    fsdp_comm_s = 2 * _link_s("all_gather", world, unit_bytes, link) + _link_s(
        "all_reduce", world, unit_bytes, link
    )
    fields["fsdp_unit_overhead_us"] = (blocks["fsdp"] - plain_s(1) - fsdp_comm_s) * 1e6
    fields["fsdp_gather_overhead_us"] = 0.0  # the unshards are inside the unit's time measured above
    # per tensor: an optimizer step moves each parameter's bytes (engine.optimizer_bytes_per_param)
    h = s.model.hidden_size
    for field, kind in (("optimizer_overhead_us", "plain"), ("dtensor_optimizer_overhead_us", "dtensor")):
        params = h * h / world
        memory_s = (
            params * optimizer_bytes_per_param(s) / (s.cluster.gpu.hbm_GBps * 1e9 * compute.memory_efficiency)
        )
        fields[field] = (_slope_s(host["optimizer_s"][kind]) - memory_s) * 1e6
    return fields


def profile_cluster(s: Scenario, record: dict[str, Any]) -> tuple[Cluster, list[str]]:
    """`s`'s cluster measured: device, innermost link, compute model, host costs, cores; and notes."""
    cluster = s.cluster
    gpu, half_gflop = _gpu(cluster, record["device"])
    link = fit_link(pd.DataFrame(record["links"]))
    tiers = list(cluster.tiers)
    tiers[0] = tiers[0].model_copy(
        update={"bandwidth_GBps": link[1] / 1e9, "latency_us": link[0] * 1e6, "efficiency": 1.0}
    )
    base = cluster.compute.model_copy(update={"matmul_half_gflop": half_gflop})
    measured = cluster.model_copy(update={"gpu": gpu, "tiers": tiers, "compute": base, "preset": None})
    compute = _fit_compute(s.model_copy(update={"cluster": measured}), record["compute"])
    notes = [
        f"device: peak {gpu.peak_tflops['fp32'] * 1e3:.1f} GFLOP/s (best GEMM of the scenario's shapes), "
        f"memory {gpu.hbm_GBps:.1f} GB/s; link {link[0] * 1e6:.0f} us + {link[1] / 1e9:.2f} GB/s; "
        f"{record['cores']} core(s)",
        f"compute model (plain model, 1 and 3 blocks): matmul {compute.matmul_efficiency:.2f}, attention "
        f"{compute.attention_efficiency:.2f}, memory {compute.memory_efficiency:.2f}, "
        f"{compute.op_overhead_us:.1f} us/op",
    ]
    share = core_share(record)
    notes.append(
        f"core share of a rank during the microbenchmarks: {share:.2f} (CPU / wall time of its compute; "
        f"host-cost bounds x {1 / share:.1f})"
    )
    update = {}
    for field, value in host_costs(
        s.model_copy(update={"cluster": measured}), record["host"], compute, link, int(record["world"])
    ).items():
        update[field], clipped = bounded(field, value, share)
        high_us = BOUNDS[field].high_us / share
        notes.append(clipped or f"{field} = {update[field]:.0f} us (bound {high_us:.0f})")
    compute = compute.model_copy(update=update)
    return measured.model_copy(
        update={"compute": compute, "compute_slots_per_node": int(record["cores"])}
    ), notes


def bound_violations(compute: ComputeModel, share: float = 1.0) -> list[str]:
    """Host fields of `compute` outside their bounds at core share `share` (none after profile_cluster
    / calibration)."""
    scale = 1 / max(share, MIN_CORE_SHARE)
    return [
        f"{field} = {getattr(compute, field):.0f} us > {bound.high_us * scale:.0f} us"
        for field, bound in BOUNDS.items()
        if getattr(compute, field) > bound.high_us * scale
    ]
