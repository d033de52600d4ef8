"""``runtime.launch``: real torchrun jobs (gloo on CPU) and the pure checks around them.

The launch tests start real ``torch.distributed.run`` jobs of a tiny 2-stage pipeline; each takes
about 10-20 s on a 2-core machine, mostly interpreter and torch start-up.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
import tomllib
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow.parquet as pq
import pytest
import tomli_w

from plancast.runtime.expected import KEY_COLUMNS, expected_event_keys
from plancast.runtime.launch import (
    LaunchError,
    LaunchPlan,
    RankFailure,
    failure_summary,
    launch,
    parse_failures,
    plan_launch,
    torchrun_command,
)
from plancast.runtime.schedstat import thread_times
from plancast.runtime.telemetry import COLUMNS as TELEMETRY_COLUMNS
from plancast.simulator.loader import load_scenario, parse_scenario
from plancast.simulator.scenario import Scenario
from plancast.traces.store import RunDir, read_events, read_measured

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "tiny-local-cpu.toml"
STEPS = 3


def scenario_file(tmp_path: Path, steps: int = STEPS, **parallelism: Any) -> Path:
    """examples/tiny-local-cpu.toml (2 ranks, pp = 2), shrunk to a few quick steps."""
    data = tomllib.loads(EXAMPLE.read_text())
    data["training"].update(seq_len=32, steps=steps)
    data["parallelism"].update(parallelism)
    path = tmp_path / "scenario.toml"
    path.write_text(tomli_w.dumps(data))
    return path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def event_keys(frame: pd.DataFrame) -> list[tuple[str, ...]]:
    columns = [c for c in KEY_COLUMNS if c != "step"]
    return sorted(map(tuple, frame[columns].astype(str).to_numpy().tolist()))


# ----------------------------------------------------------------------------------- a good run
@pytest.fixture(scope="module")
def finished_run(tmp_path_factory: pytest.TempPathFactory) -> RunDir:
    tmp = tmp_path_factory.mktemp("launch-ok")
    out = tmp / "run"
    code = launch(scenario_file(tmp), out, timeout_s=120)
    assert code == 0, "the 2-rank launch failed; its output is in the captured stderr"
    return RunDir(out)


@pytest.mark.distributed
def test_run_directory_holds_every_file(finished_run: RunDir) -> None:
    m = finished_run.measured_dir
    assert finished_run.scenario_toml.is_file()
    assert sorted(p.name for p in m.iterdir() if not p.name.startswith(".")) == [
        "env.json",
        "rank-00000.parquet",
        "rank-00001.parquet",
        "summary.json",
        "telemetry.parquet",
    ]
    # torchrun's per-attempt folder is the run's, not a torchelastic_* left in the temporary directory
    assert (finished_run.logs_dir / "torchelastic").is_dir()


@pytest.mark.distributed
def test_rank_files_hold_schema_valid_events_for_every_step(finished_run: RunDir) -> None:
    for rank in (0, 1):
        events = read_events(finished_run.rank_events(rank))  # validates against the schema
        assert set(events["rank"]) == {rank}
        assert sorted(set(events["step"])) == list(range(STEPS))
        assert (events["source"] == "measured").all()


@pytest.mark.distributed
def test_measured_events_of_a_step_equal_the_expected_keys(finished_run: RunDir) -> None:
    scenario = load_scenario(finished_run.scenario_toml).scenario
    events = read_measured(finished_run).events
    expected = expected_event_keys(scenario)
    for step in range(STEPS):
        assert event_keys(events[events["step"] == step]) == event_keys(expected), f"step {step}"


@pytest.mark.distributed
def test_summary_and_env(finished_run: RunDir) -> None:
    summary = json.loads(finished_run.measured_summary.read_text())
    assert summary["status"] == "ok"
    assert (summary["world_size"], summary["steps"], summary["warmup_steps"]) == (2, STEPS, 1)
    assert summary["step_time_s"] > 0
    assert len(summary["step_times_s"]) == len(summary["losses"]) == STEPS
    assert all(isinstance(x, float) for x in summary["losses"])  # the last stage reports each step
    assert set(summary["memory_gib"]) == {"parameters", "gradients", "optimizer", "activations"}
    assert summary["peak_memory_gib"] == max(m["peak"] for m in summary["rank_memory_gib"].values()) > 0
    if thread_times() is not None:  # Linux with schedstat (every CI machine): the ranks' core wait
        assert summary["core_wait_s"] >= 0 and sorted(summary["rank_core_wait_s"]) == ["0", "1"]
        shares = summary["rank_core_share"]  # each rank's compute thread's share of its ready time
        assert sorted(shares) == ["0", "1"] and summary["core_share"] == min(shares.values())
        assert all(0 < share <= 1 for share in shares.values())
    # the speed probe, before and after every rank's steps (runtime/microbench_probe.py)
    probes = summary["rank_speed_probe_s"]
    assert sorted(probes) == ["0", "1"] and all(len(p) == 2 and min(p) > 0 for p in probes.values())
    slowest = max(probes.values(), key=sum)
    assert [summary["speed_probe_before_s"], summary["speed_probe_after_s"]] == slowest
    assert summary["speed_probe_s"] == pytest.approx(sum(slowest) / 2)
    env = json.loads(finished_run.env_json.read_text())
    assert (env["world_size"], env["backend"]) == (2, "gloo")
    assert len(env["hostnames"]) == len(env["devices"]) == 2
    assert env["torch"]
    workload = env["speed_probe_workload"]  # what the probe ran: readings compare only for one
    assert workload == summary["speed_probe_workload"] and workload.startswith("cpu:")


@pytest.mark.distributed
def test_telemetry_is_an_empty_table_with_the_columns_on_cpu(finished_run: RunDir) -> None:
    table = pq.read_table(finished_run.telemetry)
    assert table.column_names == list(TELEMETRY_COLUMNS)
    assert table.num_rows == 0


@pytest.mark.distributed
def test_scenario_toml_is_the_resolved_scenario(finished_run: RunDir) -> None:
    written = load_scenario(finished_run.scenario_toml).scenario
    assert written.parallelism.data_parallel_degree == 1
    assert written.parallelism.pipeline_layer_split == [2, 2]


# ------------------------------------------------------------------------------------- failures
@pytest.mark.distributed
def test_a_killed_rank_fails_the_run_and_keeps_finished_steps(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("PLANCAST_FAULT_RANK", "1")
    monkeypatch.setenv("PLANCAST_FAULT_STEP", "2")
    run = RunDir(tmp_path / "run")
    code = launch(scenario_file(tmp_path, steps=4), run.path, timeout_s=120)
    assert code == 2
    err = capfd.readouterr().err
    assert "rank 1 failed first (killed by SIGKILL" in err
    assert "Traceback" not in err
    assert str(run.rank_log(1)) in err
    events = read_measured(run).events
    for rank in (0, 1):
        assert sorted(set(events.loc[events["rank"] == rank, "step"])) == [0, 1], f"rank {rank}"
    summary = json.loads(run.measured_summary.read_text())
    assert summary["status"] == "failed"
    assert 1 in summary["failed_ranks"]  # rank 0 may also fail on its broken connection first
    assert summary["steps_finished"] == {"0": [0, 1], "1": [0, 1]}


@pytest.mark.distributed
def test_a_run_past_its_timeout_is_stopped(tmp_path: Path) -> None:
    run = RunDir(tmp_path / "run")
    code = launch(scenario_file(tmp_path, steps=10_000), run.path, timeout_s=20)
    assert code == 124
    summary = json.loads(run.measured_summary.read_text())
    assert summary["status"] == "failed"
    assert summary["reason"].startswith("timed out")
    assert summary["failed_ranks"] == [0, 1]  # neither finished its 10 000 steps


# ---------------------------------------------------------------------------- multi-node on loopback
@pytest.mark.distributed
def test_two_launches_on_loopback_act_as_two_nodes(tmp_path: Path) -> None:
    path, out = scenario_file(tmp_path, steps=2), tmp_path / "run"
    endpoint = f"127.0.0.1:{free_port()}"
    nodes = []
    for node in (1, 0):  # node 1 joins first: c10d would have made it node 0
        nodes.append(
            subprocess.Popen(
                [
                    *(sys.executable, "-m", "plancast.runtime.launch", str(path), "--out", str(out)),
                    *("--nnodes", "2"),
                    *("--node-rank", str(node), "--rdzv-endpoint", endpoint, "--timeout", "120"),
                ]
            )
        )
        time.sleep(1.0)
    assert [p.wait(timeout=180) for p in nodes] == [0, 0]
    run = RunDir(out)
    assert sorted(run.rank_files()) == [0, 1]
    assert json.loads(run.measured_summary.read_text())["status"] == "ok"
    env = json.loads(run.env_json.read_text())
    assert env["world_size"] == 2
    # the static rendezvous: node 1's rank is global rank 1 whichever launcher joined first
    assert [(r["rank"], r["node"], r["local_rank"]) for r in env["ranks"]] == [(0, 0, 0), (1, 1, 0)]


# ---------------------------------------------------------------------------------- bad input
def _scenario(num_nodes: int = 1) -> Scenario:
    data = tomllib.loads(EXAMPLE.read_text())
    data["cluster"]["num_nodes"] = num_nodes
    return parse_scenario(data).scenario


BAD_LAUNCHES: dict[str, tuple[dict[str, Any], str]] = {
    "too few ranks": ({"nproc_per_node": 1}, "pass --nproc-per-node 2"),
    "too many ranks": ({"nproc_per_node": 4}, "--nnodes 1 x --nproc-per-node 4 = 4 would start"),
    "nodes that do not share the ranks": ({"nnodes": 3, "rdzv_endpoint": "h:1"}, "cannot share evenly"),
    "no rendezvous endpoint": ({"nnodes": 2}, "needs --rdzv-endpoint HOST:PORT"),
    "node rank out of range": ({"nnodes": 2, "node_rank": 2, "rdzv_endpoint": "h:1"}, "--node-rank must"),
    "no steps": ({"steps": 0}, "--steps must be at least 1"),
}


@pytest.mark.parametrize("name", list(BAD_LAUNCHES))
def test_bad_launch_options_are_refused_with_the_fix(name: str) -> None:
    options, message = BAD_LAUNCHES[name]
    kwargs: dict[str, Any] = {
        "nproc_per_node": None,
        "steps": None,
        "nnodes": 1,
        "node_rank": 0,
        "rdzv_endpoint": None,
        **options,
    }
    with pytest.raises(LaunchError, match=message.replace("+", r"\+")):
        plan_launch(_scenario(), **kwargs)


def test_world_size_mismatch_is_refused_before_anything_starts(tmp_path: Path) -> None:
    out = tmp_path / "run"
    with pytest.raises(LaunchError, match=r"needs tp\*pp\*dp = 1\*2\*1 = 2 ranks.*--nproc-per-node 2"):
        launch(scenario_file(tmp_path), out, nproc_per_node=3)
    assert not out.exists()


def test_an_existing_measured_run_is_not_overwritten(tmp_path: Path) -> None:
    run = RunDir(tmp_path / "run")
    run.measured_dir.mkdir(parents=True)
    (run.measured_dir / "rank-00000.parquet").write_bytes(b"earlier run")
    with pytest.raises(LaunchError, match="already holds a measured run"):
        launch(scenario_file(tmp_path), run.path)
    assert (run.measured_dir / "rank-00000.parquet").read_bytes() == b"earlier run"


def test_default_ranks_per_node_split_the_world() -> None:
    plan = plan_launch(
        _scenario(num_nodes=2),  # 2 x 2 CPU ranks: pp = 2, dp = 2
        nproc_per_node=None,
        steps=None,
        nnodes=2,
        node_rank=1,
        rdzv_endpoint="node0:29400",
    )
    assert (plan.world_size, plan.nproc_per_node, plan.steps) == (4, 2, 20)


# ------------------------------------------------------------------------------- command lines
def test_single_node_command_binds_its_store_to_loopback() -> None:
    plan = LaunchPlan(2, 1, 2, 0, 5, None)
    cmd = torchrun_command(plan, Path("/s.toml"), Path("/run"), timeout_s=60, rdzv_id="x")
    assert cmd[1:3] == ["-m", "torch.distributed.run"]
    assert "--standalone" not in cmd
    assert cmd[cmd.index("--rdzv-endpoint") + 1] == "127.0.0.1:0"
    assert cmd[cmd.index("--log-dir") + 1] == "/run/logs/torchelastic"  # not a torchelastic_* in /tmp
    tail = cmd[cmd.index("--max-restarts") :]
    assert tail == [
        "--max-restarts", "0", "--monitor-interval", "0.5",
        "-m", "plancast.runtime.worker",
        "--scenario", "/s.toml", "--out", "/run", "--steps", "5", "--timeout-s", "60",
    ]  # fmt: skip


def test_multi_node_command_uses_the_static_rendezvous_in_node_order() -> None:
    plan = LaunchPlan(4, 2, 2, 1, 5, "node0:29400")
    cmd = torchrun_command(plan, Path("/s.toml"), Path("/run"), timeout_s=60, rdzv_id="job7")
    joined = " ".join(cmd)
    assert "--nnodes 2 --nproc-per-node 2" in joined
    assert "--rdzv-backend static --rdzv-endpoint node0:29400 --rdzv-id job7 --node-rank 1" in joined
    assert "--standalone" not in cmd


# ------------------------------------------------------------------------ torchrun's failure report
TORCHRUN_FAILURE = """\
torch.distributed.elastic.multiprocessing.errors.ChildFailedError:
============================================================
runtime.worker FAILED
------------------------------------------------------------
Failures:
[1]:
  time      : 2026-11-22_03:59:30
  host      : localhost
  rank      : 0 (local_rank: 0)
  exitcode  : -15 (pid: 18844)  (SIGTERM)
  error_file: <N/A>
  traceback : Signal 15 (SIGTERM) received by PID 18844
[2]:
  time      : 2026-11-22_03:59:30
  host      : node3
  rank      : 2 (local_rank: 0)
  exitcode  : 1 (pid: 18846)
  error_file: /tmp/torchelastic_x/error.json
  traceback : Traceback (most recent call last):
    RuntimeError: boom
------------------------------------------------------------
Root Cause (first observed failure):
[0]:
  time      : 2026-11-22_03:59:30
  host      : localhost
  rank      : 1 (local_rank: 1)
  exitcode  : -9 (pid: 18845)  (SIGKILL)
  error_file: <N/A>
  traceback : Signal 9 (SIGKILL) received by PID 18845
============================================================
"""


def test_torchrun_failure_report_is_parsed_root_cause_first() -> None:
    assert parse_failures(TORCHRUN_FAILURE) == [
        RankFailure(1, 1, "localhost", -9, "SIGKILL", root_cause=True),
        RankFailure(0, 0, "localhost", -15, "SIGTERM", root_cause=False),
        RankFailure(2, 0, "node3", 1, None, root_cause=False),
    ]
    assert parse_failures("no failure summary here") == []


def test_failed_summary_names_failed_ranks_not_the_ones_torchrun_stopped() -> None:
    plan = LaunchPlan(3, 1, 3, 0, 4, None)
    steps = {0: [0, 1], 1: [0, 1], 2: [0]}
    summary = failure_summary(plan, 1, parse_failures(TORCHRUN_FAILURE), steps, "r")
    assert summary["failed_ranks"] == [1, 2]
    assert summary["steps_finished"] == {"0": [0, 1], "1": [0, 1], "2": [0]}


def test_without_a_report_the_ranks_missing_steps_are_the_failed_ones() -> None:
    plan = LaunchPlan(3, 1, 3, 0, 2, None)
    summary = failure_summary(plan, 124, [], {0: [0, 1], 1: [0], 2: []}, "timed out")
    assert summary["failed_ranks"] == [1, 2]
