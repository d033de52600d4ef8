"""One rank's training loop: build the model chunks, parallelize them, run instrumented steps.

Everything is passed explicitly (no process-group singletons): the caller initialises the default
process group; ``Trainer`` builds a ``DeviceMesh`` from the simulator's ``RankGrid`` and derives
every group from it.
"""

from __future__ import annotations

import contextlib
import functools
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any, cast

import pandas as pd
import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh
from torch.distributed.tensor import DTensor, Partial, Replicate
from torch.nn.parallel import DistributedDataParallel
from torch.nn.utils import parametrize

from plancast.runtime.instrument import (
    CpuCapture,
    SpanKey,
    StepEvents,
    StepRecorder,
    choose_capture,
    default_timer,
)
from plancast.runtime.memory import (
    ActivationAccount,
    bytes_now,
    memory_timeline_points,
    peak_memory,
    state_bytes,
)
from plancast.runtime.model import Decoder, ModelConfig, microbatch, synthetic_batch
from plancast.runtime.moe import is_expert_param, set_aux_loss_scale
from plancast.runtime.parallel.cp import apply_context_parallel, shard_sequence
from plancast.runtime.parallel.dp import (
    allreduce_split_grads,
    backward_with_sync,
    localize_dtensor_params,
    wrap_ddp,
    zero1_optimizer,
)
from plancast.runtime.parallel.ep import (
    ExpertParams,
    apply_expert_parallel,
    scale_expert_grads,
)
from plancast.runtime.parallel.fsdp import apply_fsdp
from plancast.runtime.parallel.pp import PipelineExecutor, StageRunner
from plancast.runtime.parallel.tp import apply_tensor_parallel, local_seq_len
from plancast.runtime.plan import Chunk, RankPlan, rank_plan
from plancast.runtime.precision import autocast_for, compute_dtype, fsdp_policy, fused_adamw
from plancast.simulator.costs.tp_comm import moe_on_sequence_shards
from plancast.simulator.mesh import GroupName
from plancast.simulator.scenario import Scenario

LEARNING_RATE = 1e-3
"""AdamW learning rate of the synthetic run (the scenario describes cost, not convergence)."""
OPTIMIZER = SpanKey("optimizer")


@dataclass
class StepOutput:
    """What one step produced on this rank."""

    loss: float | None
    """Mean loss over this rank's micro-batches (last pipeline stage only, else None)."""
    recorded: StepEvents
    """The measured events, resolved; their table is built on first use of ``events``."""
    work_end_s: float = 0.0
    """``time.perf_counter()`` when the step's device work was done, before the recorder read the
    profiler (``StepRecorder.finish``): the end of the step as ``plancast run`` times it."""

    @property
    def events(self) -> pd.DataFrame:
        """The step's measured events (schema table), built outside the step on first use."""
        return self.recorded.frame()


@dataclass
class ChunkState:
    """One model chunk on this rank, parallelized, with its optimizer."""

    chunk: Chunk
    model: Decoder
    optimizer: torch.optim.Optimizer
    runner: StageRunner
    tie_group: dist.ProcessGroup | None
    tie_peer: int


def library_collectives(scenario: Scenario) -> bool:
    """Whether collectives are issued where only the profiler sees them: DTensor (tp > 1), FSDP2 (ZeRO-2/3).

    Everything else is timed directly: compute and send/recv spans, the tied-embedding all-reduce,
    DDP's gradient buckets (a comm hook) and ZeRO-1's broadcasts (runtime/parallel/dp.py), so plain
    DDP, ZeRO-1 and pipeline plans never start the profiler, most of the instrumentation cost on
    small models (benchmarks/instrument_overhead.py).
    """
    return scenario.dtensor_params


class Trainer:
    """Builds this rank's share of the plan and runs steps (the default process group must exist)."""

    def __init__(
        self,
        scenario: Scenario,
        rank: int,
        world_size: int,
        device: torch.device,
        *,
        instrument: bool = True,
        recorder: StepRecorder | None = None,
        cpu_capture: CpuCapture = "dispatch",
    ) -> None:
        """``instrument=False`` never starts the profiler; ``recorder`` replaces the default recorder
        (one whose ``enabled`` is False leaves DDP and ZeRO without timing hooks); ``cpu_capture`` is
        how a CPU run captures library collectives (runtime/instrument/capture.py)."""
        self.scenario, self.device = scenario, device
        self.plan: RankPlan = rank_plan(scenario, rank, world_size)
        grid = self.plan.grid
        self.mesh: DeviceMesh = init_device_mesh(
            device.type, grid.mesh_shape, mesh_dim_names=grid.mesh_dim_names
        )
        self.recorder = recorder or StepRecorder(
            rank,
            default_timer(device),
            choose_capture(instrument and library_collectives(scenario), device.type, cpu_capture),
            device_type=device.type,
        )
        self.activations = ActivationAccount()
        self._activations_counted = False
        self._timeline: list[list[Any]] = []
        # the step whose memory is read after each compute span: on GPU the second (the optimizer's
        # states exist from the first step on), on CPU the first, the one whose activations are counted
        self._timeline_step = 0 if self.device.type != "cuda" else min(1, scenario.training.steps - 1)
        self.groups = self._moe_cp_groups()
        self._hsdp_mesh: DeviceMesh | None = None
        tie_groups = self._tie_groups()
        self.chunks = [self._build_chunk(c, tie_groups) for c in self.plan.chunks]
        t = scenario.training
        shape = (
            t.micro_batch_size,
            local_seq_len(t.seq_len, scenario.tp, scenario.parallelism.sequence_parallel) // grid.cp,
            scenario.model.hidden_size,
        )
        self.executor = PipelineExecutor(
            self.plan,
            {c.chunk.stage: c.runner for c in self.chunks},
            self.recorder,
            shape,
            compute_dtype(scenario),
            device,
            full_recompute=t.recompute == "full" and t.recompute_num_layers is None,  # else per block
            autocast=autocast_for(scenario, device),
        )

    # ------------------------------------------------------------------------------------ building
    def _moe_cp_groups(self) -> dict[str, dist.ProcessGroup]:
        """This rank's dense-gradient (``dp_cp``), expert-parallel and expert-data-parallel groups,
        from the rank grid (every rank creates every group of an axis, in the same order)."""
        grid, out = self.plan.grid, dict[str, dist.ProcessGroup]()
        axes: list[GroupName] = ["dp_cp"] if grid.dp * grid.cp > 1 else []
        axes += ["ep", "edp"] if self.scenario.model.is_moe else []
        for axis in axes:
            if len(grid.group(axis, self.plan.rank)) > 1:
                out[axis], _ = dist.new_subgroups_by_enumeration([list(g) for g in grid.groups(axis)])
        return out

    def _tie_groups(self) -> dict[int, dist.ProcessGroup]:
        """Groups {first-stage rank, last-stage rank} per (dp, tp) for tied embeddings across stages."""
        s, grid = self.scenario, self.plan.grid
        if not s.model.tie_word_embeddings or grid.pp == 1:
            return {}
        groups = {}
        for pp_group in grid.groups("pp"):  # every rank creates every group, in the same order
            pair = [pp_group[0], pp_group[-1]]
            group = dist.new_group(ranks=pair)
            for r in pair:
                groups[r] = group
        return groups

    def _build_chunk(self, c: Chunk, tie_groups: dict[int, dist.ProcessGroup]) -> ChunkState:
        s, grid = self.scenario, self.plan.grid
        cfg = ModelConfig.from_scenario(s)
        ep_group = grid.group("ep", self.plan.rank) if cfg.moe is not None else (self.plan.rank,)
        model = Decoder(
            cfg,
            c.first_layer,
            c.last_layer,
            has_embedding=c.has_embedding,
            has_head=c.has_head,
            seed=s.training.seed,
            ep_rank=ep_group.index(self.plan.rank),
            ep=len(ep_group),
        ).to(self.device)
        set_aux_loss_scale(model, 1.0 / s.num_microbatches)  # the loss is averaged over micro-batches
        if "ep" in self.groups:
            apply_expert_parallel(model, self.groups["ep"], self.recorder)
        if grid.cp > 1:
            cp_group = self.mesh["cp"].get_group()
            apply_context_parallel(model, cp_group, s.training.seq_len, self.recorder, self.device)
        if s.tp > 1:
            apply_tensor_parallel(
                model,
                self.mesh["tp"],
                sequence_parallel=s.parallelism.sequence_parallel,
                vocab_parallel=s.vocab_tp > 1,
                moe_on_shards=moe_on_sequence_shards(s),
            )
        zero, last_backward = s.parallelism.zero_stage, None
        if s.fsdp:
            apply_fsdp(model, self._fsdp_mesh(), zero_stage=zero, mp_policy=fsdp_policy(s))
        elif "dp_cp" in self.groups and not self.plan.split_backward:  # split: reduced after the step
            last_backward = self._wrap_ddp(model, c)
        params = list(model.parameters())
        optimizer: torch.optim.Optimizer
        if "dp_cp" in self.groups and zero == 1:
            optimizer = zero1_optimizer(
                params,
                self.groups["dp_cp"],
                LEARNING_RATE,
                recorder=self.recorder,
                stage=c.stage,
                chunk=c.chunk,
                fused=fused_adamw(self.device),
            )
        else:
            optimizer = torch.optim.AdamW(params, lr=LEARNING_RATE, fused=fused_adamw(self.device))
        runner = StageRunner(c.stage, c.chunk, model, params, last_backward)
        peer = self.plan.tie_peer(c)
        return ChunkState(
            c,
            model,
            optimizer,
            runner,
            tie_groups.get(self.plan.rank) if peer is not None else None,
            -1 if peer is None else peer,
        )

    def _fsdp_mesh(self) -> DeviceMesh:
        """The mesh FSDP2 shards over: dp, or under HSDP the 2-D (dp_replicate, dp_shard) mesh, on which
        fully_shard reduce-scatters over dp_shard and all-reduces over dp_replicate (torchtitan's
        ``ParallelDims`` mesh; torch/distributed/fsdp/_fully_shard/_fsdp_collectives.py
        ``foreach_reduce``)."""
        grid = self.plan.grid
        if grid.replicate == 1:
            return self.mesh["dp"]
        if self._hsdp_mesh is None:  # built once: every rank creates its groups, in the same order
            names = grid.hsdp_mesh_dim_names
            self._hsdp_mesh = init_device_mesh(self.device.type, grid.hsdp_mesh_shape, mesh_dim_names=names)
        return self._hsdp_mesh["dp_replicate", "dp_shard"]

    def _wrap_ddp(self, model: Decoder, c: Chunk) -> functools.partial[None]:
        """DDP over the dense-gradient group; routed experts get a second reducer (expert data parallel)."""
        s = self.scenario
        if s.tp > 1:
            localize_dtensor_params(model)
        ids = [self.device.index] if self.device.type == "cuda" and self.device.index is not None else None
        experts = [name for name, _ in model.named_parameters() if is_expert_param(name)]
        DistributedDataParallel._set_params_and_buffers_to_ignore_for_model(model, experts)
        wrap = functools.partial(
            wrap_ddp,
            bucket_cap_mb=s.parallelism.ddp_bucket_cap_MiB,
            stage=c.stage,
            chunk=c.chunk,
            device_ids=ids,
            recorder=self.recorder,
        )
        reducers = [wrap(model, self.groups["dp_cp"])]
        if experts and "edp" in self.groups:
            reducers.append(wrap(ExpertParams(model), self.groups["edp"]))
        return functools.partial(backward_with_sync, reducers)

    # ------------------------------------------------------------------------------------- running
    def step(self, step: int) -> StepOutput:
        """Run optimizer step ``step`` (0-based) and return its loss and measured events."""
        s, coord = self.scenario, self.plan.coord
        inputs, targets = synthetic_batch(s, step)
        m, cp = s.num_microbatches, self.plan.grid.cp
        inputs, targets = shard_sequence(inputs, cp, coord.cp), shard_sequence(targets, cp, coord.cp)
        mb_in = [microbatch(s, inputs, coord.dp, j).to(self.device) for j in range(m)]
        mb_tg = [microbatch(s, targets, coord.dp, j).to(self.device) for j in range(m)]
        for c in self.chunks:
            c.optimizer.zero_grad(set_to_none=True)
        self.recorder.begin_step()
        # activations are counted in the first step only (every step has the same shapes and schedule),
        # so the saved-tensor hooks' Python cost stays out of the timed steps (runtime/memory.py)
        counting = not self._activations_counted
        self._activations_counted = True
        params = (p for c in self.chunks for p in c.runner.parameters)
        probing = step == self._timeline_step
        self.recorder.memory_probe = self._memory_now if probing else None
        with self.activations.track(params) if counting else contextlib.nullcontext():
            loss = self.executor.run(mb_in, mb_tg)
        if self.plan.split_backward:  # DDP's hooks do not see the weight passes (runtime/parallel/dp.py)
            for c in self.chunks:
                allreduce_split_grads(c.model, self.groups, self.recorder, c.chunk.stage, c.chunk.chunk)
        grid = self.plan.grid
        # the expert reducer averages over edp: scaled to 1/dp in all (runtime/parallel/ep.py)
        expert_scale = len(grid.group("edp", self.plan.rank)) / grid.dp
        for c in self.chunks:
            scale_expert_grads(c.model, expert_scale)
            self._reduce_partial_grads(c)
            self._sync_tied_embedding(c)
        self._sum_tied_copies_here()
        with self.recorder.span(OPTIMIZER):
            for c in self.chunks:
                if self.recorder.profiling:  # attributes ZeRO-1's broadcasts to the chunk
                    with self.recorder.comm_scope("dp", c.chunk.stage, c.chunk.chunk):
                        c.optimizer.step()
                else:
                    c.optimizer.step()
        events = self.recorder.finish(step)
        if probing:
            self._timeline = memory_timeline_points(self.recorder.memory_points)
            self.recorder.memory_probe = None
        last = any(c.chunk.has_head for c in self.chunks)
        if last and self.plan.grid.cp > 1:  # the mean of the sequence shards' losses, after the step
            shared = torch.tensor([loss], dtype=torch.float64)
            dist.all_reduce(shared, group=self.mesh["cp"].get_group())
            loss = float(shared) / self.plan.grid.cp
        return StepOutput(loss if last else None, events, self.recorder.work_end_s)

    def _reduce_partial_grads(self, c: ChunkState) -> None:
        """Sum the sequence-parallel norm gradients (Partial over tp) in one all-reduce (as Megatron-LM)."""
        partial = [
            p
            for p in c.runner.parameters
            if isinstance(p.grad, DTensor) and any(isinstance(pl, Partial) for pl in p.grad.placements)
        ]
        if not partial:
            return
        locals_ = [p.grad.to_local() for p in partial if isinstance(p.grad, DTensor)]
        flat = torch.cat([t.reshape(-1) for t in locals_])
        with self.recorder.comm_scope("tp", c.chunk.stage, c.chunk.chunk):
            dist.all_reduce(flat, group=self.mesh["tp"].get_group())
        offset = 0
        for p, t in zip(partial, locals_, strict=True):
            assert isinstance(p.grad, DTensor)
            reduced = flat[offset : offset + t.numel()].view_as(t)
            offset += t.numel()
            p.grad = DTensor.from_local(
                reduced, p.grad.device_mesh, [Replicate()] * p.grad.device_mesh.ndim, run_check=False
            )

    def _tied_copy_grad(self, c: ChunkState) -> torch.Tensor:
        """This rank's gradient of the tied-embedding copy chunk `c` holds (its local shard)."""
        embed, head = c.model.embed, c.model.head
        owner = embed.tok if embed is not None else head.output if head is not None else None
        weight = None if owner is None else _leaf(owner, "weight")
        if weight is None or weight.grad is None:
            raise RuntimeError(f"stage {c.chunk.stage} holds a tied embedding copy without a gradient")
        grad = weight.grad
        if isinstance(grad, DTensor) and isinstance(weight, DTensor):
            if grad.placements != weight.placements:
                # DTensor's embedding backward leaves a vocab-parallel embedding-only stage a replicated
                # gradient: keep this rank's rows (a slice, no collective), those the output copy holds
                weight.grad = grad = grad.redistribute(weight.device_mesh, weight.placements)
            grad = grad.to_local()
        return grad

    def _sum_tied_copies_here(self) -> None:
        """Both copies of a tied embedding in two chunks of this rank (the V placement puts the first and
        last stage on rank 0): sum their gradients in place, what the two holders' all-reduce does, so
        each chunk's optimizer applies the same update to its copy."""
        if not self.scenario.model.tie_word_embeddings:
            return
        embeds = [c for c in self.chunks if c.model.embed is not None and c.model.head is None]
        heads = [c for c in self.chunks if c.model.head is not None and c.model.embed is None]
        if embeds and heads:
            first, last = self._tied_copy_grad(embeds[0]), self._tied_copy_grad(heads[0])
            first.add_(last)
            last.copy_(first)

    def _sync_tied_embedding(self, c: ChunkState) -> None:
        """Sum the gradients of the two copies of a tied embedding (first and last stage)."""
        if c.tie_group is None:
            return
        grad = self._tied_copy_grad(c)
        if self.recorder.profiling:
            timed: AbstractContextManager[None] = self.recorder.comm_scope(
                "pp", c.chunk.stage, c.chunk.chunk, peer=c.tie_peer
            )
        else:  # no profiler this run: time the all-reduce as a span of its own
            timed = self.recorder.span(
                SpanKey("all_reduce", c.chunk.stage, c.chunk.chunk, stream="pp", peer=c.tie_peer)
            )
        with timed:
            dist.all_reduce(grad, group=c.tie_group)

    def modules(self) -> list[nn.Module]:
        return [c.model for c in self.chunks]

    def _memory_now(self) -> float:
        """This rank's bytes now (runtime/memory.py `bytes_now`)."""
        return bytes_now(self.device, self.activations)

    @property
    def memory_timeline(self) -> list[list[Any]]:
        """Memory after each compute span of one step: [kind, stage, chunk, microbatch, bytes]. On CPU the
        first step's saved activations plus the model states as they stand at the end of the run
        (parameters, gradients, optimizer states: held over the whole step, as the simulator counts
        them); on GPU the allocator's allocated bytes (runtime/memory.py `bytes_now`)."""
        if self.device.type == "cuda":
            return self._timeline
        states = sum(state_bytes(self.modules(), [c.optimizer for c in self.chunks]).values())
        return [[*point[:4], point[4] + states] for point in self._timeline]

    def memory(self) -> dict[str, int]:
        """Peak memory of this rank (bytes), with its components."""
        return peak_memory(self.device, self.modules(), [c.optimizer for c in self.chunks], self.activations)


def _leaf(module: nn.Module, name: str) -> torch.Tensor:
    """The parameter autograd fills for ``module.<name>``: under DDP with tensor parallel the attribute is
    computed from a local parameter (runtime/parallel/dp.py `localize_dtensor_params`), whose gradient
    is this rank's shard."""
    if parametrize.is_parametrized(module, name):
        original = cast(nn.ModuleDict, module.parametrizations)[name].original
        assert isinstance(original, torch.Tensor)
        return original
    weight = getattr(module, name)
    assert isinstance(weight, torch.Tensor)
    return weight
