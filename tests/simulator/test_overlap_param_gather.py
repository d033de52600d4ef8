"""parallelism.overlap_param_gather under Megatron-LM's distributed optimizer (`--overlap-param-gather`):
the updated parameters' all-gather leaves the end of the step and runs bucket by bucket beside the next
step's first forward, each bucket's forward waiting for its own gather (megatron/core/distributed/
param_and_grad_buffer.py `finish_param_sync`; simulator/engine/param_gather.py)."""

from __future__ import annotations

from typing import Any

import pandas as pd
import pytest

from plancast.simulator.engine.plan import StepPlan
from plancast.simulator.importers import ConfigImportError, from_megatron_args
from plancast.simulator.loader import parse_scenario
from plancast.simulator.predict import simulate
from plancast.simulator.scenario import Scenario
from plancast.simulator.sweep_space import enumerate_plans


def distopt_8b(overlap: bool | None, **par: Any) -> Scenario:
    """Llama 3 8B on two DGX B200 nodes under Megatron's distributed optimizer (dp 16)."""
    parallelism = {"zero_stage": 1, "overlap_grad_reduce": True, "distributed_optimizer": True,
                   "framework": "megatron-lm", **par}  # fmt: skip
    if overlap is not None:
        parallelism["overlap_param_gather"] = overlap
    data = {
        "model": {"preset": "llama3-8b"},
        "training": {"seq_len": 8192, "micro_batch_size": 1, "global_batch_size": 32, "dtype": "bf16"},
        "parallelism": parallelism,
        "cluster": {"preset": "dgx-b200", "num_nodes": 2},
    }
    return parse_scenario(data, "overlap-param-gather").scenario


def rank0(s: Scenario, engine: str = "auto") -> tuple[float, pd.DataFrame]:
    pred = simulate(s, events=True, engine=engine)
    events = pred.events
    return pred.summary["step_time_s"], events[events["rank"] == 0]


def test_megatron_leaves_it_off_as_its_flag_is_opt_in() -> None:
    assert distopt_8b(None).parallelism.overlap_param_gather is False
    assert distopt_8b(None, zero_stage=3, distributed_optimizer=False).parallelism.overlap_param_gather


def test_the_gather_moves_from_after_the_optimizer_to_the_first_forward() -> None:
    step_off, off = rank0(distopt_8b(False))
    step_on, on = rank0(distopt_8b(True))
    plan = StepPlan.of(distopt_8b(True))
    gathers_off = off[off["kind"] == "all_gather"]
    gathers_on = on[on["kind"] == "all_gather"]
    optimizer_end_us = off[off["kind"] == "optimizer"].eval("start_us + dur_us").iloc[0]
    assert len(gathers_off) == 1
    assert gathers_off["start_us"].iloc[0] == pytest.approx(optimizer_end_us)  # after the optimizer
    assert len(gathers_on) == len(plan.units[0].bucket_bytes) > 1  # one per bucket
    assert gathers_on["start_us"].min() == 0.0  # queued as the step starts
    forwards = on[on["kind"] == "forward"]
    first, later = forwards[forwards["microbatch"] == 0], forwards[forwards["microbatch"] == 1]
    first_bucket_us = gathers_on.sort_values("start_us")["dur_us"].iloc[0]
    # the first forward waits for the first bucket at least; the later ones wait for nothing
    assert first["dur_us"].iloc[0] >= later["dur_us"].iloc[0] + first_bucket_us
    # the step gains, but never more than the whole gather it used to pay after the optimizer
    assert 0.0 < step_off - step_on <= gathers_off["dur_us"].iloc[0] * 1e-6


def test_a_gather_slower_than_the_forward_leaves_the_forward_waiting() -> None:
    """On one 25 GB/s NIC per GPU and a short sequence the gathers outrun the forward: the first forward
    then ends after the last gather, so the step is longer than the gathers alone."""
    slow = distopt_8b(True)
    data = slow.model_dump(mode="json", exclude_none=True)
    data["training"]["seq_len"] = 512
    data["cluster"] = {"preset": "dgx-b200", "num_nodes": 2, "tiers": [
        {**data["cluster"]["tiers"][0]},
        {**data["cluster"]["tiers"][1], "bandwidth_GBps": 25.0},
    ]}  # fmt: skip
    s = parse_scenario(data, "slow-nic").scenario
    _, on = rank0(s)
    gathers = on[on["kind"] == "all_gather"]
    forwards = on[on["kind"] == "forward"]
    first = forwards[forwards["microbatch"] == 0].iloc[0]
    later_us = forwards[forwards["microbatch"] == 1]["dur_us"].iloc[0]
    assert gathers["dur_us"].sum() > 2 * later_us  # the case: gathers twice the forward
    last_gather_end = (gathers["start_us"] + gathers["dur_us"]).max()
    first_end = first["start_us"] + first["dur_us"]
    # the forward ends with the last bucket's share of its compute after the last gather
    last_share = StepPlan.of(s).param_gather_buckets(0)[-1] / sum(StepPlan.of(s).param_gather_buckets(0))
    slowdown = s.cluster.compute.overlap_slowdown
    assert last_gather_end <= first_end <= last_gather_end + later_us * last_share * (1 + slowdown) + 1e-6


INTERLEAVED = {"pipeline_parallel_schedule": "Interleaved1F1B", "virtual_stages_per_rank": 2}


@pytest.mark.parametrize(
    "par", [{}, {"pipeline_parallel_degree": 2}, {"pipeline_parallel_degree": 2, **INTERLEAVED}]
)
def test_both_engines_agree(par: dict[str, Any]) -> None:
    s = distopt_8b(True, **par)
    assert rank0(s, "simpy")[0] == pytest.approx(rank0(s, "event-free")[0], rel=1e-9)


LLAMA_8B_ARGS = (
    "--num-layers 32 --hidden-size 4096 --num-attention-heads 32 --group-query-attention "
    "--num-query-groups 8 --ffn-hidden-size 14336 --swiglu --seq-length 8192 --max-position-embeddings 8192 "
    "--micro-batch-size 1 --global-batch-size 32 --bf16 --vocab-size 128256 "
)


def test_the_megatron_importer_reads_the_flag() -> None:
    on = from_megatron_args(
        LLAMA_8B_ARGS + "--use-distributed-optimizer --overlap-grad-reduce --overlap-param-gather"
    )
    off = from_megatron_args(LLAMA_8B_ARGS + "--use-distributed-optimizer --overlap-grad-reduce")
    assert on["parallelism"]["overlap_param_gather"] is True
    assert "overlap_param_gather" not in off["parallelism"]  # Megatron's default: the framework's, off


@pytest.mark.parametrize(
    "flags", ["--overlap-param-gather", "--use-distributed-optimizer --overlap-param-gather"]
)
def test_the_megatron_importer_refuses_what_megatron_refuses(flags: str) -> None:
    with pytest.raises(ConfigImportError, match="--overlap-param-gather: Megatron-LM needs"):
        from_megatron_args(LLAMA_8B_ARGS + flags)


def test_the_sweep_bound_stays_a_lower_bound_with_the_gather_overlapped() -> None:
    """The sweep's bounds drop the post-optimizer gather under the key (sweep_bound.py): still at most
    the simulated step on every sampled ZeRO-1 plan."""
    from tests.simulator.test_sweep_bound import assert_bounds_hold, every_nth, toy

    base = toy("tiny-gpt", 8)
    par = base.parallelism.model_copy(update={"distributed_optimizer": True, "overlap_param_gather": True})
    overlapped = base.model_copy(update={"parallelism": par})
    plans = [p for p in sorted(enumerate_plans(overlapped, 8)) if p.zero_stage == 1 and p.dp > 1]
    assert StepPlan.of(plans[0].apply(overlapped)).forward_param_gather  # the case is the overlapped one
    assert assert_bounds_hold(overlapped, 8, every_nth(plans, 30)) > 15
