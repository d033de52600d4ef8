"""Cross-field checks of a parallel plan: errors for impossible plans, warnings for unwise ones.

Legal but unwise plans (tensor parallel across nodes, ZeRO with one data-parallel rank) are
simulated with a warning, not refused: seeing how bad they are is part of the point.

Every number of a scenario is also bounded (``BOUNDS``, published in the scenario reference), and
the work one simulated step costs is bounded (``MAX_SIMULATED_WORK``), so a scenario that validates
simulates: no overflow, no memory exhaustion, no step that takes hours to simulate.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from plancast.simulator.catalog.frameworks import schedule_warnings as framework_schedule_warnings
from plancast.simulator.costs.fp8 import recipe_problems
from plancast.simulator.expert_bias import expert_bias_warnings
from plancast.simulator.model_linear import LINEAR_BOUNDS, linear_attention_problems, linear_plan_problems
from plancast.simulator.model_shapes import MODEL_SHAPE_BOUNDS, model_shape_problems
from plancast.simulator.model_sparse import DSA_BOUNDS, sparse_attention_problems, sparse_training_problems
from plancast.simulator.model_window import window_problems
from plancast.simulator.scenario import Scenario
from plancast.simulator.scenario_attention import attention_backend_problems
from plancast.simulator.schedules import schedule_problems, schedule_warnings
from plancast.simulator.validation_data_parallel import data_parallel_problems, data_parallel_warnings
from plancast.simulator.validation_memory import memory_problems
from plancast.simulator.validation_moe import model_moe_problems, moe_cp_warnings, plan_moe_cp_problems

Bound = tuple[float, float, str]

BOUNDS: dict[str, Bound] = {
    # key path ("[*]" any list item, ".*" any key of a table) -> (min, max, why)
    "model.hidden_size": (1, 1_000_000, "100x the widest published model (PaLM-540B: 18,432)"),
    "model.num_hidden_layers": (1, 10_000, "100x the deepest published model (PaLM-540B: 118 layers)"),
    "model.num_attention_heads": (1, 100_000, "at least one head_dim per head of the widest model"),
    "model.num_key_value_heads": (1, 100_000, "as num_attention_heads"),
    "model.intermediate_size": (1, 10_000_000, "100x the widest published MLP"),
    "model.vocab_size": (1, 100_000_000, "100x the largest published vocabularies (~256k)"),
    "model.max_position_embeddings": (1, 100_000_000, "as training.seq_len"),
    "model.num_local_experts": (0, 100_000, "100x the most experts published (DeepSeek-V3: 256)"),
    "model.num_experts_per_tok": (1, 100_000, "at most num_local_experts"),
    "model.moe_intermediate_size": (1, 10_000_000, "as intermediate_size"),
    "model.n_shared_experts": (0, 100_000, "as num_local_experts"),
    "model.first_k_dense_replace": (0, 10_000, "at most num_hidden_layers"),
    "model.router_aux_loss_coef": (0, 1e3, "a loss weight (Switch Transformer: 0.01)"),
    "model.moe_capacity_factor": (1e-3, 1e3, "slots per expert over the mean load (Switch: 1.0-2.0)"),
    **MODEL_SHAPE_BOUNDS,
    **DSA_BOUNDS,
    **LINEAR_BOUNDS,
    "training.seq_len": (1, 100_000_000, "10x the longest published contexts (10M tokens)"),
    "training.micro_batch_size": (1, 1_000_000, "samples held by one rank at once"),
    "training.global_batch_size": (1, 100_000_000, "100x the largest published batches (~16M tokens)"),
    "training.steps": (1, 10_000_000, "steps one measured run executes"),
    "training.seed": (0, 2**32 - 1, "a 32-bit seed, the range every random generator accepts"),
    "parallelism.tensor_parallel_degree": (1, 1_000_000, "at most the largest world size"),
    "parallelism.pipeline_parallel_degree": (1, 1_000_000, "at most the largest world size"),
    "parallelism.expert_parallel_degree": (1, 1_000_000, "at most the largest world size"),
    "parallelism.context_parallel_degree": (1, 1_000_000, "at most the largest world size"),
    "parallelism.data_parallel_degree": (-1, 10_000_000, "-1 (inferred) or at most the world size"),
    "parallelism.virtual_stages_per_rank": (1, 10_000, "at most one chunk per layer"),
    "parallelism.pipeline_layer_split[*]": (0, 10_000, "a stage's layer count"),
    "parallelism.ddp_bucket_cap_MiB": (1e-3, 1e6, "1 KB to 1 TB; torch DDP's default is 25"),
    "cluster.num_nodes": (1, 1_000_000, "10x the largest published clusters (~100k GPUs)"),
    "cluster.gpus_per_node": (1, 1_024, "ranks one node launches"),
    "cluster.compute_slots_per_node": (1, 1_024, "as gpus_per_node"),
    "cluster.gpu.peak_tflops.*": (1e-3, 1e6, "1 GFLOP/s (a slow CPU core) to 100x a B200"),
    "cluster.gpu.hbm_GBps": (1e-3, 1e6, "1 MB/s to 100x HBM3e"),
    "cluster.gpu.memory_GiB": (1e-9, 1e6, "1 byte to ~5000x an H100's 80 GiB"),
    "cluster.tiers[*].size": (1, 10_000_000, "at most the world size"),
    "cluster.tiers[*].bandwidth_GBps": (
        1e-6,
        1e15,
        "1 KB/s up to effectively unbounded (ideal-case studies)",
    ),
    "cluster.tiers[*].latency_us": (0, 1e7, "up to 10 s per message"),
    "cluster.tiers[*].efficiency": (1e-3, 1, "a fraction of the link's bandwidth"),
    "cluster.compute.matmul_efficiency": (1e-3, 1, "a fraction of peak"),
    "cluster.compute.matmul_half_gflop": (0, 1e6, "a GEMM size in GFLOP (1 PFLOP at most)"),
    "cluster.compute.attention_efficiency": (1e-3, 1, "a fraction of peak"),
    "cluster.compute.memory_efficiency": (1e-3, 1, "a fraction of HBM bandwidth"),
    "cluster.compute.*": (0, 1e7, "host overheads in microseconds: up to 10 s each"),
}
"""Bounds of every number in a scenario (inclusive). A number without its own entry gets
``DEFAULT_BOUND``. Published in the scenario reference; every example and preset lies inside."""

DEFAULT_BOUND: Bound = (-1e15, 1e15, "any other number: magnitude up to 1e15")

MAX_WORLD_SIZE = 1_000_000
"""Ranks (cluster.num_nodes x cluster.gpus_per_node, or `sweep --gpus`) plancast plans for: 10x the
largest published clusters (~100k GPUs). Process-group membership is built per rank, about 50 s per
million ranks per simulated step (measured: 80,000 ranks in 4.3 s)."""

MAX_SIMULATED_WORK = 1_000_000
"""Pipeline actions one simulated step schedules (micro-batches x stages x virtual stages), at most.
The engine runs about 7,000-10,000 of them per second on one core (measured on this project's 2-core
machine: 8,192 micro-batches x 8 stages of 1F1B in 9 s), so this caps a step at a few minutes;
per-layer work is vectorized and does not count."""


@dataclass(frozen=True, slots=True)
class Problem:
    """One thing wrong with a scenario: where, and what to do about it."""

    path: str
    message: str

    def __str__(self) -> str:
        return f"{self.path}: {self.message}" if self.path else self.message


def _divides(errors: list[Problem], path: str, value: int, divisor: int, what: str, fix: str) -> None:
    if divisor > 0 and value % divisor:
        errors.append(Problem(path, f"{value} is not divisible by {what} ({divisor}); {fix}"))


def _check_degrees(s: Scenario, errors: list[Problem]) -> bool:
    """World size = tp * pp * cp * dp. Returns False when later checks would be meaningless."""
    par, world = s.parallelism, s.world_size
    tp, pp, cp = s.tp, s.pp, s.cp
    names, degrees = ("tp * pp", f"{tp} * {pp}") if cp == 1 else ("tp * pp * cp", f"{tp} * {pp} * {cp}")
    if world % (tp * pp * cp):
        errors.append(
            Problem(
                "parallelism.tensor_parallel_degree",
                f"{names} = {degrees} = {tp * pp * cp} does not divide the world size {world} "
                f"(cluster.num_nodes * cluster.gpus_per_node); pick degrees whose product divides it",
            )
        )
        return False
    dp = par.data_parallel_degree
    if dp > 0 and tp * pp * cp * dp != world:
        errors.append(
            Problem(
                "parallelism.data_parallel_degree",
                f"{names} * dp = {degrees} * {dp} = {tp * pp * cp * dp} but the cluster has {world} ranks; "
                f"set it to {world // (tp * pp * cp)} or -1 to infer it",
            )
        )
        return False
    return True


def _check_model(s: Scenario, errors: list[Problem]) -> None:
    m, tp = s.model, s.tp
    if "head_dim" not in m.model_fields_set and not m.is_mla:  # else heads need not divide the width
        _divides(
            errors,
            "model.hidden_size",
            m.hidden_size,
            m.num_attention_heads,
            "num_attention_heads",
            "the head dimension must be an integer (or declare model.head_dim)",
        )
    _divides(
        errors,
        "model.num_attention_heads",
        m.num_attention_heads,
        m.kv_heads,
        "num_key_value_heads",
        "each key/value head must serve a whole group of query heads",
    )
    _divides(
        errors,
        "model.num_attention_heads",
        m.num_attention_heads,
        tp,
        "parallelism.tensor_parallel_degree",
        "each tensor-parallel rank needs whole heads",
    )
    _divides(
        errors,
        "model.num_key_value_heads",
        m.kv_heads,
        tp,
        "parallelism.tensor_parallel_degree",
        "use fewer tensor-parallel ranks than key/value heads, or more key/value heads",
    )
    _divides(
        errors,
        "model.intermediate_size",
        m.ffn_size,
        tp,
        "parallelism.tensor_parallel_degree",
        "the MLP is split column-wise over tensor parallel",
    )
    if m.position_embedding == "learned" and s.training.seq_len > m.max_position_embeddings:
        errors.append(
            Problem(
                "training.seq_len",
                f"{s.training.seq_len} exceeds model.max_position_embeddings "
                f"({m.max_position_embeddings}) of the learned position table; shorten it or "
                f"raise max_position_embeddings",
            )
        )


def _check_batch(s: Scenario, errors: list[Problem]) -> None:
    t, dp = s.training, s.dp
    per_step = t.micro_batch_size * dp
    if t.global_batch_size % per_step:
        errors.append(
            Problem(
                "training.global_batch_size",
                f"{t.global_batch_size} is not divisible by micro_batch_size * dp = "
                f"{t.micro_batch_size} * {dp} = {per_step}; use a multiple of {per_step}",
            )
        )


def _check_pipeline(s: Scenario, errors: list[Problem]) -> None:
    par, pp, v = s.parallelism, s.pp, s.vpp
    layers = s.model.num_hidden_layers
    rules = schedule_problems(par.pipeline_parallel_schedule, pp, s.num_microbatches, v)
    errors.extend(Problem(p.path, p.message) for p in rules)
    stages = pp * v
    split = par.pipeline_layer_split
    if split is None and layers < stages:
        errors.append(
            Problem(
                "parallelism.pipeline_parallel_degree",
                f"{stages} (virtual) stages but only {layers} layers; every stage needs a layer",
            )
        )
    if split is not None:
        if len(split) != stages:
            errors.append(
                Problem(
                    "parallelism.pipeline_layer_split",
                    f"has {len(split)} entries; it needs one per (virtual) stage: "
                    f"pipeline_parallel_degree * virtual_stages_per_rank = {stages}",
                )
            )
        elif sum(split) != layers:
            errors.append(
                Problem(
                    "parallelism.pipeline_layer_split",
                    f"sums to {sum(split)} but model.num_hidden_layers is {layers}",
                )
            )
        elif min(split[1:-1], default=1) < 1 or (stages == 1 and split[0] < 1):
            # the first and last stage may hold only the embedding or only the output layer and loss
            # (Megatron-core --account-for-embedding/loss-in-pipeline-split; Llama 3, arXiv 2407.21783
            # sec. 3.3.2: "the first model chunk on the first stage has only the embedding")
            errors.append(
                Problem(
                    "parallelism.pipeline_layer_split",
                    "every stage between the first and the last needs at least one layer "
                    "(the first may hold only the embedding, the last only the output layer and loss)",
                )
            )


def _check_sequence_parallel(s: Scenario, errors: list[Problem]) -> None:
    if not s.parallelism.sequence_parallel:
        return
    if s.tp == 1:
        errors.append(
            Problem(
                "parallelism.sequence_parallel",
                "needs tensor_parallel_degree > 1 (it shards activations over the tp group); "
                "set it to false or raise tp",
            )
        )
    else:
        _divides(
            errors,
            "training.seq_len",
            s.training.seq_len,
            s.tp,
            "parallelism.tensor_parallel_degree",
            "sequence parallel splits the sequence over tensor-parallel ranks",
        )


def _check_cluster(s: Scenario, errors: list[Problem], warnings: list[str]) -> None:
    c = s.cluster
    sizes = [t.size for t in c.tiers]
    prev = 1
    for i, size in enumerate(sizes[:-1]):
        path = f"cluster.tiers[{i}].size"
        if size is None:
            errors.append(Problem(path, "required for every tier but the outermost"))
            return
        if size % prev or size <= prev:
            errors.append(
                Problem(path, f"{size} must be a multiple of, and larger than, the tier inside it ({prev})")
            )
        elif c.world_size % size:
            errors.append(Problem(path, f"{size} does not divide the cluster's {c.world_size} ranks"))
        prev = size
    last = sizes[-1]
    if last is not None and last != c.world_size and len(sizes) > 1:
        warnings.append(
            f"cluster.tiers[{len(sizes) - 1}].size = {last} ignored: the outermost tier spans the "
            f"whole cluster ({c.world_size} ranks)"
        )
    dtype = s.training.dtype
    if s.training.fp8 and "fp8" not in c.gpu.peak_tflops:
        errors.append(
            Problem(
                "training.fp8",
                f"{c.gpu.name} has no FP8 tensor cores (no fp8 in cluster.gpu.peak_tflops: "
                f"{sorted(c.gpu.peak_tflops)}); use a Hopper or newer GPU, add its fp8 peak, or set "
                "fp8 = false",
            )
        )
    errors.extend(Problem(p.path, p.message) for p in memory_problems(s))
    if s.training.fp8 and dtype == "fp32":
        errors.append(
            Problem("training.fp8", 'FP8 GEMMs run inside mixed precision: set training.dtype = "bf16"')
        )
    errors.extend(Problem(*p) for p in recipe_problems(s.training.fp8, s.training.fp8_recipe, c.gpu))
    if c.gpu.peak_dtype(dtype) not in c.gpu.peak_tflops:
        errors.append(
            Problem(
                "training.dtype",
                f"{dtype} has no peak in cluster.gpu.peak_tflops "
                f"({sorted(c.gpu.peak_tflops)}); choose one of those or add its peak",
            )
        )


def _unwise(s: Scenario, warnings: list[str]) -> None:
    inner = s.cluster.tier_sizes[0]
    if len(s.cluster.tiers) > 1 and s.tp > inner:
        warnings.append(
            f"tensor_parallel_degree {s.tp} is wider than the {s.cluster.tiers[0].name} domain "
            f"({inner} ranks): every layer's collectives cross the slower "
            f"{s.cluster.tiers[1].name} links"
        )
    warnings.extend(schedule_warnings(s.parallelism.pipeline_parallel_schedule, s.pp))
    par = s.parallelism
    warnings.extend(framework_schedule_warnings(par.framework, par.pipeline_parallel_schedule, s.pp))
    if s.pp > 1 and s.num_microbatches < s.pp:
        warnings.append(
            f"{s.num_microbatches} micro-batches on {s.pp} stages: the pipeline bubble exceeds half "
            f"the step; raise global_batch_size or lower micro_batch_size"
        )
    warnings.extend(data_parallel_warnings(s))


def _numbers(value: Any, path: str) -> Iterator[tuple[str, float]]:
    """Every number in a scenario dump, with its key path (``cluster.tiers[0].latency_us``)."""
    if isinstance(value, bool):
        return
    if isinstance(value, int | float):
        yield path, value
    elif isinstance(value, Mapping):
        for key, item in value.items():
            yield from _numbers(item, f"{path}.{key}" if path else str(key))
    elif isinstance(value, list | tuple):
        for i, item in enumerate(value):
            yield from _numbers(item, f"{path}[{i}]")


def bound_of(path: str) -> Bound:
    """The bound of one key path: its own entry, else its table's ``.*`` entry, else the default."""
    pattern = re.sub(r"\[\d+\]", "[*]", path)
    parent = pattern.rsplit(".", 1)[0]
    return BOUNDS.get(pattern) or BOUNDS.get(f"{parent}.*") or DEFAULT_BOUND


def check_bounds(s: Scenario) -> list[Problem]:
    """Numbers outside ``BOUNDS`` (non-finite ones are refused earlier, by the schema)."""
    errors = []
    if s.world_size > MAX_WORLD_SIZE:
        errors.append(
            Problem(
                "cluster.num_nodes",
                f"num_nodes x gpus_per_node = {s.world_size:,} ranks, more than the {MAX_WORLD_SIZE:,} "
                "plancast plans for; use fewer nodes",
            )
        )
    for path, value in _numbers(s.model_dump(), ""):
        low, high, why = bound_of(path)
        if not (math.isfinite(value) and low <= value <= high):
            item = re.fullmatch(r"(.*)\[(\d+)\]", path)  # a list entry: the list's key, then which one
            where, what = (item[1], f"entry {item[2]} ({value:g})") if item else (path, f"{value:g}")
            errors.append(Problem(where, f"{what} is outside [{low:g}, {high:g}] ({why})"))
    return errors


def simulated_work(s: Scenario) -> int:
    """Pipeline actions one simulated step schedules (see ``MAX_SIMULATED_WORK``)."""
    return s.num_microbatches * s.pp * s.vpp


def _check_work(s: Scenario, errors: list[Problem]) -> None:
    work = simulated_work(s)
    if work > MAX_SIMULATED_WORK:
        errors.append(
            Problem(
                "training.global_batch_size",
                f"one step is {s.num_microbatches:,} micro-batches x {s.pp * s.vpp} (virtual) pipeline "
                f"stages = {work:,} pipeline actions to simulate, more than the {MAX_SIMULATED_WORK:,} "
                "plancast simulates (minutes); lower global_batch_size, or raise micro_batch_size or "
                "the data-parallel degree",
            )
        )


def check_plan(s: Scenario) -> tuple[list[Problem], list[str]]:
    """All errors (impossible plans) and warnings (unwise ones) of a field-valid scenario."""
    errors: list[Problem] = check_bounds(s)
    warnings: list[str] = []
    if errors:  # later checks compute with these numbers
        return errors, warnings
    _check_cluster(s, errors, warnings)
    _check_model(s, errors)
    errors.extend(Problem(p.path, p.message) for p in model_moe_problems(s))
    errors.extend(Problem(p.path, p.message) for p in model_shape_problems(s.model, s.model.num_experts))
    errors.extend(Problem(p.path, p.message) for p in window_problems(s.model, s.model.num_hidden_layers))
    t = s.training
    sparse = sparse_attention_problems(s.model, s.model.is_mla)
    sparse += sparse_training_problems(s.model, t.dsa_indexer_loss)
    windowed = s.model.sliding_window is not None
    sparse += linear_attention_problems(s.model, s.model.layer_types, s.model.is_mla, windowed)
    per_op = t.recompute == "selective" and t.selective_recompute == "op"
    sparse += linear_plan_problems(s.model, s.tp, s.cp, per_op)
    errors.extend(Problem(p.path, p.message) for p in sparse)
    errors.extend(Problem(p.path, p.message) for p in data_parallel_problems(s))
    backend = attention_backend_problems(s.training, s.model.is_sparse_attention)
    errors.extend(Problem(path, message) for path, message in backend)
    if _check_degrees(s, errors):
        errors.extend(Problem(p.path, p.message) for p in plan_moe_cp_problems(s))
        _check_batch(s, errors)
        if not errors:
            _check_pipeline(s, errors)
    _check_sequence_parallel(s, errors)
    if not errors:
        _check_work(s, errors)
    if not errors:
        _unwise(s, warnings)
        warnings.extend(moe_cp_warnings(s))
        warnings.extend(expert_bias_warnings(s))
    return errors, warnings
