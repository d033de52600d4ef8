"""Cross-field checks of a parallel plan: errors for impossible plans, warnings for unwise ones.

Legal but unwise plans (tensor parallel across nodes, ZeRO with one data-parallel rank) are
simulated with a warning, not refused: seeing how bad they are is part of the point.
"""

from __future__ import annotations

from dataclasses import dataclass

from plancast.simulator.scenario import Scenario


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
    """World size = tp * pp * dp. Returns False when later checks would be meaningless."""
    par, world = s.parallelism, s.world_size
    tp, pp = s.tp, s.pp
    if world % (tp * pp):
        errors.append(
            Problem(
                "parallelism.tensor_parallel_degree",
                f"tp * pp = {tp} * {pp} = {tp * pp} does not divide the world size {world} "
                f"(cluster.num_nodes * cluster.gpus_per_node); pick degrees whose product divides it",
            )
        )
        return False
    dp = par.data_parallel_degree
    if dp > 0 and tp * pp * dp != world:
        errors.append(
            Problem(
                "parallelism.data_parallel_degree",
                f"tp * pp * dp = {tp} * {pp} * {dp} = {tp * pp * dp} but the cluster has {world} ranks; "
                f"set it to {world // (tp * pp)} or -1 to infer it",
            )
        )
        return False
    return True


def _check_model(s: Scenario, errors: list[Problem]) -> None:
    m, tp = s.model, s.tp
    _divides(
        errors,
        "model.hidden_size",
        m.hidden_size,
        m.num_attention_heads,
        "num_attention_heads",
        "the head dimension must be an integer",
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
    name = par.pipeline_parallel_schedule
    layers = s.model.num_hidden_layers
    if name == "Interleaved1F1B":
        if v < 2:
            errors.append(
                Problem(
                    "parallelism.virtual_stages_per_rank",
                    "Interleaved1F1B needs at least 2 virtual stages per rank; set it to 2 or more, "
                    "or use the 1F1B schedule",
                )
            )
        m = s.num_microbatches
        if m > 0 and m % pp:
            errors.append(
                Problem(
                    "training.global_batch_size",
                    f"Interleaved1F1B needs the micro-batch count ({m}) divisible by "
                    f"pipeline_parallel_degree ({pp}); change global_batch_size or micro_batch_size",
                )
            )
    elif v != 1:
        errors.append(
            Problem(
                "parallelism.virtual_stages_per_rank",
                f"{name} runs one stage per rank; set virtual_stages_per_rank = 1 or use Interleaved1F1B",
            )
        )
    stages = pp * v
    if layers < stages:
        errors.append(
            Problem(
                "parallelism.pipeline_parallel_degree",
                f"{stages} (virtual) stages but only {layers} layers; every stage needs a layer",
            )
        )
    split = par.pipeline_layer_split
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
        elif min(split) < 1:
            errors.append(Problem("parallelism.pipeline_layer_split", "every stage needs at least one layer"))


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
    key = "tf32" if dtype == "fp32" and "tf32" in c.gpu.peak_tflops else dtype
    if key not in c.gpu.peak_tflops:
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
    if s.parallelism.zero_stage and s.dp == 1:
        warnings.append(f"zero_stage {s.parallelism.zero_stage} with one data-parallel rank shards nothing")
    if s.pp == 1 and s.parallelism.pipeline_parallel_schedule not in ("1F1B", "GPipe"):
        warnings.append(
            f"{s.parallelism.pipeline_parallel_schedule} has no effect without pipeline parallelism"
        )
    if s.pp > 1 and s.num_microbatches < s.pp:
        warnings.append(
            f"{s.num_microbatches} micro-batches on {s.pp} stages: the pipeline bubble exceeds half "
            f"the step; raise global_batch_size or lower micro_batch_size"
        )
    if s.parallelism.zero_stage >= 2 and s.pp > 1:
        warnings.append(
            "ZeRO-2/3 with pipeline parallelism re-reduces gradients every micro-batch "
            "(as DeepSpeed warns); ZeRO-1 is the usual pairing"
        )


def check_plan(s: Scenario) -> tuple[list[Problem], list[str]]:
    """All errors (impossible plans) and warnings (unwise ones) of a field-valid scenario."""
    errors: list[Problem] = []
    warnings: list[str] = []
    _check_cluster(s, errors, warnings)
    _check_model(s, errors)
    if _check_degrees(s, errors):
        _check_batch(s, errors)
        if not errors:
            _check_pipeline(s, errors)
    _check_sequence_parallel(s, errors)
    if not errors:
        _unwise(s, warnings)
    return errors, warnings
