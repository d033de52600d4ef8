"""What one rank executes, derived purely from the scenario, the simulator's rank grid and schedule.

Nothing here imports torch: the runtime (``runtime.trainer``) and the expected-event builder
(``runtime.expected``) read the same ``RankPlan``, so a measured run and its expected key set are
two views of one plan. Rank layout and schedule come from ``simulator.mesh`` and
``simulator.schedules``; they are never re-derived here.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from plancast.runtime.model_support import ShapeSupportError, check_model_shape_support
from plancast.simulator.mesh import Coord, RankGrid
from plancast.simulator.scenario import Parallelism, Scenario
from plancast.simulator.schedules import Action, build_schedule, owned_stages, splits_backward, stage_rank


class PlanError(ValueError):
    """A scenario the runtime cannot execute; the message names the key and the fix."""


@dataclass(frozen=True, slots=True)
class Chunk:
    """One model chunk held by a rank: its virtual stage (simulator/schedules.py's ``owned_stages``)."""

    stage: int
    chunk: int
    first_layer: int
    last_layer: int
    has_embedding: bool
    has_head: bool


@dataclass(frozen=True, slots=True)
class RankPlan:
    """Everything one rank needs to know about the plan, as plain data."""

    scenario: Scenario
    grid: RankGrid
    rank: int
    actions: tuple[Action, ...]
    chunks: tuple[Chunk, ...]
    split_backward: bool

    @property
    def coord(self) -> Coord:
        return self.grid.coord(self.rank)

    @property
    def num_stages(self) -> int:
        """Virtual stages in the whole pipeline, ``pp * vpp``."""
        return self.grid.pp * self.scenario.vpp

    def chunk_of_stage(self, stage: int) -> Chunk:
        for c in self.chunks:
            if c.stage == stage:
                return c
        raise KeyError(f"rank {self.rank} holds no stage {stage}")

    def holder(self, stage: int) -> int:
        """Global rank holding virtual stage ``stage`` on this rank's (dp, cp, tp) pipeline."""
        name = self.scenario.parallelism.pipeline_parallel_schedule
        return self.grid.rank(replace(self.coord, pp=stage_rank(name, self.grid.pp, stage)))

    def tie_peer(self, chunk: Chunk) -> int | None:
        """The rank holding the other copy of the tied embedding, when it lives on another rank."""
        if not self.scenario.model.tie_word_embeddings or self.num_stages == 1:
            return None
        if chunk.has_embedding:
            return self.holder(self.num_stages - 1) if self.holder(self.num_stages - 1) != self.rank else None
        if chunk.has_head:
            return self.holder(0) if self.holder(0) != self.rank else None
        return None


def layer_ranges(scenario: Scenario) -> list[tuple[int, int]]:
    """``[first, last)`` layer range of every virtual stage, from ``scenario.layer_split``."""
    ranges, start = [], 0
    for n in scenario.layer_split:
        ranges.append((start, start + n))
        start += n
    return ranges


def check_runtime_support(scenario: Scenario, world_size: int) -> None:
    """Raise PlanError for plans the runtime cannot execute on ``world_size`` ranks."""
    tp, pp, dp, cp = scenario.tp, scenario.pp, scenario.dp, scenario.parallelism.context_parallel_degree
    m = scenario.model
    if tp * pp * dp * cp != world_size:
        raise PlanError(
            "tensor_parallel_degree * pipeline_parallel_degree * data_parallel_degree * "
            f"context_parallel_degree = {tp}*{pp}*{dp}*{cp} = {tp * pp * dp * cp}, but {world_size} ranks "
            "were started; set --nproc-per-node/--nnodes to match"
        )
    check_moe_cp_support(scenario)
    check_framework_behaviour(scenario)
    try:
        check_model_shape_support(scenario)
    except ShapeSupportError as err:
        raise PlanError(str(err)) from None
    if m.num_attention_heads % tp or m.kv_heads % tp:
        raise PlanError(
            f"model.num_attention_heads ({m.num_attention_heads}) and num_key_value_heads ({m.kv_heads}) "
            f"must be divisible by parallelism.tensor_parallel_degree ({tp})"
        )
    if m.ffn_size % tp:
        raise PlanError(
            f"model.intermediate_size ({m.ffn_size}) must be divisible by tensor_parallel_degree ({tp})"
        )
    if scenario.parallelism.sequence_parallel and scenario.training.seq_len % tp:
        raise PlanError(
            f"training.seq_len ({scenario.training.seq_len}) must be divisible by tp ({tp}) "
            "with parallelism.sequence_parallel"
        )
    if scenario.training.global_batch_size % (scenario.training.micro_batch_size * dp):
        raise PlanError(
            "training.global_batch_size must be a multiple of micro_batch_size * data_parallel_degree"
        )
    name = scenario.parallelism.pipeline_parallel_schedule
    if splits_backward(name) and (cp > 1 or (dp > 1 and (scenario.parallelism.zero_stage >= 2 or tp > 1))):
        raise PlanError(
            f"pipeline_parallel_schedule = {name!r} (split backward) runs with context_parallel_degree = 1, "
            "and with data_parallel_degree > 1 only under zero_stage 0 or 1 without tensor parallel (the "
            "gradients are all-reduced after the weight passes, which FSDP's and DTensor's hooks do not "
            "see); use 1F1B for these plans"
        )
    if scenario.parallelism.sequence_parallel and tp > 1 and dp > 1:
        raise PlanError(
            "parallelism.sequence_parallel with data_parallel_degree > 1 is not supported by the runtime "
            "(the replicated norm weights are DTensors that DDP cannot bucket and FSDP2 leaves partial); "
            "turn sequence_parallel off or use dp = 1"
        )
    if scenario.vocab_tp > 1 and m.vocab_size % tp:
        raise PlanError(
            f"model.vocab_size ({m.vocab_size}) must be divisible by tensor_parallel_degree ({tp}) with "
            "parallelism.vocab_parallel; pad the vocabulary (Megatron-LM --make-vocab-size-divisible-by) "
            "or set vocab_parallel = false"
        )
    if scenario.training.dtype != "fp32" and scenario.cluster.gpu.name == "cpu-core":
        raise PlanError(f"training.dtype = {scenario.training.dtype!r} needs a GPU; use fp32 on CPU")
    if any(n < 1 for n in scenario.layer_split):
        raise PlanError("parallelism.pipeline_layer_split: every virtual stage needs at least one layer")


def _check_memory_keys(scenario: Scenario) -> None:
    """The memory keys of other frameworks' optimizers and pipelining that the runtime does not run."""
    t, p = scenario.training, scenario.parallelism
    if t.optimizer_moment_dtype != "fp32":
        raise PlanError(
            f"training.optimizer_moment_dtype = {t.optimizer_moment_dtype!r}: the runtime's AdamW keeps fp32 "
            "moments; simulate the plan, or remove the key to run it"
        )
    if t.attention_output_store != "dtype":
        raise PlanError(
            f"training.attention_output_store = {t.attention_output_store!r}: the runtime keeps the "
            "attention output in training.dtype; simulate the plan, or remove the key to run it"
        )
    if t.activation_input_store != "dtype":
        raise PlanError(
            f"training.activation_input_store = {t.activation_input_store!r}: the runtime saves the SwiGLU's "
            "input in training.dtype; simulate the plan, or remove the key to run it"
        )
    if not t.master_weights:
        raise PlanError(
            "training.master_weights = false: the runtime trains fp32 parameters under autocast "
            "(runtime/precision.py); simulate the plan, or remove the key to run it"
        )
    if p.pipeline_output_chunks != "none":
        raise PlanError(
            f"parallelism.pipeline_output_chunks = {p.pipeline_output_chunks!r}: the runtime frees a stage's "
            "output after its backward; set pipeline_output_chunks = 'none' to run this plan"
        )
    if p.pipeline_parameter_copies != 1:
        raise PlanError(
            f"parallelism.pipeline_parameter_copies = {p.pipeline_parameter_copies}: the runtime runs "
            "DualPipeV with one copy of each stage; set pipeline_parameter_copies = 1 to run this plan"
        )


def check_framework_behaviour(scenario: Scenario) -> None:
    """Raise PlanError for the other frameworks' behaviours the simulator models and the runtime does not
    run (a run that ignored them would not be the plan that was predicted)."""
    t, p = scenario.training, scenario.parallelism
    if t.recompute == "selective" and t.selective_recompute != "attention":
        raise PlanError(
            f"training.selective_recompute = {t.selective_recompute!r}: the runtime recomputes the attention "
            "core only (Korthikanti et al. 2022); set selective_recompute = 'attention' to run this plan"
        )
    if t.recompute == "selective" and t.recompute_modules not in (None, ["core_attn"]):
        raise PlanError(
            f"training.recompute_modules = {t.recompute_modules}: the runtime's selective recompute re-runs "
            'the attention core only (Megatron-Core\'s default, ["core_attn"]); set recompute_modules = '
            '["core_attn"] or remove the key to run this plan'
        )
    fsdp = scenario.dp > 1 and p.zero_stage >= 2
    if fsdp and p.fsdp_backward_prefetch != "pre":
        raise PlanError(
            f"parallelism.fsdp_backward_prefetch = {p.fsdp_backward_prefetch!r}: the runtime runs FSDP2, "
            "which gathers the next unit before this one's backward; set fsdp_backward_prefetch = 'pre'"
        )
    if p.tp_comm_overlap and scenario.tp > 1:
        raise PlanError(
            "parallelism.tp_comm_overlap = true: the runtime's tensor-parallel collectives block (DTensor, "
            "no userbuffer overlap); set tp_comm_overlap = false to run this plan"
        )
    if t.packed_document_tokens is not None:
        raise PlanError(
            f"training.packed_document_tokens = {t.packed_document_tokens}: the runtime trains each sequence "
            "as one causal document; simulate the plan, or remove the key to run it"
        )
    offloads = [k for k in ("activation_offload", "optimizer_cpu_offload") if getattr(t, k)]
    if offloads:
        raise PlanError(
            f"training.{offloads[0]} = true: the runtime keeps activations and optimizer states on the "
            f"device; simulate the plan, or set {offloads[0]} = false to run it"
        )
    if t.fused_cross_entropy != "none":
        raise PlanError(
            f"training.fused_cross_entropy = {t.fused_cross_entropy!r}: the runtime computes the loss with "
            "torch's cross_entropy; set fused_cross_entropy = 'none' to run this plan"
        )
    _check_memory_keys(scenario)
    if p.pipeline_receive_buffers != "per_transfer":
        raise PlanError(
            f"parallelism.pipeline_receive_buffers = {p.pipeline_receive_buffers!r}: the runtime receives "
            "into a buffer per transfer; set pipeline_receive_buffers = 'per_transfer' to run this plan"
        )
    _check_kernels(scenario)
    _check_distributed_optimizer(scenario)


def _check_kernels(scenario: Scenario) -> None:
    """The kernels and number formats a plan names that the runtime's eager PyTorch does not run."""
    t, p = scenario.training, scenario.parallelism
    if t.fp8:
        raise PlanError(
            f"training.fp8 = true (training.fp8_recipe = {t.fp8_recipe!r}): the runtime has no FP8 GEMM path "
            "(Transformer Engine or torchao float8); simulate the plan, or set fp8 = false to run it in bf16"
        )
    if t.attention_backend in ("te", "flex"):
        raise PlanError(
            f"training.attention_backend = {t.attention_backend!r}: the runtime attends with torch's "
            "scaled_dot_product_attention (not Transformer Engine's or FlexAttention); set "
            "attention_backend = 'sdpa' (or unset it) to run this plan"
        )
    if scenario.model.moe_expert_bias and scenario.model.is_moe:
        raise PlanError(
            "model.moe_expert_bias = true: the runtime's grouped experts have no biases (its gpt-oss shape "
            "runs without them); set moe_expert_bias = false to run this plan"
        )
    if scenario.model.attention_sinks:
        raise PlanError(
            "model.attention_sinks = true: the runtime's attention has no sink logits (its gpt-oss shape "
            "runs without them); set attention_sinks = false to run this plan"
        )
    if t.moe_expert_gemm == "multi_stream" and scenario.model.is_moe:
        raise PlanError(
            "training.moe_expert_gemm = 'multi_stream': the runtime runs its experts as its own grouped "
            "PyTorch ops, not Transformer Engine's per-expert cuBLAS GEMMs; set moe_expert_gemm = 'grouped' "
            "(or unset it) to run this plan"
        )
    if t.elementwise == "fused":
        raise PlanError(
            "training.elementwise = 'fused' (the default of parallelism.framework = "
            f"{p.framework!r}): the runtime runs its elementwise ops as eager PyTorch, without fused kernels "
            "or torch.compile; set training.elementwise = 'eager' to run this plan"
        )
    if t.dtype == "fp16":
        raise PlanError(
            "training.dtype = 'fp16' needs a loss scaler, which the runtime does not run; use bf16 (the same "
            "speed on A100 and later) or fp32"
        )


def _check_distributed_optimizer(scenario: Scenario) -> None:
    """Megatron's distributed optimizer (reduce-scattered gradients, parameters all-gathered after the step
    or, with overlap_param_gather, beside the next forward: simulator/engine/param_gather.py) is not the
    runtime's ZeRO-1, which all-reduces with DDP and broadcasts each owner's shard
    (ZeroRedundancyOptimizer, runtime/parallel/dp.py)."""
    p = scenario.parallelism
    if p.zero_stage == 1 and p.distributed_optimizer and scenario.dp * scenario.cp > 1:
        gather = " and overlap_param_gather = false" if p.overlap_param_gather else ""
        raise PlanError(
            "parallelism.distributed_optimizer = true: the runtime runs ZeRO-1 as DDP's all-reduce and "
            "ZeroRedundancyOptimizer's broadcasts, not Megatron's gradient reduce-scatter and parameter "
            f"all-gather; set distributed_optimizer = false{gather} to run this plan"
        )


def check_moe_cp_support(scenario: Scenario) -> None:
    """Raise PlanError for the expert- and context-parallel plans the runtime does not execute."""
    p, m = scenario.parallelism, scenario.model
    ep, cp = p.expert_parallel_degree, p.context_parallel_degree
    if m.num_local_experts:
        if scenario.tp > 1:
            _check_moe_folding(scenario)
        if scenario.dp > 1 and p.zero_stage > 0:
            raise PlanError(
                f"model.num_local_experts with parallelism.zero_stage = {p.zero_stage}: the runtime reduces "
                "expert gradients with a second DDP reducer (ZeRO-0 only); set zero_stage = 0"
            )
        if cp > 1:
            raise PlanError(
                "model.num_local_experts with context_parallel_degree > 1: the runtime runs context "
                "parallelism on dense models only; set parallelism.context_parallel_degree = 1"
            )
        _check_moe_kernels(p)
    elif ep > 1:
        raise PlanError(
            f"parallelism.expert_parallel_degree = {ep} needs a mixture-of-experts model; set "
            "model.num_local_experts or expert_parallel_degree = 1"
        )
    if cp > 1 and scenario.tp > 1:
        raise PlanError(
            "context_parallel_degree > 1 with tensor_parallel_degree > 1 is not supported by the runtime; "
            "set one of them to 1"
        )
    if cp > 1 and scenario.dp > 1 and p.zero_stage >= 2:
        raise PlanError(
            "context_parallel_degree > 1 with zero_stage 2/3 is not supported by the runtime "
            "(FSDP2 would shard over data parallel only); use zero_stage 0 or 1"
        )


def _check_moe_folding(scenario: Scenario) -> None:
    """MoE under tensor parallel runs as MoE parallel folding with whole experts: each rank routes its
    sequence shard over an ep group that may span tp (simulator/mesh.py), no expert split over tp."""
    p, m = scenario.parallelism, scenario.model
    if p.expert_tensor_parallel_degree != 1 or not p.sequence_parallel or m.n_shared_experts:
        raise PlanError(
            "model.num_local_experts with tensor_parallel_degree > 1: the runtime runs MoE under tensor "
            "parallel only as parallel folding with whole experts on sequence shards; set "
            "parallelism.expert_tensor_parallel_degree = 1 and sequence_parallel = true (and "
            "model.n_shared_experts = 0), or tensor_parallel_degree = 1"
        )


def _check_moe_kernels(p: Parallelism) -> None:
    """The runtime's MoE runs NCCL/gloo all-to-alls in line, with experts whole on each rank."""
    if p.moe_token_dispatcher != "alltoall" or p.moe_overlap_ep_comm:
        raise PlanError(
            f"parallelism.moe_token_dispatcher = {p.moe_token_dispatcher!r} / moe_overlap_ep_comm = "
            f"{p.moe_overlap_ep_comm}: the runtime dispatches with blocking all-to-alls only; set "
            "moe_token_dispatcher = 'alltoall' and moe_overlap_ep_comm = false"
        )
    if (p.expert_tensor_parallel_degree or 1) != 1:
        raise PlanError(
            f"parallelism.expert_tensor_parallel_degree = {p.expert_tensor_parallel_degree}: the runtime "
            "keeps each expert whole on its rank; set it to 1 or unset it"
        )


def rank_plan(scenario: Scenario, rank: int, world_size: int | None = None) -> RankPlan:
    """The plan of global ``rank`` (``world_size`` defaults to pp * dp * cp * tp)."""
    grid = scenario.grid
    check_runtime_support(scenario, grid.world_size if world_size is None else world_size)
    name = scenario.parallelism.pipeline_parallel_schedule
    schedule = build_schedule(name, scenario.pp, scenario.num_microbatches, scenario.vpp)
    pp_rank = grid.coord(rank).pp
    ranges = layer_ranges(scenario)
    num_stages = scenario.pp * scenario.vpp
    chunks = tuple(
        Chunk(
            stage=stage,
            chunk=c,
            first_layer=ranges[stage][0],
            last_layer=ranges[stage][1],
            has_embedding=stage == 0,
            has_head=stage == num_stages - 1,
        )
        for c, stage in enumerate(owned_stages(name, scenario.pp, pp_rank, scenario.vpp))
    )
    return RankPlan(scenario, grid, rank, schedule[pp_rank], chunks, splits_backward(name))
