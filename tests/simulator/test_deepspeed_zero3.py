"""DeepSpeed ZeRO-3 gathers per submodule (each GEMM's weight), not per block as FSDP2 does: a block is
several units, the prefetch looks one weight ahead, and the gathered working set is two weights. Under
full recompute every unit, DeepSpeed's or FSDP2's, is gathered a third time."""

from __future__ import annotations

from typing import Any

import pytest

from plancast.simulator.costs.memory import rank_memory
from plancast.simulator.costs.memory_fsdp import reduce_scatter_bytes, root_unit_bytes
from plancast.simulator.costs.stage import stage_costs
from plancast.simulator.engine import Topology
from plancast.simulator.loader import parse_scenario
from plancast.simulator.predict import simulate
from plancast.simulator.scenario import Scenario
from plancast.simulator.units import dp_plan


def gpt_zero3(framework: str, recompute: str = "full") -> Scenario:
    """A GPT block (QKV, out-projection, FC1, FC2) under ZeRO-3 over two DGX A100 nodes, no model parallel."""
    data: dict[str, Any] = {
        # dropout pinned: the frameworks' defaults differ (Megatron-DeepSpeed 0.1, torchtitan 0.0)
        "model": {
            "preset": "gpt3-175b",
            "num_hidden_layers": 4,
            "hidden_dropout": 0.1,
            "attention_dropout": 0.1,
        },
        # elementwise pinned: the frameworks' defaults differ there too (fused vs eager)
        "training": {
            "seq_len": 2048,
            "global_batch_size": 16,
            "dtype": "bf16",
            "recompute": recompute,
            "elementwise": "fused",
        },
        "parallelism": {"zero_stage": 3, "framework": framework},
        "cluster": {"preset": "dgx-a100-80gb", "num_nodes": 2},
    }
    return parse_scenario(data).scenario


def units(s: Scenario) -> tuple[Any, ...]:
    cost = stage_costs(s, Topology.of(s).levels("tp"))[0]
    return dp_plan(s, cost).units


def test_a_deepspeed_block_is_a_unit_per_weight_with_the_ops_between_them_apart() -> None:
    ds, fsdp = units(gpt_zero3("deepspeed")), units(gpt_zero3("torchtitan"))
    block = [u for u in ds if u.name.startswith("layer0.")]
    holding = [u.name.split(".")[1] for u in block if u.param_bytes > 0]
    assert holding == ["qkv", "out_proj", "fc1", "fc2"]
    assert any(u.param_bytes == 0 for u in block)  # the attention core and the norms: no parameters
    whole = next(u for u in fsdp if u.name == "layer0")
    assert sum(u.param_bytes for u in block) == pytest.approx(whole.param_bytes, rel=1e-9)
    assert sum(u.forward_share for u in block) == pytest.approx(whole.forward_share, rel=1e-9)
    assert sum(u.backward_share for u in block) == pytest.approx(whole.backward_share, rel=1e-9)
    # FC1 holds 4h^2 and the out-projection h^2 (GPT's 4h MLP)
    fc1, out = (next(u for u in block if u.name.endswith(n)) for n in ("fc1", "out_proj"))
    assert fc1.param_bytes == pytest.approx(4 * out.param_bytes, rel=1e-9)


def test_deepspeed_gathers_each_weight_and_moves_the_same_bytes() -> None:
    ds, fsdp = (simulate(gpt_zero3(f)).events for f in ("deepspeed", "torchtitan"))

    def gathers(events: Any) -> Any:
        return events[(events["stream"] == "dp") & (events["kind"] == "all_gather") & (events["rank"] == 0)]

    assert len(gathers(ds)) > 3 * len(gathers(fsdp))
    assert gathers(ds)["bytes"].sum() == pytest.approx(gathers(fsdp)["bytes"].sum(), rel=1e-6)


def test_deepspeed_keeps_two_weights_gathered_not_two_blocks() -> None:
    ds, fsdp = (rank_memory(gpt_zero3(f), 0).gathered for f in ("deepspeed", "torchtitan"))
    titan = gpt_zero3("torchtitan")  # less FSDP2's backward buffers (costs/memory_fsdp.py), not units
    fsdp -= reduce_scatter_bytes(titan) + root_unit_bytes(titan, (0,))
    assert ds == pytest.approx(fsdp * 8 / 24, rel=1e-3)  # FC1 + FC2 = 8h^2 of two 12h^2 blocks


@pytest.mark.parametrize("framework", ["torchtitan", "deepspeed"])
def test_full_recompute_gathers_every_unit_a_third_time(framework: str) -> None:
    """The model recomputes a whole stage before its backward, as plancast's runtime does, so each unit
    is gathered for the forward, the recompute and the backward. FSDP1/2 under per-block checkpointing
    gather twice; docs/calibration.md ("Gathers under full recompute") says why the count stays."""
    s = gpt_zero3(framework)
    holding = sum(1 for u in units(s) if u.param_bytes > 0) * s.num_microbatches  # per step, either way
    counts = {}
    for recompute in ("full", "none"):
        events = simulate(gpt_zero3(framework, recompute)).events
        mine = events[(events["rank"] == 0) & (events["stream"] == "dp")]
        counts[recompute] = int((mine["kind"] == "all_gather").sum())
        assert int((mine["kind"] == "reduce_scatter").sum()) == holding
    assert counts == {"full": 3 * holding, "none": 2 * holding}
