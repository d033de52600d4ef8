"""`plancast submit` and `plancast run` under SLURM: the job script, a SLURM job's environment, and a real
two-node SLURM cluster on this machine (tests/slurm_cluster.py): submit, compare, a lost node, resume."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from plancast.runtime.slurm import SlurmError, check_one_task_per_node, rendezvous_port, slurm_node
from plancast.runtime.submit import JobRequest, SubmitError, parse_time, run_command
from plancast.simulator.loader import parse_scenario
from plancast.simulator.placement import check_placement
from tests.cli_runner import REPO, cli_main
from tests.slurm_cluster import SlurmCluster, SlurmUnavailableError, slurm_cluster

TWO_NODES = """\
[model]
preset = "tiny-gpt"
[training]
seq_len = 64
micro_batch_size = 2
global_batch_size = 8
dtype = "fp32"
steps = {steps}
{checkpoint}[parallelism]
pipeline_parallel_degree = 2
pipeline_parallel_schedule = "1F1B"
[cluster]
preset = "local-cpu"
num_nodes = 2
gpus_per_node = 1
"""


def two_node_text(steps: int = 3, every: int | None = None) -> str:
    checkpoint = "" if every is None else f"checkpoint_every_steps = {every}\n"
    return TWO_NODES.format(steps=steps, checkpoint=checkpoint)


def two_node_scenario(folder: Path, steps: int = 3, every: int | None = None) -> Path:
    path = folder / "two-nodes.toml"
    path.write_text(two_node_text(steps, every))
    return path


# ------------------------------------------------------------------------------ a job's environment
BATCH = {
    "SLURM_JOB_ID": "42",
    "SLURM_JOB_NUM_NODES": "2",
    "SLURM_NODEID": "0",
    "SLURM_JOB_NODELIST": "n[1-2]",
}
STEP = {**BATCH, "SLURM_STEP_ID": "0", "SLURM_STEP_NUM_NODES": "2", "SLURM_NODEID": "1", "SLURM_NTASKS": "2"}


def test_outside_slurm_there_is_no_node() -> None:
    assert slurm_node({}) is None


def test_a_task_of_srun_is_its_node_of_the_step() -> None:
    node = slurm_node(STEP)
    assert node is not None and node.in_step
    assert (node.nnodes, node.node_rank, node.rdzv_id) == (2, 1, "slurm-42-0")


def test_the_batch_script_is_not_a_step() -> None:
    node = slurm_node(BATCH)
    assert node is not None and not node.in_step and node.nnodes == 2


def test_more_tasks_than_nodes_is_refused_with_the_srun_line() -> None:
    node = slurm_node({**STEP, "SLURM_NTASKS": "4"})
    assert node is not None
    with pytest.raises(SlurmError, match="--ntasks-per-node=1"):
        check_one_task_per_node(node)


def test_every_node_derives_the_same_port_and_master_port_wins() -> None:
    assert rendezvous_port("42", {}) == rendezvous_port("42", {}) == 20042
    assert rendezvous_port("42", {"MASTER_PORT": "29500"}) == 29500
    with pytest.raises(SlurmError, match="MASTER_PORT"):
        rendezvous_port("42", {"MASTER_PORT": "x"})


@pytest.mark.parametrize(
    ("text", "minutes"),
    [("90", 90), ("01:30:00", 90), ("1-00:00", 1440), ("0:30", 1), ("00:10:30", 11), ("2-1", 2940)],
)
def test_time_limits_in_slurm_formats(text: str, minutes: int) -> None:
    assert parse_time(text) == minutes


@pytest.mark.parametrize("text", ["", "soon", "1:2:3:4", "0", "9" * 40])
def test_bad_time_limits_are_refused(text: str) -> None:
    with pytest.raises(SubmitError, match="--time"):
        parse_time(text)


# --------------------------------------------------------------------------------------- placement
def _scenario(tp: int, pp: int, nodes: int, per_node: int) -> Any:
    data = tomllib.loads(two_node_text())
    data["parallelism"] = {"tensor_parallel_degree": tp, "pipeline_parallel_degree": pp}
    data["cluster"] = {"preset": "local-cpu", "num_nodes": nodes, "gpus_per_node": per_node}
    return parse_scenario(data).scenario


def _ranks(*nodes: str) -> list[dict[str, Any]]:
    return [{"rank": rank, "node_name": node} for rank, node in enumerate(nodes)]


def test_ranks_in_node_order_match_the_plan() -> None:
    assert check_placement(_scenario(1, 2, 2, 1), _ranks("n1", "n2"), ranks_per_node=1).matches
    assert check_placement(_scenario(2, 2, 2, 2), _ranks("a", "a", "b", "b"), ranks_per_node=2).matches


def test_tensor_parallel_over_the_network_is_named() -> None:
    problems = check_placement(_scenario(2, 2, 2, 2), _ranks("a", "b", "a", "b"), ranks_per_node=2).problems
    assert any(p.startswith("tp group [0, 1]: the plan keeps it inside one node, the run had it on a, b")
               for p in problems), problems  # fmt: skip
    assert any("rank 2 ran on node 'a'" in p for p in problems), problems


def test_ranks_the_run_does_not_place_are_said() -> None:
    problems = check_placement(_scenario(1, 2, 2, 1), _ranks("n1"), ranks_per_node=1).problems
    assert problems == ["env.json names no node for ranks [1]: placement not checked for them"]


# ------------------------------------------------------------------------------------- the job script
def test_dry_run_prints_submitits_own_script_for_the_job(tmp_path: Path) -> None:
    from submitit.slurm.slurm import _make_sbatch_string

    scenario, run = two_node_scenario(tmp_path), tmp_path / "run"
    args = ["--nodes", "2", "--partition", "gpu", "--time", "00:20:00", "--account", "proj"]
    code, stdout, stderr = cli_main("submit", str(scenario), "--out", str(run), *args, "--dry-run")
    assert code == 0, stderr
    req = JobRequest(scenario, run, 2, 1, gpus=False)
    expected = _make_sbatch_string(
        command=" ".join(run_command(req)),
        folder=run.resolve() / "slurm",
        job_name="plancast",
        partition="gpu",
        time=20,
        nodes=2,
        ntasks_per_node=1,
        cpus_per_task=1,
        account="proj",
        additional_parameters={"signal": "TERM@90"},
        wckey="plancast",
    )
    assert stdout == expected
    lines = stdout.splitlines()
    assert {"#SBATCH --nodes=2", "#SBATCH --ntasks-per-node=1", "#SBATCH --partition=gpu"} <= set(lines)
    assert "#SBATCH --time=20" in lines and "#SBATCH --account=proj" in lines
    srun = next(line for line in lines if line.startswith("srun "))
    assert srun.endswith(
        f"-m plancast run {scenario.resolve()} --out {run.resolve()} --nproc-per-node 1 --timeout 600"
    )
    assert not run.exists()  # a dry run writes nothing


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--nodes", "3"], "--nodes 3 x --gpus-per-node"),
        (["--nodes", "0"], "--nodes must be at least 1"),
        (["--nodes", "2", "--time", "soon"], "--time 'soon'"),
    ],
)
def test_a_job_that_cannot_hold_the_plan_is_refused(tmp_path: Path, args: list[str], message: str) -> None:
    code, _, stderr = cli_main(
        "submit", str(two_node_scenario(tmp_path)), "--out", str(tmp_path / "r"), *args
    )
    assert code == 2 and message in stderr and "Traceback" not in stderr, stderr


# ------------------------------------------------------------------------- a real two-node cluster
@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SlurmCluster]:
    try:
        with slurm_cluster(tmp_path_factory.mktemp("slurm")) as c:
            yield c
    except SlurmUnavailableError as why:
        pytest.skip(f"no SLURM test cluster: {why}")


def plancast(cluster: SlurmCluster, *args: str, timeout_s: float = 400) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "plancast", *args],
        env=cluster.env, cwd=REPO, capture_output=True, text=True, timeout=timeout_s, check=False,
    )  # fmt: skip


@pytest.mark.distributed
def test_slurm_accepts_the_script_as_written(cluster: SlurmCluster, tmp_path: Path) -> None:
    scenario, run = two_node_scenario(tmp_path), tmp_path / "r"
    dry = plancast(cluster, "submit", str(scenario), "--out", str(run), "--nodes", "2", "--dry-run")
    assert dry.returncode == 0, dry.stderr
    script = tmp_path / "job.sbatch"
    script.write_text(dry.stdout)
    test = subprocess.run(
        ["sbatch", "--test-only", str(script)],
        env=cluster.env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert test.returncode == 0 and "to start at" in test.stderr, test.stderr


@pytest.mark.distributed
def test_submit_on_two_nodes_then_compare(cluster: SlurmCluster, tmp_path: Path) -> None:
    run = tmp_path / "run"
    done = plancast(
        cluster, "submit", str(two_node_scenario(tmp_path)), "--out", str(run), "--nodes", "2", "--wait"
    )
    assert done.returncode == 0, done.stdout + done.stderr + _logs(cluster, run)
    env = json.loads((run / "measured" / "env.json").read_text())
    placed = [(r["rank"], r["node"], r["local_rank"], r["node_name"]) for r in env["ranks"]]
    assert placed == [(0, 0, 0, "n1"), (1, 1, 0, "n2")]  # global rank = node x 1 + local rank
    assert {r["slurm_job_id"] for r in env["ranks"]} != {None}
    compare = plancast(cluster, "compare", str(run), "--json")
    assert compare.returncode == 0, compare.stderr
    summary = json.loads(compare.stdout)
    assert (summary["events_missing"], summary["events_extra"]) == (0, 0)
    assert summary["events_matched"] > 0
    assert summary["placement"]["matches_plan"] is True
    assert summary["placement"]["nodes"] == {"0": "n1", "1": "n2"}


def _logs(cluster: SlurmCluster, run: Path, tail: int = 1500) -> str:
    """The job's own output (RUN/slurm/) and the daemons' logs, ends only: why a job failed, in the
    assertion message (a launcher killed with exit 137 says nothing of its own)."""
    paths = sorted((run / "slurm").glob("*_log.*")) + sorted((cluster.folder / "log").glob("*.log"))
    parts = [f"\n--- {p.name}\n{p.read_text(errors='replace')[-tail:]}" for p in paths if p.is_file()]
    return "".join(parts)


def _job_id(run: Path) -> str:
    """The job id `plancast submit` recorded for RUN (RUN/slurm/job-<id>.json; the newest)."""
    ids = [int(p.stem.removeprefix("job-")) for p in (run / "slurm").glob("job-*.json")]
    assert ids, f"no job recorded in {run / 'slurm'}"
    return str(max(ids))


def _kill_node(node: str, job_id: str) -> list[int]:
    """SIGKILL every plancast process that SLURM job ``job_id`` started on ``node`` (launcher, torchrun,
    ranks): a lost node. The job id keeps it off any other job's processes on that node name."""
    killed = []
    marks = (f"SLURMD_NODENAME={node}".encode(), f"SLURM_JOB_ID={job_id}".encode())
    for pid in [int(p) for p in os.listdir("/proc") if p.isdigit()]:
        try:
            environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
        if all(mark in environ for mark in marks) and b"plancast" in cmdline:
            try:
                os.kill(pid, signal.SIGKILL)
                killed.append(pid)
            except ProcessLookupError:
                continue
    return killed


@pytest.mark.distributed
def test_a_lost_node_is_named_its_steps_kept_and_resume_finishes(
    cluster: SlurmCluster, tmp_path: Path
) -> None:
    run = tmp_path / "run"
    scenario = two_node_scenario(tmp_path, steps=24, every=4)
    job = subprocess.Popen(
        [sys.executable, "-m", "plancast", "submit", str(scenario), "--out", str(run), "--nodes", "2",
         "--wait", "--timeout", "300"],
        env=cluster.env, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    deadline = time.monotonic() + 300
    # COMPLETE, not the folder: rank 0's DCP save makes the folder before rank 1 has appended its 8th
    # step's events; COMPLETE follows the save's barrier, which every rank reaches after appending
    while time.monotonic() < deadline and not (run / "checkpoints" / "step-000008" / "COMPLETE").exists():
        time.sleep(0.5)
    assert _kill_node("n2", _job_id(run)), "node n2 ran no plancast process" + _logs(cluster, run)
    stdout, stderr = job.communicate(timeout=400)
    assert job.returncode != 0, stdout + stderr
    assert "lost node 1 (n2, ranks [1])" in stderr, stderr
    summary = json.loads((run / "measured" / "summary.json").read_text())
    assert summary["status"] == "failed" and summary["lost_nodes"][0]["node_name"] == "n2"
    finished = summary["steps_finished"]
    assert len(finished["0"]) >= 8 and len(finished["1"]) >= 8  # both nodes' finished steps are kept
    resumed = plancast(cluster, "submit", "--resume", str(run), "--nodes", "2", "--wait", "--timeout", "300")
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr + _logs(cluster, run)
    assert json.loads((run / "measured" / "summary.json").read_text())["status"] == "ok"
