"""`plancast run` under faults (issue 11), through the real CLI with real torchrun jobs: a launch this
machine cannot hold is refused before anything starts, one run directory has one writer, a killed
rank is named in one paragraph and recorded as `failed`, Ctrl-C records `interrupted`, and no process
of the run outlives it."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import tomllib
from pathlib import Path

import pytest
import tomli_w

from plancast.runtime.failures import RankError, RankFailure, first_failure
from plancast.runtime.machine import Machine, RANK_BASE_GiB, check_machine
from plancast.traces.lock import RunLock, RunLockedError
from plancast.traces.store import RunDir, TraceReadError, read_events, read_measured
from tests.cli_runner import REPO, cli_main, cli_subprocess

EXAMPLES = REPO / "examples"


def scenario(tmp_path: Path, steps: int) -> Path:
    data = tomllib.loads((EXAMPLES / "tiny-local-cpu.toml").read_text())
    data["training"].update(seq_len=32, steps=steps)
    path = tmp_path / "scenario.toml"
    path.write_text(tomli_w.dumps(data))
    return path


def start_run(
    scenario_path: Path, out: Path, *extra: str, env: dict[str, str] | None = None
) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "plancast",
            "run",
            str(scenario_path),
            "--out",
            str(out),
            "--timeout",
            "300",
            *extra,
        ],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, **(env or {})},
    )


def workers_of(out: Path) -> dict[int, int]:
    """pid -> RANK of every live worker process writing ``out`` (read from /proc)."""
    found: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().split(b"\0")
            if b"plancast.runtime.worker" not in cmdline or str(out).encode() not in cmdline:
                continue
            environ = dict(
                item.split(b"=", 1) for item in (entry / "environ").read_bytes().split(b"\0") if b"=" in item
            )
            found[int(entry.name)] = int(environ[b"RANK"])
        except (OSError, KeyError, ValueError):
            continue
    return found


def processes_naming(out: Path) -> list[int]:
    """Live processes whose command line names ``out`` (the launcher, torchrun, workers)."""
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and int(entry.name) != os.getpid():
            try:
                if str(out).encode() in (entry / "cmdline").read_bytes():
                    pids.append(int(entry.name))
            except OSError:
                continue
    return pids


def wait_for(condition, timeout_s: float = 180) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "timed out waiting"
        time.sleep(0.2)


def streamed_steps(run: RunDir, rank: int) -> int:
    """Steps the rank has finished so far: the whole batches of its stream (traces/rank_stream.py; its
    parquet file is written only once it closes, after the last step)."""
    try:
        return len(set(read_events(run.rank_stream(rank))["step"]))
    except (OSError, TraceReadError):  # not started yet, or its first batch half written
        return 0


def mid_run(run: RunDir, *ranks: int) -> bool:
    """Every rank of `ranks` has finished two steps and its run is not over (no parquet file yet)."""
    return all(streamed_steps(run, r) >= 2 for r in ranks) and not run.rank_events(ranks[0]).exists()


def assert_nothing_left(out: Path) -> None:
    wait_for(lambda: not processes_naming(out), timeout_s=30)


# ------------------------------------------------------------------------------------ before start
def test_a_launch_this_machine_cannot_hold_is_refused_before_anything_starts(tmp_path: Path) -> None:
    out = tmp_path / "X"
    result = cli_subprocess("run", str(EXAMPLES / "gpt3-175b-dgx-a100.toml"), "--out", str(out), timeout_s=60)
    assert result.returncode == 2, result.stderr
    assert "cannot start on this machine" in result.stderr and "--nnodes" in result.stderr
    assert "Traceback" not in result.stderr
    assert not out.exists()  # nothing written, nothing started


@pytest.mark.parametrize(
    ("machine", "ranks", "memory_GiB", "oversubscribe", "expected"),
    [
        (Machine(2, 24.0, 0), 1536, 0.0, True, "1536 CPU ranks on this machine's 2 core(s) (at most 16"),
        (Machine(2, 24.0, 0), 4, 40.0, True, "more than 80% of the 24 GiB"),
        (Machine(2, 24.0, 8), 16, 1000.0, False, "16 ranks per node but this machine has 8 visible GPU(s)"),
        (Machine(2, 24.0, 0), 4, 0.01, False, "ranks would share cores, so their timings would mean nothing"),
        (Machine(2, 24.0, 0), 4, 0.01, True, None),
        (Machine(2, 24.0, 0), 2, 0.01, False, None),
        (Machine(2, None, 8), 8, 1000.0, False, None),
    ],
)
def test_the_machine_check(
    machine: Machine, ranks: int, memory_GiB: float, oversubscribe: bool, expected: str | None
) -> None:
    why = check_machine(machine, ranks, memory_GiB, "FIX", oversubscribe=oversubscribe)
    assert why is None if expected is None else (expected in str(why) and str(why).endswith("FIX"))
    if expected and "share cores" in expected:
        assert "pass --oversubscribe to run it anyway" in str(why)
    assert RANK_BASE_GiB > 0


def test_more_ranks_than_cores_are_refused_naming_the_flag(tmp_path: Path) -> None:
    """`plancast run` of a plan with one rank more than this machine's cores: exit 2 before anything
    starts, naming --oversubscribe (nothing is launched, so this runs beside any test)."""
    ranks = len(os.sched_getaffinity(0)) + 1
    data = {
        "model": {"preset": "tiny-gpt"},
        "training": {"seq_len": 16, "micro_batch_size": 1, "global_batch_size": ranks, "dtype": "fp32"},
        "parallelism": {"data_parallel_degree": ranks},
        "cluster": {"preset": "local-cpu", "gpus_per_node": ranks},
    }
    path = tmp_path / "scenario.toml"
    path.write_text(tomli_w.dumps(data))
    out = tmp_path / "run"
    result = cli_subprocess("run", str(path), "--out", str(out), timeout_s=120)
    assert result.returncode == 2, result.stderr
    assert "--oversubscribe" in result.stderr and "share cores" in result.stderr, result.stderr
    assert "Traceback" not in result.stderr and not out.exists()


# ----------------------------------------------------------------------------------- one writer
def test_the_lock_names_its_holder_and_dies_with_it(tmp_path: Path) -> None:
    code = (
        "import pathlib, time\nfrom plancast.traces.lock import RunLock\n"
        f"RunLock(pathlib.Path({str(tmp_path)!r}), 'holder').acquire()\n"
        "print('held', flush=True)\ntime.sleep(600)"
    )
    holder = subprocess.Popen([sys.executable, "-c", code], cwd=REPO, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        with pytest.raises(RunLockedError, match=f"pid {holder.pid} .*holder"):
            RunLock(tmp_path, "second").acquire()
    finally:
        holder.kill()
        holder.wait()
    with RunLock(tmp_path, "after a killed holder"):  # the kernel released it: no stale lock
        pass


@pytest.mark.distributed
def test_two_concurrent_runs_into_one_out_exactly_one_runs(tmp_path: Path) -> None:
    path, out = scenario(tmp_path, steps=2), tmp_path / "run"
    first = start_run(path, out)
    wait_for(lambda: (out / ".plancast.lock").exists() and (out / ".plancast.lock").stat().st_size > 0)
    second = start_run(path, out)
    _, second_err = second.communicate(timeout=120)
    _, first_err = first.communicate(timeout=300)
    assert (first.returncode, second.returncode) == (0, 2), (first_err, second_err)
    assert f"is being written by pid {first.pid}" in second_err and "Traceback" not in second_err
    assert json.loads((out / "measured" / "summary.json").read_text())["status"] == "ok"


def test_simulate_out_into_a_measured_run_needs_force(tmp_path: Path) -> None:
    out = tmp_path / "run"
    assert cli_main("simulate", str(EXAMPLES / "tiny-local-cpu.toml"), "--out", str(out))[0] == 0
    RunDir(out).measured_dir.mkdir()
    (RunDir(out).rank_events(0)).write_bytes(b"measured")
    before = (out / "scenario.toml").read_text()
    code, _, err = cli_main("simulate", str(EXAMPLES / "gpt3-175b-dgx-a100.toml"), "--out", str(out))
    assert code == 2 and "holds a measured run" in err and "--force" in err
    assert (out / "scenario.toml").read_text() == before
    code, _, err = cli_main(
        "simulate", str(EXAMPLES / "gpt3-175b-dgx-a100.toml"), "--out", str(out), "--force"
    )
    assert code == 0, err
    assert (out / "scenario.toml").read_text() != before


# -------------------------------------------------------------------------------- failures
@pytest.mark.distributed
def test_killing_one_rank_mid_run_names_it_and_compare_shows_failed(tmp_path: Path) -> None:
    path, out = scenario(tmp_path, steps=400), tmp_path / "run"
    job = start_run(path, out)
    run = RunDir(out)
    wait_for(lambda: mid_run(run, 0, 1))
    (victim,) = [pid for pid, rank in workers_of(out).items() if rank == 1]
    os.kill(victim, signal.SIGKILL)
    _, err = job.communicate(timeout=120)
    assert job.returncode == 2, err
    assert "Traceback" not in err
    (paragraph,) = [line for line in err.splitlines() if "run failed" in line]
    assert "rank 1 failed first (killed by SIGKILL" in paragraph
    assert str(run.rank_log(1)) in paragraph
    summary = json.loads(run.measured_summary.read_text())
    assert summary["status"] == "failed" and summary["first_failed_rank"] == 1
    assert 1 in summary["failed_ranks"]  # rank 0 may also have raised on its broken connection
    finished = read_measured(run).events
    assert len(set(finished.loc[finished["rank"] == 1, "step"])) >= 1  # the finished steps are intact
    both = min(len(set(finished.loc[finished["rank"] == r, "step"])) for r in (0, 1))
    assert len(summary["step_times_s"]) == both and min(summary["step_times_s"]) > 0  # and their times
    _, stdout, stderr = cli_main("compare", str(out))
    assert "measured run status: failed" in stdout and "rank 1 failed first" in stderr
    assert_nothing_left(out)


@pytest.mark.distributed
def test_ctrl_c_stops_every_process_and_records_interrupted(tmp_path: Path) -> None:
    path, out = scenario(tmp_path, steps=400), tmp_path / "run"
    job = start_run(path, out)
    wait_for(lambda: mid_run(RunDir(out), 0))
    job.send_signal(signal.SIGINT)
    _, err = job.communicate(timeout=120)
    assert job.returncode == 130, err
    assert "Traceback" not in err and "run interrupted" in err
    summary = json.loads(RunDir(out).measured_summary.read_text())
    assert summary["status"] == "interrupted" and 2 <= len(summary["step_times_s"]) < 400  # stopped mid-run
    assert_nothing_left(out)


@pytest.mark.distributed
def test_a_killed_launcher_takes_its_job_with_it(tmp_path: Path) -> None:
    path, out = scenario(tmp_path, steps=400), tmp_path / "run"
    system_tmp = tmp_path / "system-tmp"  # the launcher's temporary directory (TMPDIR), to check after
    system_tmp.mkdir()
    job = start_run(path, out, env={"TMPDIR": str(system_tmp)})
    wait_for(lambda: mid_run(RunDir(out), 0))
    job.kill()  # SIGKILL: no handler runs; the kernel tells torchrun (PR_SET_PDEATHSIG)
    job.communicate(timeout=30)
    assert_nothing_left(out)
    # nothing the killed launcher made in the temporary directory stays behind (it used to leave an empty
    # folder a kill; the ranks' own files go to RUN, torchrun's to RUN/logs). torch's compile cache is
    # torch's: importing torch.distributed.pipelining makes TMPDIR/torchinductor_USER, shared and kept
    # by design (torch/_inductor/runtime/cache_dir_utils.py)
    assert [p.name for p in system_tmp.iterdir() if not p.name.startswith("torchinductor_")] == []


@pytest.mark.parametrize(
    ("failures", "errors", "first"),
    [
        # rank 1 SIGKILLed; rank 0's broken collective raised; torchrun blamed rank 0 as root cause
        ([RankFailure(0, 0, "h", 1, None, True), RankFailure(1, 1, "h", -9, "SIGKILL", False)],
         {0: RankError(0, 5.0, "RuntimeError: Connection closed by peer")}, (1, "killed by SIGKILL, on h")),
        # rank 2 raised first (earliest record); rank 0 raised later on its broken connection
        ([RankFailure(0, 0, "h", 1, None, True), RankFailure(2, 2, "h", 1, None, False)],
         {0: RankError(0, 7.5, "RuntimeError: gloo"), 2: RankError(2, 7.1, "ValueError: bad shape")},
         (2, "ValueError: bad shape")),
        # ranks torchrun stopped itself (SIGTERM) are never the first
        ([RankFailure(0, 0, "h", -15, "SIGTERM", False), RankFailure(1, 1, "h", 1, None, True)], {},
         (1, "exit code 1, on h")),
        ([], {}, None),
    ],
)  # fmt: skip
def test_the_first_failed_rank_is_the_cause_not_the_collateral(
    failures: list[RankFailure], errors: dict[int, RankError], first: tuple[int, str] | None
) -> None:
    assert first_failure(failures, errors) == first
