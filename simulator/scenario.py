"""The scenario: everything needed to predict or run one training step (DESIGN.md, v1 contract).

Model keys use Hugging Face config.json names, parallelism keys follow torchtitan/Megatron-LM
vocabulary, the cluster is a list of link tiers, innermost first. Unknown keys are errors.
`load_scenario` parses TOML, merges presets, validates every field and then the plan as a whole,
and returns a resolved scenario (every default filled in) or raises `ScenarioError` listing each
problem with its key path and a fix.
"""

from __future__ import annotations

import math
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator
from pydantic_core import PydanticCustomError

from plancast.simulator import catalog

Dtype = Literal["fp32", "fp16", "bf16"]
Recompute = Literal["none", "selective", "full"]
ScheduleName = Literal["GPipe", "1F1B", "Interleaved1F1B", "ZeroBubble"]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, validate_default=True, strict=True)


def _lookup(table: dict[str, dict[str, object]], name: str, what: str, key: str) -> dict[str, object]:
    """A preset, or a validation error located at `key` (so the message names the key path)."""
    try:
        return catalog.lookup(table, name, what)
    except KeyError as err:
        message = str(err).strip("'\"")
        raise PydanticCustomError("unknown_preset", "{message}", {"message": message, "key": key}) from None


def _profile(path: str) -> dict[str, object]:
    """The [cluster] table of a calibrated profile file (`plancast calibrate -o FILE`)."""
    try:
        table = tomllib.loads(Path(path).read_text(encoding="utf-8")).get("cluster")
    except (OSError, tomllib.TOMLDecodeError) as err:
        raise PydanticCustomError(
            "unknown_preset", "{message}", {"message": f"cannot read profile {path}: {err}", "key": "preset"}
        ) from None
    if not isinstance(table, dict):
        raise PydanticCustomError(
            "unknown_preset", "{message}", {"message": f"{path} has no [cluster] table", "key": "preset"}
        )
    table.pop("preset", None)
    return table


def _merge_preset(data: Any, table: dict[str, dict[str, object]], what: str) -> Any:
    """Explicit keys override the preset's (as DESIGN.md specifies for [model] and [cluster]).

    A cluster preset may also be a path to a calibrated profile (a TOML file with a [cluster] table)."""
    if not isinstance(data, Mapping) or data.get("preset") is None:
        return data
    name = str(data["preset"])
    if what == "cluster" and name.endswith(".toml"):
        return {**_profile(name), **{k: v for k, v in data.items() if k != "preset"}, "preset": name}
    base = _lookup(table, name, what, "preset")
    return {**base, **data}


# --------------------------------------------------------------------------------------------- model
class Model(_Strict):
    """A GPT/Llama-style decoder-only transformer."""

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
    activation: Literal["gelu", "swiglu"] = "gelu"
    """MLP: gelu (two matrices) or swiglu (three)."""
    norm: Literal["layernorm", "rmsnorm"] = "layernorm"
    """Normalisation layer."""
    position_embedding: Literal["learned", "rope"] = "learned"
    """Learned absolute positions (GPT) or rotary (Llama; no parameters)."""
    max_position_embeddings: int = Field(default=2048, gt=0)
    """Rows of the learned position table."""
    tie_word_embeddings: bool = True
    """Output projection shares the input embedding matrix."""

    @model_validator(mode="before")
    @classmethod
    def _preset(cls, data: Any) -> Any:
        return _merge_preset(data, catalog.MODELS, "model")

    @model_validator(mode="after")
    def _defaults(self) -> Model:
        if self.num_key_value_heads is None:
            object.__setattr__(self, "num_key_value_heads", self.num_attention_heads)
        if self.intermediate_size is None:
            h = self.hidden_size
            # Llama (Touvron et al. 2023): 2/3 of 4h, rounded up to a multiple of 256.
            ffn = 4 * h if self.activation == "gelu" else 256 * math.ceil(8 * h / 3 / 256)
            object.__setattr__(self, "intermediate_size", ffn)
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
    def head_dim(self) -> int:
        return self.hidden_size // self.num_attention_heads


# ------------------------------------------------------------------------------------------ training
class Training(_Strict):
    """One optimizer step: batch shape, precision and activation recompute."""

    seq_len: int = Field(default=2048, gt=0)
    """Tokens per sample s."""
    micro_batch_size: int = Field(default=1, gt=0)
    """Samples per micro-batch b on one data-parallel rank."""
    global_batch_size: int = Field(default=8, gt=0)
    """Samples per optimizer step B over all data-parallel ranks."""
    dtype: Dtype = "bf16"
    """Compute dtype; fp16/bf16 use mixed-precision Adam (fp32 master weights)."""
    recompute: Recompute = "none"
    """Activation recompute: none, selective (attention core, Korthikanti et al. 2022) or full."""
    flash_attention: bool = False
    """Fused attention (Dao et al. 2022): no s x s scores in memory; off reproduces Megatron-LM 2022."""
    grad_accumulation_fp32: bool = False
    """Keep gradients in fp32 (Megatron-LM `--accumulate-allreduce-grads-in-fp32`): 18 bytes per parameter
    for mixed-precision Adam instead of the ZeRO paper's 16."""
    steps: int = Field(default=10, gt=0)
    """Optimizer steps the runtime executes (the simulator predicts one)."""
    seed: int = 0
    """Seed of the runtime's synthetic tokens and weights."""


# --------------------------------------------------------------------------------------- parallelism
class Parallelism(_Strict):
    """How the model is split over the ranks (torchtitan / Megatron-LM vocabulary)."""

    tensor_parallel_degree: int = Field(default=1, gt=0)
    """Ranks sharing each layer's matrices (Megatron-LM tensor parallel)."""
    pipeline_parallel_degree: int = Field(default=1, gt=0)
    """Pipeline stages (ranks along the pipeline)."""
    data_parallel_degree: int = -1
    """Model replicas; -1 infers world_size / (tp * pp)."""
    zero_stage: Literal[0, 1, 2, 3] = 0
    """0 none | 1 optimizer states | 2 + gradients | 3 + parameters (FSDP), sharded over data parallel."""
    pipeline_parallel_schedule: ScheduleName = "1F1B"
    """GPipe | 1F1B | Interleaved1F1B | ZeroBubble (ZB-H1)."""
    virtual_stages_per_rank: int = Field(default=1, gt=0)
    """Model chunks per pipeline rank (Interleaved1F1B needs >= 2)."""
    pipeline_layer_split: list[int] | None = None
    """Layers per (virtual) stage, in stage order; default: as even as possible."""
    sequence_parallel: bool = False
    """Shard LayerNorm/dropout activations over tensor parallel (Korthikanti et al. 2022); needs tp > 1."""
    vocab_parallel: bool = False
    """Split the embedding and output layer over tensor parallel (Megatron-LM); off: replicated on
    every tp rank, as plancast's runtime does."""
    overlap_grad_reduce: bool = True
    """Reduce gradient buckets while the backward pass runs (DDP / ZeRO)."""
    overlap_param_gather: bool = True
    """ZeRO-3: prefetch the next layer's parameters while the current one computes."""
    overlap_p2p_comm: bool = True
    """Pipeline sends run asynchronously (torch.distributed.pipelining, Megatron-LM
    `--overlap-p2p-communication`); off: the sender waits for each transfer (Megatron-LM 2022)."""
    scatter_gather_p2p: bool = False
    """Megatron-LM's scatter/gather pipeline sends: each tp rank sends 1/tp of the activation over the
    slow tier and the receivers all-gather it (Narayanan et al. 2021 sec. 4.1)."""
    tp_comm_overlap: bool = False
    """Hide tensor-parallel collectives behind GEMMs (off: they sit on the critical path)."""
    ddp_bucket_cap_MB: float = Field(default=25.0, gt=0)
    """Gradient bucket size in MB (torch DDP's default bucket_cap_mb = 25)."""

    @field_validator("data_parallel_degree")
    @classmethod
    def _dp(cls, value: int) -> int:
        if value == 0 or value < -1:
            raise ValueError("must be a positive integer, or -1 to infer world_size / (tp * pp)")
        return value


# ------------------------------------------------------------------------------------------- cluster
class GPU(_Strict):
    """One accelerator (or CPU core used as a rank)."""

    name: str = "custom"
    peak_tflops: dict[str, Annotated[float, Field(gt=0, allow_inf_nan=False)]]
    """Dense peak TFLOP/s per dtype (fp32, tf32, fp16, bf16, ...)."""
    hbm_GBps: float = Field(gt=0)
    """Memory bandwidth, GB/s."""
    memory_GiB: float = Field(gt=0)
    """Device memory, GiB."""

    @field_validator("peak_tflops", mode="before")
    @classmethod
    def _peak(cls, value: Any) -> Any:
        if isinstance(value, int | float):  # one number: the same peak for every dtype
            return {d: float(value) for d in ("fp32", "tf32", "fp16", "bf16")}
        return value

    def peak_flops(self, dtype: str) -> float:
        """Peak FLOP/s for dtype (fp32 training uses TF32 tensor cores where the GPU has them)."""
        key = "tf32" if dtype == "fp32" and "tf32" in self.peak_tflops else dtype
        if key not in self.peak_tflops:
            raise KeyError(f"cluster.gpu.peak_tflops has no entry for {dtype}")
        return self.peak_tflops[key] * 1e12


class Tier(_Strict):
    """A level of the network: ranks inside one unit of it talk over its links."""

    name: str
    size: int | None = Field(default=None, gt=0)
    """Ranks inside one unit of this tier; the outermost tier always spans the whole cluster."""
    bandwidth_GBps: float = Field(gt=0)
    """Per rank, one direction, GB/s."""
    latency_us: float = Field(default=0.0, ge=0)
    """Per message (alpha), microseconds."""
    efficiency: float = Field(default=1.0, gt=0, le=1)
    """Achieved fraction of bandwidth_GBps for large collectives (nccl-tests busbw / peak)."""


class ComputeModel(_Strict):
    """Achieved compute as a function of op shape (see simulator/costs/efficiency.py).

    Defaults: bounded least-squares fit (benchmarks/fit_published.py) on Korthikanti et al. 2022
    Table 4 (ten per-layer times of the 22B model) and Table 5 (eight iteration times, 22B to 1T) on
    A100, together with the NVLink tier's in-training efficiency. Leave-one-model-out
    cross-validation of that fit is reported by the same script. `plancast calibrate` refits them.
    """

    matmul_efficiency: float = Field(default=0.79, gt=0, le=1)
    """Fraction of peak reached by very large GEMMs."""
    matmul_half_gflop: float = Field(default=0.35, ge=0)
    """GEMM size (GFLOP) at which achieved efficiency is half of matmul_efficiency's headroom."""
    attention_efficiency: float = Field(default=0.54, gt=0, le=1)
    """Fraction of peak reached by the attention core (QK^T, softmax-V)."""
    memory_efficiency: float = Field(default=0.95, gt=0, le=1)
    """Fraction of HBM bandwidth reached by memory-bound ops (norms, activations, optimizer)."""
    op_overhead_us: float = Field(default=26.0, ge=0)
    """Fixed time per operator (kernel launch, framework dispatch)."""
    tp_collective_overhead_us: float = Field(default=0.0, ge=0)
    """Host time per tensor-parallel collective beyond the link's alpha-beta (framework dispatch, e.g.
    DTensor redistributes on CPU); ~0 on GPUs, whose host runs ahead. Measured on the local machine: a
    1-element DTensor all-reduce minus a plain one (runtime/microbench_host.py)."""
    sp_collective_overhead_us: float = Field(default=0.0, ge=0)
    """The same for the all-gathers and reduce-scatters of sequence parallelism (DTensor redistributes
    between sequence shards and replicas); measured as a 1-element DTensor all-gather minus a plain one."""
    dp_collective_overhead_us: float = Field(default=0.0, ge=0)
    """Host time per ZeRO-2/3 (FSDP2) collective; the local-cpu measurement counts it in
    fsdp_unit_overhead_us (the hooks issue the collectives) and leaves this 0."""
    tp_layer_overhead_us: float = Field(default=0.0, ge=0)
    """Host time per tensor-parallel transformer block and micro-batch, forward + backward, beyond its
    collectives (DTensor dispatch and sharding propagation; simulator/costs/host.py); ~0 on GPUs.
    Measured on this machine by the microbenchmarks (one block, tensor-parallel vs plain)."""
    sp_layer_overhead_us: float = Field(default=0.0, ge=0)
    """The same for a sequence-parallel block (in place of tp_layer_overhead_us)."""
    fsdp_unit_overhead_us: float = Field(default=0.0, ge=0)
    """Host time per FSDP2 unit (each block and the root) and micro-batch beyond its collectives (its
    pre/post forward and backward hooks run in Python); measured by the microbenchmarks."""
    p2p_overhead_us: float = Field(default=0.0, ge=0)
    """Host time per pipeline transfer on each side (the pipelining runtime's per-action bookkeeping,
    posting the send or receive); ~0 on GPUs, whose host runs ahead. Measured: posting a 1-element isend."""
    optimizer_overhead_us: float = Field(default=0.0, ge=0)
    """Host time per parameter tensor per optimizer step (a per-tensor update loop: torch's Adam on
    CPU; ~0 with the fused/foreach kernels on GPU). Measured (AdamW over 32 vs 8 tensors); refitted by
    `plancast calibrate` on the optimizer spans of >= 2 runs with different tensor counts per rank."""
    dtensor_optimizer_overhead_us: float = Field(default=0.0, ge=0)
    """The same when the parameters are DTensors (tensor parallel, ZeRO-2/3 with FSDP2): each update op
    goes through DTensor's dispatch. Measured and refitted as optimizer_overhead_us, on DTensors."""


class Cluster(_Strict):
    """The machines: a GPU type, the node shape and the link tiers, innermost first."""

    preset: str | None = None
    """Catalog name (`plancast catalog`); explicit keys override it."""
    gpu: GPU
    """Catalog GPU name, or a table with peak_tflops, hbm_GBps, memory_GiB."""
    num_nodes: int = Field(default=1, gt=0)
    gpus_per_node: int = Field(default=8, gt=0)
    tiers: list[Tier] = Field(min_length=1)
    """Link tiers, innermost first."""
    compute: ComputeModel = ComputeModel()
    """Compute efficiency model (calibratable)."""
    compute_slots_per_node: int | None = Field(default=None, gt=0)
    """Ranks of a node share this many compute units (CPU cores when ranks are CPU processes);
    None: every rank has its own device. `plancast calibrate` sets it to this machine's cores."""

    @model_validator(mode="before")
    @classmethod
    def _preset(cls, data: Any) -> Any:
        data = _merge_preset(data, catalog.CLUSTERS, "cluster")
        if isinstance(data, Mapping) and isinstance(data.get("gpu"), str):
            name = data["gpu"]
            data = {**data, "gpu": {"name": name, **_lookup(catalog.GPUS, name, "GPU", "gpu")}}
        return data

    @property
    def world_size(self) -> int:
        return self.num_nodes * self.gpus_per_node

    @property
    def tier_sizes(self) -> tuple[int, ...]:
        """Ranks per unit of each tier, innermost first; the outermost spans the cluster."""
        sizes = [t.size or self.world_size for t in self.tiers[:-1]]
        return (*sizes, self.world_size)


# ------------------------------------------------------------------------------------------ scenario
class Scenario(_Strict):
    """Model + training + parallelism + cluster: one training step to predict or run."""

    model: Model
    training: Training = Training()
    parallelism: Parallelism = Parallelism()
    cluster: Cluster

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
    def dp(self) -> int:
        """Data-parallel degree, resolved (load_scenario fills -1 in)."""
        dp = self.parallelism.data_parallel_degree
        return dp if dp > 0 else self.world_size // (self.tp * self.pp)

    @property
    def vocab_tp(self) -> int:
        """Ranks the vocabulary is split over: tp with vocab_parallel, else 1 (replicated)."""
        return self.tp if self.parallelism.vocab_parallel else 1

    @property
    def vpp(self) -> int:
        return self.parallelism.virtual_stages_per_rank

    @property
    def fsdp(self) -> bool:
        """ZeRO-2/3 over more than one data-parallel rank: parameters sharded by FSDP2."""
        return self.dp > 1 and self.parallelism.zero_stage >= 2

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
        return even_layer_split(self.model.num_hidden_layers, self.pp * self.vpp)


def even_layer_split(num_layers: int, num_stages: int) -> tuple[int, ...]:
    """Layers over stages as evenly as possible; the first and last stage take the fewer layers,
    because they also hold the embedding and the output layer (as Megatron-LM's
    `--decoder-first/last-pipeline-num-layers` and DeepSpeed's balanced partitioning do; BLOOM-176B
    ran 70 layers on 12 stages)."""
    base, extra = divmod(num_layers, num_stages)
    split = [base] * num_stages
    # Middle stages first, then the last, then the first.
    order = list(range(1, num_stages - 1)) + ([num_stages - 1] if num_stages > 1 else []) + [0]
    for stage in order[:extra]:
        split[stage] += 1
    return tuple(split)
