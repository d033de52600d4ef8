"""The axes of the plan search: one point of it (`Plan`) and the expert- and context-parallel choices
(simulator/sweep.py enumerates them)."""

from __future__ import annotations

import math
from dataclasses import dataclass

from plancast.simulator.layer_split import even_layer_split
from plancast.simulator.scenario import Scenario

SCHEDULES = ("1F1B", "Interleaved1F1B", "ZeroBubble", "GPipe")
RECOMPUTE = ("none", "selective", "full")
ZERO_STAGES = (0, 1, 2, 3)


@dataclass(frozen=True, slots=True, order=True)
class Plan:
    """One point of the search space."""

    tp: int
    pp: int
    dp: int
    micro_batch_size: int
    schedule: str
    virtual_stages: int
    recompute: str
    sequence_parallel: bool
    zero_stage: int
    ep: int = 1  # expert parallel, carved out of dp
    cp: int = 1  # context parallel: world = tp * cp * pp * dp
    first_layers: int = 0
    """Blocks on the first virtual stage, and on the last (Megatron-LM's --decoder-first/last-pipeline-
    num-layers); the rest spread evenly between them. 0 and 0: the even split (scenario.even_layer_split)."""
    last_layers: int = 0

    def layer_split(self, layers: int, trailing: int = 0) -> tuple[int, ...]:
        """Blocks per virtual stage; `trailing`: the MTP depths after them (scenario.even_layer_split)."""
        stages = self.pp * self.virtual_stages
        if not self.first_layers:
            return even_layer_split(layers, stages, trailing)
        rest = layers - self.first_layers - self.last_layers
        middle = even_layer_split(rest, stages - 2) if stages > 2 else ()
        return (self.first_layers, *middle, self.last_layers)

    def apply(self, base: Scenario) -> Scenario:
        """The base scenario with this plan's parallelism, batch shape and layer split."""
        split = list(self.layer_split(base.model.num_hidden_layers)) if self.first_layers else None
        par = base.parallelism.model_copy(
            update={
                "tensor_parallel_degree": self.tp,
                "pipeline_parallel_degree": self.pp,
                "data_parallel_degree": self.dp,
                "zero_stage": self.zero_stage,
                "pipeline_parallel_schedule": self.schedule,
                "virtual_stages_per_rank": self.virtual_stages,
                "sequence_parallel": self.sequence_parallel,
                "pipeline_layer_split": split,
                "expert_parallel_degree": self.ep,
                "context_parallel_degree": self.cp,
            }
        )
        training = base.training.model_copy(
            update={"micro_batch_size": self.micro_batch_size, "recompute": self.recompute}
        )
        return base.model_copy(update={"parallelism": par, "training": training})

    def label(self) -> str:
        sched = self.schedule + (f"x{self.virtual_stages}" if self.virtual_stages > 1 else "")
        sp = "+SP" if self.sequence_parallel else ""
        extra = (f" ep{self.ep}" if self.ep > 1 else "") + (f" cp{self.cp}" if self.cp > 1 else "")
        if self.first_layers:
            extra += f" layers {self.first_layers}..{self.last_layers}"
        return (
            f"tp{self.tp}{sp} pp{self.pp} dp{self.dp}{extra} mb{self.micro_batch_size} {sched} "
            f"rc={self.recompute} zero{self.zero_stage}"
        )


def divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


MIN_CP_TOKENS = 4096
"""Context parallel is searched while each rank keeps at least this many tokens of a sequence: below it
the K/V exchange outweighs the attention it splits (Llama 3 used cp 16 at 128k tokens, 8k per rank,
Dubey et al. 2024 sec. 3.3.2)."""


def cp_choices(seq_len: int, gpus: int) -> list[int]:
    """Context-parallel degrees worth searching: 1, and on long sequences the divisors cp of `gpus` with
    seq_len % (2 cp) == 0 and at least MIN_CP_TOKENS tokens per rank."""
    return [c for c in divisors(gpus) if c == 1 or (seq_len % (2 * c) == 0 and seq_len // c >= MIN_CP_TOKENS)]


def ep_choices(base: Scenario, dp: int) -> list[int]:
    """Expert-parallel degrees: divisors of dp that divide the expert count (1 for a dense model)."""
    experts = base.model.num_experts
    return [e for e in divisors(dp) if experts % e == 0] if experts else [1]


def balanced_layers(
    layers: int, stages: int, first_extra: float, last_extra: float
) -> tuple[int, int] | None:
    """The pipeline layer balancer: (blocks on the first stage, on the last) that minimise the largest
    stage's work, in blocks, when the first stage also runs `first_extra` blocks' worth (the embedding)
    and the last `last_extra` (the output layer and loss); the middle stages split the rest evenly. None
    where that is the even split, or where there is no middle to move blocks to or from.

    Megatron-LM sets the same two numbers by hand (--decoder-first/last-pipeline-num-layers); a big
    vocabulary makes the last stage the bottleneck of an even split (Llama 3 8B's 128k-token output
    layer is about two blocks of work)."""
    if stages < 2 or layers < stages:
        return None
    best: tuple[float, int, int] | None = None
    for first in range(1, layers - stages + 3):
        for last in range(1, layers - first - (stages - 2) + 1):
            rest = layers - first - last
            if stages == 2 and rest:
                continue
            middle = math.ceil(rest / (stages - 2)) if stages > 2 else 0
            load = max(first + first_extra, last + last_extra, middle)
            if best is None or (load, abs(first - last), first) < (best[0], abs(best[1] - best[2]), best[1]):
                best = (load, first, last)
    if best is None:
        return None
    _, first, last = best
    between = even_layer_split(layers - first - last, stages - 2) if stages > 2 else ()
    split = (first, *between, last)
    even = even_layer_split(layers, stages)
    even_load = max(even[0] + first_extra, even[-1] + last_extra, *even[1:-1])
    return None if split == even or best[0] >= even_load else (first, last)
