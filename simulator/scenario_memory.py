"""The scenario keys of the memory-saving features (docs/memory.md): partial recompute, activation and
optimizer offload, FP8 primary weights, HSDP. Declared here, inherited by scenario.Training and
scenario.Parallelism, so these keys have one home."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from plancast.simulator.fields import Strict

RecomputeModule = Literal["core_attn", "moe_act", "layernorm", "mla_up_proj", "mlp", "moe", "shared_experts"]
"""Megatron-Core's recompute modules (megatron/core/transformer/transformer_config.py `recompute_modules`)."""


class MemoryTrainingKeys(Strict):
    """Training keys that trade time for memory."""

    recompute_modules: list[RecomputeModule] | None = None
    """With recompute = "selective" (and selective_recompute "attention"): the submodules Megatron-Core
    recomputes (`--recompute-modules`, TransformerConfig.recompute_modules in megatron/core/transformer/
    transformer_config.py; unset: its default ["core_attn"]). "core_attn" the attention core; "layernorm"
    the norms that are modules of their own (under Transformer Engine the MLA input norm and an MoE block's
    pre-MLP norm; the others are fused into the next GEMM, gpt_layer_specs.py); "mla_up_proj" MLA's
    up-projections and RoPE; "moe_act" the routed experts' activation; "mlp" a dense block's MLP; "moe"
    the whole MoE layer (its token all-to-alls too); "shared_experts" the shared experts. Each keeps what
    its recompute discards out of the saved activations and re-runs its forward in backward (costs/
    recompute.py); "moe_act", "layernorm" and "mla_up_proj" discard only their outputs."""

    recompute_num_layers: int | None = Field(default=None, gt=0)
    """With recompute = "full": Megatron-LM's `--recompute-num-layers` under `recompute_method`. Unset: every
    layer keeps only its input (uniform, 1). docs/memory.md."""
    recompute_method: Literal["block", "uniform"] = "uniform"
    """Megatron-LM's `--recompute-method`: block recomputes the first recompute_num_layers layers of each
    (virtual) stage and keeps all of the others' activations; uniform keeps the input of each group of
    recompute_num_layers layers and rebuilds a whole group in backward."""
    activation_offload: bool = False
    """Saved activations go to host memory after each block's forward and come back for its backward
    (Megatron-Core `--cpu-offloading`, torch `save_on_cpu`): host-link time, two blocks kept on the GPU."""
    activation_offload_num_layers: int | None = Field(default=None, gt=0)
    """With activation_offload: only the first n blocks of each (virtual) stage offload, the others keep
    their activations on the GPU (Megatron-Core `--cpu-offloading-num-layers`, which Megatron-Bridge's
    performance recipes set per GPU: cpu_offloading_num_layers). Unset: every block offloads."""
    optimizer_cpu_offload: bool = False
    """Optimizer states (fp32 master, Adam moments) live in host memory and the step runs on the host
    (DeepSpeed ZeRO-Offload `offload_optimizer`, Megatron-LM `--optimizer-cpu-offload`); gradients go down
    and parameters come back over the host link each step (simulator/costs/offload.py)."""
    fused_cross_entropy: Literal["none", "te"] = "none"
    """The loss as Transformer Engine's fused kernel computes it (Megatron-Core `--cross-entropy-loss-fusion
    --cross-entropy-fusion-impl te`, which Megatron-Bridge's Llama recipes set): it keeps the logits in the
    training dtype and no fp32 copies (costs/memory.py loss_bytes_per_logit). Memory only: the loss's time
    is priced as the unfused one."""
    master_weights: bool = True
    """False: pure 16-bit training. The parameters themselves are kept in training.dtype and updated in
    place, their gradients and Adam's moments in that dtype too (torch.optim makes its state like the
    parameter): NeMo AutoModel, which builds its models in bfloat16 (`NeMoAutoModelForCausalLM.from_config`
    turns torch_dtype "auto" into bfloat16; its MoE models' `initialize_weights` ends in `self.to(dtype)`)
    and steps torch.optim.Adam over them under FSDP2. True: the optimizer updates an fp32 copy (Megatron-LM's
    main params, DeepSpeed's bf16 optimizer, torchtitan's fp32 parameters under autocast or FSDP2 mixed
    precision). 2 + 2 + 4 bytes a parameter instead of 16 to 18 (costs/memory.py); the optimizer step
    moves 16-bit bytes (costs/optimizer.py). Needs framework torchtitan and a 16-bit training.dtype."""
    optimizer_moment_dtype: Literal["fp32", "bf16"] = "fp32"
    """The dtype of Adam's two moments. "bf16": Megatron-Core's precision-aware optimizer
    (`--use-precision-aware-optimizer --exp-avg-dtype bf16 --exp-avg-sq-dtype bf16`, Transformer Engine's
    FusedAdam), which Megatron-Bridge's DeepSeek-V3 recipes set (src/megatron/bridge/recipes/deepseek/
    deepseek_v3.py) after the DeepSeek-V3 report (sec. 3.3.3): 2 + 2 bytes a parameter instead of 4 + 4,
    sharded as the optimizer states are, with the fp32 master weights kept; the optimizer step reads and
    writes them in bf16 (costs/optimizer.py). Needs framework megatron-lm."""
    activation_input_store: Literal["dtype", "fp8", "fp8_recipe"] = "dtype"
    """How the SwiGLU's input (FC1's output, both halves) is kept for backward. "fp8": one byte an element,
    cast back before the backward: Megatron-Core's `activation_func_fp8_input_store`
    (`--activation-func-fp8-input-store`, TransformerConfig in megatron/core/transformer/
    transformer_config.py; megatron/core/fusions/fused_bias_swiglu.py saves `input.to(torch.float8_e4m3fn)`,
    a plain cast without scales), in the dense MLPs, the shared experts and the routed experts alike.
    "fp8_recipe": quantized with training.fp8_recipe's scales (its `saved_input_bytes`, costs/fp8.py; needs
    training.fp8), as the DeepSeek-V3 report caches the MoE SwiGLU's inputs "in FP8 with our fine-grained
    quantization method" (arXiv 2412.19437 sec. 3.3.3). Either way one more elementwise pass over the input
    each direction (costs/ops.py swiglu). Needs a SwiGLU model."""
    attention_output_store: Literal["dtype", "e5m6"] = "dtype"
    """How a block keeps the attention's output (the input of the Linear after it) for backward. "dtype":
    in training.dtype, plus the output projection's FP8 copy under training.fp8 (Transformer Engine).
    "e5m6": one 12-bit copy with an fp32 scale per 1x128 tile, read by both the attention's backward and
    the output projection's: the DeepSeek-V3 report's custom format for exactly these activations (arXiv
    2412.19437 sec. 3.3.3, "Low-Precision Storage and Communication"); its quantization is one more
    elementwise pass in forward and its dequantization one in backward (costs/ops.py)."""
    fp8_param: bool = False
    """With fp8: FP8 primary weights (Transformer Engine `fp8_model_init`, Megatron `--fp8-param-gather`,
    Megatron-Bridge's FP8 recipes): the blocks' GEMM weights held as FP8 and its transpose, no 16-bit copy."""


class MemoryParallelismKeys(Strict):
    """Parallelism keys that trade communication for memory."""

    pipeline_receive_buffers: Literal["per_transfer", "per_microbatch"] = "per_transfer"
    """Where a pipeline stage receives activations and gradients: "per_transfer", a buffer made for each
    receive and freed with its micro-batch (plancast's runtime, runtime/parallel/pp.py; Megatron-LM;
    torch.distributed.pipelining after pytorch/pytorch#196463); "per_microbatch", one input and one
    output-gradient buffer per micro-batch and stage, allocated at the first step and kept
    (torch.distributed.pipelining before it, as torchtitan and NeMo AutoModel ran it: pytorch/pytorch#136380;
    costs/memory.py pipelining_buffer_bytes)."""
    pipeline_output_chunks: Literal["none", "last_stage", "every_stage"] = "none"
    """Which pipeline stages keep each micro-batch's output until the step ends: torch.distributed.pipelining
    appends every forward's output to `output_chunks` to merge them after the step ("every_stage" before
    pytorch/pytorch#153383, May 2025, as torchtitan's December 2024 benchmarks ran it; "last_stage" after
    it, until the schedules' opt-out of pytorch/pytorch#159251): the boundary activation of a middle stage,
    the logits of the last (costs/memory.py kept_output_bytes). "none": outputs are freed after their
    backward (Megatron-LM, plancast's runtime). Memory only."""
    pipeline_parameter_copies: Literal[1, 2] = 1
    """2: DualPipe proper, bidirectional, whose rank i holds stages i and pp-1-i of a pp-stage split, so the
    model sits twice on the pipeline (DeepSeek-V3 report, arXiv 2412.19437 sec. 3.2.1 and Table 2: parameters
    2x, activations PP + 1 stages; github.com/deepseek-ai/DualPipe dualpipe.py, each copy keeping its own
    gradients, summed between copies). Priced as schedule DualPipeV (its cut-in-half form, the same bubble)
    with the rank's parameters, gradients and FP8 weights of DualPipe's two stages and one more chunk of
    activations in flight (costs/memory_dualpipe.py); the optimizer states once, sharded over both copies'
    ranks. Memory only: the gradient sum between the copies is not priced; `plancast sweep` refuses it."""
    data_parallel_replicate_degree: int = Field(default=1, gt=0)
    """HSDP (torchtitan `data_parallel_replicate_degree`, FSDP `HYBRID_SHARD`): replicas of the model among
    the dp ranks; ZeRO-2/3 shards within each group of dp / replicas (x cp) and all-reduces the sharded
    gradients across the replicas (simulator/mesh.py). 1: shard over all of dp."""
