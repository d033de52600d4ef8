"""The all-to-all dispatcher's second permutation (Megatron-Core MoEAlltoAllTokenDispatcher's
sort_chunks_by_idxs, torchtitan ExpertParallel's _permute): a rank with several local experts copies the
tokens it receives into expert order after the dispatch and back before the combine; DeepEP's
and the allgather dispatcher's one local permutation does not (costs/moe.py, issue 31)."""

from __future__ import annotations

import pytest

from plancast.simulator.costs.moe import moe_block_forward
from plancast.simulator.costs.moe_overlap import MLP_OP_PREFIXES
from plancast.simulator.costs.ops import Op, Shape
from tests.simulator.test_moe_keys import _scenario, _summary

SORTS = ("expert_sort_chunks", "expert_unsort_chunks")


def _ops(dispatcher: str, ep: int = 32) -> dict[str, Op]:
    """The MoE block's forward ops on MOE's 64 experts at `ep` (the pure function: ep 64 holds one each)."""
    s = _scenario(moe_token_dispatcher=dispatcher)
    return {
        op.name: op
        for op in moe_block_forward(Shape.of(s), s.model, ep, imbalance=1.0, dispatcher=dispatcher)
    }


def test_alltoall_sorts_the_received_slots_by_local_expert_and_back() -> None:
    ops = _ops("alltoall")
    # 4096 tokens x top-8 slots received (forced balance), hidden 1024, bf16: read and write once each
    for name in SORTS:
        assert ops[name].bytes == pytest.approx(2 * 4096 * 8 * 1024 * 2)
    names = list(ops)
    assert names.index("permute") < names.index(SORTS[0]) < names.index("expert_gate_up")
    assert names.index("expert_down") < names.index(SORTS[1]) < names.index("unpermute")
    assert all(n.startswith(MLP_OP_PREFIXES) for n in SORTS)  # after the dispatch, before the combine


@pytest.mark.parametrize("dispatcher", ["deepep", "hybridep", "allgather"])
def test_the_other_dispatchers_permute_once(dispatcher: str) -> None:
    assert not set(SORTS) & set(_ops(dispatcher))


@pytest.mark.parametrize("ep", [1, 64])
def test_one_expert_per_rank_or_no_exchange_needs_no_sort(ep: int) -> None:
    assert not set(SORTS) & set(_ops("alltoall", ep))


def test_the_sorts_lengthen_the_alltoall_blocks_compute() -> None:
    compute = {d: _summary(moe_token_dispatcher=d)["compute_time_s"] for d in ("alltoall", "deepep")}
    assert compute["alltoall"] > compute["deepep"]
