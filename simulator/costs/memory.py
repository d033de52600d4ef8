"""Memory per rank: model states under ZeRO, activations (Korthikanti et al. 2022), in-flight micro-batches.

Model states for mixed-precision Adam (Rajbhandari et al. 2020, "ZeRO", sec. 3.1 and Figure 1):
2 bytes of fp16/bf16 parameters + 2 of gradients + 12 of optimizer state (fp32 master, momentum,
variance) = 16 P; over N data-parallel ranks ZeRO-1 keeps 4P + 12P/N, ZeRO-2 2P + 14P/N, ZeRO-3 16P/N.
Megatron-LM accumulates gradients in fp32 (`--accumulate-allreduce-grads-in-fp32`): 18 P.
fp32 training: 4 + 4 + 8 (momentum, variance; no master copy) = 16 P.
Mixed precision whose master weights are the parameters (torch.autocast, FSDP2 MixedPrecisionPolicy:
torchtitan, plancast's runtime; `Scenario.amp_master_params`): 4 bytes of fp32 parameters + 4 of fp32
gradients + 8 of optimizer state, and the 16-bit working copy of the weights: autocast's cast of each
weight is saved for backward (2 P held from forward to backward), FSDP2 keeps the gathered copy (ZeRO-2:
every unit, 2 P unsharded; ZeRO-3: the gathered units, reported apart). Measured on one H100 (bf16
1.3B GPT): 4.9 GiB each of parameters and gradients, 9.8 GiB of AdamW state (docs/calibration.md).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from plancast.simulator.costs.fp8 import fp8_weight_copy_bytes
from plancast.simulator.costs.fp8 import gemm_input_bytes as fp8_gemm_input_bytes
from plancast.simulator.costs.gdn import gdn_saved_bytes
from plancast.simulator.costs.memory_dualpipe import extra_inflight_bytes, optimizer_share, parameter_stages
from plancast.simulator.costs.memory_fsdp import fsdp_holds_stage_unsharded, fsdp_transient_bytes
from plancast.simulator.costs.mla import mla_saved_elements
from plancast.simulator.costs.moe import moe_activation_bytes
from plancast.simulator.costs.ops import DTYPE_BYTES, E5M6_BYTES, Shape, gemm_weight_elements, layer_forward
from plancast.simulator.costs.params import layer_params, moe_layer_count, rank_parameters
from plancast.simulator.costs.recompute import discarded_block_bytes, op_sac_saved_elements
from plancast.simulator.scenario import Scenario
from plancast.simulator.schedules import Action, Schedule, build_schedule, owned_stages

GiB = 1024**3


@dataclass(frozen=True, slots=True)
class MemoryBreakdown:
    """Bytes one rank holds at its peak."""

    parameters: float
    gradients: float
    optimizer: float
    activations: float
    gathered: float = 0.0  # ZeRO-3's gathered units; FSDP2's backward buffers (costs/memory_fsdp.py)
    host: float = 0.0  # offloaded to host memory (optimizer states, activations): not in `total`

    @property
    def total(self) -> float:
        """Bytes allocated on the GPU at the peak (torch.cuda.max_memory_allocated)."""
        return self.parameters + self.gradients + self.optimizer + self.activations + self.gathered

    def reserved(self, fragmentation: float) -> float:
        """Bytes the caching allocator holds at the peak (torch.cuda.max_memory_reserved): the allocated
        peak over the share its split blocks leave usable (cluster.gpu.fragmentation, catalog/gpus.py)."""
        return self.total / (1 - fragmentation)

    def gib(self) -> dict[str, float]:
        """The breakdown in GiB, as the CLI's summary reports it."""
        return {
            "parameters": self.parameters / GiB,
            "gradients": self.gradients / GiB,
            "optimizer": self.optimizer / GiB,
            "activations": self.activations / GiB,
            "gathered": self.gathered / GiB,
        }


def model_state_bytes(
    params: float,
    *,
    dp: int,
    zero_stage: int,
    dtype: str,
    grad_fp32: bool = False,
    master_params: bool = False,
    master_weights: bool = True,
    moment_bytes: float = 4.0,
) -> tuple[float, float, float]:
    """(parameters, gradients, optimizer) bytes on one rank holding `params` parameters before sharding;
    `master_params`: the fp32 parameters are the master weights (module docstring); not `master_weights`:
    pure 16-bit training, parameters, gradients and both Adam moments in `dtype` (training.master_weights);
    `moment_bytes`: bytes of each Adam moment (training.optimizer_moment_dtype)."""
    shard = max(dp, 1)
    if not master_weights and dtype != "fp32":
        d = DTYPE_BYTES[dtype]
        return (
            params * d / (shard if zero_stage >= 3 else 1),
            params * d / (shard if zero_stage >= 2 else 1),
            params * 2 * d / (shard if zero_stage >= 1 else 1),
        )
    if master_params and dtype != "fp32":
        copy = DTYPE_BYTES[dtype] if zero_stage < 3 else 0.0  # ZeRO-3: the gathered units hold it
        master = 4.0 / (shard if zero_stage >= 2 else 1)
        return (
            params * (master + copy),
            params * 4.0 / (shard if zero_stage >= 2 else 1),
            params * 2 * moment_bytes / (shard if zero_stage >= 1 else 1),
        )
    if dtype == "fp32":
        p_bytes, g_bytes, o_bytes = 4.0, 4.0, 2 * moment_bytes
    else:  # the fp32 master copy and the two moments
        p_bytes, g_bytes, o_bytes = 2.0, 4.0 if grad_fp32 else 2.0, 4.0 + 2 * moment_bytes
    optimizer = params * o_bytes / (shard if zero_stage >= 1 else 1)
    gradients = params * g_bytes / (shard if zero_stage >= 2 else 1)
    parameters = params * p_bytes / (shard if zero_stage >= 3 else 1)
    return parameters, gradients, optimizer


def layer_activation_bytes(
    x: Shape, recompute: str, mlp_bytes: float | None = None, policy: str = "attention"
) -> float:
    """Bytes one transformer block keeps for backward, per micro-batch (Korthikanti et al. 2022, sec. 4.1;
    e.g. tensor parallel: s*b*h*(10 + 24/t + 5*a*s/(h*t)) for fp16 GPT). Generalised to GQA, SwiGLU,
    head_dim, MLA, fp32, fused attention and FP8 GEMM inputs (gemm_input_bytes); `mlp_bytes` replaces
    the MLP's share (an MoE block, costs/moe.py). Under context parallel x.s is the rank's s / cp
    tokens, so everything but the K/V-length scores is /cp. Selective recompute under `policy` "op"
    (torchtitan's per-op checkpointing) keeps the block's input and the outputs costs/recompute.py
    lists, and fp32 logsumexp rows when attention is fused. Selective recompute under "attention" keeps what
    x.recompute_modules do not discard (Megatron-Core `recompute_modules`, costs/recompute.py)."""
    d, t, r = x.dtype_bytes, x.tp, x.residual_bytes or x.dtype_bytes
    sbh = x.s * x.b * x.h
    sp = t if x.sp else 1  # sequence parallel shards the otherwise replicated tensors
    if recompute == "full":
        return r * sbh / sp  # the block's input only
    if recompute == "selective" and policy == "op" and mlp_bytes is None:
        lse = 4.0 * x.b * x.heads / t * x.s if x.flash else 0.0
        return r * sbh / sp + d * x.s * x.b * op_sac_saved_elements(layer_forward(x), x) + lse
    g = gemm_input_bytes(x)
    # two norm inputs (residual-stream elements: fp32 under autocast over fp32 weights, Shape.residual_bytes),
    # two 1-byte dropout masks (none without dropout, model_dropout.py); QKV input, FC1 input, the sequence
    # parallel shard or, where the framework saves it, the gathered input (Shape.sp_saves_gathered)
    replicated = (2 * r + (2 if x.hidden_dropout else 0)) * sbh / sp
    replicated += 2 * g * sbh / (1 if x.sp_saves_gathered else sp)
    qkv = d * x.s * x.b * (x.q_dim + 2 * x.kv_dim) / t
    if x.qk_norm:  # the per-head norms keep their inputs, the projected Q and K
        qkv += d * x.s * x.b * (x.q_dim + x.kv_dim) / t
    # the attention's output: the output projection's input, which the fused kernel also keeps (its
    # backward reads it) in `dtype` beside a narrow copy under FP8
    out_bytes = g + (d if x.flash and g != d else 0.0)
    if x.attn_out_e5m6:  # one E5M6 copy serves both backwards (training.attention_output_store)
        out_bytes = E5M6_BYTES
    out_proj = out_bytes * (x.s * x.b * x.o_dim) / t
    if x.mla is not None:  # the latents, per-head Q/K/V and output MLA keeps (costs/mla.py)
        projections, output = mla_saved_elements(x, x.mla)
        out_element = E5M6_BYTES if x.attn_out_e5m6 else d
        qkv, out_proj = d * x.s * x.b * projections, out_element * x.s * x.b * output
    # FC1's output (the activation's input: two halves under SwiGLU, Shape.act_input_bytes each), FC2's
    # input
    if mlp_bytes is None:
        mlp = ((2 if x.swiglu else 1) * x.act_input_bytes + g) * x.s * x.b * x.ffn / t
    else:
        mlp = mlp_bytes
    modules = x.recompute_modules if recompute == "selective" else frozenset()
    scores = 0.0
    unfused = not x.flash and x.dsa is None  # DSA's kernels are fused whatever flash_attention says
    if unfused and (recompute == "none" or (recompute == "selective" and "core_attn" not in modules)):
        # softmax out (and under dropout its mask and output)
        scores = (d + (d + 1 if x.attention_dropout else 0)) * x.b * x.heads * x.s * (x.kv_s or x.s) / t
    if "mlp" in modules and mlp_bytes is None:  # Megatron-Core's "mlp" recompute (costs/recompute.py)
        mlp = 0.0
    discarded = discarded_block_bytes(x, moe=mlp_bytes is not None) if modules else 0.0
    attention = qkv + out_proj + scores + (d * x.s * x.b * (x.q_dim + x.o_dim) / t if x.attn_gate else 0.0)
    if x.gdn is not None:  # a hybrid's mean block: its Gated DeltaNet layers' share (costs/gdn.py)
        attention += x.gdn.share * (gdn_saved_bytes(x, x.gdn, g) - attention)
    return replicated + attention + mlp - discarded


def gemm_input_bytes(x: Shape) -> float:
    """Bytes per element of a GEMM input saved for its weight gradient. Under FP8 the linear layers save
    the quantized input they already made for the forward GEMM, in the orientation the weight-gradient
    GEMM reads: Transformer Engine's Linear / LayerNormLinear save `inputmat` / `ln_out` after the cast
    (transformer_engine/pytorch/module/linear.py, layernorm_linear.py, keeping only the column-wise copy
    of block-scaled formats), torchao's tensorwise Float8Linear saves `input_fp8`
    (torchao/float8/float8_linear.py `manual_float8_matmul_with_args_in_float8`), its rowwise recipe the
    high-precision input: costs/fp8.py `Recipe.saved_input_bytes`."""
    return fp8_gemm_input_bytes(x.fp8, x.fp8_recipe, x.dtype_bytes)


def rebuilds_a_block(recompute: str, policy: str, moe: bool) -> bool:
    """Whether backward rebuilds one block's activations at a time on top of what the blocks keep: full
    recompute, and torchtitan's per-op policy (dense blocks; an MoE block keeps the attention policy's)."""
    return recompute == "full" or (recompute == "selective" and policy == "op" and not moe)


def peak_inflight_layers(actions: tuple[Action, ...], chunk_layers: dict[int, int]) -> int:
    """Most layer-micro-batches whose activations a rank holds at once under its schedule:
    forward of (chunk, mb) adds the chunk's layers, its backward (B) releases them."""
    return round(peak_inflight_bytes(actions, {c: float(n) for c, n in chunk_layers.items()}))


def loss_bytes_per_logit(s: Scenario, vocab_tp: int | None = None) -> float:
    """Bytes per logit the cross-entropy holds at its peak, the start of backward, with the vocabulary split
    over `vocab_tp` ranks (default: the scenario's). Megatron-LM's vocab-parallel loss keeps the softmax
    and writes the gradient into it: fp32 logits and gradient, 8. torch's `F.cross_entropy` (torchtitan
    without tensor parallel) saves log_softmax's fp32 output, and its backward holds that, the incoming
    gradient and the input gradient at once: 12. torchtitan's loss parallel (tp > 1, its default
    `loss_parallel`) runs torch's DTensor handler, which fuses the two backwards as `(grad_input +
    exp(x)) * grad_output` over a zeroed `grad_input` (torch/distributed/tensor/parallel/loss.py
    `_nll_loss_and_log_softmax_backward`): the saved fp32 log-softmax and three fp32 temporaries at
    once, 16. Transformer Engine's fused loss (training.fused_cross_entropy "te") saves the logits in the
    training dtype and row statistics, and computes the gradient from them in backward
    (transformer_engine/pytorch/cross_entropy.py `CrossEntropyFunction`): the logits' own bytes."""
    if s.training.fused_cross_entropy == "te":
        return float(DTYPE_BYTES[s.training.dtype])
    if s.parallelism.framework != "torchtitan":
        return 8.0
    return 16.0 if (s.vocab_tp if vocab_tp is None else vocab_tp) > 1 else 12.0


def rank_memory(s: Scenario, pp_rank: int, schedule: Schedule | None = None) -> MemoryBreakdown:
    """Peak memory of a rank at pipeline position pp_rank (all tp/dp ranks of a stage are alike).

    `schedule` (build_schedule of the scenario) may be passed in to avoid rebuilding it per rank."""
    m, t, par = s.model, s.training, s.parallelism
    split = s.layer_split
    stages = s.pp * s.vpp
    owned = owned_stages(par.pipeline_parallel_schedule, s.pp, pp_rank, s.vpp)  # this rank's, by chunk
    starts = [sum(split[:v]) for v in range(stages)]
    held = parameter_stages(s, owned)  # DualPipe's second copy (costs/memory_dualpipe.py)
    params, experts = rank_parameters(m, split, held, tp=s.tp, vocab_tp=s.vocab_tp, ep=s.ep, etp=s.etp)
    p_b, g_b, o_b = _model_states(s, params - experts, experts)
    o_b *= optimizer_share(s)
    if caches_fp8_weights(s):  # the blocks' FP8 weights (costs/fp8.py): not the embedding and output layer
        outer = rank_parameters(m, [0] * stages, held, tp=s.tp, vocab_tp=s.vocab_tp, ep=s.ep, etp=s.etp)[0]
        copies = fp8_weight_copy_bytes(
            params - outer, par.zero_stage, t.fp8_recipe, t.fp8_param, DTYPE_BYTES[t.dtype]
        )
        if (t.fp8_param or par.zero_stage < 3) and not keeps_fp8_transpose(s):
            copies -= params - outer  # one byte a weight element: no transpose beside the FP8 weight
        p_b += copies / s.zero_dp if par.zero_stage >= 3 else copies  # FP8 primary weights shard like bf16's
    host = 0.0
    if t.optimizer_cpu_offload:  # the optimizer's states live on the host (costs/offload.py)
        host, o_b = o_b, 0.0
    # ZeRO-3 keeps its own category, so each of the others keeps its textbook identity (16P/N in all):
    # the unit being computed is gathered in full, plus the one prefetched: a layer (FSDP2), or under
    # DeepSpeed a GEMM's weight and the next one's (it gathers per submodule, simulator/units.py).
    x = Shape.of(s)
    gathered = 0.0
    if par.zero_stage >= 3 and s.dp > 1:
        gathered = 2 * layer_params(m).per_rank(s.tp) * DTYPE_BYTES[t.dtype]
        if par.framework == "deepspeed" and not m.is_moe:
            w = [gemm_weight_elements(op, x) for op in layer_forward(x) if op.category == "matmul"]
            gathered = max(a + b for a, b in zip(w, w[1:] + w[:1], strict=True)) * DTYPE_BYTES[t.dtype]
    if fsdp_holds_stage_unsharded(s):
        if par.zero_stage >= 3:
            gathered = params * DTYPE_BYTES[t.dtype]
        g_b += params * DTYPE_BYTES[s.fsdp_reduce_dtype]
    if schedule is None:
        schedule = build_schedule(par.pipeline_parallel_schedule, s.pp, s.num_microbatches, s.vpp)
    has_moe = any(moe_layer_count(m, starts[v], split[v]) for v in owned)
    # the rank's largest block, conservatively
    folded = s.etp if par.expert_tensor_parallel_degree is not None else None
    mlp = moe_activation_bytes(x, m, t.moe_routing_imbalance, folded) if has_moe else None
    kept, layers = {}, {}
    for c, stage in enumerate(owned):  # each multi-token-prediction depth keeps a block's activations
        layers[c] = split[stage] + (m.num_nextn_predict_layers if stage == stages - 1 else 0)
        kept[c] = chunk_activation_bytes(s, x, layers[c], mlp)
    rebuilt = max(k[1] for k in kept.values())
    resident, offloaded, staging = offload_split(s, x, mlp, {c: k[0] for c, k in kept.items()}, layers)
    outputs = kept_output_bytes(s, x, owned)
    acts, offloaded_host = inflight_peak_bytes(schedule[pp_rank], resident, offloaded, staging, outputs)
    acts += extra_inflight_bytes(s, resident)
    host += offloaded_host
    gathered += fsdp_transient_bytes(s, owned, schedule[pp_rank], resident, outputs, acts)
    acts += rebuilt + pipelining_buffer_bytes(s, x, owned, schedule[pp_rank])
    if stages - 1 in owned:  # the loss's fp32 buffers for one micro-batch (vocab-parallel)
        # all of it when replicated; one loss per multi-token-prediction depth beside the main one
        acts += (1 + m.num_nextn_predict_layers) * loss_bytes_per_logit(s) * x.s * x.b * x.vocab / s.vocab_tp
    return MemoryBreakdown(p_b, g_b, o_b, acts, gathered, host)


def caches_fp8_weights(s: Scenario) -> bool:
    """Whether FP8 GEMM weights live for the step beside the parameters. Transformer Engine caches each
    weight's FP8 copy over a step's micro-batches (`is_first_microbatch`), or holds FP8 primary weights
    (training.fp8_param); torchao's Float8Linear (torchtitan) casts the weight in every forward
    (torchao/float8/float8_linear.py `Float8Linear.forward`), so no copy outlives its micro-batch (a
    block that is not recomputed saves its micro-batch's cast for backward: not counted)."""
    t = s.training
    return t.fp8 and (t.fp8_param or s.parallelism.framework != "torchtitan")


def keeps_fp8_transpose(s: Scenario) -> bool:
    """Whether a per-tensor FP8 weight keeps its transpose beside it. Hopper's FP8 GEMMs take both operands
    K-major (TN only), so Transformer Engine writes a transposed copy for the GEMMs that read the other
    way; it makes none where cuBLASLt runs every layout: `create_transpose = columnwise_usage &&
    !nvte_is_non_tn_fp8_gemm_supported()` (transformer_engine/pytorch/csrc/quantizer.cpp), true for
    compute capability 10.x and 13+ (transformer_engine/common/transformer_engine.cpp). Block-scaled
    recipes keep both orientations on every GPU (their scales run along K, costs/fp8.py)."""
    cc = s.cluster.gpu.compute_capability
    per_tensor = s.training.fp8_recipe in ("tensorwise_delayed", "tensorwise_current")
    return not (per_tensor and cc is not None and (10.0 <= cc < 12.0 or cc >= 13.0))


def pipelining_buffer_bytes(
    s: Scenario, x: Shape, owned: tuple[int, ...] | list[int], actions: tuple[Action, ...]
) -> float:
    """The receive buffers parallelism.pipeline_receive_buffers = "per_microbatch" keeps for the step:
    torch.distributed.pipelining allocates one per micro-batch of the step for each stage's input (but the
    first stage's) and output gradient (but the last stage's) (torch/distributed/pipelining/stage.py
    `_prepare_forward_infra` / `_prepare_backward_infra`, one `_make_tensor_from_meta` per micro-batch;
    pytorch/pytorch#136380). A stage boundary is the rank's share of the residual stream, split over tp
    under sequence parallel. The input buffers of the micro-batches in flight are their chunks' first
    inputs, already counted with the activations."""
    if s.parallelism.pipeline_receive_buffers != "per_microbatch" or s.pp == 1:
        return 0.0
    last = s.pp * s.vpp - 1
    boundary = x.b * x.s * x.h * x.dtype_bytes / (x.tp if x.sp else 1)
    buffers = sum((v > 0) + (v < last) for v in owned) * s.num_microbatches * boundary
    inputs = {c: boundary if v > 0 else 0.0 for c, v in enumerate(owned)}
    return buffers - peak_inflight_bytes(actions, inputs)


def chunk_activation_bytes(s: Scenario, x: Shape, layers: int, mlp: float | None) -> tuple[float, float]:
    """(bytes a chunk of `layers` blocks keeps per micro-batch, bytes its backward rebuilds at once on top).

    Partial recompute (training.recompute_num_layers, Megatron-LM megatron/core/transformer/
    transformer_block.py `_checkpointed_forward`): "block" checkpoints the first n blocks of the chunk one
    by one and keeps every activation of the rest; "uniform" checkpoints the input of each group of n
    blocks and rebuilds a whole group in backward (n = 1: full recompute)."""
    t = s.training
    full = layer_activation_bytes(x, "none", mlp)
    if t.recompute != "full" or t.recompute_num_layers is None:
        rebuilt = full if rebuilds_a_block(t.recompute, t.selective_recompute, moe=mlp is not None) else 0.0
        return layers * layer_activation_bytes(x, t.recompute, mlp, t.selective_recompute), rebuilt
    n, checkpoint = min(t.recompute_num_layers, layers), layer_activation_bytes(x, "full", mlp)
    if t.recompute_method == "block":
        return n * checkpoint + (layers - n) * full, full if n else 0.0
    return math.ceil(layers / max(n, 1)) * checkpoint, n * full


def offload_split(
    s: Scenario, x: Shape, mlp: float | None, kept: dict[int, float], layers: dict[int, int]
) -> tuple[dict[int, float], dict[int, float], float]:
    """(bytes each chunk keeps on the GPU per micro-batch, bytes it offloads, the most offloaded bytes on the
    GPU at once) under training.activation_offload. Megatron-Core's `--cpu-offloading-num-layers` n
    offloads the first n blocks of a chunk (Transformer Engine `get_cpu_offload_context`: one offload
    group per block, `AsyncDoubleBufferGroupOffloadHandler`), the rest keep their activations; its double
    buffer holds the block being computed and the one on the host link: two blocks' worth."""
    t = s.training
    if not t.activation_offload:
        return kept, dict.fromkeys(kept, 0.0), 0.0
    layer = layer_activation_bytes(x, t.recompute, mlp, t.selective_recompute)
    n = t.activation_offload_num_layers
    offloaded = {c: b if n is None else min(b, min(n, layers[c]) * layer) for c, b in kept.items()}
    return {c: kept[c] - offloaded[c] for c in kept}, offloaded, 2 * layer


def peak_inflight_bytes(
    actions: tuple[Action, ...], chunk_bytes: dict[int, float], kept: dict[int, float] | None = None
) -> float:
    """Most activation bytes a rank holds at once under its schedule: forward of (chunk, mb) adds what
    the chunk keeps, its backward (B) releases it; `kept`: bytes a forward adds that stay to the step's end
    (kept_output_bytes)."""
    added = {c: b + (kept[c] if kept else 0.0) for c, b in chunk_bytes.items()}  # per chunk, once
    live = peak = 0.0
    for a in actions:  # the sweep's exact memory check walks every rank's actions: kept lean
        kind = a.kind
        if kind == "F":
            live += added[a.chunk]
            peak = max(peak, live)
        elif kind == "B":
            live -= chunk_bytes[a.chunk]
    return peak


def inflight_peak_bytes(
    actions: tuple[Action, ...],
    resident: dict[int, float],
    offloaded: dict[int, float],
    staging: float,
    outputs: dict[int, float],
) -> tuple[float, float]:
    """(most activation bytes on the GPU at once, bytes left on the host at the offloaded peak): what the
    chunks keep on the GPU and the outputs kept for the step; under training.activation_offload the
    offloaded blocks leave at most `staging` on the GPU, copied or computed (offload_split)."""
    acts = peak_inflight_bytes(actions, resident, outputs)
    off = peak_inflight_bytes(actions, offloaded) if any(offloaded.values()) else 0.0
    if not off:
        return acts, 0.0
    step_outputs = sum(outputs[a.chunk] for a in actions if a.kind == "F")
    return max(acts, min(off, staging) + step_outputs), off - min(off, staging)


def kept_output_bytes(s: Scenario, x: Shape, owned: tuple[int, ...] | list[int]) -> dict[int, float]:
    """Per chunk, the output a forward leaves until the step ends under parallelism.pipeline_output_chunks:
    torch.distributed.pipelining's `forward_one_chunk` appends it to `output_chunks` for the step's merge
    (torch/distributed/pipelining/stage.py; pytorch/pytorch#153383 kept only the last stage's, #138504
    detached them but kept the tensors). A middle stage's output is the rank's share of the residual stream
    (split over tp under sequence parallel), the last stage's the logits in the training dtype."""
    keep = s.parallelism.pipeline_output_chunks
    last = s.pp * s.vpp - 1
    boundary = x.b * x.s * x.h * x.dtype_bytes / (x.tp if x.sp else 1)
    logits = x.b * x.s * x.vocab / s.vocab_tp * x.dtype_bytes
    out = {}
    for c, v in enumerate(owned):
        if v == last:
            out[c] = logits if keep != "none" else 0.0
        else:
            out[c] = boundary if keep == "every_stage" else 0.0
    return out


def _model_states(s: Scenario, dense: float, experts: float) -> tuple[float, float, float]:
    """(parameters, gradients, optimizer) bytes: ZeRO shards dense states over the dense-gradient group
    dp * cp (Megatron-LM's data-parallel group with context parallel; under HSDP its shard group,
    Scenario.zero_dp) and the routed experts' over the expert-data-parallel group dp / ep (Megatron-Core's
    expert_data_parallel_group), simulator/mesh.py."""
    t, zero = s.training, s.parallelism.zero_stage
    grad_fp32, master = bool(t.grad_accumulation_fp32), s.amp_master_params

    def states(n: float, dp: int) -> tuple[float, float, float]:
        return model_state_bytes(
            n,
            dp=dp,
            zero_stage=zero,
            dtype=t.dtype,
            grad_fp32=grad_fp32,
            master_params=master,
            master_weights=t.master_weights,
            moment_bytes=DTYPE_BYTES[t.optimizer_moment_dtype],
        )

    d = states(dense, s.zero_dp)
    if not experts:
        return d
    e = states(experts, s.edp)
    return d[0] + e[0], d[1] + e[1], d[2] + e[2]


def peak_memory(s: Scenario, schedule: Schedule | None = None) -> tuple[int, MemoryBreakdown]:
    """(pipeline rank, breakdown) of the rank with the highest peak."""
    if schedule is None:
        schedule = build_schedule(s.parallelism.pipeline_parallel_schedule, s.pp, s.num_microbatches, s.vpp)
    per_rank = [(r, rank_memory(s, r, schedule)) for r in range(s.pp)]
    return max(per_rank, key=lambda item: item[1].total)


def fits_in_memory(s: Scenario, limit_bytes: float, schedule: Schedule | None = None) -> bool:
    """Whether `peak_memory`'s peak is at most `limit_bytes`: every rank's, stopping at the first above it.
    The second and the last pipeline ranks first: a model whose first stage holds its dense blocks (the
    sweep's closed form checks that one, simulator/sweep_groups.py) mostly peaks there, on the second
    rank's early in-flight micro-batches or the last one's head, loss and multi-token-prediction blocks."""
    if schedule is None:
        schedule = build_schedule(s.parallelism.pipeline_parallel_schedule, s.pp, s.num_microbatches, s.vpp)
    ranks = dict.fromkeys([r for r in (1, s.pp - 1) if r < s.pp] + list(range(s.pp)))
    return all(rank_memory(s, r, schedule).total <= limit_bytes for r in ranks)
