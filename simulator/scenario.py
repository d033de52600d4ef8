"""The scenario: everything needed to predict or run one training step (docs/scenario.md is its reference).

Model keys use Hugging Face config.json names, parallelism keys follow torchtitan/Megatron-LM
vocabulary, the cluster is a list of link tiers, innermost first. Unknown keys are errors.
`load_scenario` parses TOML, merges presets, validates every field and then the plan as a whole,
and returns a resolved scenario (every default filled in) or raises `ScenarioError` listing each
problem with its key path and a fix.
"""

from __future__ import annotations

import math
from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from plancast.simulator import catalog
from plancast.simulator.catalog.frameworks import (
    DEFAULT_FRAMEWORK,
    PARALLELISM_DEFAULTS,
    Framework,
    framework_defaults,
    parallelism_defaults,
)
from plancast.simulator.cluster import Cluster
from plancast.simulator.costs.fp8 import FP8Recipe
from plancast.simulator.fields import Dtype, Recompute, Strict
from plancast.simulator.layer_split import even_layer_split
from plancast.simulator.mesh import RankGrid
from plancast.simulator.model_dropout import ModelDropout
from plancast.simulator.model_shapes import ModelShapes
from plancast.simulator.presets import merge_preset
from plancast.simulator.scenario_attention import AttentionTrainingKeys
from plancast.simulator.scenario_memory import MemoryParallelismKeys, MemoryTrainingKeys
from plancast.simulator.scenario_moe import MoeParallelismKeys, MoeTrainingKeys
from plancast.simulator.schedules import ScheduleName

DEPRECATED_KEYS: dict[tuple[str, str], str] = {
    ("parallelism", "ddp_bucket_cap_MB"): "ddp_bucket_cap_MiB",  # it always meant MiB
}
"""(table, old key) -> the key's new name; the loader renames them with a warning."""


# --------------------------------------------------------------------------------------------- model
class Model(ModelShapes, ModelDropout):
    """A GPT/Llama-style decoder-only transformer (head_dim, MLA, MTP and routing-group keys:
    simulator/model_shapes.py; dropout: simulator/model_dropout.py)."""

    preset: str | None = None
    """Catalog name (`plancast catalog`); explicit keys override it."""
    hidden_size: int = Field(gt=0)
    """Model width h."""
    num_hidden_layers: int = Field(gt=0)
    """Transformer blocks L."""
    num_attention_heads: int = Field(gt=0)
    """Query heads a."""
    num_key_value_heads: int | None = Field(default=None, gt=0)
    """Key/value heads (grouped-query attention); default: num_attention_heads (multi-head)."""
    intermediate_size: int | None = Field(default=None, gt=0)
    """MLP width; default 4h for GELU, Llama's 2/3 * 4h rounded up to 256 for SwiGLU."""
    vocab_size: int = Field(gt=0)
    """Vocabulary V."""
    activation: Literal["gelu", "swiglu", "relu2"] = "gelu"
    """MLP: gelu (two matrices), swiglu (three) or relu2, squared ReLU over two matrices (So et al. 2021,
    "Primer"; Nemotron's `hidden_act = "relu2"`)."""
    norm: Literal["layernorm", "rmsnorm"] = "layernorm"
    """Normalisation layer."""
    position_embedding: Literal["learned", "rope"] = "learned"
    """Learned absolute positions (GPT) or rotary (Llama; no parameters)."""
    max_position_embeddings: int = Field(default=2048, gt=0)
    """Rows of the learned position table."""
    tie_word_embeddings: bool = True
    """Output projection shares the input embedding matrix."""
    num_local_experts: int | None = Field(default=None, ge=0)
    """Routed experts per MoE layer (Mixtral's name; the HF importer maps DeepSeek's `n_routed_experts`
    and Qwen-MoE's `num_experts` onto it). Unset or 0: a dense model (docs/moe.md)."""
    num_experts_per_tok: int = Field(default=2, gt=0)
    """Top-k: routed experts each token visits (Mixtral 2, DeepSeek-V3 8)."""
    moe_intermediate_size: int | None = Field(default=None, gt=0)
    """FFN width of one routed or shared expert; default: intermediate_size."""
    n_shared_experts: int = Field(default=0, ge=0)
    """Always-on shared experts of width moe_intermediate_size each (DeepSeek-MoE, Dai et al. 2024)."""
    first_k_dense_replace: int = Field(default=0, ge=0)
    """The first k layers keep a dense MLP of width intermediate_size (DeepSeek-V3: 3)."""
    router_aux_loss_coef: float = Field(default=0.0, ge=0)
    """Load-balancing loss weight (Switch Transformer, Fedus et al. 2021 eq. 4); the runtime adds it to
    the loss; it does not change step time."""
    moe_capacity_factor: float | None = Field(default=None, gt=0)
    """Unset: dropless routing (the simulator prices the mean load times a cited imbalance factor). A
    number: GShard/Switch capacity, each rank sends ceil(factor * tokens * top_k / experts) token slots
    per expert (padded, overflow dropped; Lepikhin et al. 2020, Fedus et al. 2021 sec. 2.2)."""

    @model_validator(mode="before")
    @classmethod
    def _preset(cls, data: Any) -> Any:
        return merge_preset(data, catalog.MODELS, "model")

    @model_validator(mode="after")
    def _defaults(self) -> Model:
        if self.num_key_value_heads is None:
            object.__setattr__(self, "num_key_value_heads", self.num_attention_heads)
        if self.intermediate_size is None:
            h = self.hidden_size
            # Llama (Touvron et al. 2023): 2/3 of 4h, rounded up to a multiple of 256.
            ffn = 256 * math.ceil(8 * h / 3 / 256) if self.activation == "swiglu" else 4 * h
            object.__setattr__(self, "intermediate_size", ffn)
        if self.head_dim is None:
            object.__setattr__(self, "head_dim", self.hidden_size // self.num_attention_heads)
        return self

    @property
    def kv_heads(self) -> int:
        """num_key_value_heads, resolved."""
        assert self.num_key_value_heads is not None  # filled by _defaults
        return self.num_key_value_heads

    @property
    def ffn_size(self) -> int:
        """intermediate_size, resolved."""
        assert self.intermediate_size is not None  # filled by _defaults
        return self.intermediate_size

    @property
    def num_experts(self) -> int:
        """Routed experts per MoE layer; 0 for a dense model."""
        return self.num_local_experts or 0

    @property
    def is_moe(self) -> bool:
        return self.num_experts > 0

    @property
    def expert_ffn_size(self) -> int:
        """FFN width of one expert: moe_intermediate_size, else intermediate_size."""
        return self.moe_intermediate_size or self.ffn_size

    def is_moe_layer(self, layer: int) -> bool:
        """Whether global layer index ``layer`` (0-based) has an MoE block instead of a dense MLP."""
        return self.is_moe and layer >= self.first_k_dense_replace


# ------------------------------------------------------------------------------------------ training
class Training(MemoryTrainingKeys, MoeTrainingKeys, AttentionTrainingKeys):
    """One optimizer step: batch shape, precision and activation recompute."""

    seq_len: int = Field(default=2048, gt=0)
    """Tokens per sample s."""
    micro_batch_size: int = Field(default=1, gt=0)
    """Samples per micro-batch b on one data-parallel rank."""
    global_batch_size: int = Field(default=8, gt=0)
    """Samples per optimizer step B over all data-parallel ranks."""
    dtype: Dtype = "bf16"
    """Compute dtype; fp16/bf16 use mixed-precision Adam (fp32 master weights). `plancast run` trains bf16
    under torch.autocast with fp32 parameters and gradients (runtime/precision.py) and refuses fp16."""
    recompute: Recompute = "none"
    """Activation recompute: none, selective (attention core, Korthikanti et al. 2022) or full."""
    selective_recompute: Literal["attention", "op"] = "attention"
    """What recompute = "selective" re-runs in backward. attention: the attention core (Korthikanti et al.
    2022 sec. 4.2; Megatron-LM, plancast's runtime). op: torchtitan's per-op selective checkpointing
    (`selective_ac_option = "op"`): every op but matmuls, fused attention and reduce-scatters, and every
    second matmul of a block (simulator/costs/recompute.py); a block keeps its input and those saved
    outputs for backward, and one block is rebuilt at a time (costs/memory.py; MoE blocks keep the
    attention policy's memory). `plancast run` runs the attention policy only and refuses "op"."""
    flash_attention: bool = False
    """Fused attention (Dao et al. 2022): no s x s scores in memory; off reproduces Megatron-LM 2022."""
    elementwise: Literal["fused", "eager"] | None = None
    """How the elementwise ops run. fused: each op one kernel reading and writing its tensors once
    (Megatron-LM's and DeepSpeed's fused kernels, Transformer Engine, torchtitan with torch.compile).
    eager: as eager PyTorch runs them, RMSNorm, RoPE and SwiGLU as kernel sequences partly in fp32,
    plus the attention's layout copies (simulator/costs/eager.py). Default: parallelism.framework's
    (torchtitan eager, as it runs without torch.compile unless asked and as plancast's runtime runs;
    megatron-lm and deepspeed fused). Set "fused" for a torchtitan run with torch.compile."""
    fp8: bool = False
    """The transformer blocks' GEMMs in FP8 with per-tensor scaling (Transformer Engine's `--fp8-format
    hybrid`, torchao float8), everything else in `dtype`: the GPU's FP8 peak, a cast of each GEMM input,
    an FP8 weight copy; attention and the output layer stay in `dtype` (simulator/costs/fp8.py). Needs
    a GPU with an FP8 peak (Hopper or newer). `plancast run` has no FP8 path and refuses it."""
    fp8_recipe: FP8Recipe = "tensorwise_delayed"
    """How training.fp8 scales its GEMMs, by Transformer Engine / Megatron-LM / torchao names:
    tensorwise_delayed (TE DelayedScaling, Megatron `--fp8-recipe delayed`), tensorwise_current (TE
    Float8CurrentScaling, torchao tensorwise), rowwise (torchao), blockwise (DeepSeek-V3's 1x128 / 128x128
    tiles, TE Float8BlockScaling), mxfp8 (OCP MXFP8, Blackwell) or nvfp4 (NVFP4, Blackwell). Each sets the
    GEMM peak, the cast and amax passes and the weight copies kept (simulator/costs/fp8.py cites each);
    attention, norms, embedding and output layer stay in `dtype`. Only with fp8 = true; `plancast run`
    refuses FP8."""
    grad_accumulation_fp32: bool | None = None
    """Keep gradients in fp32 (Megatron-LM `--accumulate-allreduce-grads-in-fp32`): 18 bytes per parameter
    for mixed-precision Adam instead of the ZeRO paper's 16. Default: parallelism.framework's (on for
    bf16 under all three: Megatron-LM's main grads, DeepSpeed's bf16 optimizer, torchtitan's fp32
    parameters under autocast or FSDP2 mixed precision; off for fp16 and fp32)."""
    steps: int = Field(default=10, gt=0)
    """Optimizer steps the runtime executes (the simulator predicts one)."""
    seed: int = 0
    """Seed of the runtime's synthetic tokens and weights."""
    total_tokens: float | None = Field(default=None, gt=0, allow_inf_nan=False)
    """Tokens of the whole run to plan for (e.g. 15e12); set, `simulate` adds time-to-train, goodput under
    failures, GPU-hours, cost and energy (simulator/goodput.py). Unset: step-level output only."""
    checkpoint_every_steps: int | None = Field(default=None, gt=0)
    """Checkpoint every K steps (the runtime saves with torch.distributed.checkpoint; `plancast run
    --checkpoint-every K` overrides it). Unset: the runtime does not checkpoint and the planner uses the
    optimal interval (Young 1974)."""


# --------------------------------------------------------------------------------------- parallelism
class Parallelism(MemoryParallelismKeys, MoeParallelismKeys):
    """How the model is split over the ranks (torchtitan / Megatron-LM vocabulary)."""

    tensor_parallel_degree: int = Field(default=1, gt=0)
    """Ranks sharing each layer's matrices (Megatron-LM tensor parallel)."""
    pipeline_parallel_degree: int = Field(default=1, gt=0)
    """Pipeline stages (ranks along the pipeline)."""
    data_parallel_degree: int = -1
    """Model replicas; -1 infers world_size / (tp * pp * cp)."""
    zero_stage: Literal[0, 1, 2, 3] = 0
    """0 none | 1 optimizer states | 2 + gradients | 3 + parameters (FSDP), sharded over data parallel."""
    pipeline_parallel_schedule: ScheduleName = "1F1B"
    """Pipeline schedule: 1F1B, GPipe, Interleaved1F1B, ZeroBubble (ZB-H1), ZBH2, ZBV, DualPipeV
    (docs/schedules.md: bubble, memory, when to use; simulator/schedules.py: order and rules)."""
    virtual_stages_per_rank: int = Field(default=1, gt=0)
    """Model chunks per pipeline rank (Interleaved1F1B needs >= 2; ZBV and DualPipeV exactly 2, in a V)."""
    pipeline_layer_split: list[int] | None = None
    """Layers per (virtual) stage, in stage order; default: as even as possible."""
    expert_parallel_degree: int = Field(default=1, gt=0)
    """Ranks the routed experts of each MoE layer are split over (ep; Megatron-Core
    `--expert-model-parallel-size`, torchtitan `expert_parallel_degree`); carved out of data parallel:
    it divides data_parallel_degree and num_local_experts. Experts use tensor parallel tp."""
    context_parallel_degree: int = Field(default=1, gt=0)
    """Ranks each sequence is split over (cp; Megatron-LM `--context-parallel-size`, torchtitan
    `context_parallel_degree`): 2 * cp chunks, rank i keeps chunks i and 2cp-1-i (causal load balance),
    K/V all-gathered per attention layer (Llama 3 paper sec. 3.3.2). World = pp * dp * cp * tp."""
    sequence_parallel: bool = False
    """Shard LayerNorm/dropout activations over tensor parallel (Korthikanti et al. 2022); needs tp > 1."""
    framework: Framework = DEFAULT_FRAMEWORK
    """Whose behaviour to model where frameworks differ in step time: megatron-lm | torchtitan |
    deepspeed. It sets the defaults of vocab_parallel, overlap_p2p_comm, scatter_gather_p2p,
    zero_collective_algorithm, overlap_grad_reduce, overlap_param_gather, ddp_bucket_cap_MiB,
    training.grad_accumulation_fp32 and training.elementwise (simulator/catalog/frameworks.py cites
    each); keys written in the scenario override it. Default torchtitan: plancast's runtime is built on
    the same torch stack (DTensor tensor parallel, FSDP2, torch.distributed.pipelining), so a
    scenario's prediction and its `plancast run` measure the same behaviour."""
    vocab_parallel: bool | None = None
    """Split the embedding and output layer over tensor parallel, with a vocab-parallel loss
    (Megatron-LM, DeepSpeed and torchtitan do, and so does plancast's runtime). Default: the
    framework's (on for all three); off: replicated on every tp rank."""
    overlap_grad_reduce: bool | None = None
    """Reduce gradient buckets (DDP / ZeRO-1) or units (ZeRO-2/3) while the backward pass runs; off: after
    it. Default: the framework's (megatron-lm off, as `--overlap-grad-reduce` is opt-in; deepspeed on for
    ZeRO-3 only, as `overlap_comm`; torchtitan on)."""
    overlap_param_gather: bool | None = None
    """Gather parameters beside the forward: ZeRO-2/3 prefetch the next unit's; Megatron's distributed
    optimizer (`--overlap-param-gather`) gathers each chunk's buckets in its next first forward, not
    after the step (docs/hardware.md). Default: on for ZeRO-2/3, off below (Megatron's flag is opt-in)."""
    overlap_p2p_comm: bool | None = None
    """Pipeline sends run asynchronously (torch.distributed.pipelining, Megatron-LM
    `--overlap-p2p-communication`); off: the sender waits for each transfer (Megatron-LM 2022,
    DeepSpeed). Default: the framework's."""
    scatter_gather_p2p: bool | None = None
    """Megatron-LM's scatter/gather pipeline sends: each tp rank sends 1/tp of the activation over the
    slow tier and the receivers all-gather it (Narayanan et al. 2021 sec. 4.1). Default: the
    framework's (megatron-lm and deepspeed on, torchtitan off)."""
    fsdp_backward_prefetch: Literal["pre", "post"] = "pre"
    """ZeRO-2/3 backward, with overlap_param_gather: when the next unit's all-gather is issued. pre: as the
    current unit's gradient computation starts, so they overlap (FSDP2, torchtitan; FSDP1
    `BackwardPrefetch.BACKWARD_PRE`); post: once it is done (FSDP1 `BACKWARD_POST`, "less overlap", the
    default of Composer through 0.16, composer/trainer/dist_strategy.py), so each unit waits for its own
    gather, queued behind the previous unit's reduce-scatter. `plancast run` (FSDP2) refuses "post"."""
    zero_collective_algorithm: Literal["ring", "hierarchical"] | None = None
    """How ZeRO-2/3 parameter all-gathers and gradient reduce-scatters cross nodes. hierarchical: NCCL's
    rings, one channel per NIC, so a gather over whole nodes runs at the node's summed NIC bandwidth
    (FSDP2, Megatron-LM's distributed optimizer); ring: one flat ring paced by each GPU's own NIC, as
    DeepSpeed's ZeRO-3 measured (Narayanan et al. 2021 Table 2). Default: the framework's."""
    fsdp_reduce_dtype: Dtype | None = None
    """ZeRO-2/3: the dtype gradients are reduce-scattered in (FSDP `MixedPrecision.reduce_dtype`, FSDP2
    `MixedPrecisionPolicy.reduce_dtype`); wider than training.dtype, each unit's gradient is cast to it
    before the collective, which then moves its bytes. torchtitan's default config reduces in fp32
    (`mixed_precision_reduce = "float32"`), as does Composer's `mixed_precision = "DEFAULT"` from
    0.16.4. Ignored below ZeRO-2. Default: training.dtype; `plancast run` reduces in the dtype given
    (runtime/precision.py)."""
    tp_comm_overlap: bool = False
    """Hide tensor-parallel collectives behind GEMMs (off: they sit on the critical path). The GEMMs
    beside them still run cluster.compute.overlap_slowdown slower for the time they hide."""
    distributed_optimizer: bool = False
    """With zero_stage 1 (read only there): Megatron-LM's distributed optimizer
    (`--use-distributed-optimizer`), which reduce-scatters each gradient bucket to its owners and
    all-gathers the updated parameters once after the step (megatron/core/distributed/
    param_and_grad_buffer.py, start_grad_sync / start_param_sync); off: ZeRO-1 as DDP's all-reduce
    followed by ZeroRedundancyOptimizer's broadcast from each owner."""
    ddp_bucket_cap_MiB: float | None = Field(default=None, gt=0)
    """Data-parallel gradient bucket size in MiB. Default: the framework's (Megatron-LM max(40M, 1M x dp)
    parameters, DeepSpeed 5e8 elements, in gradient bytes); under torchtitan none: torch DDP's reducer
    puts every gradient of a chunk in one bucket (find_unused_parameters=False) and rebuilds
    [1 MiB, bucket_cap_mb] buckets only in a forward through DDP, which plancast's runtime (gradient
    accumulation through the bare module, as pipelining) never runs, so under torchtitan a value
    here only reaches DDP's bucket_cap_mb and the simulated chunk keeps one bucket. The old name
    ``ddp_bucket_cap_MB`` is still read, with a warning."""

    @property
    def bucket_cap_MiB(self) -> float | None:
        """The cap gradient buckets follow: none under torchtitan, whose torch DDP (as plancast's runtime
        drives it) keeps one bucket per chunk whatever bucket_cap_mb it is given."""
        return None if self.framework == "torchtitan" else self.ddp_bucket_cap_MiB

    @field_validator("data_parallel_degree")
    @classmethod
    def _dp(cls, value: int) -> int:
        if value == 0 or value < -1:
            raise ValueError("must be a positive integer, or -1 to infer world_size / (tp * pp * cp)")
        return value


def with_defaults(par: Parallelism, defaults: dict[str, object]) -> Parallelism:
    """`par` with framework defaults filled in, those keys still unset (`Scenario.derived_keys`)."""
    filled = par.model_copy(update=defaults)
    object.__setattr__(filled, "__pydantic_fields_set__", set(par.model_fields_set))
    return filled


# ------------------------------------------------------------------------------------------ scenario
class Scenario(Strict):
    """Model + training + parallelism + cluster: one training step to predict or run."""

    model: Model
    training: Training = Training()
    parallelism: Parallelism = Parallelism()
    cluster: Cluster

    @model_validator(mode="after")
    def _framework_defaults(self) -> Scenario:
        """Fill the framework-dependent keys the scenario left unset (explicit keys win)."""
        par, t, dp = self.parallelism, self.training, max(self.dp, 1)
        defaults = framework_defaults(par.framework, dtype=t.dtype, dp=dp, zero_stage=par.zero_stage)
        given = t.grad_accumulation_fp32
        grad_fp32 = defaults["grad_accumulation_fp32"] if given is None else given
        if unset := [k for k in PARALLELISM_DEFAULTS if getattr(par, k) is None]:
            fill = parallelism_defaults(
                par.framework, dtype=t.dtype, grad_fp32=bool(grad_fp32), dp=dp, zero_stage=par.zero_stage
            )  # fmt: skip
            object.__setattr__(self, "parallelism", with_defaults(par, {k: fill[k] for k in unset}))
        fills = {
            k: v
            for k, v in (("grad_accumulation_fp32", grad_fp32), ("elementwise", defaults["elementwise"]))
            if getattr(t, k) is None
        }
        if fills:
            object.__setattr__(self, "training", t.model_copy(update=fills))
        return self

    @property
    def derived_keys(self) -> frozenset[str]:
        """The [parallelism] keys the scenario left unset, filled from its framework's defaults."""
        return frozenset(PARALLELISM_DEFAULTS) - self.parallelism.model_fields_set

    @property
    def world_size(self) -> int:
        return self.cluster.world_size

    @property
    def tp(self) -> int:
        return self.parallelism.tensor_parallel_degree

    @property
    def pp(self) -> int:
        return self.parallelism.pipeline_parallel_degree

    @property
    def cp(self) -> int:
        return self.parallelism.context_parallel_degree

    @property
    def ep(self) -> int:
        """Expert-parallel degree (1 for a dense model)."""
        return self.parallelism.expert_parallel_degree

    @property
    def grid(self) -> RankGrid:
        """The plan's rank grid (simulator/mesh.py), folded expert grid included."""
        par = self.parallelism
        etp, replicate = par.expert_tensor_parallel_degree, par.data_parallel_replicate_degree
        return RankGrid(self.pp, self.dp, self.tp, cp=self.cp, ep=self.ep, etp=etp, replicate=replicate)

    @property
    def etp(self) -> int:
        """Expert-tensor-parallel degree (parallelism.expert_tensor_parallel_degree, default tp)."""
        return self.parallelism.expert_tensor_parallel_degree or self.tp

    @property
    def edp(self) -> int:
        """Expert-data-parallel degree, replicas of each expert: dp / ep, or with folding
        tp * cp * dp / (ep * etp)."""
        if self.parallelism.expert_tensor_parallel_degree is None:
            return max(self.dp // self.ep, 1)
        return max(self.tp * self.cp * self.dp // (self.ep * self.etp), 1)

    @property
    def dp(self) -> int:
        """Data-parallel degree, resolved (load_scenario fills -1 in)."""
        dp = self.parallelism.data_parallel_degree
        return dp if dp > 0 else self.world_size // (self.tp * self.pp * self.cp)

    @property
    def vocab_tp(self) -> int:
        """Ranks the vocabulary is split over: tp with vocab_parallel, else 1 (replicated)."""
        return self.tp if self.parallelism.vocab_parallel else 1

    @property
    def vpp(self) -> int:
        return self.parallelism.virtual_stages_per_rank

    @property
    def zero_dp(self) -> int:
        """Ranks ZeRO shards the dense model states over: dp x cp, or dp / replicas x cp under HSDP."""
        return self.dp // self.parallelism.data_parallel_replicate_degree * self.cp

    @property
    def fsdp(self) -> bool:
        """ZeRO-2/3 over more than one data-parallel rank: parameters sharded by FSDP2."""
        return self.dp > 1 and self.parallelism.zero_stage >= 2

    @property
    def amp_master_params(self) -> bool:
        """Mixed precision whose fp32 master weights are the parameters themselves (torch.autocast, FSDP2
        MixedPrecisionPolicy: torchtitan and plancast's runtime), not a copy inside the optimizer beside
        16-bit parameters (Megatron-LM, DeepSpeed). Changes the model-state split (costs/memory.py) and
        the optimizer's passes (costs/optimizer.py)."""
        t = self.training
        return self.parallelism.framework == "torchtitan" and t.dtype != "fp32" and t.master_weights

    @property
    def fsdp_reduce_dtype(self) -> Dtype:
        """The dtype ZeRO-2/3 reduce-scatters gradients in (parallelism.fsdp_reduce_dtype, default filled)."""
        return self.parallelism.fsdp_reduce_dtype or self.training.dtype

    @property
    def dtensor_params(self) -> bool:
        """Whether the runtime's parameters are DTensors (tensor parallel, or sharded by FSDP2)."""
        return self.tp > 1 or self.fsdp

    @property
    def num_microbatches(self) -> int:
        """Micro-batches per step on one pipeline: B / (b * dp)."""
        return self.training.global_batch_size // (self.training.micro_batch_size * self.dp)

    @property
    def layer_split(self) -> tuple[int, ...]:
        """Layers per virtual stage (pp * v entries), resolved."""
        split = self.parallelism.pipeline_layer_split
        if split is not None:
            return tuple(split)
        m = self.model
        return even_layer_split(m.num_hidden_layers, self.pp * self.vpp, m.num_nextn_predict_layers)
