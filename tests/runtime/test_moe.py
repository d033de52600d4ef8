"""The MoE layer on one process: routing and capacity semantics, the layer against a per-token loop,
the load-balancing loss and its gradient (runtime/moe.py); the grouped experts' layout, forward and
backward against the loop (runtime/moe_experts.py)."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F  # noqa: N812  (the torch convention)

from plancast.runtime.model import MLP, ModelConfig
from plancast.runtime.moe import AuxLossAutoScaler, MoE, MoEConfig, route

HIDDEN = 8


def cfg(activation: str = "swiglu", **moe: object) -> ModelConfig:
    spec = {"num_experts": 4, "top_k": 2, "expert_ffn_size": 16, **moe}
    return ModelConfig(
        hidden_size=HIDDEN,
        num_layers=2,
        num_heads=2,
        num_kv_heads=2,
        ffn_size=32,
        vocab_size=16,
        activation=activation,
        norm="rmsnorm",
        position_embedding="rope",
        max_positions=64,
        tie_embeddings=False,
        moe=MoEConfig(**spec),  # type: ignore[arg-type]
    )


def layer(c: ModelConfig, seed: int = 0) -> MoE:
    torch.manual_seed(seed)
    assert c.moe is not None
    moe = MoE(c.hidden_size, c.moe, lambda ffn: MLP(c, ffn), activation=c.activation)
    for p in moe.experts.parameters():  # torch.empty until init_weights: give them values here
        torch.nn.init.normal_(p, std=0.3)
    return moe


def expert(moe: MoE, e: int, x: torch.Tensor) -> torch.Tensor:
    """Global expert ``e`` on ``x``, written out from its slice of the stacked weights."""
    ex, i = moe.experts, e - moe.experts.first_expert
    up = F.linear(x, ex.w3[i])
    if ex.activation == "swiglu":
        hidden = F.silu(F.linear(x, ex.w1[i])) * up
    elif ex.activation == "relu2":
        hidden = F.relu(up).square()
    else:
        hidden = F.gelu(up)
    return F.linear(hidden, ex.w2[i])


def per_token(moe: MoE, x: torch.Tensor, dropped: set[tuple[int, int]] = frozenset()) -> torch.Tensor:  # type: ignore[assignment]
    """Each token: sum over its top-k experts of renormalised weight * expert(token), a loop."""
    probs = torch.softmax(moe.router(x), -1)
    top_p, top_e = probs.topk(moe.moe.top_k, -1)
    w = top_p / top_p.sum(-1, keepdim=True)
    rows = []
    for t in range(x.shape[0]):
        y = torch.zeros(HIDDEN)
        for j in range(moe.moe.top_k):
            if (j, t) not in dropped:
                y = y + w[t, j] * expert(moe, int(top_e[t, j]), x[t])
        if moe.shared is not None:
            y = y + moe.shared(x[t])
        rows.append(y)
    return torch.stack(rows)


@pytest.mark.parametrize("activation", ["swiglu", "gelu", "relu2"])
@pytest.mark.parametrize("shared", [0, 1])
def test_dropless_layer_equals_the_per_token_loop(activation: str, shared: int) -> None:
    moe = layer(cfg(activation, num_shared=shared))
    x = torch.randn(10, HIDDEN)
    torch.testing.assert_close(moe(x), per_token(moe, x), rtol=1e-5, atol=1e-6)


def test_capacity_follows_gshard_and_drops_later_arrivals() -> None:
    logits = torch.tensor([[5.0, 4.0, 0.0, 0.0]] * 3)  # every token: expert 0 first, expert 1 second
    r = route(logits, top_k=2, capacity=2)
    assert r.kept.tolist() == [[True, True, False], [True, True, False]]  # third arrival dropped
    assert r.slot[:, :2].tolist() == [[0, 1], [2, 3]]  # expert * capacity + arrival position
    assert MoEConfig(8, 2, 4, capacity_factor=1.25).capacity(12) == math.ceil(1.25 * 12 * 2 / 8)
    assert MoEConfig(8, 2, 4).capacity(12) == 12  # dropless: one slot per token and expert


def test_dropless_routing_skips_the_arrival_order_and_changes_nothing_it_reads() -> None:
    logits = torch.randn(16, 8)
    full, dropless = route(logits, 3, 16), route(logits, 3, 16, dropless=True)
    assert torch.equal(dropless.slot // 16, full.slot // 16)  # each choice's expert, all MoE._grouped reads
    assert bool(dropless.kept.all()) and bool(full.kept.all())  # capacity T: nothing dropped either way
    assert int((dropless.slot % 16).max()) == 0 < int((full.slot % 16).max())  # no arrival order computed
    torch.testing.assert_close(dropless.weight, full.weight)
    torch.testing.assert_close(dropless.aux_loss, full.aux_loss)


def test_dropped_assignments_contribute_nothing() -> None:
    moe = layer(cfg(capacity_factor=0.5))
    x = torch.randn(12, HIDDEN)
    capacity = moe.moe.capacity(12)
    r = route(moe.router(x), moe.moe.top_k, capacity)
    dropped = {(j, t) for j, t in zip(*torch.nonzero(~r.kept, as_tuple=True), strict=True)}
    assert dropped, "a capacity factor of 0.5 must drop some assignments"
    dropped = {(int(j), int(t)) for j, t in dropped}
    torch.testing.assert_close(moe(x), per_token(moe, x, dropped), rtol=1e-5, atol=1e-6)


def test_aux_loss_is_switch_formula_and_reaches_the_router() -> None:
    uniform = route(torch.zeros(4, 4), top_k=1, capacity=4)
    assert float(uniform.aux_loss) == pytest.approx(1.0)  # balanced: E * sum (1/E)(1/E) * E = 1 (k=1)
    moe = layer(cfg(aux_loss_coef=0.5))
    moe.aux_loss_scale = 0.25
    x = torch.randn(6, HIDDEN)
    moe(x).sum().backward()
    with_aux = moe.router.weight.grad.clone()
    moe.zero_grad()
    r = route(moe.router(x), 2, 6)
    (r.aux_loss * 0.5 * 0.25).backward()
    moe.router.weight.grad, aux_only = None, moe.router.weight.grad.clone()
    object.__setattr__(moe, "moe", MoEConfig(4, 2, 16))  # coefficient 0: no aux gradient
    moe(x).sum().backward()
    torch.testing.assert_close(with_aux, moe.router.weight.grad + aux_only)


def test_auto_scaler_is_the_identity_forward() -> None:
    out, aux = torch.randn(3, requires_grad=True), torch.tensor(2.0, requires_grad=True)
    y = AuxLossAutoScaler.apply(out, aux, 0.125)
    assert torch.equal(y, out)
    y.sum().backward()
    assert float(aux.grad) == 0.125 and torch.equal(out.grad, torch.ones(3))


def test_expert_shards_hold_the_global_expert_names() -> None:
    c = cfg()
    assert c.moe is not None
    shard = MoE(HIDDEN, c.moe, lambda ffn: MLP(c, ffn), ep_rank=1, ep=2)
    assert (shard.experts.first_expert, len(shard.experts)) == (2, 2)
    assert shard.experts.w2.shape == (2, HIDDEN, 16) and shard.experts.w1.shape == (2, 16, HIDDEN)
    assert shard.experts.expert_names("w1") == ["2.gate.weight", "3.gate.weight"]
    with pytest.raises(ValueError, match="divisible"):
        MoE(HIDDEN, c.moe, lambda ffn: MLP(c, ffn), ep_rank=0, ep=3)
