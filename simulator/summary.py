"""Step-level figures from the simulated spans: where the time goes, throughput, memory, fit.

Per simulated rank, step time = compute + exposed communication (tp, dp, pp) + optimizer + bubble,
where the bubble is what is left: time the compute stream waits for other stages (`pipeline_bubble`,
the one definition every report uses). The reported breakdown is that of the rank whose compute
stream is busiest (the pipeline's bottleneck).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from plancast.simulator.costs.memory import GiB, peak_memory
from plancast.simulator.costs.ops import model_flops_per_token
from plancast.simulator.costs.params import count_parameters
from plancast.simulator.scenario import Scenario
from plancast.simulator.schedules import Schedule

PIPELINE_KINDS = ("forward", "backward", "backward_input", "backward_weight", "recompute")


def _union_length(starts: np.ndarray, ends: np.ndarray) -> float:
    """Total length covered by intervals (merge overlapping ones)."""
    if len(starts) == 0:
        return 0.0
    order = np.argsort(starts, kind="stable")
    s, e = starts[order], np.maximum.accumulate(ends[order])
    gaps = np.maximum(s[1:] - e[:-1], 0.0)
    return float(e[-1] - s[0] - gaps.sum())


def _exposed(comm: np.ndarray, busy: np.ndarray) -> float:
    """Length of comm intervals not covered by busy intervals (both arrays of [start, end] rows)."""
    if len(comm) == 0:
        return 0.0
    both = np.vstack([comm, busy]) if len(busy) else comm
    return _union_length(both[:, 0], both[:, 1]) - (
        _union_length(busy[:, 0], busy[:, 1]) if len(busy) else 0.0
    )


def pipeline_bubble(step_time_s: float, compute_s: float, exposed_comm_s: float) -> tuple[float, float]:
    """(bubble_time_s, bubble_fraction) of one rank: the one definition of the pipeline bubble.

    The bubble is the part of the step in which the rank's compute stream neither computes (forward,
    backward, recompute, optimizer: `compute_s`) nor waits on communication that nothing hides
    (`exposed_comm_s`): it waits for other pipeline stages. bubble_fraction = bubble_time_s /
    step_time_s. With uniform stages, no communication cost and no optimizer it is GPipe's
    (p - 1)/(m + p - 1) (Huang et al. 2019 sec. 2.3). `simulate` reports it for the critical rank
    (the busiest compute stream); a measured step's per-rank breakdown uses the same function."""
    bubble_s = max(step_time_s - compute_s - exposed_comm_s, 0.0)
    return bubble_s, (bubble_s / step_time_s if step_time_s > 0 else 0.0)


@dataclass(frozen=True, slots=True)
class _Breakdown:
    """Where one rank's step goes (seconds)."""

    compute: float
    optimizer: float
    exposed: dict[str, float]
    bubble: float
    busy: float  # compute-stream time of the pipeline passes


def summarize(
    s: Scenario,
    spans: Sequence[tuple[Any, ...]],
    tp_comm_s: dict[int, float],
    p2p_s: Callable[[int, int], float],
    hardware_flops: float,
    schedule: Schedule | None = None,
    dp_wait_s: dict[int, float] | None = None,
) -> dict[str, Any]:
    """The summary object of the CLI contract (docs/cli.md; plus breakdown details).

    `tp_comm_s[rank]`: tensor-parallel time inside that rank's compute spans (on the critical path
    unless overlapped); `p2p_s(rank, peer)`: one pipeline transfer's duration; `hardware_flops`: FLOPs
    the whole cluster executes in the step (recompute included); `dp_wait_s[rank]`: time inside that
    rank's compute spans spent waiting for ZeRO-2/3 gathers (communication, not compute)."""
    rank_col = np.fromiter((sp[0] for sp in spans), dtype=np.int64, count=len(spans))
    start = np.fromiter((sp[8] for sp in spans), dtype=np.float64, count=len(spans))
    dur = np.fromiter((sp[9] for sp in spans), dtype=np.float64, count=len(spans))
    is_compute = np.fromiter((sp[1] == "compute" for sp in spans), dtype=bool, count=len(spans))
    is_pipe = np.fromiter((sp[2] in PIPELINE_KINDS for sp in spans), dtype=bool, count=len(spans))
    is_opt = is_compute & ~is_pipe
    is_dp = np.fromiter((sp[1] == "dp" for sp in spans), dtype=bool, count=len(spans))
    ranks = sorted(set(rank_col.tolist()))
    step_time = float((start + dur).max()) if spans else 0.0
    size = max(ranks, default=0) + 1
    pipe_busy = np.bincount(rank_col[is_pipe], weights=dur[is_pipe], minlength=size)
    opt_busy = np.bincount(rank_col[is_opt], weights=dur[is_opt], minlength=size)
    recv_exposed = np.zeros(size)
    for sp in spans:
        if sp[2] == "recv" and sp[9] > 0:
            recv_exposed[sp[0]] += min(sp[9], p2p_s(sp[0], sp[7]))

    per_rank: dict[int, _Breakdown] = {}
    for r in ranks:
        mine = rank_col == r
        busy = np.column_stack([start, start + dur])[mine & is_compute]
        dp = np.column_stack([start, start + dur])[mine & is_dp] if is_dp.any() else np.empty((0, 2))
        tp, wait = tp_comm_s.get(r, 0.0), (dp_wait_s or {}).get(r, 0.0)
        dp_exposed = (_exposed(dp, busy) if len(dp) else 0.0) + wait
        exposed = {"tp": tp, "dp": dp_exposed, "pp": float(recv_exposed[r])}
        pipe, opt = float(pipe_busy[r]), float(opt_busy[r])
        compute = pipe - tp - wait
        bubble, _ = pipeline_bubble(step_time, compute + opt, sum(exposed.values()))
        per_rank[r] = _Breakdown(compute, opt, exposed, bubble, pipe)
    critical = max(per_rank, key=lambda r: per_rank[r].busy) if per_rank else 0
    c = per_rank.get(critical, _Breakdown(0.0, 0.0, {}, 0.0, 0.0))
    _, bubble_fraction = pipeline_bubble(step_time, c.compute + c.optimizer, sum(c.exposed.values()))

    tokens = s.training.global_batch_size * s.training.seq_len
    model_flops = model_flops_per_token(s) * tokens
    peak = s.cluster.gpu.peak_flops(s.training.dtype)
    model_tflops = model_flops / s.world_size / step_time / 1e12 if step_time else 0.0
    hw_tflops = hardware_flops / s.world_size / step_time / 1e12 if step_time else 0.0
    pp_rank, mem = peak_memory(s, schedule)
    limit = s.cluster.gpu.memory_GiB
    usable = s.cluster.gpu.usable_memory_GiB
    return {
        "step_time_s": step_time,
        "bubble_fraction": bubble_fraction,
        "compute_time_s": c.compute,
        "exposed_comm_time_s": sum(c.exposed.values()),
        "exposed_comm_s": dict(c.exposed),
        "optimizer_time_s": c.optimizer,
        "bubble_time_s": c.bubble,
        "critical_rank": critical,
        "peak_memory_gib": mem.total / GiB,
        "peak_memory_pp_rank": pp_rank,
        "memory_gib": mem.gib(),
        "gpu_memory_gib": limit,
        "usable_memory_gib": usable,
        "fits_in_memory": mem.total / GiB <= usable,
        "num_parameters": count_parameters(s.model),
        "model_tflops_per_gpu": model_tflops,
        "hardware_tflops_per_gpu": hw_tflops,
        "mfu": model_tflops * 1e12 / peak,
        "hfu": hw_tflops * 1e12 / peak,
        "tokens_per_s": tokens / step_time if step_time else 0.0,
        "num_microbatches": s.num_microbatches,
        "world_size": s.world_size,
        "degrees": {"tp": s.tp, "pp": s.pp, "dp": s.dp, "vpp": s.vpp},
    }
