"""Cross-field checks of the memory keys (docs/memory.md): keys that only mean something beside another.

Returned as ``PlanProblem`` (path, message with the fix); validation.check_plan reports them with the rest.
"""

from __future__ import annotations

from plancast.simulator.costs.fp8 import recipe
from plancast.simulator.memory_key_checks import (
    act_input_store_problems,
    master_weights_problems,
    moment_dtype_problems,
    parameter_copies_problems,
    pipeline_output_problems,
)
from plancast.simulator.scenario import Scenario
from plancast.simulator.schedules import PlanProblem


def memory_problems(s: Scenario) -> list[PlanProblem]:
    """Partial recompute without full recompute, recompute modules outside selective recompute or absent
    from the model, offloaded block counts without offload, FP8 weights without
    FP8 GEMMs or under a recipe that keeps none, HSDP without FSDP or with a replica count that does not
    divide the data-parallel ranks."""
    t, par, out = s.training, s.parallelism, list[PlanProblem]()
    if t.recompute_num_layers is not None and t.recompute != "full":
        fix = 'set recompute = "full" (Megatron-LM --recompute-granularity full) or remove the key'
        out.append(PlanProblem("training.recompute_num_layers", f"recomputes whole layers: {fix}"))
    if t.activation_offload_num_layers is not None and not t.activation_offload:
        fix = "set activation_offload = true (Megatron-Core --cpu-offloading) or remove the key"
        out.append(PlanProblem("training.activation_offload_num_layers", f"counts offloaded blocks: {fix}"))
    if t.fp8_param and not t.fp8:
        out.append(PlanProblem("training.fp8_param", "FP8 weights need FP8 GEMMs: set training.fp8 = true"))
    elif t.fp8_param and not recipe(t.fp8_recipe).weight_copy_bytes:
        out.append(
            PlanProblem(
                "training.fp8_param",
                f'FP8 primary weights under training.fp8_recipe = "{t.fp8_recipe}", which keeps no FP8 '
                "weight (torchao casts it per use, costs/fp8.py): drop fp8_param, or pick a recipe that "
                "caches FP8 weights (tensorwise_delayed, tensorwise_current, blockwise, mxfp8, nvfp4)",
            )
        )
    out += _recompute_module_problems(s)
    out += master_weights_problems(s) + pipeline_output_problems(s) + moment_dtype_problems(s)
    out += act_input_store_problems(s) + parameter_copies_problems(s)
    replicas = par.data_parallel_replicate_degree
    if replicas > 1 and (s.dp % replicas or par.zero_stage < 2 or s.dp // replicas < 2):
        out.append(
            PlanProblem(
                "parallelism.data_parallel_replicate_degree",
                f"{replicas} replicas of {s.dp} data-parallel ranks under zero_stage {par.zero_stage}: HSDP "
                "shards with FSDP over at least 2 ranks, so set zero_stage = 2 or 3 and a replica count that "
                "divides the dp ranks into groups of 2 or more (all replicas, no sharding: zero_stage 0)",
            )
        )
    return out


def _recompute_module_problems(s: Scenario) -> list[PlanProblem]:
    """training.recompute_modules outside Megatron-Core's selective recompute, or naming a submodule the
    model does not have (megatron/core/transformer/transformer_config.py `recompute_modules`)."""
    t, m = s.training, s.model
    if t.recompute_modules is None:
        return []
    key = "training.recompute_modules"
    if t.recompute != "selective" or t.selective_recompute != "attention":
        fix = 'set recompute = "selective" with selective_recompute = "attention" (Megatron-LM ' \
            "--recompute-granularity selective), or remove the key"
        return [PlanProblem(key, f"lists Megatron-Core's selectively recomputed submodules: {fix}")]
    present = {"core_attn", "layernorm", "mlp"}
    present |= {"mla_up_proj"} if m.is_mla else set()
    present |= {"moe", "moe_act"} if m.is_moe else set()
    present |= {"shared_experts"} if m.is_moe and m.n_shared_experts else set()
    missing = [name for name in t.recompute_modules if name not in present]
    if missing or len(set(t.recompute_modules)) < len(t.recompute_modules):
        return [
            PlanProblem(
                key,
                f"{t.recompute_modules}: {missing or 'a repeated name'} is not a submodule of this model "
                "once (mla_up_proj needs MLA, moe and moe_act experts, shared_experts shared experts): list "
                f"each of {sorted(present)} at most once",
            )
        ]
    return []
