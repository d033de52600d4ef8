"""runtime/local_profile.load_changed: when today's load differs a lot from the one the machine profile
was measured under, the user is told; small changes and unknown loads say nothing."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest

from plancast.runtime.local_profile import (
    LOAD_SHARE_CHANGE,
    expected_share,
    latest_host_record,
    load_changed,
    machine_load,
    shape_key,
)
from tests.cli_runner import REPO


@pytest.mark.parametrize(
    ("then", "now", "cores", "told"),
    [
        (0.0, 0.5, 2, False),  # 2 ranks on 2 cores: share 1.0 then, 0.8 now (the limit)
        (0.0, 0.6, 2, True),  # 0.77 now
        (0.5, 2.5, 2, True),  # 0.8 then, 0.44 now
        (12.2, 13.4, 2, False),  # busy then and now: 0.14 and 0.13
        (9.0, 1.0, 2, True),  # measured busy, quiet now
        (9.0, 1.0, 32, False),  # 32 cores: a full share either way
        (None, 9.0, 2, False),  # a record from before the load was kept
        (True, 9.0, 2, False),
        (0.5, None, 2, False),  # no load average on this platform
        (0.5, 9.0, None, True),  # cores unknown: counted as one
    ],
)
def test_a_large_load_change_is_told(then: object, now: float | None, cores: object, told: bool) -> None:
    note = load_changed(then, now, cores, 2)
    assert (note is not None) is told
    if note:
        assert f"{now:.1f} now" in note


def test_the_fair_share_of_the_cores() -> None:
    assert expected_share(0.0, cores=2, ranks=2) == 1.0
    assert expected_share(2.0, cores=2, ranks=2) == pytest.approx(0.5)
    assert LOAD_SHARE_CHANGE == 0.8


def test_the_load_is_read_on_linux() -> None:
    load = machine_load()
    assert load is None or load >= 0


def test_compare_reads_this_hosts_latest_core_share_without_torch(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PLANCAST_CACHE_DIR", str(tmp_path))
    assert latest_host_record() is None  # never measured
    mine = tmp_path / f"{socket.gethostname()}_some-cpu_2cores_torch2"
    theirs = tmp_path / "another-host_some-cpu_2cores_torch2"
    for folder, share in ((mine, 0.6), (theirs, 0.3)):
        folder.mkdir()
        (folder / "h64-record.json").write_text(json.dumps({"cpu_share": share}))
    record = latest_host_record()
    assert record is not None and record["cpu_share"] == pytest.approx(0.6)  # this host's, not theirs


def test_compare_reads_the_record_its_prediction_came_from(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A CPU run's speed reference is the probe of its own shapes' record (the one its prediction is read
    from), not this host's latest record of other shapes, measured at another moment."""
    import os

    from plancast.commands.runs import profile_probe, profile_share
    from plancast.simulator.loader import load_scenario

    monkeypatch.setenv("PLANCAST_CACHE_DIR", str(tmp_path / "cache"))
    run = tmp_path / "run"
    run.mkdir()
    (run / "scenario.toml").write_text((REPO / "examples" / "tiny-local-cpu.toml").read_text())
    scenario = load_scenario(run / "scenario.toml").scenario
    folder = tmp_path / "cache" / f"{socket.gethostname()}_some-cpu_2cores_torch2"
    folder.mkdir(parents=True)

    def record(name: str, probe_s: float, share: float, mtime: int) -> None:
        path = folder / name
        probe = {"probe_wall_s": probe_s, "workload": "w"}
        path.write_text(json.dumps({"cpu_share": share, "speed_probe": probe}))
        os.utime(path, (mtime, mtime))

    record(f"{shape_key(scenario)}.json", 0.008, 0.9, 1_000)
    record("h999-other-shape.json", 0.020, 0.4, 2_000)  # newer, of other shapes
    assert profile_probe(run) == {"probe_s": 0.008, "workload": "w"}
    assert profile_share(run) == 1.0  # with a probe the reference is its wall time at a share of 1
    (folder / f"{shape_key(scenario)}.json").unlink()
    assert profile_probe(run) == {"probe_s": 0.020, "workload": "w"}  # none of its shapes: the latest
