"""Damaged run directories through the real CLI: a clear message naming the file, exit code 2, and
the rest of the run still compared (or, for imports, nothing half-written)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pandas as pd
import pyarrow.parquet as pq
import pytest

from plancast.simulator.loader import load_scenario
from plancast.simulator.predict import simulate
from plancast.traces import schema
from plancast.traces.rank_stream import RankEventWriter
from plancast.traces.store import RunDir, write_json
from tests.cli_runner import cli_subprocess

REPO = Path(__file__).resolve().parent.parent
SCENARIO = REPO / "examples" / "tiny-local-cpu.toml"


def plancast(*args: str) -> subprocess.CompletedProcess[str]:
    return cli_subprocess(*args, timeout_s=120)


@pytest.fixture
def run(tmp_path: Path) -> Path:
    """A run with predictions and three 'measured' steps (the predicted events, relabelled)."""
    path = tmp_path / "run"
    assert plancast("simulate", str(SCENARIO), "--out", str(path)).returncode == 0
    events = simulate(load_scenario(SCENARIO).scenario).events.assign(source="measured")
    rd = RunDir(path)
    rd.measured_dir.mkdir(parents=True, exist_ok=True)
    for rank, rows in events.groupby("rank"):
        writer = RankEventWriter(rd, int(rank))
        for step in range(3):
            writer.append_step(
                rows.assign(step=step, start_us=rows["start_us"] * 1.1, dur_us=rows["dur_us"] * 1.1)
            )
        writer.close()
    write_json(rd.env_json, {"world_size": 2})
    write_json(rd.measured_summary, {"status": "ok", "peak_memory_gib": 0.01})
    return path


def test_intact_run_compares_cleanly(run: Path) -> None:
    result = plancast("compare", str(run), "--json")
    assert result.returncode == 0, result.stderr
    summary = json.loads(result.stdout)
    assert summary["events_missing"] == 0 and summary["events_extra"] == 0
    assert summary["step_time_error"] == pytest.approx(-1 / 11, rel=1e-6)  # measured = 1.1 x predicted


def test_compare_shows_the_measured_core_wait(run: Path) -> None:
    """The ranks' wait for a CPU core (measured/summary.json's core_wait_s) in compare's text and JSON;
    no line where the run did not record it."""
    assert "core wait" not in plancast("compare", str(run)).stdout
    write_json(RunDir(run).measured_summary, {"status": "ok", "peak_memory_gib": 0.01, "core_wait_s": 0.004})
    result = plancast("compare", str(run))
    assert result.returncode == 0, result.stderr
    assert "measured core wait: 4 ms a step" in result.stdout
    assert json.loads(plancast("compare", str(run), "--json").stdout)["measured_core_wait_s"] == 0.004


def test_compare_names_a_core_wait_that_is_not_seconds(run: Path) -> None:
    write_json(RunDir(run).measured_summary, {"status": "ok", "core_wait_s": "lots"})
    result = plancast("compare", str(run))
    assert result.returncode == 2
    assert "core_wait_s is 'lots', not seconds" in result.stderr and "Traceback" not in result.stderr
    assert "step time: predicted" in result.stdout  # the rest is still compared


KEPT_TELEMETRY = REPO / "tests" / "data" / "gpu_runs" / "llama3-4layer-one-h100" / "measured"
KEPT_TELEMETRY = KEPT_TELEMETRY / "telemetry.parquet"


def test_compare_shows_what_the_gpus_ran_at(run: Path) -> None:
    """The GPUs' clock while busy (measured/telemetry.parquet, here a kept H100 run's) in compare's text
    and JSON; no line for a run whose telemetry sampled no GPU."""
    assert "measured GPU" not in plancast("compare", str(run)).stdout
    (run / "measured" / "telemetry.parquet").write_bytes(KEPT_TELEMETRY.read_bytes())
    result = plancast("compare", str(run))
    assert result.returncode == 0, result.stderr
    assert "measured GPU while busy: SM clock 1680 MHz (median of 5 busy samples, up to 1860 MHz)" in (
        result.stdout.replace("\n", " ")
    )
    gpu = json.loads(plancast("compare", str(run), "--json").stdout)["measured_gpu"]
    assert gpu["sm_clock_MHz"] == 1680.0 and gpu["busy_samples"] == 5


def _truncate(path: Path) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


def _other_schema_version(path: Path) -> None:
    table = pq.read_table(path)
    meta = dict(table.schema.metadata or {})
    meta[b"plancast.schema_version"] = b"99"
    pq.write_table(table.replace_schema_metadata(meta), path)


DAMAGE = {
    "truncated rank file": (lambda r: _truncate(r / "measured" / "rank-00001.parquet"), "rank-00001.parquet"),
    "missing rank file": (lambda r: (r / "measured" / "rank-00001.parquet").unlink(), "rank-00001.parquet"),
    "other schema version": (
        lambda r: _other_schema_version(r / "measured" / "rank-00001.parquet"),
        "rank-00001.parquet",
    ),
    "summary cut in the middle": (lambda r: _truncate(r / "measured" / "summary.json"), "summary.json"),
    "telemetry cut in the middle": (
        lambda r: (r / "measured" / "telemetry.parquet").write_bytes(KEPT_TELEMETRY.read_bytes()[:300]),
        "telemetry.parquet",
    ),
}


@pytest.mark.parametrize("damage", DAMAGE)
def test_damaged_run_says_what_and_still_compares_the_rest(run: Path, damage: str) -> None:
    harm, name = DAMAGE[damage]
    harm(run)
    result = plancast("compare", str(run))
    assert result.returncode == 2
    assert "Traceback" not in result.stdout + result.stderr
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert errors and any(name in line for line in errors), result.stderr
    assert "step time: predicted" in result.stdout  # the rest of the run is still compared
    if damage == "summary cut in the middle":  # unreadable, not "absent: still running, or killed"
        assert "absent" not in result.stderr and "cannot be read" in result.stderr


def test_kineto_json_cut_in_the_middle(tmp_path: Path) -> None:
    traces = tmp_path / "traces"
    traces.mkdir()
    (traces / "rank0.pt.trace.json").write_text(
        '{"traceEvents": [{"ph": "X", "name": "ProfilerStep#1", "ts": 1'
    )
    result = plancast("import-kineto", str(traces), "--out", str(tmp_path / "run"))
    assert result.returncode == 2
    assert "rank0.pt.trace.json" in result.stderr and "Traceback" not in result.stderr
    assert not (tmp_path / "run" / "measured").exists()  # nothing half-imported


def test_compare_without_measured_events_is_bad_input(tmp_path: Path) -> None:
    path = tmp_path / "run"
    assert plancast("simulate", str(SCENARIO), "--out", str(path)).returncode == 0
    result = plancast("compare", str(path))
    assert result.returncode == 2
    assert "no readable events" in result.stderr


def test_compare_of_an_imported_trace_gives_advice_that_works(tmp_path: Path) -> None:
    """An imported trace has measured/ but no scenario: compare names the simulate line that writes the
    prediction beside it (with --force, which simulate needs next to a measured run), and it works."""
    traces = REPO / "tests" / "traces" / "data" / "kineto_annotated_gpu"
    run = tmp_path / "run"
    assert plancast("import-kineto", str(traces), "--out", str(run)).returncode == 0
    result = plancast("compare", str(run))
    assert result.returncode == 2
    advice = result.stderr.split("`")[1]
    assert advice.endswith("--force"), result.stderr
    args = advice.removeprefix("plancast ").replace("SCENARIO", str(SCENARIO)).split()
    assert plancast(*args).returncode == 0


def test_export_then_import_kineto_gives_back_the_same_events(tmp_path: Path) -> None:
    """`export --source predicted` of a run without measured events (it raised UnboundLocalError) and
    `import-kineto` of that export: the events come back one for one, times and all."""
    from plancast.traces.store import read_measured, read_predicted

    run, back = tmp_path / "run", tmp_path / "back"
    assert plancast("simulate", str(SCENARIO), "--out", str(run)).returncode == 0
    exported = plancast("export", str(run), "--source", "predicted")
    assert exported.returncode == 0, exported.stderr
    result = plancast(
        "import-kineto", str(run / "chrome" / "predicted"), "--out", str(back), "--scenario", str(SCENARIO)
    )
    assert result.returncode == 0, result.stderr
    columns = [c for c in schema.COLUMNS if c not in ("source", "flops")]
    sent = read_predicted(RunDir(run))[columns].sort_values(columns).reset_index(drop=True)
    got = read_measured(RunDir(back)).events[columns].sort_values(columns).reset_index(drop=True)
    pd.testing.assert_frame_equal(sent, got, check_dtype=False)
    compared = json.loads(plancast("compare", str(back), "--json").stdout)  # the same prediction beside it
    assert (compared["events_missing"], compared["events_extra"]) == (0, 0)
    assert compared["step_time_error"] == pytest.approx(0.0, abs=1e-9)


def test_export_writes_every_rank_of_a_prediction_that_holds_one_rank_per_class(tmp_path: Path) -> None:
    """Above simulator/predict.py's EXPAND_LIMIT (256 ranks) a prediction holds one rank per symmetric
    class (dp 132, pp 2: ranks 0 and 132 of 264); `export` wrote ranks 0-132, the highest rank + 1, where
    `simulate --out` wrote all 264. It reads the plan's world size from the run's scenario.toml, and
    names a scenario.toml it cannot read (exit 2, the events still exported)."""
    toml = tmp_path / "plan.toml"
    toml.write_text(
        '[model]\npreset = "gpt3-1.3b"\n[training]\nseq_len = 2048\nmicro_batch_size = 1\n'
        "global_batch_size = 264\n[parallelism]\npipeline_parallel_degree = 2\n"
        '[cluster]\npreset = "dgx-h100-80gb"\nnum_nodes = 33\n'
    )
    run = tmp_path / "run"
    assert plancast("simulate", str(toml), "--out", str(run)).returncode == 0, toml.read_text()
    assert sorted(set(read_predicted_ranks(run))) == [0, 132]
    written = sorted((run / "chrome" / "predicted").glob("rank-*.json"))
    assert len(written) == 264
    for path in written:
        path.unlink()
    result = plancast("export", str(run), "--source", "predicted")
    assert result.returncode == 0, result.stderr
    assert "264 file(s)" in result.stdout and len(list((run / "chrome" / "predicted").glob("*.json"))) == 264
    (run / "scenario.toml").write_text("[model\n")
    damaged = plancast("export", str(run), "--source", "predicted")
    assert damaged.returncode == 2 and "scenario.toml could not be read" in damaged.stderr, damaged.stderr
    assert "133 file(s)" in damaged.stdout


def read_predicted_ranks(run: Path) -> list[int]:
    from plancast.traces.store import read_predicted

    return [int(r) for r in read_predicted(RunDir(run))["rank"]]
