"""The capture paths' rules without ranks: which path a run takes, and how the profiler path
attributes the collectives it sees (real gloo runs of every path: tests/distributed)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from plancast.runtime.instrument import (
    CpuTimer,
    Owner,
    SpanKey,
    StepRecorder,
    choose_capture,
    cpu_capture_from,
)
from plancast.runtime.instrument.capture import CPU_CAPTURE_ENV
from plancast.runtime.instrument.keys import Scope, owner_of
from plancast.runtime.instrument.profiler import STEP_MARKER, ProfiledEvent, collective_events
from plancast.traces.schema import Event

CHOICES = [
    # (library collectives, device, PLANCAST_CPU_CAPTURE) -> capture path
    ((False, "cpu", "dispatch"), "timer"),
    ((False, "cuda", "profiler"), "timer"),
    ((True, "cpu", "dispatch"), "dispatch"),
    ((True, "cpu", "profiler"), "profiler"),
    ((True, "cuda", "dispatch"), "profiler"),
]


@pytest.mark.parametrize(("args", "mode"), CHOICES)
def test_capture_path_of_a_run(args: tuple[bool, str, str], mode: str) -> None:
    assert choose_capture(*args) == mode  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("environ", "mode"),
    [({}, "dispatch"), ({"PLANCAST_CPU_CAPTURE": "dispatch"}, "dispatch"),
     ({"PLANCAST_CPU_CAPTURE": "profiler"}, "profiler")],
)  # fmt: skip
def test_cpu_capture_is_read_from_the_environment_given(environ: dict[str, str], mode: str) -> None:
    assert cpu_capture_from(environ) == mode


def test_unknown_cpu_capture_names_the_variable_and_the_choices() -> None:
    with pytest.raises(ValueError, match=r"PLANCAST_CPU_CAPTURE='spy'.*dispatch, profiler"):
        cpu_capture_from({"PLANCAST_CPU_CAPTURE": "spy"})


def test_owner_rule() -> None:
    forward = SpanKey("forward", 2, 1, 3)
    scope = Owner("pp", 2, 1, -1, peer=5)
    assert owner_of(forward, "tp") == Owner("tp", 2, 1, 3)
    assert owner_of(scope, "tp") == scope  # a comm_scope names stream and key itself
    assert owner_of(SpanKey("recv", 2, 1, 3, stream="pp", peer=1), "tp") is None  # the span's own op


def ev(name: str, start_us: float, end_us: float, thread: int = 1) -> ProfiledEvent:
    return ProfiledEvent.of(name, thread, start_us, end_us)


def test_profiled_collectives_are_attributed_to_their_scopes() -> None:
    scopes: list[Scope] = [
        SpanKey("forward", 0, 0, 1),
        Owner("dp", 0, 0, -1),
        SpanKey("recv", 0, 0, 1, "pp", peer=1),
    ]
    profiled = [
        ev(STEP_MARKER, 5.0, 1000.0),
        ev("plancast|0", 10.0, 100.0),
        ev("c10d::allreduce_", 20.0, 25.0),  # DTensor inside the forward: tp
        ev("gloo:all_reduce", 30.0, 40.0),
        ev("FSDP::pre_forward", 50.0, 60.0),
        ev("c10d::_allgather_base_", 55.0, 57.0),  # FSDP2 inside the forward: dp
        ev("gloo:all_gather", 58.0, 70.0),
        ev("plancast|1", 200.0, 300.0),
        ev("c10d::broadcast_", 210.0, 211.0),  # a comm_scope's: its stream and key
        ev("gloo:broadcast", 212.0, 215.0),
        ev("c10d::broadcast_", 220.0, 221.0),
        ev("gloo:broadcast", 222.0, 230.0),
        ev("plancast|2", 400.0, 500.0),
        ev("c10d::allreduce_", 410.0, 411.0),  # inside a recv span: that span's, skipped
        ev("c10d::allreduce_", 600.0, 601.0),  # outside every scope
        ev("gloo:all_reduce", 602.0, 612.0),
    ]
    got = collective_events(profiled, 3, 7, scopes)
    want = [
        Event("measured", 3, 7, "tp", "all_reduce", 25.0, 10.0, 0, 0, 1, index=0),
        Event("measured", 3, 7, "dp", "all_gather", 53.0, 12.0, 0, 0, 1, index=0),
        Event("measured", 3, 7, "dp", "broadcast", 207.0, 3.0, 0, 0, -1, index=0),
        Event("measured", 3, 7, "dp", "broadcast", 217.0, 8.0, 0, 0, -1, index=1),
        Event("measured", 3, 7, "other", "all_reduce", 597.0, 10.0, -1, -1, -1, index=0),
    ]
    assert got == want


def test_collectives_pair_with_backend_events_of_their_own_kind() -> None:
    """Two groups' workers starting out of issue order on a loaded CPU (fresh-clone CI of 02e7ad6: a
    data-parallel all-reduce took the expert all-to-all's ``gloo:`` event, and the all-to-all an event
    started after the optimizer), and an op with no backend event of its own (gloo's reduce-scatter,
    NCCL's all-to-all as send/recv kernels), each keep their own timing."""
    scopes: list[Scope] = [Owner("dp", 0, 0, -1), Owner("ep", 0, 0, 1)]
    profiled = [
        ev(STEP_MARKER, 0.0, 1000.0),
        ev("plancast|0", 10.0, 100.0),
        ev("c10d::allreduce_", 20.0, 21.0),
        ev("c10d::_reduce_scatter_base_", 22.0, 23.0),  # no backend event: its own range
        ev("plancast|1", 30.0, 90.0),
        ev("c10d::alltoall_base_", 31.0, 32.0),
        ev("gloo:all_to_all", 33.0, 40.0, thread=3),  # the expert group's worker starts first
        ev("gloo:all_reduce", 45.0, 60.0, thread=2),
        ev("ncclDevKernel_SendRecv", 61.0, 62.0),
        ev("gloo:all_reduce", 500.0, 510.0, thread=2),  # a later op's, never the reduce-scatter's
    ]
    got = [(e.kind, e.start_us, e.dur_us) for e in collective_events(profiled, 0, 0, scopes)]
    assert got == [("all_reduce", 45.0, 15.0), ("reduce_scatter", 22.0, 1.0), ("all_to_all", 33.0, 7.0)]


def test_profiler_capture_records_spans_and_nothing_else_without_collectives() -> None:
    """The real profiler path on one process: spans as rows, no collective events invented."""
    rec = StepRecorder(0, CpuTimer(), "profiler")
    rec.begin_step()
    assert rec.profiling
    with rec.span(SpanKey("forward", 0, 0, 0)), rec.comm_scope("dp", 0, 0):
        torch.ones(8).sum()
    out = rec.finish(0)
    assert not rec.profiling  # stopped with the step
    assert out.keys == [SpanKey("forward", 0, 0, 0)]


def test_worker_refuses_an_unknown_cpu_capture_before_joining(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The worker reads the variable once, first, and stops with the message (no process group)."""
    from plancast.runtime import worker

    for name, value in {"RANK": "0", "WORLD_SIZE": "1", "LOCAL_RANK": "0", CPU_CAPTURE_ENV: "spy"}.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(SystemExit, match=r"plancast.runtime.worker: PLANCAST_CPU_CAPTURE='spy'"):
        worker.main(["--scenario", str(tmp_path / "unused.toml"), "--out", str(tmp_path / "run")])
    assert not (tmp_path / "run").exists()
