"""Cross-field checks of training.master_weights (pure 16-bit training), training.optimizer_moment_dtype,
training.activation_input_store and parallelism.pipeline_output_chunks (docs/memory.md), beside the other
memory keys' (validation_memory.py calls them)."""

from __future__ import annotations

from plancast.simulator.scenario import Scenario
from plancast.simulator.schedules import PlanProblem


def master_weights_problems(s: Scenario) -> list[PlanProblem]:
    """Pure 16-bit training under fp32 (nothing to drop) or under a framework that always keeps fp32 main
    parameters: Megatron-LM's Float16OptimizerWithFloat16Params / distributed optimizer and DeepSpeed's
    bf16 optimizer copy the 16-bit parameters into fp32 ones (megatron/core/optimizer/optimizer.py,
    deepspeed/runtime/bf16_optimizer.py)."""
    t, framework = s.training, s.parallelism.framework
    if t.master_weights:
        return []
    key = "training.master_weights"
    if t.dtype == "fp32":
        return [
            PlanProblem(
                key,
                "false keeps the parameters in training.dtype, which is fp32 here: there is no "
                'fp32 copy to drop; remove the key, or set training.dtype = "bf16"',
            )
        ]
    if framework != "torchtitan":
        return [
            PlanProblem(
                key,
                f"false (pure 16-bit parameters and optimizer states) under framework {framework}, whose "
                "optimizer always keeps fp32 main parameters: remove the key, or set parallelism.framework = "
                '"torchtitan" (torch.optim over 16-bit parameters, as NeMo AutoModel runs it)',
            )
        ]
    return []


def pipeline_output_problems(s: Scenario) -> list[PlanProblem]:
    """Stage outputs kept for the step without a pipeline: there is no stage to keep them."""
    kept = s.parallelism.pipeline_output_chunks
    if kept == "none" or s.pp > 1:
        return []
    return [
        PlanProblem(
            "parallelism.pipeline_output_chunks",
            f'"{kept}" keeps the outputs of pipeline stages, but pipeline_parallel_degree is 1: remove the '
            "key or set pipeline_parallel_degree > 1",
        )
    ]


def moment_dtype_problems(s: Scenario) -> list[PlanProblem]:
    """bf16 Adam moments outside Megatron-LM: torch's AdamW (torchtitan) keeps its state in the parameter's
    dtype, and DeepSpeed's bf16 optimizer keeps fp32 states (deepspeed/runtime/bf16_optimizer.py)."""
    framework = s.parallelism.framework
    if s.training.optimizer_moment_dtype == "fp32" or framework == "megatron-lm":
        return []
    return [
        PlanProblem(
            "training.optimizer_moment_dtype",
            f'"bf16" is Megatron-Core\'s precision-aware optimizer; under framework {framework} the moments '
            'take the optimizer\'s own dtype: remove the key, set parallelism.framework = "megatron-lm", or '
            "under torchtitan train pure bf16 with training.master_weights = false",
        )
    ]


def act_input_store_problems(s: Scenario) -> list[PlanProblem]:
    """The FP8 store of the activation's input without a SwiGLU (Megatron-Core passes
    activation_func_fp8_input_store only to its fused SwiGLU kernels, megatron/core/transformer/mlp.py
    `bias_swiglu_impl`, so nothing is stored narrower), or quantized by an FP8 recipe the run lacks."""
    store, key = s.training.activation_input_store, "training.activation_input_store"
    if store == "dtype":
        return []
    if s.model.activation != "swiglu":
        why = f'model.activation is "{s.model.activation}": Megatron-Core applies it only to SwiGLU'
        return [PlanProblem(key, f'"{store}" stores the SwiGLU\'s input narrower, but {why}; remove the key')]
    if store == "fp8_recipe" and not s.training.fp8:
        return [
            PlanProblem(
                key,
                '"fp8_recipe" quantizes with training.fp8_recipe, but training.fp8 is off: set training.fp8 '
                '= true, or use "fp8" (a plain cast, Megatron-Core\'s)',
            )
        ]
    return []


def parameter_copies_problems(s: Scenario) -> list[PlanProblem]:
    """DualPipe's second copy (costs/memory_dualpipe.py) is priced on DualPipeV's order, needs an even pp
    (DualPipe's README: PP even), and is defined only where ZeRO leaves the gradients whole: how ZeRO-2/3
    would shard two copies no source states."""
    par = s.parallelism
    if par.pipeline_parameter_copies == 1:
        return []
    key, why, fix = "parallelism.pipeline_parameter_copies", "", ""
    if par.pipeline_parallel_schedule != "DualPipeV":
        why = f'is DualPipe, priced as DualPipeV, but the schedule is "{par.pipeline_parallel_schedule}"'
        fix = 'set pipeline_parallel_schedule = "DualPipeV" or remove the key'
    elif s.pp % 2:
        why, fix = f"is DualPipe, which pairs rank i with rank pp-1-i, but pp is {s.pp}", "use an even pp"
    elif par.zero_stage >= 2:
        why = f"under zero_stage {par.zero_stage}: how ZeRO-2/3 shards DualPipe's two copies is not stated"
        fix = "set zero_stage 0 or 1 (DeepSeek-V3 ran ZeRO-1) or remove the key"
    return [PlanProblem(key, f"2 {why}: {fix}")] if why else []


def unswept_copies(s: Scenario) -> str | None:
    """Why `plancast sweep` cannot search `s` (DualPipe's second copy, which the sweep's memory estimate
    and its other schedules do not hold), or None."""
    if s.parallelism.pipeline_parameter_copies == 1:
        return None
    return (
        "parallelism.pipeline_parameter_copies = 2 is DualPipe's memory on one schedule (DualPipeV); the "
        "sweep searches every schedule with one copy of the model: remove the key to sweep, and simulate the "
        "DualPipe plan alone"
    )
