"""What a sweep needs from its scenario before it searches, and why a search came back empty.

The global batch is an input of the search, not one of its axes: it sets the optimizer's step and so
the model's convergence, which a step-time search must not trade away. A scenario that never set it
(`plancast import hf` writes no [training] table, so the default of 8 sequences would apply) is refused.
"""

from __future__ import annotations

from plancast.simulator.scenario import Scenario
from plancast.simulator.sweep_axes import Pins, Plan, cp_choices
from plancast.simulator.sweep_space import roots, tensor_parallel_degrees

BATCH_KEYS = ("global_batch_size", "seq_len")


def missing_batch(base: Scenario) -> str | None:
    """Why `base`'s batch cannot be searched over (a key it left at its default), or None. The loader
    keeps which keys a file gave (pydantic's `model_fields_set`), so a default is told from a choice."""
    unset = [key for key in BATCH_KEYS if key not in base.training.model_fields_set]
    if not unset:
        return None
    t = base.training
    names = " and ".join(f"training.{key}" for key in unset)
    return (
        f"{names} not set (the default global_batch_size = {t.global_batch_size} sequences of "
        f"seq_len = {t.seq_len} tokens would apply): a sweep ranks plans for one batch, so give it: add "
        "a [training] table with global_batch_size (sequences per optimizer step) and seq_len (tokens per "
        "sequence) to the scenario"
    )


def why_empty(base: Scenario, gpus: int, enumerated: int, limit_GiB: float, pins: Pins | None = None) -> str:
    """The constraint that emptied the search: the model's shapes, the batch, the pins, or memory."""
    m, t = base.model, base.training
    if enumerated == 0 and pins is not None and pins.values:
        return (
            f"no plan with --pin {pins.label()} on {gpus} GPUs: no valid plan has those values (the "
            "degrees must divide the GPUs and the model, the schedule build for the micro-batch count); "
            "drop or change a --pin"
        )
    if not tensor_parallel_degrees(base, gpus):
        return (
            f"no tensor-parallel degree divides {gpus} GPUs and the model's heads "
            f"({m.num_attention_heads}), kv heads ({m.kv_heads}) and ffn size ({m.ffn_size})"
        )
    if enumerated == 0:
        dps = [
            gpus // (tp * pp * cp)
            for tp, pp in roots(base, gpus)
            for cp in cp_choices(t.seq_len, gpus // tp, base.model.has_linear_attention)
            if (gpus // tp) % (cp * pp) == 0
        ]
        smallest_dp = min(dps, default=gpus)
        return (
            f"no plan: training.global_batch_size = {t.global_batch_size} is not a multiple of any "
            f"data-parallel degree on {gpus} GPUs (the smallest is {smallest_dp}); raise "
            "training.global_batch_size or search fewer --gpus"
        )
    runnable = (
        f"; with --runnable, only the plans framework {base.parallelism.framework} runs as given count "
        "(drop it to rank the others too)"
        if pins is not None and pins.runnable
        else ""
    )
    return (
        f"no plan of {enumerated:,} fits in {limit_GiB:g} GiB per GPU (memory): shard over more GPUs "
        f"(--gpus {2 * gpus:,} or more) or plan for a GPU with more memory (--cluster){runnable}"
    )


def plan_warnings(base: Scenario, gpus: int, plans: list[Plan]) -> list[list[str]]:
    """Per plan, what `plancast validate` warns about it, less what it warns about `base` itself and
    every one of `plans` too (printed once, for the scenario): a ranked plan that its framework refuses
    (Megatron-Core's EP overlap rules, validation_moe.py), runs no schedule of (catalog/frameworks.py)
    or finds unwise is named beside its rank, also where `base` shares it and other plans do not (a
    DualPipeV scenario's DualPipeV plans among ZBV ones). The search ranks such plans by their predicted
    time all the same; `--pin` leaves them out (docs/sweep.md)."""
    from plancast.simulator.sweep import _base_for  # the sweep imports this module
    from plancast.simulator.validation import check_plan

    resized = _base_for(base, gpus)
    found = [check_plan(plan.apply(resized))[1] for plan in plans]
    everywhere = set(check_plan(resized)[1]).intersection(*map(set, found))
    return [[w for w in warnings if w not in everywhere] for warnings in found]


def warning_lines(warned: list[list[str]]) -> list[str]:
    """`plan_warnings` of ranked plans as printed lines, each warning once with the ranks it applies to
    (`#1-#3, #7: ...`), in the order the ranks first name them: a framework that ships none of the top
    plans' schedule would otherwise print the same line under every rank."""
    ranks: dict[str, list[int]] = {}
    for i, warnings in enumerate(warned, 1):
        for warning in warnings:
            ranks.setdefault(warning, []).append(i)
    return [f"{_ranges(found)}: {warning}" for warning, found in ranks.items()]


def _ranges(ranks: list[int]) -> str:
    """`#1-#3, #7` for [1, 2, 3, 7] (ascending)."""
    runs: list[list[int]] = []
    for rank in ranks:
        if runs and rank == runs[-1][-1] + 1:
            runs[-1].append(rank)
        else:
            runs.append([rank])
    return ", ".join(f"#{run[0]}" if len(run) == 1 else f"#{run[0]}-#{run[-1]}" for run in runs)
