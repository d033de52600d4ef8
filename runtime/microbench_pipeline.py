"""The pipeline executor's host time per transfer (runtime/parallel/pp.py), measured as a run spends it.

One of the host-cost microbenchmarks (runtime/microbench_host.py): rank pairs run a 2-stage GPipe step
whose stages do almost nothing through the real executor and recorder, and each rank runs the same two
stages as one, alone; the difference in the main thread's CPU time is what the pipeline adds per
transfer side (posting, bookkeeping), and gloo's own threads' CPU time is read beside it.
"""

from __future__ import annotations

import statistics
import time
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from plancast.runtime.schedstat import thread_times
from plancast.simulator.scenario import Scenario

TRANSFER_MICROBATCHES = 8
TRANSFER_STEPS = 9  # a median of 9 steps of 32 transfer sides each
TRANSFER_GAP_S = 0.001  # what an odd world's last rank computes at each of the pairs' barriers


def spin(seconds: float) -> None:
    """One rank's compute for `seconds`: small matmuls on its one thread, as a rank's forward runs."""
    a, end = torch.ones(64, 64), time.perf_counter() + seconds
    while time.perf_counter() < end:
        a @ a


def transport_thread_seconds() -> float:
    """CPU time so far of this process's gloo threads (its TCP event loops); 0 where /proc has no
    schedstat (runtime/schedstat.py)."""
    times = thread_times("gloo")
    return 0.0 if times is None else times.cpu_s


def stand_in(s: Scenario, pp: int, dp: int) -> Scenario:
    """A plan of `s`'s activation and vocabulary sizes and nothing else (the stages are stand-ins, so
    only the plan's shape matters): a plain two-layer model over pp x dp ranks, TRANSFER_MICROBATCHES
    micro-batches per pipeline."""
    from plancast.simulator.loader import parse_scenario

    h, t = s.model.hidden_size, s.training
    data = {
        "model": {
            "hidden_size": h,
            "num_hidden_layers": 2,
            "num_attention_heads": 1,
            "intermediate_size": 4 * h,
            "vocab_size": s.model.vocab_size,
        },
        "training": {
            "seq_len": t.seq_len,
            "micro_batch_size": t.micro_batch_size,
            "global_batch_size": t.micro_batch_size * TRANSFER_MICROBATCHES * dp,
            "dtype": "fp32",
        },
        "parallelism": {"pipeline_parallel_degree": pp, "data_parallel_degree": dp},
        "cluster": {"preset": "local-cpu", "gpus_per_node": pp * dp},
    }
    return parse_scenario(data).scenario


class _Stages:
    """Near-empty stages: the first scales its input, the last scales and applies the head (for the
    loss); held together, one stage does both."""

    def __init__(self, s: Scenario) -> None:
        self.scale = nn.Parameter(torch.ones(()))
        self.head = nn.Parameter(torch.randn(s.model.hidden_size, s.model.vocab_size) * 0.02)

    def first(self, x: torch.Tensor) -> torch.Tensor:
        return x * self.scale

    def last(self, x: torch.Tensor) -> torch.Tensor:
        return (x * self.scale) @ self.head

    def both(self, x: torch.Tensor) -> torch.Tensor:
        return self.last(self.first(x))

    def runners(self, plan: Any) -> dict[int, Any]:
        from plancast.runtime.parallel.pp import StageRunner

        fns = {(0, False): self.first, (1, True): self.last, (0, True): self.both}
        params = [self.scale, self.head]
        return {
            c.stage: StageRunner(c.stage, c.chunk, fns[(c.stage, c.has_head)], params) for c in plan.chunks
        }


def _step_seconds(scenario: Scenario, stages: _Stages, alone: bool) -> tuple[float, float]:
    """(main-thread CPU, gloo threads' CPU) of one executor step of `scenario` on this rank, medians."""
    from plancast.runtime.instrument import StepRecorder, choose_capture, default_timer
    from plancast.runtime.parallel.pp import PipelineExecutor
    from plancast.runtime.plan import rank_plan

    t, cpu = scenario.training, torch.device("cpu")
    shape = (t.micro_batch_size, t.seq_len, scenario.model.hidden_size)
    tokens = [torch.randint(0, scenario.model.vocab_size, shape[:2]) for _ in range(TRANSFER_MICROBATCHES)]
    inputs = [torch.randn(shape) for _ in range(TRANSFER_MICROBATCHES)]
    rank = dist.get_rank()
    plan = rank_plan(scenario, rank, scenario.pp * scenario.dp)
    recorder = StepRecorder(
        rank, default_timer(cpu), choose_capture(False, "cpu", "dispatch"), device_type="cpu"
    )
    executor = PipelineExecutor(plan, stages.runners(plan), recorder, shape, torch.float32, cpu)
    times, transport = [], []
    for step in range(TRANSFER_STEPS + 1):
        if not alone:
            dist.barrier()
        recorder.begin_step()
        start, moved = time.thread_time(), transport_thread_seconds()
        executor.run(inputs, tokens)
        times.append(time.thread_time() - start)
        transport.append(transport_thread_seconds() - moved)
        recorder.finish(step)
    return statistics.median(times[1:]), statistics.median(transport[1:])


def transfer_host_seconds(s: Scenario) -> tuple[float, float]:
    """Host CPU time per pipeline transfer on each side: the executor's (posting included), what a
    pipeline adds to a rank's thread beyond its passes; and gloo's threads', which move the message
    beside it. The pairs' main-thread CPU time minus the single rank's, over the pair's transfer sides
    (4 per micro-batch: a send and a receive each way); gloo's threads' over the pair's steps (the
    single rank moves no message). The pairs' means, on every rank."""
    rank, world = dist.get_rank(), dist.get_world_size()
    pairs = world // 2
    mine = [0.0, 0.0]
    if rank < 2 * pairs:
        stages = _Stages(s)
        split_s, moved_s = _step_seconds(stand_in(s, 2, pairs), stages, alone=False)
        whole_s, _ = _step_seconds(stand_in(s, 1, world), stages, alone=True)
        mine = [max(split_s - whole_s / 2, 0.0), moved_s]
    else:  # an odd world's last rank: keeps a core busy meanwhile, at the pairs' barriers
        for _ in range(TRANSFER_STEPS + 1):
            dist.barrier()
            spin(TRANSFER_GAP_S)
    total = torch.tensor(mine)
    dist.all_reduce(total)
    executor_s, transport_s = (float(v) / max(2 * pairs, 1) / (2 * TRANSFER_MICROBATCHES) for v in total)
    return executor_s, transport_s
