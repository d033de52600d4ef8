"""Training frameworks whose behaviour a scenario can model (`parallelism.framework`).

Each entry sets the defaults of the keys where frameworks differ in a way that changes step time.
A key written in the scenario always wins; these only fill what the scenario leaves out.

- vocab_parallel: all three split the embedding and output layer over tensor parallel (Megatron-LM
  `VocabParallelEmbedding` / `ColumnParallelLinear` + `vocab_parallel_cross_entropy`; torchtitan
  `parallelize_llama` (torchtitan/models/llama3/infra/parallelize.py, `apply_tp`):
  `"tok_embeddings": RowwiseParallel(input_layouts=Replicate(), output_layouts=Shard(1))`,
  `"output": ColwiseParallel(input_layouts=Shard(1), output_layouts=Shard(-1) if loss_parallel else
  Replicate(), use_local_output=not loss_parallel)`, with `loss_parallel` on by default
  (`disable_loss_parallel = False`); Megatron-DeepSpeed uses Megatron's layers). plancast's runtime
  does the same (runtime/parallel/tp.py, runtime/parallel/loss.py).
- overlap_p2p_comm: Megatron-LM's `--no-overlap-p2p-communication` is a store_false flag (overlap on;
  megatron/training/arguments.py); torch.distributed.pipelining posts every send asynchronously;
  DeepSpeed's PipelineEngine sends synchronously (deepspeed/runtime/pipe/p2p.py).
- scatter_gather_p2p: Megatron-LM sends 1/tp of an activation per rank and all-gathers it
  (Narayanan et al. 2021 sec. 4.1, on by default); DeepSpeed partitions pipeline activations over
  model-parallel ranks (`PipelineEngine.is_pipe_partitioned`); torchtitan sends the full tensor.
- grad_accumulation_fp32: Megatron-LM sets `accumulate_allreduce_grads_in_fp32` for bf16
  (arguments.py: "if args.bf16: ... = True"); DeepSpeed's bf16 optimizer accumulates in fp32
  (`BF16_Optimizer`); fp16 keeps 16-bit gradients in both. torchtitan (and plancast's runtime, since
  it runs bf16) keep gradients in the parameter dtype, and the parameters are the fp32 master weights:
  bf16 runs under `torch.autocast` without FSDP (torchtitan/distributed/utils.py `maybe_enable_amp`)
  and FSDP2's `MixedPrecisionPolicy(param_dtype=bf16)` casts only the gathered copy, the sharded
  parameter and its gradient staying fp32; so bf16 under torchtitan has fp32 gradients too (measured:
  a bf16 1.3B GPT on one H100 holds 4.9 GiB of gradients, 4 bytes each; docs/calibration.md).
  Megatron-LM keeps that only for bf16 without `--grad-reduce-in-bf16` (arguments.py: "elif not
  args.accumulate_allreduce_grads_in_fp32 and args.main_grads_dtype == torch.float32: ... = True");
  Megatron-Core's own DistributedDataParallelConfig defaults grad_reduce_in_fp32 to False, and
  Megatron-Bridge's performance scripts set it False (scripts/performance/utils/helpers.py
  `set_basic_perf_overrides`): a Bridge recipe's row says grad_accumulation_fp32 = false. Its
  distributed optimizer (`--use-distributed-optimizer`, on in every Bridge recipe) is zero_stage 1:
  fp32 main parameters and Adam moments sharded, 16-bit parameters and the gradient buffer whole.
  FP8 primary weights (`--fp8-param-gather`, store_true: off in Megatron-LM, on in Bridge's FP8
  recipes) are training.fp8_param (docs/memory.md).
- zero_collective_algorithm: NCCL runs an all-gather or reduce-scatter over whole nodes as rings, one
  channel per NIC, so the node's NICs work together: nccl-tests reach the node's summed NIC bandwidth
  as bus bandwidth (85-96 of 100 GB/s on A100 nodes with 4 HDR NICs, NVIDIA/nccl-tests#119; 200 GB/s
  all_gather on 256 H100 with 8 NDR NICs each, NVIDIA/nccl#1218). FSDP2 (torchtitan) and Megatron-LM's
  distributed optimizer issue one such collective per unit or bucket: "hierarchical". DeepSpeed's
  ZeRO-3 as Narayanan et al. 2021 Table 2 measured it (175B and 530B, 384 to 2,240 A100s) ran at
  one GPU's NIC bandwidth, the step time stopping falling with more GPUs: "ring".
- overlap_grad_reduce: Megatron-LM's `--overlap-grad-reduce` is a store_true flag, off by default
  (megatron/training/arguments.py: "If set, overlap DDP grad reduce"), so its gradient all-reduce (or
  the distributed optimizer's reduce-scatter) runs after the backward pass; DeepSpeed's ZeRO
  `overlap_comm` defaults to true for stage 3 only (DeepSpeedZeroConfig); torch DDP and FSDP2 reduce
  each bucket or unit from its autograd hook (torchtitan): on.
- overlap_param_gather: Megatron-LM's `--overlap-param-gather` is a store_true flag, off by default
  (megatron/training/arguments.py: "If set, overlap param all-gather in distributed optimizer"), so the
  distributed optimizer all-gathers the updated parameters right after the step (DistributedOptimizer
  `step_with_ready_grads` calls start_param_sync when it is off), and only Megatron has that optimizer:
  off below ZeRO-2 in every framework. ZeRO-2/3 prefetch (FSDP2's forward prefetch, DeepSpeed's
  `stage3_prefetch_bucket_size`, Megatron-FSDP): on.
- ddp_bucket_cap_MiB: Megatron-core's DDP buckets hold max(40M, 1M x dp) parameters
  (megatron/core/distributed/distributed_data_parallel.py); DeepSpeed's `reduce_bucket_size` is 5e8
  elements (deepspeed/runtime/zero/config.py); torch DDP as plancast's runtime drives it keeps the
  reducer's first assignment, one bucket per chunk (`None`, see Parallelism.ddp_bucket_cap_MiB).
- elementwise: Megatron-LM fuses its elementwise ops unless told not to (`--no-bias-gelu-fusion`,
  `--no-bias-dropout-fusion`, `--no-rope-fusion`, `--no-bias-swiglu-fusion` turn the fusions off;
  Transformer Engine's normalization kernels), as Megatron-DeepSpeed does with Megatron's kernels:
  "fused". torchtitan compiles only when asked (`--training.compile`, later `--compile.enable`, off in
  its JobConfig), so its ops run eagerly, as in plancast's runtime: "eager" (simulator/costs/eager.py).
"""

from __future__ import annotations

from typing import Literal

Framework = Literal["megatron-lm", "torchtitan", "deepspeed"]

DEFAULT_FRAMEWORK: Framework = "torchtitan"


def framework_defaults(
    framework: Framework, *, dtype: str, dp: int, zero_stage: int = 0
) -> dict[str, object]:
    """The framework's values for the step-time keys a scenario leaves unset.

    `ddp_bucket_params` is the gradient bucket in parameters (None: one bucket per chunk); the
    scenario turns it into `ddp_bucket_cap_MiB` with its gradient dtype."""
    if framework == "megatron-lm":
        return {
            "vocab_parallel": True,
            "overlap_p2p_comm": True,
            "scatter_gather_p2p": True,
            "grad_accumulation_fp32": dtype == "bf16",
            "zero_collective_algorithm": "hierarchical",
            "overlap_grad_reduce": False,
            "overlap_param_gather": zero_stage >= 2,
            "ddp_bucket_params": max(40_000_000, 1_000_000 * dp),
            "elementwise": "fused",
        }
    if framework == "deepspeed":
        return {
            "vocab_parallel": True,
            "overlap_p2p_comm": False,
            "scatter_gather_p2p": True,
            "grad_accumulation_fp32": dtype == "bf16",
            "zero_collective_algorithm": "ring",
            "overlap_grad_reduce": zero_stage == 3,
            "overlap_param_gather": zero_stage >= 2,
            "ddp_bucket_params": 500_000_000,
            "elementwise": "fused",
        }
    return {
        "vocab_parallel": True,
        "overlap_p2p_comm": True,
        "scatter_gather_p2p": False,
        "grad_accumulation_fp32": dtype == "bf16",
        "zero_collective_algorithm": "hierarchical",
        "overlap_grad_reduce": True,
        "overlap_param_gather": zero_stage >= 2,
        "ddp_bucket_params": None,
        "elementwise": "eager",
    }


PARALLELISM_DEFAULTS = (
    "vocab_parallel",
    "overlap_p2p_comm",
    "scatter_gather_p2p",
    "zero_collective_algorithm",
    "overlap_grad_reduce",
    "overlap_param_gather",
    "ddp_bucket_cap_MiB",
)
"""The [parallelism] keys a scenario that leaves them unset gets from its framework."""

PLAN_DEPENDENT = ("overlap_grad_reduce", "overlap_param_gather", "ddp_bucket_cap_MiB")
"""Of those, the ones whose default depends on the plan (ZeRO stage, data-parallel degree): a plan the
sweep derives from a scenario gets them again for its own shape (sweep_axes.Plan.apply)."""


def parallelism_defaults(
    framework: Framework, *, dtype: str, grad_fp32: bool, dp: int, zero_stage: int
) -> dict[str, object]:
    """`framework_defaults`' [parallelism] keys (`PARALLELISM_DEFAULTS`), the gradient bucket in MiB of
    the gradient dtype (fp32 with fp32 gradient accumulation or training; None: one bucket per chunk)."""
    defaults = framework_defaults(framework, dtype=dtype, dp=dp, zero_stage=zero_stage)
    out = {k: defaults[k] for k in PARALLELISM_DEFAULTS[:-1]}
    bucket_params = defaults["ddp_bucket_params"]
    grad_bytes = 4 if grad_fp32 or dtype == "fp32" else 2
    out["ddp_bucket_cap_MiB"] = bucket_params * grad_bytes / 2**20 if isinstance(bucket_params, int) else None
    return out


PIPELINE_SCHEDULES: dict[Framework, tuple[str, ...]] = {
    # Megatron-Core's get_forward_backward_func (megatron/core/pipeline_parallel/schedules.py, NVIDIA/
    # Megatron-LM d98e8a6, 2026-08): no pipelining, 1F1B, and with virtual stages the interleaved 1F1B
    # (its combined 1F1B for EP overlap runs inside that one). Zero-bubble and V schedules live in forks:
    # sail-sg/zero-bubble-pipeline-parallelism, AMD Primus's zbpp patches (AMD-AGI/Primus PR #447).
    "megatron-lm": ("1F1B", "Interleaved1F1B"),
    # torch.distributed.pipelining get_schedule_class (torch 2.13), which torchtitan builds from
    # parallelism.pipeline_parallel_schedule: GPipe, 1F1B, Interleaved1F1B, InterleavedZeroBubble (the
    # paper's ZB1P, ZB-H1), ZBVZeroBubble, DualPipeV; no ZB-H2.
    "torchtitan": ("GPipe", "1F1B", "Interleaved1F1B", "ZeroBubble", "ZBV", "DualPipeV"),
    # DeepSpeed's PipelineEngine runs its TrainSchedule, a 1F1B (deepspeed/runtime/pipe/schedule.py);
    # Megatron-DeepSpeed adds ZB-H1 (`--enable-zbh1-pipeline`, deepspeedai/Megatron-DeepSpeed PR #396).
    "deepspeed": ("1F1B", "ZeroBubble"),
}
"""The pipeline schedules (simulator/schedules.py names) each framework ships. plancast prices every
schedule under any framework; a plan whose framework does not ship its schedule is warned about."""


def schedule_warnings(framework: Framework, schedule: str, pp: int) -> list[str]:
    """A pipeline schedule the framework does not ship (`PIPELINE_SCHEDULES`; none without a pipeline)."""
    ships = PIPELINE_SCHEDULES[framework]
    if pp <= 1 or schedule in ships:
        return []
    return [
        f"parallelism.pipeline_parallel_schedule = {schedule!r}: framework {framework} does not ship it "
        f"(it runs {', '.join(ships)}); plancast prices it as the schedule runs, so the plan needs a fork "
        "or another framework that has it (docs/schedules.md)"
    ]
