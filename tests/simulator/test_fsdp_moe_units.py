"""An MoE model's FSDP units (simulator/units.py): each block unit holds its own block's bytes (a dense
first block outweighs an MoE block's attention, router and shared expert), and under ZeRO-2/3 the routed
experts are sharded over the expert-data-parallel group and gathered / reduce-scattered with their block
(torchtitan's `fully_shard(transformer_block.moe.experts, mesh=dp_mod_ep_mesh)`), not all-reduced after
the backward as DDP / ZeRO-1 reduce them."""

from __future__ import annotations

from typing import Any

import pytest

from plancast.simulator.costs.ops import DTYPE_BYTES
from plancast.simulator.costs.params import chunk_expert_bytes, chunk_tensor_bytes
from plancast.simulator.engine import Engine, StepPlan
from plancast.simulator.loader import parse_scenario
from plancast.simulator.scenario import Scenario


def scenario(zero: int, ep: int = 2, dp: int = 4, **model: Any) -> Scenario:
    return parse_scenario(
        {
            "model": {"preset": "tiny-moe", "first_k_dense_replace": 1, **model},
            "training": {"seq_len": 256, "micro_batch_size": 1, "global_batch_size": 4 * dp, "dtype": "bf16"},
            "parallelism": {
                "data_parallel_degree": dp,
                "expert_parallel_degree": ep,
                "zero_stage": zero,
                "framework": "torchtitan",
            },
            "cluster": {"preset": "dgx-h100-80gb", "gpus_per_node": dp, "num_nodes": 1},
        }
    ).scenario


def test_each_block_unit_holds_its_own_block_and_its_experts_over_edp() -> None:
    s = scenario(3)
    plan = StepPlan.of(s)
    units = plan.units[0]
    blocks = [u for u in units.units if u.name != "root"]
    dtype = DTYPE_BYTES[s.training.dtype]
    assert s.edp == 2 and len(blocks) == s.model.num_hidden_layers
    dense, moe = blocks[0], blocks[1:]
    assert dense.param_bytes > moe[0].param_bytes and dense.expert_bytes == 0.0
    experts = chunk_expert_bytes(s.model, s.etp, s.ep, first_layer=1, layers=1, dtype_bytes=dtype)
    assert all(u.expert_bytes == experts > 0 for u in moe)
    # the root keeps what the blocks do not: embedding, head, final norm
    whole = sum(chunk_tensor_bytes(s.model, s.tp, layers=len(blocks), has_embedding=True, has_head=True))
    assert sum(u.param_bytes for u in units.units) == pytest.approx(whole / 4 * dtype, rel=1e-12)
    assert units.expert_bucket_bytes == ()  # no DDP reducer beside the units


def test_ddp_and_zero1_keep_the_expert_reducer_and_edp_1_shards_nothing() -> None:
    for s in (scenario(0), scenario(1)):
        units = StepPlan.of(s).units[0]
        assert units.expert_bucket_bytes and all(u.expert_bytes == 0.0 for u in units.units)
    alone = StepPlan.of(scenario(3, ep=4)).units[0]  # ep = dp: every expert has one replica
    assert all(u.expert_bytes == 0.0 for u in alone.units) and alone.expert_bucket_bytes == ()


def _gathers(s: Scenario) -> tuple[int, float]:
    """Rank 0's all-gathers on its dp stream: how many, and their seconds."""
    engine = Engine(s)
    engine.run()
    spans = [sp for sp in engine.spans if sp.rank == 0 and sp.stream == "dp" and sp.kind == "all_gather"]
    return len(spans), sum(sp.dur_s for sp in spans)


def test_zero3_gathers_the_experts_with_each_moe_block_on_the_dp_stream() -> None:
    """Every gather of an MoE block is followed by its experts' over edp: the rank's gathers grow by one
    per MoE unit gathered and by the experts' bytes; with experts unsharded (ep = dp) there are none."""
    sharded, alone = scenario(3), scenario(3, ep=4)
    count, seconds = _gathers(sharded)
    moe_units = sharded.model.num_hidden_layers - 1
    passes = 2 * sharded.num_microbatches  # ZeRO-3: each forward and each backward gathers
    count_alone, seconds_alone = _gathers(alone)
    assert count == count_alone + passes * moe_units and seconds > seconds_alone
