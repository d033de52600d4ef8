"""From step time to the decision: checkpoints, failures, goodput, time-to-train, cost and energy.

Pure arithmetic over a scenario and its predicted step time (nothing here simulates):

- checkpoint bytes: parameters + optimizer state of the whole model, each tensor written once
  (torch.distributed.checkpoint's save planner deduplicates replicated tensors and each rank writes
  its own shards), mixed-precision Adam as in the ZeRO paper (Rajbhandari et al. 2020, sec. 3.1):
  2 bytes of parameters + 12 of optimizer state per parameter; fp32 training 4 + 8;
- write and read time: the job's bytes spread evenly over its nodes, each node at
  `cluster.checkpoint_bandwidth_GBps`;
- the job's mean time between failures: per-GPU MTBF / GPUs (independent failures, so rates add);
- the checkpoint interval: Young 1974 ("A first order approximation to the optimum checkpoint
  interval", CACM 17(9)), tau = sqrt(2 C M) with C the write time and M the job MTBF, unless
  `training.checkpoint_every_steps` fixes it. Young's form is chosen over Daly 2006's higher-order one
  because at the checkpoint costs of training jobs (C << M) they agree to a few percent and Young's
  is the identity tests can check exactly;
- goodput (first-order model of Daly 2006, FGCS 22(3), sec. 2): each segment of tau useful seconds
  costs tau + C; a failure arrives every M wall seconds on average and loses half a segment plus the
  restart R (restart overhead + checkpoint read):
  goodput = tau / (tau + C) * (1 - ((tau + C) / 2 + R) / M);
- time to train = total_tokens / tokens_per_s / goodput; GPU-hours, cost (price per GPU-hour) and
  energy (GPU board power x wall time x PUE; the catalog's TDP is an upper bound, a measured run's
  telemetry gives the power it really drew).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from plancast.simulator.costs.params import stage_parameters
from plancast.simulator.scenario import Scenario

SECONDS_PER_HOUR = 3600.0
SECONDS_PER_DAY = 86400.0
JOULES_PER_MWH = 3.6e9


def state_bytes_per_parameter(dtype: str) -> float:
    """Checkpointed bytes per parameter: the parameters plus Adam's state (ZeRO paper sec. 3.1):
    fp32: 4 (weights) + 8 (momentum, variance); fp16/bf16: 2 (weights) + 12 (fp32 master, momentum,
    variance)."""
    return 12.0 if dtype == "fp32" else 14.0


def checkpoint_parameters(s: Scenario) -> float:
    """Parameters a checkpoint holds, each stored tensor once: tensor-parallel shards add up to the
    whole matrix and data-parallel replicas are deduplicated, but the output layer's copy of a tied
    embedding on the last pipeline stage is a tensor of its own (simulator/costs/params.py)."""
    split = s.layer_split
    stages = len(split)
    return sum(
        stage_parameters(
            s.model, layers, first=v == 0, last=v == stages - 1, tp=1, pipelined=stages > 1, vocab_tp=1
        )
        for v, layers in enumerate(split)
    )


@dataclass(frozen=True, slots=True)
class Checkpoint:
    """What one checkpoint of the plan costs."""

    total_bytes: float
    per_rank_bytes: float  # even share per rank (the save planner balances deduplicated writes)
    write_s: float
    read_s: float


def checkpoint(s: Scenario) -> Checkpoint:
    """Size and write/read time of one checkpoint of `s` (nodes write their shares in parallel)."""
    total = checkpoint_parameters(s) * state_bytes_per_parameter(s.training.dtype)
    per_node_s = total / s.cluster.num_nodes / (s.cluster.checkpoint_bandwidth_GBps * 1e9)
    return Checkpoint(total, total / s.world_size, per_node_s, per_node_s)


def checkpoint_prediction(s: Scenario) -> dict[str, float]:
    """The ``checkpoint`` object of ``predicted/summary.json``: what one save of `s` writes and costs."""
    c = checkpoint(s)
    return {
        "bytes": c.total_bytes,
        "bytes_per_rank": c.per_rank_bytes,
        "write_s": c.write_s,
        "read_s": c.read_s,
    }


def young_interval_s(write_s: float, mtbf_s: float) -> float:
    """Young 1974: the first-order optimum compute time between checkpoints, sqrt(2 C M)."""
    return math.sqrt(2.0 * write_s * mtbf_s)


def goodput_fraction(interval_s: float, write_s: float, restart_s: float, mtbf_s: float) -> float:
    """Useful fraction of wall time (first-order model, Daly 2006 sec. 2), clamped at 0: a job whose
    failures come faster than it can checkpoint and restart makes no progress."""
    lost_s = lost_per_failure_s(interval_s, write_s, restart_s)
    return max(interval_s / (interval_s + write_s) * (1.0 - lost_s / mtbf_s), 0.0)


def lost_per_failure_s(interval_s: float, write_s: float, restart_s: float) -> float:
    """Expected wall time one failure costs: half a segment of compute and checkpoint (failures land
    uniformly within it) plus the restart (Daly 2006 sec. 2, first order)."""
    return (interval_s + write_s) / 2.0 + restart_s


def job_mtbf_s(s: Scenario) -> float:
    """Mean time between failures of the whole job: independent per-GPU failures, rates add."""
    return s.cluster.gpu.mtbf_hours * SECONDS_PER_HOUR / s.world_size


def plan_run(s: Scenario, step_time_s: float, *, power_W: float | None = None) -> dict[str, Any] | None:
    """The `goodput` object of `simulate --json` (None without training.total_tokens). `power_W`, the
    mean board power a measured run's telemetry saw, replaces the catalog's TDP in the energy."""
    tokens = s.training.total_tokens
    if tokens is None or step_time_s <= 0:
        return None
    ckpt = checkpoint(s)
    mtbf_s = job_mtbf_s(s)
    every = s.training.checkpoint_every_steps
    interval_s = every * step_time_s if every is not None else young_interval_s(ckpt.write_s, mtbf_s)
    restart_s = s.cluster.restart_overhead_s + ckpt.read_s
    goodput = goodput_fraction(interval_s, ckpt.write_s, restart_s, mtbf_s)
    tokens_per_step = s.training.global_batch_size * s.training.seq_len
    useful_s = tokens / tokens_per_step * step_time_s
    wall_s = useful_s / goodput if goodput > 0 else None
    gpu = s.cluster.gpu
    watts = power_W if power_W is not None else gpu.board_power_W
    gpu_hours = s.world_size * wall_s / SECONDS_PER_HOUR if wall_s is not None else None
    energy = (
        s.world_size * watts * wall_s * s.cluster.pue / JOULES_PER_MWH
        if wall_s is not None and watts is not None
        else None
    )
    return {
        "total_tokens": tokens,
        "steps": math.ceil(tokens / tokens_per_step),
        "checkpoint_bytes": ckpt.total_bytes,
        "checkpoint_bytes_per_rank": ckpt.per_rank_bytes,
        "checkpoint_write_s": ckpt.write_s,
        "checkpoint_read_s": ckpt.read_s,
        "checkpoint_interval_s": interval_s,
        "checkpoint_interval_steps": interval_s / step_time_s,
        "checkpoint_interval_source": "training.checkpoint_every_steps" if every is not None else "young",
        "job_mtbf_hours": mtbf_s / SECONDS_PER_HOUR,
        "restart_s": restart_s,
        "lost_per_failure_s": lost_per_failure_s(interval_s, ckpt.write_s, restart_s),
        "expected_failures": wall_s / mtbf_s if wall_s is not None else None,
        "goodput_fraction": goodput,
        "useful_days": useful_s / SECONDS_PER_DAY,
        "time_to_train_days": wall_s / SECONDS_PER_DAY if wall_s is not None else None,
        "gpu_hours": gpu_hours,
        "cost_usd": gpu_hours * gpu.price_usd_per_hour
        if gpu_hours is not None and gpu.price_usd_per_hour is not None
        else None,
        "energy_MWh": energy,
        "price_usd_per_gpu_hour": gpu.price_usd_per_hour,
        "power_W": watts,
        "power_source": "telemetry" if power_W is not None else "catalog",
        "pue": s.cluster.pue,
    }


def resized(s: Scenario, gpus: int) -> Scenario:
    """`s` on `gpus` GPUs: num_nodes x gpus_per_node = gpus with the node shape kept (what the run-level
    figures need: node and GPU counts; the plan search also resizes the link tiers)."""
    per_node = min(s.cluster.gpus_per_node, gpus)
    cluster = s.cluster.model_copy(update={"num_nodes": max(gpus // per_node, 1), "gpus_per_node": per_node})
    return s.model_copy(update={"cluster": cluster})


def goodput_curve(s: Scenario, gpu_counts: Sequence[int]) -> list[dict[str, float]]:
    """Goodput of `s`'s checkpoints at Young's interval on each GPU count, at a fixed per-GPU failure
    rate: the job's MTBF falls as 1 / GPUs while a checkpoint's write time falls only as 1 / nodes."""
    rows = []
    for gpus in gpu_counts:
        sized = resized(s, gpus)
        ckpt, mtbf_s = checkpoint(sized), job_mtbf_s(sized)
        interval_s = young_interval_s(ckpt.write_s, mtbf_s)
        restart_s = s.cluster.restart_overhead_s + ckpt.read_s
        rows.append(
            {
                "gpus": float(gpus),
                "job_mtbf_hours": mtbf_s / SECONDS_PER_HOUR,
                "checkpoint_interval_s": interval_s,
                "goodput_fraction": goodput_fraction(interval_s, ckpt.write_s, restart_s, mtbf_s),
            }
        )
    return rows
