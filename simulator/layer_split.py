"""The default pipeline layer split (scenario.Scenario.layer_split when parallelism.pipeline_layer_split
is unset; the sweep's plans use it too, simulator/sweep_axes.py)."""

from __future__ import annotations


def even_layer_split(num_layers: int, num_stages: int, trailing: int = 0) -> tuple[int, ...]:
    """Layers over stages as evenly as possible; the first and last stage take the fewer layers,
    because they also hold the embedding and the output layer (as Megatron-LM's
    `--decoder-first/last-pipeline-num-layers` and DeepSpeed's balanced partitioning do; BLOOM-176B
    ran 70 layers on 12 stages). `trailing`: blocks that run after the last layer on the last stage
    (the multi-token-prediction depths, costs/mtp.py), balanced as layers and then taken off the last
    stage, as Megatron-Bridge lays DeepSeek-V3 out (pipeline layout "Et|(tt|)*30mL" on 32 stages: the
    MTP block and loss alone on the last; recipes/deepseek/deepseek_v3.py, scripts/performance)."""
    if trailing:
        split = list(even_layer_split(num_layers + trailing, num_stages))
        if split[-1] >= trailing:
            split[-1] -= trailing
            return tuple(split)
    base, extra = divmod(num_layers, num_stages)
    split = [base] * num_stages
    # Middle stages first, then the last, then the first.
    order = list(range(1, num_stages - 1)) + ([num_stages - 1] if num_stages > 1 else []) + [0]
    for stage in order[:extra]:
        split[stage] += 1
    return tuple(split)
