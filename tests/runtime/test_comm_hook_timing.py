"""DDP buckets and ZeRO-1 broadcasts are timed by hooks, not the profiler; the recorder's rows.

Only tensor parallelism (DTensor) and FSDP2 need ``torch.profiler``; the other plans must never
start it and must still produce exactly the expected events (tests/distributed/test_events.py checks
the keys of every plan). No timing thresholds here: only what the events must be, never how fast.
"""

from __future__ import annotations

from typing import Any

import pandas as pd
import pytest
import torch

from plancast.runtime.instrument import CpuTimer, SpanKey, StepRecorder, events_frame
from plancast.runtime.trainer import library_collectives
from plancast.simulator.loader import parse_scenario
from plancast.traces.schema import Event, to_frame
from tests.distributed.checks import events_match_expected, tiny_scenario
from tests.distributed.spawn import run_ranks

PLANS: dict[str, tuple[dict[str, Any], bool]] = {
    # name: (parallelism, needs the profiler)
    "ddp": ({"data_parallel_degree": 2}, False),
    "zero1": ({"data_parallel_degree": 2, "zero_stage": 1}, False),
    "pp": ({"pipeline_parallel_degree": 2}, False),
    "zero2": ({"data_parallel_degree": 2, "zero_stage": 2}, True),
    "zero3": ({"data_parallel_degree": 2, "zero_stage": 3}, True),
    "tp": ({"tensor_parallel_degree": 2}, True),
    "tp-ddp": ({"tensor_parallel_degree": 2, "data_parallel_degree": 2}, True),
}


@pytest.mark.parametrize("name", list(PLANS))
def test_only_dtensor_and_fsdp_plans_need_the_profiler(name: str) -> None:
    parallelism, profiled = PLANS[name]
    world = 4 if name == "tp-ddp" else 2
    scenario = parse_scenario(tiny_scenario(world, **parallelism)).scenario
    assert library_collectives(scenario) is profiled


# ------------------------------------------------------------------------------ recorder rows
def test_rows_become_the_schema_table() -> None:
    """Spans, an unobserved send and hooked collectives -> the table ``to_frame`` builds."""
    rec = StepRecorder(3, CpuTimer(), profile_collectives=False)
    rec.begin_step()
    with rec.span(SpanKey("forward", 1, 0, 2)):
        pass
    send = rec.open_async(SpanKey("send", 1, 0, 2, stream="pp", peer=0, bytes=4096, index=1))

    class NoFutureWork:  # gloo point-to-point work
        def get_future(self) -> Any:
            raise RuntimeError("Work::getFuture not implemented.")

    rec.watch(send, NoFutureWork())
    futures = [torch.futures.Future() for _ in range(3)]
    done = [rec.open_collective("dp", "all_reduce", 1, 0) for _ in range(2)]
    chained = [futures[i].then(d.value) for i, d in enumerate(done)]
    bcast = rec.open_collective("dp", "broadcast", 1, 0)
    futures[2].add_done_callback(bcast.done)
    for f in futures:
        f.set_result([torch.zeros(1)])
    assert all(torch.equal(c.wait(), torch.zeros(1)) for c in chained)
    out = rec.finish(7)
    frame = out.frame()
    assert out.frame() is frame  # built once

    got = frame.drop(columns=["start_us", "dur_us"])
    events = [
        Event("measured", 3, 7, "compute", "forward", 0.0, 0.0, stage=1, chunk=0, microbatch=2),
        Event("measured", 3, 7, "pp", "send", 0.0, 0.0, 1, 0, 2, index=1, peer=0, bytes=4096),
        Event("measured", 3, 7, "dp", "all_reduce", 0.0, 0.0, 1, 0, -1, index=0),
        Event("measured", 3, 7, "dp", "all_reduce", 0.0, 0.0, 1, 0, -1, index=1),
        Event("measured", 3, 7, "dp", "broadcast", 0.0, 0.0, 1, 0, -1, index=0),
    ]
    pd.testing.assert_frame_equal(got, to_frame(events).drop(columns=["start_us", "dur_us"]))
    assert (frame["start_us"] >= 0).all() and (frame["dur_us"] >= 0).all()
    assert frame.loc[1, "dur_us"] == 0.0  # completion never observed: lasts 0, as before
    assert frame["start_us"].is_monotonic_increasing  # issue order
    assert not rec._p2p_futures  # the failed lookup is not repeated for every send

    rec.begin_step()  # indices restart every step
    rec.open_collective("dp", "all_reduce", 1, 0).done(None)
    assert rec.finish(8).frame()["index"].tolist() == [0]


def test_events_frame_keeps_mixed_ranks_steps_and_flops() -> None:
    events = [
        Event("measured", 0, 1, "compute", "forward", 1.0, 2.0, stage=0, chunk=0, microbatch=0, flops=5.0),
        Event("predicted", 1, 2, "dp", "all_reduce", 3.0, 4.0, stage=0, chunk=0, index=2),
    ]
    pd.testing.assert_frame_equal(events_frame(events), to_frame(events))


# --------------------------------------------------------------------------- real gloo ranks
def hooked_collectives_without_profiler(rank: int, world_size: int, data: dict[str, Any]) -> None:
    """Instrumented steps never start the profiler; the dp events are the hooks' and are well formed."""
    from plancast.runtime import instrument

    def no_profiler(*_args: Any, **_kwargs: Any) -> Any:
        raise AssertionError("the profiler was started for a plan whose collectives are hooked")

    instrument.profile = no_profiler  # type: ignore[assignment]
    events_match_expected(rank, world_size, data)  # exactly the expected keys, profiler-free

    from plancast.runtime.trainer import Trainer

    scenario = parse_scenario(data).scenario
    trainer = Trainer(scenario, rank, world_size, torch.device("cpu"), instrument=True)
    for step in range(2):
        events = trainer.step(step).events
        dp = events[events["stream"] == "dp"]
        assert len(dp) > 0, f"rank {rank}: no dp collectives recorded"
        assert (dp["microbatch"] == -1).all()
        assert (dp["dur_us"] >= 0).all() and (dp["start_us"] >= 0).all()
        for _kind, group in dp.groupby("kind"):
            assert group["index"].tolist() == list(range(len(group)))
            # index is issue order, so issue marks increase with it
            assert group["start_us"].is_monotonic_increasing
        optimizer = events[events["kind"] == "optimizer"].iloc[0]
        for row in dp[dp["kind"] == "broadcast"].itertuples():
            assert row.start_us >= optimizer["start_us"]  # issued inside the optimizer step


@pytest.mark.distributed
@pytest.mark.parametrize("name", ["ddp", "zero1"])
def test_ddp_and_zero1_collectives_are_timed_without_the_profiler(name: str) -> None:
    parallelism, _ = PLANS[name]
    # two buckets per step: hook order and index over more than one bucket
    data = tiny_scenario(2, **parallelism)
    data["parallelism"]["ddp_bucket_cap_MB"] = 0.01
    run_ranks(2, hooked_collectives_without_profiler, data)
