"""FLOPs and HBM bytes of every operator of one micro-batch on one rank.

A transformer block's forward is a list of `Op`s (GEMMs, attention core, memory-bound elementwise
ops); backward and recompute are derived from it. FLOP counts follow Narayanan et al. 2021 eq. (3)
(24·b·s·h² + 4·b·s²·h per layer for GPT), generalised to grouped-query attention and SwiGLU.
Bytes of elementwise ops follow the tensors they read and write (Korthikanti et al. 2022, sec. 4.1,
lists the same tensors for activation memory).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from plancast.simulator.costs import eager
from plancast.simulator.costs.attention import (
    CAUSAL_FRACTION,
    flash_kernel_relative,
    fused_attention_rate,
    head_dim_rate,
    window_work,
)
from plancast.simulator.costs.dsa import Dsa, dsa_core_ops, indexer_projections, projection_backward
from plancast.simulator.costs.fp8 import Recipe, recipe
from plancast.simulator.costs.gdn import Gdn, blend, gdn_mixer, gdn_projections, output_gate
from plancast.simulator.costs.moe_gemm import grouped_gemm_rate, multi_stream_experts, per_expert_quantize
from plancast.simulator.costs.op import Op, in_share
from plancast.simulator.expert_bias import expert_bias_add, probs_bytes
from plancast.simulator.model_dropout import dropout_probabilities
from plancast.simulator.scenario import Model, Scenario

DTYPE_BYTES = {"fp32": 4, "fp16": 2, "bf16": 2}
# bytes an element of the attention output cached in E5M6 (12 bits) with an fp32 scale per 1x128 tile
# (DeepSeek-V3 report, arXiv 2412.19437 sec. 3.3.2-3.3.3; training.attention_output_store)
E5M6_BYTES = 12 / 8 + 4 / 128


@dataclass(frozen=True, slots=True)
class MlaRanks:
    """Multi-head latent attention's low ranks (simulator/model_shapes.py); the head widths sit in Shape."""

    q_lora: int  # 0: queries projected from the hidden state directly (q_lora_rank null)
    kv_lora: int
    rope: int  # the rotary key width every head shares (qk_rope_head_dim)

    @classmethod
    def of(cls, m: Model) -> MlaRanks | None:
        if m.kv_lora_rank is None:
            return None
        return cls(m.q_lora_rank or 0, m.kv_lora_rank, m.qk_rope_head_dim or 0)


@dataclass(frozen=True, slots=True)
class Shape:
    """What the op formulas need, read off a scenario once."""

    b: int  # micro-batch size
    s: int  # sequence length on this rank: seq_len / cp (context parallel splits it)
    h: int
    heads: int
    kv_dim: int  # kv_heads * head_dim
    ffn: int
    vocab: int
    tp: int
    vocab_tp: int  # tp when the embedding/head are vocab-parallel, else 1
    sp: bool
    dtype_bytes: int
    swiglu: bool
    rope: bool
    flash: bool
    kv_s: int = 0  # keys each query attends over: the whole sequence under context parallel; 0: s
    fp8: bool = False  # the block's GEMMs in FP8 (training.fp8)
    fp8_recipe: str = "tensorwise_delayed"  # training.fp8_recipe
    fused_attention: float | None = None  # the causal fused kernel's rate (costs/attention.py); None: not it
    flash_relative: float = 1.0  # the other flash kernel's rate over FlashAttention-2's (FlexAttention's)
    window_work: float = 1.0  # the fused core's work (windows, packed documents) over causal's (attention.py)
    sink_rescale: bool = False  # attention sinks applied after a FlexAttention kernel (ops.sink_rescale)
    eager: bool = False  # elementwise ops as eager PyTorch runs them (training.elementwise, costs/eager.py)
    rmsnorm: bool = False
    qk_head_dim: int = 0  # per-head query/key width (model_shapes.py); 0: h / heads
    v_head_dim: int = 0  # per-head value width; 0: qk_head_dim
    mla: MlaRanks | None = None  # multi-head latent attention (costs/mla.py); None: grouped-query
    dsa: Dsa | None = None  # DeepSeek Sparse Attention over MLA (costs/dsa.py); None: dense attention
    gdn: Gdn | None = None  # Gated DeltaNet layers of a hybrid model (costs/gdn.py); None: none
    attn_gate: bool = False  # the full attention's output gate (model.attn_output_gate)
    relu2: bool = False  # squared-ReLU MLP (two matrices, as GELU)
    qk_norm: bool = False  # RMSNorm over every query and key head (model.qk_layernorm)
    grouped_gemm_rate: float = 1.0  # the routed experts' grouped GEMMs over a large GEMM (costs/moe_gemm.py)
    per_expert_quantize: bool = False  # under fp8, one quantize call per local expert (costs/moe_gemm.py)
    multi_stream_experts: bool = False  # one cuBLAS GEMM per expert on a few streams (costs/moe_gemm.py)
    expert_bias: str | None = None  # how expert biases are added (simulator/expert_bias.py); None: none
    probs_bytes: int = 2  # bytes of a routing probability at the experts (expert_bias.probs_bytes)
    hidden_dropout: bool = True  # masks after the output projections (model.hidden_dropout > 0)
    attention_dropout: bool = True  # a mask over the attention probabilities (model.attention_dropout > 0)
    # bytes of a residual-stream element: fp32 under autocast over fp32 parameters without FSDP's bf16 cast
    # (the embedding's fp32 output and every block's sum stay fp32; costs/memory.py layer_activation_bytes);
    # 0: dtype_bytes
    residual_bytes: int = 0
    # sequence parallel whose column-parallel GEMMs save their all-gathered input (torchtitan's DTensor plan
    # gathers each block's input to Replicate before wq/wk/wv and w1/w3, and the matmuls save it:
    # torchtitan/models/llama3/infra/parallelize.py apply_tp); Megatron-LM saves the shard and gathers
    # again in backward (megatron/core/tensor_parallel/layers.py LinearWithGradAccumulationAndAsync...)
    sp_saves_gathered: bool = False
    # what recompute = "selective" re-runs under the "attention" policy (training.recompute_modules,
    # costs/recompute.py); Megatron-Core's default
    recompute_modules: frozenset[str] = frozenset({"core_attn"})
    attn_out_e5m6: bool = False  # the attention output kept once in E5M6 (training.attention_output_store)
    # how the SwiGLU's input is saved (training.activation_input_store): dtype, fp8 or fp8_recipe
    act_input_store: str = "dtype"

    @property
    def qk_dim(self) -> int:
        """Width of one head's query/key (h / heads unless the model declares head_dim or MLA)."""
        return self.qk_head_dim or self.h // self.heads

    @property
    def q_dim(self) -> int:
        """All query heads' width: h for a GPT/Llama block."""
        return self.heads * self.qk_dim

    @property
    def v_dim(self) -> int:
        """One head's value width."""
        return self.v_head_dim or self.qk_dim

    @property
    def o_dim(self) -> int:
        """Attention output width, the out-projection's input: heads * v_dim (h for GPT/Llama)."""
        return self.heads * self.v_dim

    @classmethod
    def of(cls, s: Scenario) -> Shape:
        m, t = s.model, s.training
        hidden_dropout, attention_dropout = dropout_probabilities(m, s.parallelism.framework)
        return cls(
            b=t.micro_batch_size,
            s=t.seq_len // s.cp,
            kv_s=t.seq_len,
            h=m.hidden_size,
            heads=m.num_attention_heads,
            kv_dim=m.kv_heads * m.qk_head_dim,
            ffn=m.ffn_size,
            vocab=m.vocab_size,
            tp=s.tp,
            vocab_tp=s.vocab_tp,
            sp=s.parallelism.sequence_parallel,
            dtype_bytes=DTYPE_BYTES[t.dtype],
            swiglu=m.activation == "swiglu",
            rope=m.position_embedding == "rope",
            flash=t.flash_attention,
            fp8=t.fp8,
            fp8_recipe=t.fp8_recipe,
            fused_attention=fused_attention_rate(
                s.cluster.compute, s.parallelism.framework, t.flash_attention, t.seq_len, t.attention_backend
            ),
            flash_relative=flash_kernel_relative(s.cluster.compute, t.attention_backend),
            window_work=window_work(s),
            sink_rescale=m.attention_sinks and t.flash_attention and t.attention_backend == "flex",
            eager=t.elementwise == "eager",
            rmsnorm=m.norm == "rmsnorm",
            qk_head_dim=m.qk_head_dim,
            v_head_dim=m.value_head_dim,
            mla=MlaRanks.of(m),
            dsa=Dsa.of(s),
            gdn=Gdn.of(s),
            attn_gate=m.attn_output_gate,
            relu2=m.activation == "relu2",
            qk_norm=m.qk_layernorm,
            grouped_gemm_rate=grouped_gemm_rate(s),
            per_expert_quantize=per_expert_quantize(s),
            multi_stream_experts=multi_stream_experts(s),
            expert_bias=expert_bias_add(s),
            probs_bytes=probs_bytes(s.parallelism.moe_token_dispatcher, DTYPE_BYTES[t.dtype]),
            hidden_dropout=hidden_dropout > 0,
            attention_dropout=attention_dropout > 0,
            residual_bytes=4 if s.amp_master_params and s.parallelism.zero_stage < 2 else 0,
            sp_saves_gathered=s.parallelism.framework == "torchtitan" and s.parallelism.sequence_parallel,
            recompute_modules=_recompute_modules(s),
            act_input_store=t.activation_input_store if m.activation == "swiglu" else "dtype",
            attn_out_e5m6=t.attention_output_store == "e5m6",
        )

    @property
    def act_input_bytes(self) -> float:
        """Bytes a saved element of the MLP activation's input takes (training.activation_input_store): 1
        as Megatron-Core's plain cast to float8_e4m3fn (fused_bias_swiglu.py), the FP8 recipe's saved
        input bytes (its scales included, costs/fp8.py) under "fp8_recipe", else the training dtype's."""
        if self.act_input_store == "fp8_recipe":
            return recipe(self.fp8_recipe).saved_input_bytes
        return 1.0 if self.act_input_store == "fp8" else float(self.dtype_bytes)


def _recompute_modules(s: Scenario) -> frozenset[str]:
    """training.recompute_modules where they apply (selective recompute under the "attention" policy; an
    empty list recomputes nothing), else Megatron-Core's default ["core_attn"]."""
    t = s.training
    megatron_selective = t.recompute == "selective" and t.selective_recompute == "attention"
    if megatron_selective and t.recompute_modules is not None:
        return frozenset(t.recompute_modules)
    return frozenset({"core_attn"})


def _gemm(name: str, m: float, k: float, n: float, d: int, narrow: Recipe | None = None) -> Op:
    """C[m,n] = A[m,k] @ B[k,n]: 2mkn FLOPs; reads A and B (narrow: their quantized elements and scales),
    writes C."""
    if narrow is None:
        return Op(name, "matmul", 2.0 * m * k * n, d * (m * k + k * n) + d * m * n, True)
    a_b = (narrow.element_bytes + narrow.scale_bytes) * (m * k + k * n)
    return Op(name, "matmul", 2.0 * m * k * n, a_b + d * m * n, True, True, narrow.peak)


def linear(name: str, m: float, k: float, n: float, x: Shape) -> list[Op]:
    """A block's linear layer: its GEMM, under training.fp8 after the quantization of its input in both
    orientations (training.fp8_recipe's reads and writes, costs/fp8.py)."""
    d = x.dtype_bytes
    if not x.fp8:
        return [_gemm(name, m, k, n, d)]
    narrow = recipe(x.fp8_recipe)
    cast = Op(f"{name}_fp8_cast", "memory", 0.0, narrow.cast_bytes(d) * m * k)
    return [cast, _gemm(name, m, k, n, d, narrow)]


def _elementwise(name: str, elements: float, d: int, extra_bytes: float = 0.0) -> Op:
    """Read and write every element once (plus masks or statistics)."""
    return Op(name, "memory", 0.0, 2.0 * elements * d + extra_bytes)


def _eager_op(name: str, elements: float, bytes_per_element: float) -> Op:
    """An eager kernel sequence as one op: its bytes, one per-op overhead (the sequence's kernels queue
    back to back on the stream; their launch gaps are not counted)."""
    return Op(name, "memory", 0.0, elements * bytes_per_element)


def norm(name: str, elements: float, x: Shape) -> Op:
    """A LayerNorm or RMSNorm over `elements`: one kernel, or RMSNorm's eager sequence."""
    if x.eager and x.rmsnorm:
        return _eager_op(name, elements, eager.rms_norm(x.dtype_bytes))
    return _elementwise(name, elements, x.dtype_bytes)


def rope(name: str, elements: float, x: Shape) -> Op:
    """Rotary embedding of q and k over `elements`: one kernel, or eager's complex multiply in fp32."""
    if x.eager:
        return _eager_op(name, elements, eager.rope(x.dtype_bytes))
    return _elementwise(name, elements, x.dtype_bytes)


def swiglu(name: str, elements: float, x: Shape) -> Op:
    """silu(gate) * up over `elements`: one fused kernel (read two, write one), or eager's two. Under
    training.activation_input_store the input (2 x elements) is also quantized for backward (read d, write
    Shape.act_input_bytes an element: Megatron-Core fused_bias_swiglu.py `input.to(torch.float8_e4m3fn)`),
    its cast back in backward priced by the memory ops' backward factor, as costs/fp8.py's casts are."""
    narrow = x.act_input_store != "dtype"
    store = 2.0 * elements * (x.dtype_bytes + x.act_input_bytes) if narrow else 0.0
    if x.eager:
        return _eager_op(name, elements, eager.swiglu(x.dtype_bytes) + store / max(elements, 1.0))
    return _elementwise(name, elements, x.dtype_bytes, extra_bytes=elements * x.dtype_bytes + store)


def attention_forward(x: Shape) -> list[Op]:
    """Q/K/V projections, rotary embedding and the attention core of one block (GQA, or MLA through
    costs/mla.py), up to the out-projection's input of x.o_dim features per token."""
    store = [attention_output_store(x)] if x.attn_out_e5m6 else []
    if x.mla is not None:
        return mla_attention_forward(x, x.mla) + store
    tokens, t = x.b * x.s, x.tp
    ops = linear("qkv", tokens, x.h, ((2 if x.attn_gate else 1) * x.q_dim + 2 * x.kv_dim) / t, x)
    if x.qk_norm:  # per-head RMSNorm of queries and keys (Qwen3)
        ops.append(norm("qk_norm", tokens * (x.q_dim + x.kv_dim) / t, x))
    if x.rope:
        ops.append(rope("rope", tokens * (x.q_dim + x.kv_dim) / t, x))
    gate = [output_gate(x)] if x.attn_gate else []
    return ops + attention_core_forward(x, x.kv_dim, x.kv_dim * x.v_dim // x.qk_dim) + gate + store


def attention_output_store(x: Shape) -> Op:
    """The attention output's quantization to E5M6 for backward (training.attention_output_store): read
    it in training.dtype, write E5M6_BYTES an element; the dequantization in backward is priced by the
    memory ops' backward factor, as costs/fp8.py's casts are."""
    elements = x.b * x.s * x.o_dim / x.tp
    return Op("attn_out_store", "memory", 0.0, elements * (x.dtype_bytes + E5M6_BYTES))


def mla_attention_forward(x: Shape, r: MlaRanks) -> list[Op]:
    """Multi-head latent attention (costs/mla.py has its shapes and sources): down-projections, their
    norms, up-projections, rotary embedding and the attention core (up to the output projection's
    input). Under context parallel the rank up-projects the latents of all kv_s tokens it gathered
    (costs/cp.py exchanges the latent, costs/mla.py `cp_kv_elements_per_token`); the down-projections
    are duplicated over tp (Megatron-Core). Under DeepSeek Sparse Attention (costs/dsa.py) the key/value
    up-projection is absorbed into each local query and output (the same multiply-adds a token), and the
    indexer and the sparse core replace the dense core."""
    tokens, t, heads = x.b * x.s, x.tp, x.heads
    nope = x.qk_dim - r.rope
    kv_tokens = x.b * (x.kv_s or x.s) if x.dsa is None else tokens
    if r.q_lora:
        ops = [
            *linear("q_down", tokens, x.h, r.q_lora, x),
            norm("q_norm", tokens * r.q_lora, x),
            *linear("q_up", tokens, r.q_lora, x.q_dim / t, x),
        ]
    else:
        ops = linear("q_proj", tokens, x.h, x.q_dim / t, x)
    ops += [
        *linear("kv_down", tokens, x.h, r.kv_lora + r.rope, x),
        norm("kv_norm", tokens * r.kv_lora, x),
        *linear("kv_up", kv_tokens, r.kv_lora, heads * (nope + x.v_dim) / t, x),
    ]
    if x.rope:  # per-head rotary queries and the one shared rotary key
        ops.append(rope("rope", tokens * (heads * r.rope / t + r.rope), x))
    if x.dsa is None:
        return ops + attention_core_forward(x, heads * x.qk_dim, heads * x.v_dim)
    return ops + _indexer_forward(x, r, x.dsa) + dsa_core_ops(x, r, x.dsa)


def _indexer_forward(x: Shape, r: MlaRanks, d: Dsa) -> list[Op]:
    """DeepSeek Sparse Attention's indexer up to its scores (costs/dsa.py): its three projections, the
    LayerNorm of its key and the rotary part of its queries and key, on detached inputs."""
    backward = projection_backward(d)  # the GEMMs (and their input casts): weight gradients at most
    shapes = indexer_projections(x, r, d)
    gemms = [replace(op, backward=backward) for shape in shapes for op in linear(*shape, x)]
    tokens = x.b * x.s
    pointwise = [norm("index_k_norm", tokens * d.head_dim, x)]
    if x.rope:
        pointwise.append(rope("index_rope", tokens * (d.n_heads + 1) * r.rope, x))
    if not d.trained:  # computed without gradients: no backward at all
        pointwise = [replace(op, backward=(0.0, 0.0)) for op in pointwise]
    return [in_share(op, d.share) for op in gemms + pointwise]  # a sharing layer has no indexer


def attention_core_forward(x: Shape, k_dim: float, v_dim: float) -> list[Op]:
    """Scores over x.qk_dim-wide heads, softmax, dropout, values over x.v_dim-wide heads; `k_dim` and
    `v_dim`: the key and value features per token the core reads (all heads, before the tp split)."""
    tokens, d, t = x.b * x.s, x.dtype_bytes, x.tp
    heads = x.heads / t
    # context parallel: s / cp local queries against all s keys, 1/cp of the work under the causal
    # load balance (costs/cp.py)
    kv_s = x.kv_s or x.s
    score_flops = 2.0 * x.b * heads * x.s * kv_s * x.qk_dim
    value_flops = 2.0 * x.b * heads * x.s * kv_s * x.v_dim
    ops: list[Op] = []
    if x.flash:  # fused kernel: no s x s tensor in HBM (Dao et al. 2022)
        io = d * tokens * (x.q_dim + x.o_dim + k_dim + v_dim) / t
        if x.fused_attention is None:
            rate = head_dim_rate(x.qk_dim, x.v_dim, "sdpa") * x.flash_relative
            flops = (score_flops + value_flops) * x.window_work
            ops.append(Op("attention", "attention", flops, io, relative_rate=rate))
        else:  # Transformer Engine's causal fused kernel: the causal half, at its own rate
            flops = (score_flops + value_flops) * CAUSAL_FRACTION * x.window_work
            width = head_dim_rate(x.qk_dim, x.v_dim, "te")
            ops.append(Op("attention", "attention", flops, io, rate=x.fused_attention, relative_rate=width))
        if x.sink_rescale:
            ops.append(sink_rescale(x.b * heads * x.s, x.v_dim, d))
    else:
        probs = x.b * heads * x.s * kv_s
        ops += [
            Op("scores", "attention", score_flops, d * (tokens * (x.q_dim + k_dim) / t + probs)),
            _elementwise("softmax", probs, d),
            *([_elementwise("attn_dropout", probs, d, extra_bytes=probs)] if x.attention_dropout else []),
            Op("attn_values", "attention", value_flops, d * (probs + tokens * (v_dim + x.o_dim) / t)),
        ]
    if x.eager:
        ops.append(_eager_op("attn_layout", tokens, eager.attention_layout(d, x.q_dim / t, k_dim / t)))
    return ops


def sink_rescale(rows: float, v_dim: int, d: int) -> Op:
    """gpt-oss's attention sinks after a FlexAttention kernel (NeMo AutoModel
    components/attention/flex_attention.py: `scale = torch.sigmoid(lse - w.view(1, -1, 1))`, `out = out *
    scale`, `out.to(q.dtype)`): over `rows` (batch x heads x queries) of fp32 log-sum-exp, the subtract
    and the sigmoid read and write 4 bytes a row; the multiply reads the output (d an element, v_dim a
    row) and the row's scale and writes fp32 (bf16 x fp32 promotes); the cast reads 4 and writes d. Four
    calls. cuDNN takes the sinks inside its kernel (softmax_type 'learnable'): nothing to add there."""
    elements = rows * v_dim
    return Op("attn_sink_rescale", "memory", 0.0, rows * 20.0 + elements * (d + 4 + 4 + d), calls=4)


def mlp_forward(x: Shape) -> list[Op]:
    """The dense MLP up to its last GEMM: SwiGLU gate+up and silu(gate) * up; GELU or squared ReLU fc1
    and its activation (Megatron-LM split: column-parallel, then fc2 row-parallel)."""
    tokens, d, t = x.b * x.s, x.dtype_bytes, x.tp
    if x.swiglu:
        return [*linear("gate_up", tokens, x.h, 2 * x.ffn / t, x), swiglu("swiglu", tokens * x.ffn / t, x)]
    act = "relu2" if x.relu2 else "gelu"  # relu then square: one fused elementwise kernel (Primer)
    return [*linear("fc1", tokens, x.h, x.ffn / t, x), _elementwise(act, tokens * x.ffn / t, d)]


def layer_forward(x: Shape) -> tuple[Op, ...]:
    """One transformer block, forward, one micro-batch, one tensor-parallel rank (Megatron-LM split:
    QKV and FC1 column-parallel, out-projection and FC2 row-parallel)."""
    tokens = x.b * x.s
    local_tokens = tokens / x.tp if x.sp else tokens  # elementwise ops on [s, b, h] are sharded by SP
    d, t = x.dtype_bytes, x.tp
    residual = local_tokens * x.h * (d + (1 if x.hidden_dropout else 0))  # the residual read, the 1-byte mask
    attention = [*attention_forward(x), *linear("out_proj", tokens, x.o_dim / t, x.h, x)]
    if x.gdn is not None:  # a hybrid's mean block (costs/gdn.py)
        into, out = gdn_projections(x, x.gdn)
        attention = blend(attention, [*linear(*into, x), *gdn_mixer(x, x.gdn), *linear(*out, x)], x.gdn.share)
    ops = [norm("norm1", local_tokens * x.h, x), *attention]
    ops += [
        _elementwise("dropout_residual1", local_tokens * x.h, d, extra_bytes=residual),
        norm("norm2", local_tokens * x.h, x),
        *mlp_forward(x),
        *linear("fc2", tokens, x.ffn / t, x.h, x),
        _elementwise("dropout_residual2", local_tokens * x.h, d, extra_bytes=residual),
    ]
    return tuple(ops)


def gemm_weight_elements(op: Op, x: Shape) -> float:
    """Weight elements of a layer GEMM on one tp rank: its FLOPs are 2 * tokens * weight elements."""
    return op.flops / (2.0 * x.b * x.s)


ATTENTION_CORE_OPS = frozenset({"scores", "softmax", "attn_dropout", "attn_values", "attention"})
"""The attention core: QK^T, softmax, dropout, attention-over-values, or the fused kernel."""


def attention_core(ops: tuple[Op, ...]) -> tuple[Op, ...]:
    """Ops selective recompute re-runs (Korthikanti et al. 2022 sec. 4.2: QK^T, softmax, dropout, attn-V)."""
    return tuple(op for op in ops if op.name in ATTENTION_CORE_OPS)


def embedding_forward(x: Shape) -> tuple[Op, ...]:
    """Vocab-parallel embedding lookup (+ positions, dropout) on the first stage."""
    tokens = x.b * x.s
    return (_elementwise("embedding", tokens * x.h, x.dtype_bytes),)


def head_forward(x: Shape) -> tuple[Op, ...]:
    """Final norm, vocab-parallel output projection and cross-entropy (fp32 logits) on the last stage."""
    tokens = x.b * x.s
    local_tokens = tokens / x.tp if x.sp else tokens
    vocab = x.vocab / x.vocab_tp
    return (
        norm("final_norm", local_tokens * x.h, x),
        _gemm("logits", tokens, x.h, vocab, x.dtype_bytes),
        _elementwise("cross_entropy", tokens * vocab, 4, extra_bytes=tokens * vocab * 4),
    )
