"""Step-level figures from the simulated spans: where the time goes, throughput, memory, fit.

Per simulated rank, step time = compute + exposed communication (tp, dp; ep for MoE models, cp under
context parallel) + optimizer + bubble, where the bubble is what is left: time the rank waits on the
pipeline, its point-to-point transfers included (`pipeline_bubble` and the rules in
traces/breakdown.py, the one definition every report uses). The reported breakdown is that of the rank
whose compute stream is busiest (the pipeline's bottleneck).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from plancast.simulator.costs.memory import peak_memory
from plancast.simulator.costs.memory_fit import memory_fit
from plancast.simulator.costs.model_flops import model_flops_per_token
from plancast.simulator.costs.params import count_parameters
from plancast.simulator.scenario import Scenario
from plancast.simulator.schedules import Schedule
from plancast.traces.breakdown import PIPELINE_KINDS, pipeline_bubble, union_us

__all__ = ["PIPELINE_KINDS", "pipeline_bubble", "summarize"]


def _exposed(comm: _Intervals, busy: _Intervals) -> float:
    """Length of the `comm` intervals not covered by the `busy` ones."""
    if not comm.starts:
        return 0.0
    busy_s, busy_e = np.array(busy.starts), np.array(busy.ends)
    both_s = np.concatenate([np.array(comm.starts), busy_s])
    both_e = np.concatenate([np.array(comm.ends), busy_e])
    return union_us(both_s, both_e) - union_us(busy_s, busy_e)


class _Intervals:
    """[start, end] intervals as two flat lists (numpy reads a list of floats far faster than a list of
    pairs)."""

    __slots__ = ("ends", "starts")

    def __init__(self) -> None:
        self.starts: list[float] = []
        self.ends: list[float] = []


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
    stream_comm_s: dict[str, dict[int, float]] | None = None,
    transfers: Sequence[tuple[Any, ...]] = (),
) -> dict[str, Any]:
    """The summary object of the CLI contract (docs/cli.md; plus breakdown details).

    `tp_comm_s[rank]`: tensor-parallel time inside that rank's compute spans (on the critical path
    unless overlapped); `p2p_s(rank, peer)`: one pipeline transfer's duration (unused since transfers
    count in the bubble; kept for the callers); `hardware_flops`: FLOPs
    the whole cluster executes in the step (recompute included); `dp_wait_s[rank]`: time inside that
    rank's compute spans spent waiting for ZeRO-2/3 gathers (communication, not compute);
    `stream_comm_s["ep"|"cp"][rank]`: blocking MoE all-to-all / context-parallel K/V time inside that
    rank's compute spans (simulator/moe_cp_spans.py), reported as exposed "ep" / "cp" communication
    (the keys appear for MoE models and for cp > 1); `transfers`: pipeline send/recv spans kept apart
    from `spans` (only their ends count, for the step time; they may also be in `spans`)."""
    step_time, per_rank = _breakdowns(s, spans, tp_comm_s, dp_wait_s or {}, stream_comm_s or {}, transfers)
    critical = _critical_rank(per_rank)
    c = per_rank.get(critical, _Breakdown(0.0, 0.0, {}, 0.0, 0.0))
    _, bubble_fraction = pipeline_bubble(step_time, c.compute + c.optimizer, sum(c.exposed.values()))
    pp_rank, mem = peak_memory(s, schedule)
    return {
        "step_time_s": step_time,
        "bubble_fraction": bubble_fraction,
        "compute_time_s": c.compute,
        "exposed_comm_time_s": sum(c.exposed.values()),
        "exposed_comm_s": dict(c.exposed),
        "overlapped_streams": overlapped_streams(s),
        "optimizer_time_s": c.optimizer,
        "bubble_time_s": c.bubble,
        "critical_rank": critical,
        **memory_fit(s, mem),
        "peak_memory_pp_rank": pp_rank,
        "num_parameters": count_parameters(s.model),
        **_throughput(s, step_time, hardware_flops),
        "num_microbatches": s.num_microbatches,
        "world_size": s.world_size,
        "degrees": {"tp": s.tp, "pp": s.pp, "dp": s.dp, "vpp": s.vpp}
        | ({"ep": s.ep} if s.model.is_moe else {})
        | ({"cp": s.cp} if s.cp > 1 else {}),
    }


class _RankSpans:
    """One rank's spans as the breakdown reads them: intervals per stream, and busy sums."""

    __slots__ = ("busy", "dp", "opt", "pipe", "tp")

    def __init__(self) -> None:
        self.busy = _Intervals()  # compute stream
        self.dp = _Intervals()
        self.tp = _Intervals()
        self.pipe = 0.0  # pipeline passes (forward, backward, ...)
        self.opt = 0.0  # the rest of the compute stream (optimizer)


def _by_rank(
    spans: Sequence[tuple[Any, ...]], transfers: Sequence[tuple[Any, ...]] = ()
) -> tuple[float, dict[int, _RankSpans]]:
    """The step time (the last end of a span or transfer) and the spans of each rank, in one pass (a
    plain loop: the columns as numpy arrays cost more to build than the sums they serve)."""
    step_time = max((sp[8] + sp[9] for sp in transfers), default=0.0 if not spans else -math.inf)
    by_rank: dict[int, _RankSpans] = {}
    pipeline_kinds = frozenset(PIPELINE_KINDS)
    for rank, stream, kind, _st, _ch, _mb, _order, _peer, start, dur, _bytes, _flops in spans:
        end = start + dur
        if end > step_time:  # noqa: PLR1730 (a comparison, not a builtin call, per span)
            step_time = end
        mine = by_rank.get(rank)
        if mine is None:
            mine = by_rank[rank] = _RankSpans()
        if stream == "compute":
            into = mine.busy
            if kind in pipeline_kinds:
                mine.pipe += dur
            else:
                mine.opt += dur
        elif stream == "dp":
            into = mine.dp
        elif stream == "tp":
            into = mine.tp
        else:
            continue
        into.starts.append(start)
        into.ends.append(end)
    return step_time, by_rank


def _breakdowns(
    s: Scenario,
    spans: Sequence[tuple[Any, ...]],
    tp_comm_s: dict[int, float],
    dp_wait_s: dict[int, float],
    stream_comm_s: dict[str, dict[int, float]],
    transfers: Sequence[tuple[Any, ...]],
) -> tuple[float, dict[int, _Breakdown]]:
    """The step time and every simulated rank's breakdown (compute, optimizer, exposed comm, bubble)."""
    step_time, by_rank = _by_rank(spans, transfers)
    extra_streams = [k for k, on in (("ep", s.model.is_moe), ("cp", s.cp > 1)) if on]
    per_rank: dict[int, _Breakdown] = {}
    for r in sorted(by_rank):
        mine = by_rank[r]
        tp, wait = tp_comm_s.get(r, 0.0), dp_wait_s.get(r, 0.0)
        dp_exposed = _exposed(mine.dp, mine.busy) + wait
        tp_out = _exposed(mine.tp, mine.busy)  # sequence-parallel norm sums
        exposed = {"tp": tp + tp_out, "dp": dp_exposed}  # pipeline transfers count in the bubble
        inner = {k: stream_comm_s.get(k, {}).get(r, 0.0) for k in extra_streams}
        exposed.update(inner)
        compute = mine.pipe - tp - wait - sum(inner.values())
        bubble, _ = pipeline_bubble(step_time, compute + mine.opt, sum(exposed.values()))
        per_rank[r] = _Breakdown(compute, mine.opt, exposed, bubble, mine.pipe)
    return step_time, per_rank


def _critical_rank(per_rank: dict[int, _Breakdown]) -> int:
    """The rank whose compute stream is busiest; among ranks busy to within float noise (1e-9
    relative: the same passes summed in another order), the lowest."""
    if not per_rank:
        return 0
    most = max(b.busy for b in per_rank.values())
    return min(r for r, b in per_rank.items() if b.busy >= most * (1 - 1e-9))


def _throughput(s: Scenario, step_time: float, hardware_flops: float) -> dict[str, float]:
    """Model and hardware TFLOP/s per GPU, MFU and HFU (PaLM appendix B: model FLOPs exclude recompute,
    hardware FLOPs include it), and tokens per second."""
    tokens = s.training.global_batch_size * s.training.seq_len
    model_flops = model_flops_per_token(s) * tokens
    peak = s.cluster.gpu.peak_flops(s.training.dtype)
    model_tflops = model_flops / s.world_size / step_time / 1e12 if step_time else 0.0
    hw_tflops = hardware_flops / s.world_size / step_time / 1e12 if step_time else 0.0
    return {
        "model_tflops_per_gpu": model_tflops,
        "hardware_tflops_per_gpu": hw_tflops,
        "mfu": model_tflops * 1e12 / peak,
        "hfu": hw_tflops * 1e12 / peak,
        "tokens_per_s": tokens / step_time if step_time else 0.0,
    }


def overlapped_streams(s: Scenario) -> list[str]:
    """Blocking streams whose collectives the plan hides under compute (traces/breakdown.py)."""
    return ["tp"] if s.parallelism.tp_comm_overlap and s.tp > 1 else []
