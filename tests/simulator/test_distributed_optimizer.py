"""parallelism.distributed_optimizer (Megatron-LM's `--use-distributed-optimizer`): under ZeRO-1 the
gradient buckets are reduce-scattered and the updated parameters all-gathered once per chunk
(megatron/core/distributed/param_and_grad_buffer.py), instead of DDP's all-reduce and a broadcast from
every owner; the same bytes move once instead of twice, so the step is shorter."""

from __future__ import annotations

from plancast.simulator.loader import parse_scenario
from plancast.simulator.predict import simulate
from plancast.simulator.scenario import Scenario


def llama_8b_on_two_b200_nodes(distributed_optimizer: bool) -> Scenario:
    data = {
        "model": {"preset": "llama3-8b"},
        "training": {"seq_len": 8192, "micro_batch_size": 1, "global_batch_size": 16, "dtype": "bf16"},
        "parallelism": {
            "zero_stage": 1,
            "overlap_grad_reduce": True,
            "distributed_optimizer": distributed_optimizer,
            "framework": "megatron-lm",
        },
        "cluster": {"preset": "dgx-b200", "num_nodes": 2},
    }
    return parse_scenario(data, "distopt").scenario


def test_the_distributed_optimizer_reduce_scatters_and_gathers_once() -> None:
    dp = {}
    steps = {}
    for on in (False, True):
        pred = simulate(llama_8b_on_two_b200_nodes(on), events=True)
        events = pred.events
        mine = events[(events["rank"] == 0) & (events["stream"] == "dp")]
        dp[on] = mine.groupby("kind")["bytes"].agg(["count", "sum"])
        steps[on] = pred.summary["step_time_s"]
    assert set(dp[False].index) == {"all_reduce", "broadcast"}
    assert set(dp[True].index) == {"reduce_scatter", "all_gather"}
    assert dp[True].loc["all_gather", "count"] == 1  # one chunk, one gather
    assert dp[True].loc["all_gather", "sum"] == dp[False].loc["broadcast", "sum"]  # every shard once
    assert dp[True].loc["reduce_scatter", "sum"] == dp[False].loc["all_reduce", "sum"]  # the same buckets
    assert steps[True] < steps[False]
