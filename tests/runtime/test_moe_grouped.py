"""The grouped experts (runtime/moe_experts.py): the padded layout the grouped GEMM reads, the dropless
layer's forward and backward against the per-token loop, the fallback against torch's kernel, and the
stacked weights against the per-expert initialisation, the expert-parallel slices and the keys a
checkpoint writes them under."""

from __future__ import annotations

import zlib
from pathlib import Path

import pytest
import torch

from plancast.runtime.checkpoint import expert_keyed
from plancast.runtime.model import Decoder, ModelConfig
from plancast.runtime.moe import MoE, global_experts
from plancast.runtime.moe_experts import GROUP_ALIGN_ROWS, grouped_mm, padded_layout
from tests.runtime.test_moe import HIDDEN, cfg, layer, per_token


def test_padded_layout_puts_each_expert_in_its_own_aligned_group() -> None:
    expert = torch.tensor([0, 0, 0, 2, 2, 2, 2, 2, 2, 2, 2, 2, 3])  # expert 1 gets no row
    dest, ends, rows = padded_layout(expert, 4)
    a = GROUP_ALIGN_ROWS
    assert ends.dtype == torch.int32
    assert ends.tolist() == [a, 2 * a, 4 * a, 5 * a]  # 3 -> 8, 0 -> 8 (never empty), 9 -> 16, 1 -> 8
    assert dest.tolist() == [0, 1, 2, 16, 17, 18, 19, 20, 21, 22, 23, 24, 32]
    assert rows == len(expert) + 4 * a and rows >= int(ends[-1])


@pytest.mark.parametrize("activation", ["swiglu", "gelu", "relu2"])
def test_grouped_forward_and_backward_equal_the_per_token_loop(activation: str) -> None:
    """37 tokens x top-2 over 4 experts: uneven groups, each padded; a wrong sort, destination or offset
    hands a token to another expert's weights or to a padding row, and the outputs or gradients differ."""
    torch.manual_seed(3)
    moe = layer(cfg(activation, num_shared=1))
    x = torch.randn(37, HIDDEN, requires_grad=True)
    grad = torch.randn(37, HIDDEN)
    moe(x).backward(grad)
    got = [x.grad.clone()] + [p.grad.clone() for p in moe.parameters()]
    x.grad = None
    moe.zero_grad()
    per_token(moe, x).backward(grad)
    want = [x.grad] + [p.grad for p in moe.parameters()]
    for name, g, w in zip(["x"] + [n for n, _ in moe.named_parameters()], got, want, strict=True):
        torch.testing.assert_close(g, w, rtol=1e-4, atol=1e-5, msg=lambda m, n=name: f"{n}: {m}")


def test_the_fallback_loop_equals_torch_grouped_mm_on_the_same_offsets() -> None:
    if not hasattr(torch, "_grouped_mm"):
        pytest.skip("this torch has no _grouped_mm")
    torch.manual_seed(0)
    x, w = torch.randn(40, 8), torch.randn(3, 8, 16)
    ends = torch.tensor([8, 16, 32], dtype=torch.int32)
    loop = grouped_mm(x, w, ends)  # a CPU tensor: the loop
    torch.testing.assert_close(loop[:32], torch._grouped_mm(x, w, offs=ends)[:32], rtol=1e-6, atol=1e-6)
    assert torch.equal(loop[32:], torch.zeros(8, 16))


def _legacy(name: str, shape: tuple[int, ...], seed: int, layers: int) -> torch.Tensor:
    """runtime/model.py's draw for a per-expert ``nn.Linear`` of that name (before stacking)."""
    gen = torch.Generator().manual_seed(seed * 1_000_003 + zlib.crc32(name.encode()))
    std = 0.02 / (2 * layers) ** 0.5 if name.endswith("down.weight") else 0.02
    return torch.randn(shape, generator=gen) * std


def test_stacked_experts_start_as_the_per_expert_modules_did_and_ep_ranks_hold_slices() -> None:
    c = cfg()
    c = ModelConfig(**{**{f: getattr(c, f) for f in c.__dataclass_fields__}, "num_layers": 1})
    whole = Decoder(c, 0, 1, has_embedding=False, has_head=False, seed=5)
    shard = Decoder(c, 0, 1, has_embedding=False, has_head=False, seed=5, ep_rank=1, ep=2)
    moe = whole.layers["0"].mlp
    assert isinstance(moe, MoE)
    gate3 = _legacy("layers.0.mlp.experts.3.gate.weight", (16, 8), 5, 1)
    down0 = _legacy("layers.0.mlp.experts.0.down.weight", (8, 16), 5, 1)
    torch.testing.assert_close(moe.experts.w1[3], gate3)
    torch.testing.assert_close(moe.experts.w2[0], down0)
    name = "layers.0.mlp.experts.w3"
    rows = global_experts(shard, name)
    assert rows == slice(2, 4) and global_experts(shard, "layers.0.mlp.router.weight") is None
    assert torch.equal(shard.get_parameter(name), whole.get_parameter(name)[rows])


def test_a_checkpoint_keys_stacked_experts_by_global_expert(tmp_path: Path) -> None:
    """Expert-parallel ranks hold the same parameter names for different experts: the state DCP writes
    names each global expert (views of the live tensors), and a load through those keys restores the
    stacked parameters and AdamW's moments."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict

    c = cfg()
    shard = Decoder(c, 0, 2, has_embedding=False, has_head=False, seed=5, ep_rank=1, ep=2)
    model, optim = get_state_dict(shard, torch.optim.AdamW(shard.parameters()))
    keyed = expert_keyed(shard, {"model": model, "optim": optim})
    assert "layers.1.mlp.experts.w1.3" in keyed["model"] and "layers.1.mlp.experts.w1" not in keyed["model"]
    assert "layers.1.mlp.router.weight" in keyed["model"]

    whole = Decoder(c, 0, 2, has_embedding=False, has_head=False, seed=5)
    opt = torch.optim.AdamW(whole.parameters())
    whole(torch.randn(1, 5, HIDDEN)).sum().backward()
    opt.step()
    model, optim = get_state_dict(whole, opt)
    dcp.save(expert_keyed(whole, {"model": model, "optim": optim}), checkpoint_id=tmp_path)
    w2 = whole.get_parameter("layers.1.mlp.experts.w2")
    saved, moment = w2.detach().clone(), opt.state[w2]["exp_avg"].clone()
    with torch.no_grad():
        w2.zero_()
        opt.state[w2]["exp_avg"].zero_()
    model, optim = get_state_dict(whole, opt)
    dcp.load(expert_keyed(whole, {"model": model, "optim": optim}), checkpoint_id=tmp_path)
    assert torch.equal(w2.detach(), saved) and torch.equal(opt.state[w2]["exp_avg"], moment)
