"""The axes of the plan search: one point of it (`Plan`) and the expert- and context-parallel choices
(simulator/sweep.py enumerates them)."""

from __future__ import annotations

from dataclasses import dataclass

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

    def apply(self, base: Scenario) -> Scenario:
        """The base scenario with this plan's parallelism and batch shape (layer split reset to even)."""
        par = base.parallelism.model_copy(
            update={
                "tensor_parallel_degree": self.tp,
                "pipeline_parallel_degree": self.pp,
                "data_parallel_degree": self.dp,
                "zero_stage": self.zero_stage,
                "pipeline_parallel_schedule": self.schedule,
                "virtual_stages_per_rank": self.virtual_stages,
                "sequence_parallel": self.sequence_parallel,
                "pipeline_layer_split": None,
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
