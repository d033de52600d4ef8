"""The host-cost and compute microbenchmarks of runtime/microbench.py, each isolating one cost.

Run inside an initialised gloo job (every rank calls them together). The blocks are the runtime's own
(runtime/model.py), parallelized by the runtime's own functions (runtime/parallel/tp.py, fsdp.py), so
what is measured is what a run executes; only the number of blocks and what wraps them change.
"""

from __future__ import annotations

import dataclasses
import functools
import time
from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh
from torch.distributed.tensor import DTensor, Partial, Replicate, Shard, distribute_tensor

from plancast.runtime.instrument.keys import Completion
from plancast.runtime.instrument.spy import SpyCapture
from plancast.runtime.microbench_pipeline import spin, transfer_host_seconds
from plancast.runtime.microbench_probe import probe_kernels
from plancast.runtime.model import Decoder, ModelConfig
from plancast.runtime.parallel.fsdp import apply_fsdp
from plancast.runtime.parallel.tp import apply_tensor_parallel
from plancast.runtime.timing import interleaved_seconds
from plancast.simulator.scenario import Scenario

BLOCK_COUNTS = (1, 3)  # two model depths: the difference is per block, the rest cancels

OPTIMIZER_TENSORS = (8, 32)  # two tensor counts: the difference is per tensor


def _config(s: Scenario, layers: int) -> ModelConfig:
    return dataclasses.replace(ModelConfig.from_scenario(s), num_layers=layers)


def measure_compute(s: Scenario) -> tuple[dict[str, dict[str, float]], float]:
    """Median forward and backward seconds of the plain model with 1 and 3 blocks (embedding and head
    included, cross-entropy loss as the runtime's last stage), keyed by block count; and the speed
    probe's kernels sampled in turns with them (runtime/microbench_probe.py), their robust wall times
    summed: the probe under the very load and speed these samples saw."""
    tokens = torch.randint(0, s.model.vocab_size, (s.training.micro_batch_size, s.training.seq_len))
    fns: dict[str, Callable[[], Any]] = {}
    for layers in BLOCK_COUNTS:
        model = Decoder(_config(s, layers), 0, layers, has_embedding=True, has_head=True)
        holder: dict[str, torch.Tensor] = {}

        def forward(model: nn.Module = model, holder: dict[str, torch.Tensor] = holder) -> None:
            model.zero_grad(set_to_none=True)
            logits = model(tokens)
            holder["loss"] = nn.functional.cross_entropy(logits.flatten(0, 1), tokens.flatten())

        def backward(holder: dict[str, torch.Tensor] = holder) -> None:
            holder.pop("loss").backward()

        fns[f"{layers}/forward"], fns[f"{layers}/backward"] = forward, backward
    probe = {f"probe/{name}": fn for name, fn in probe_kernels(torch.device("cpu")).items()}
    # forward then backward of each depth, then the probe's kernels, in turns
    typical = interleaved_seconds({**fns, **probe}, repeat=15)
    probe_wall_s = sum(typical.pop(name) for name in probe)
    out: dict[str, dict[str, float]] = {}
    for name, seconds in typical.items():
        depth, kind = name.split("/")
        out.setdefault(depth, {})[kind] = seconds
    return out, probe_wall_s


def instrumented(fn: Callable[[], Any]) -> Callable[[], None]:
    """`fn` under the dispatch capture a CPU run with library collectives (DTensor, FSDP2) is measured
    with (runtime/instrument/spy.py, trainer.library_collectives): every op of such a run passes the
    mode, ~15% of a tiny TP or FSDP2 step (benchmarks/instrument_overhead.py), so the host costs of
    those plans are measured as their runs execute, capture included."""

    def open_collective(*_key: Any) -> Completion:
        row: list[Any] = [None, time.perf_counter(), None]  # as StepRecorder.open_collective's row
        return Completion(time.perf_counter, row)

    def run() -> None:
        capture = SpyCapture.start(open_collective)
        try:
            fn()
        finally:
            capture.finish(0, 0)

    return run


def _block_step(s: Scenario, mesh: DeviceMesh, variant: str, layers: int) -> Callable[[], None]:
    """fwd + bwd of `layers` blocks: plain, tp / sp (tensor-parallel over the job), or fsdp."""
    world = mesh.size()
    # dense grouped-query blocks of the model's width: the runtime shards no MoE block over tp or FSDP
    # (runtime/plan.py refuses both) nor multi-head latent attention over tp (runtime/model_support.py),
    # and tp / sp / fsdp less plain, every variant on the same block, is the per-block host cost either way
    config = dataclasses.replace(_config(s, layers), moe=None, mla=None)
    model = Decoder(config, 0, layers, has_embedding=False, has_head=False)
    seq = s.training.seq_len // world if variant == "sp" else s.training.seq_len
    x = torch.randn(s.training.micro_batch_size, seq, s.model.hidden_size, requires_grad=True)
    if variant in ("tp", "sp"):
        apply_tensor_parallel(model, mesh, sequence_parallel=variant == "sp")
    elif variant == "fsdp":
        apply_fsdp(model, mesh, zero_stage=3)  # ZeRO-3's hooks: a superset of ZeRO-2's

    def step() -> None:
        model(x).sum().backward()

    return step if variant == "plain" else instrumented(step)


def _optimizer_step(s: Scenario, mesh: DeviceMesh, tensors: int, dtensor: bool) -> Callable[[], Any]:
    """One AdamW step over `tensors` hidden x hidden parameters (sharded DTensors or plain tensors)."""
    h = s.model.hidden_size
    params = []
    for _ in range(tensors):
        if dtensor:
            p = nn.Parameter(distribute_tensor(torch.randn(h, h), mesh, [Shard(0)]))
            p.grad = distribute_tensor(torch.randn(h, h), mesh, [Shard(0)])
        else:
            p = nn.Parameter(torch.randn(h // mesh.size(), h))
            p.grad = torch.randn_like(p)
        params.append(p)
    optimizer = torch.optim.AdamW(params, lr=1e-4)
    return instrumented(optimizer.step) if dtensor else optimizer.step


BUSY_S = 0.005  # the sender computes this long after posting: longer than a transfer, as in a pipeline
REPEAT_BUSY = 300  # a heavy tail (most transfers are prompt, some wait a scheduler slice): a mean of many


def _busy_send_seconds(nbytes: int) -> float:
    """The receivers' mean extra wait for an `nbytes` message when its sender computes right after
    posting it, over the same message from a sender that waits for it. Every rank takes part, in pairs
    2k -> 2k+1, as every stage of a pipeline computes at once: gloo moves a message on background
    threads, which wait for a time slice while the ranks keep the cores busy (on this project's 2-core
    machine, 2 ranks: a 0.1-0.3 ms median but a 4-6 ms 90th percentile, so a mean of many samples; 4
    ranks on 2 cores wait longer); where the threads get a core at once the difference is ~0. The
    same value on every rank (all-reduced)."""
    rank, world = dist.get_rank(), dist.get_world_size()
    pairs = world // 2
    x = torch.zeros(max(nbytes // 4, 1))
    waits: dict[bool, list[float]] = {True: [], False: []}
    for i in range(2 * REPEAT_BUSY + 2):
        busy = bool(i % 2)
        dist.barrier()
        if rank >= 2 * pairs:  # an odd world's last rank: it keeps a core busy, as its stage would
            if busy:
                spin(BUSY_S)
        elif rank % 2 == 0:
            work = dist.isend(x, rank + 1)
            if busy:
                spin(BUSY_S)
            if work is not None:
                work.wait()
        else:
            start = time.perf_counter()
            dist.recv(x, rank - 1)
            if i >= 2:  # the first pair warms up
                waits[busy].append(time.perf_counter() - start)
    mine = 0.0
    if waits[True]:
        mine = sum(waits[True]) / len(waits[True]) - sum(waits[False]) / len(waits[False])
    total = torch.tensor([mine])
    dist.all_reduce(total)
    return max(float(total) / max(pairs, 1), 0.0)


def _collectives(mesh: DeviceMesh) -> dict[str, float]:
    """1-element collectives, plain and through DTensor's redistribute (what tensor parallelism calls)."""
    world = mesh.size()
    x = torch.ones(1)
    gathered = [torch.zeros(1) for _ in range(world)]

    def dtensor_all_reduce() -> None:
        DTensor.from_local(x, mesh, [Partial()]).redistribute(mesh, [Replicate()]).to_local()

    def dtensor_all_gather() -> None:
        DTensor.from_local(x, mesh, [Shard(0)]).redistribute(mesh, [Replicate()]).to_local()

    ops: dict[str, Callable[[], Any]] = {
        "all_reduce": functools.partial(dist.all_reduce, x),
        "all_gather": functools.partial(dist.all_gather, gathered, x),
        "dtensor_all_reduce": instrumented(dtensor_all_reduce),
        "dtensor_all_gather": instrumented(dtensor_all_gather),
    }
    return interleaved_seconds(ops, sync=dist.barrier)


def measure_host(s: Scenario, world: int) -> dict[str, Any]:
    """Each host cost in isolation (see the module docstring), rank 0's interquartile means in seconds
    (runtime/timing.py)."""
    mesh = init_device_mesh("cpu", (world,))
    # every variant and depth in one set of turns: the host costs are differences between variants
    # (calibration/microbench.py host_costs), and a machine's speed drifts over the seconds of a
    # measurement. Timed a variant at a time, the FSDP2 slope less the plain one read 7.6-16.8 ms over
    # seven repeats on this project's 2-core VM; in one set of turns 9.5-11.5 ms (docs/accuracy.md).
    variants = ("plain", "tp", "sp", "fsdp")
    steps = {f"{v}/{n}": _block_step(s, mesh, v, n) for v in variants for n in BLOCK_COUNTS}
    timed = interleaved_seconds(steps, sync=dist.barrier)
    blocks = {v: {str(n): timed[f"{v}/{n}"] for n in BLOCK_COUNTS} for v in variants}
    optimizer: dict[str, dict[str, float]] = {}
    for kind in ("plain", "dtensor"):
        steps = {str(n): _optimizer_step(s, mesh, n, kind == "dtensor") for n in OPTIMIZER_TENSORS}
        optimizer[kind] = interleaved_seconds(steps, sync=dist.barrier)
    activation = s.training.micro_batch_size * s.training.seq_len * s.model.hidden_size * 4
    busy = _busy_send_seconds(activation)  # the receivers measured it; every rank has the mean
    executor_s, transport_s = transfer_host_seconds(s)
    return {
        "transfer_host_s": executor_s,
        "transfer_thread_s": transport_s,
        "busy_send_s": busy,
        "collective_s": _collectives(mesh),
        "block_s": blocks,
        "optimizer_s": optimizer,
    }
