"""The expert- and context-parallel axes of the plan search (simulator/sweep.py enumerates them)."""

from __future__ import annotations

from plancast.simulator.scenario import Scenario


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
