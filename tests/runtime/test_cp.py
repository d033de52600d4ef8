"""Context-parallel attention on one process: the load-balanced split, and attention over one rank's
shard with every rank's K/V equal to full-sequence attention at that shard's positions
(runtime/parallel/cp.py; the gloo runs are in tests/distributed)."""

from __future__ import annotations

import pytest
import torch

from plancast.runtime.model import Attention, Embedding, ModelConfig
from plancast.runtime.parallel.cp import local_positions, shard_sequence

SEQ = 16


def cfg(position_embedding: str, kv_heads: int = 2) -> ModelConfig:
    return ModelConfig(
        hidden_size=16,
        num_layers=2,
        num_heads=4,
        num_kv_heads=kv_heads,
        ffn_size=32,
        vocab_size=32,
        activation="gelu",
        norm="layernorm",
        position_embedding=position_embedding,
        max_positions=SEQ,
        tie_embeddings=True,
    )


def test_rank_i_holds_chunks_i_and_2cp_minus_1_minus_i() -> None:
    assert local_positions(16, 2, 0).tolist() == [0, 1, 2, 3, 12, 13, 14, 15]
    assert local_positions(16, 2, 1).tolist() == [4, 5, 6, 7, 8, 9, 10, 11]
    every = torch.cat([local_positions(24, 3, r) for r in range(3)])
    assert sorted(every.tolist()) == list(range(24))
    tokens = torch.arange(32).view(2, 16)
    assert shard_sequence(tokens, 2, 1)[1].tolist() == list(range(20, 28))
    with pytest.raises(ValueError, match="2 \\* context_parallel_degree"):
        local_positions(12, 4, 0)


class _Shard:
    """A ContextHook for rank ``rank``: attends to ``others``' K/V (every rank's), or, while
    ``others`` lacks a rank, records its own K/V and attends to them alone."""

    def __init__(self, cp: int, rank: int, others: dict[int, tuple[torch.Tensor, torch.Tensor]]) -> None:
        self.cp, self.rank, self.others = cp, rank, others
        self.positions = local_positions(SEQ, cp, rank)
        self.recording = len(others) < cp
        keys = (
            self.positions if self.recording else torch.cat([local_positions(SEQ, cp, r) for r in range(cp)])
        )
        self.mask = self.positions[:, None] >= keys[None, :]

    def gather_kv(self, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        if self.recording:
            self.others[self.rank] = (k.detach(), v.detach())
            return k, v
        kv = {**self.others, self.rank: (k, v)}  # this rank's own K/V stay in the graph
        return torch.cat([kv[r][0] for r in range(self.cp)], 2), torch.cat(
            [kv[r][1] for r in range(self.cp)], 2
        )


def _attend(embed: Embedding, attn: Attention, tokens: torch.Tensor, hook: _Shard) -> torch.Tensor:
    attn.context, embed.positions = hook, hook.positions
    return attn(embed(shard_sequence(tokens, hook.cp, hook.rank)))


@pytest.mark.parametrize("position_embedding", ["rope", "learned"])
@pytest.mark.parametrize("cp", [2, 4])
def test_sharded_attention_equals_full_attention(position_embedding: str, cp: int) -> None:
    c = cfg(position_embedding)
    torch.manual_seed(0)
    embed, attn = Embedding(c), Attention(c)
    tokens = torch.randint(0, c.vocab_size, (2, SEQ))
    full = attn(embed(tokens))
    others: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}
    for r in range(cp):  # every rank's K and V, at its global positions
        _attend(embed, attn, tokens, _Shard(cp, r, others))
    for r in range(cp):
        got = _attend(embed, attn, tokens, _Shard(cp, r, others))
        torch.testing.assert_close(got, full[:, local_positions(SEQ, cp, r)], rtol=1e-5, atol=1e-6)
