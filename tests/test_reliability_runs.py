"""Damaged run directories (issue 11), one fixture case each: `compare` and `export` through the CLI
name the damaged file, still handle the rest, agree on exit code 2 and never show a traceback or hang;
the dashboard's reader turns the same damage into a named problem."""

from __future__ import annotations

import json
import os
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from plancast.dashboard.data import load_run
from plancast.simulator.loader import load_scenario
from plancast.simulator.predict import simulate
from plancast.traces import schema
from plancast.traces.rank_stream import RankEventWriter
from plancast.traces.store import RunDir, read_measured, write_events, write_json
from tests.cli_runner import cli_main

REPO = Path(__file__).resolve().parent.parent
SCENARIO = REPO / "examples" / "tiny-local-cpu.toml"
RANDOM_BYTES = bytes(range(256)) * 4 + b"\xff\xfe\x00"


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A predicted run with three 'measured' steps per rank (the predicted events, relabelled)."""
    path = tmp_path_factory.mktemp("template") / "run"
    code, _, err = cli_main("simulate", str(SCENARIO), "--out", str(path))
    assert code == 0, err
    events = simulate(load_scenario(SCENARIO).scenario).events.assign(source="measured")
    rd = RunDir(path)
    for rank, rows in events.groupby("rank"):
        writer = RankEventWriter(rd, int(rank))
        for step in range(3):
            writer.append_step(rows.assign(step=step, dur_us=rows["dur_us"] * 1.1))
        writer.close()
    write_json(rd.env_json, {"world_size": 2})
    write_json(rd.measured_summary, {"status": "ok", "peak_memory_gib": 0.01})
    return path


@pytest.fixture
def run(template: Path, tmp_path: Path) -> Path:
    return Path(shutil.copytree(template, tmp_path / "run"))


def _replace_with_dir(path: Path) -> None:
    path.unlink()
    path.mkdir()
    (path / "inside").write_text("x")


def _nan_times(path: Path) -> None:
    frame = pd.read_parquet(path)
    frame.loc[frame.index[:3], "start_us"] = float("nan")
    frame.loc[frame.index[3:5], "dur_us"] = float("nan")
    # written without validation, as a foreign tool would (write_events would refuse it)
    table_frame = frame.astype(schema.COLUMNS)
    table = pa.Table.from_pandas(table_frame, preserve_index=False)
    table = table.replace_schema_metadata({b"plancast.schema_version": str(schema.SCHEMA_VERSION).encode()})
    pq.write_table(table, path)


@dataclass(frozen=True)
class Damage:
    id: str
    harm: Callable[[Path], None]
    names: str  # what every message must name


DAMAGE = [
    Damage(
        "summary-random-bytes",
        lambda r: (r / "measured/summary.json").write_bytes(RANDOM_BYTES),
        "summary.json",
    ),
    Damage("env-random-bytes", lambda r: (r / "measured/env.json").write_bytes(RANDOM_BYTES), "env.json"),
    Damage(
        "predicted-summary-random",
        lambda r: (r / "predicted/summary.json").write_bytes(RANDOM_BYTES),
        "summary.json",
    ),
    Damage(
        "summary-is-a-list", lambda r: (r / "measured/summary.json").write_text("[1, 2, 3]"), "summary.json"
    ),
    Damage("env-is-a-string", lambda r: (r / "measured/env.json").write_text('"hello"'), "env.json"),
    Damage(
        "summary-is-a-directory", lambda r: _replace_with_dir(r / "measured/summary.json"), "summary.json"
    ),
    Damage("env-is-a-directory", lambda r: _replace_with_dir(r / "measured/env.json"), "env.json"),
    Damage(
        "rank-file-is-a-directory",
        lambda r: _replace_with_dir(r / "measured/rank-00001.parquet"),
        "rank-00001",
    ),
    Damage(
        "summary-with-nan",
        lambda r: (r / "measured/summary.json").write_text('{"step_time_s": NaN}'),
        "summary.json",
    ),
    Damage(
        "env-claims-5-million-ranks",
        lambda r: write_json(r / "measured/env.json", {"world_size": 5_000_000}),
        "ranks 2-4999999",
    ),
    Damage(
        "env-world-size-not-a-number",
        lambda r: write_json(r / "measured/env.json", {"world_size": "two"}),
        "env.json",
    ),
    Damage("nan-times-in-a-rank-file", lambda r: _nan_times(r / "measured/rank-00001.parquet"), "non-finite"),
    Damage(
        "random-rank-file",
        lambda r: (r / "measured/rank-00001.parquet").write_bytes(RANDOM_BYTES),
        "rank-00001",
    ),
]


@pytest.mark.parametrize("damage", DAMAGE, ids=[d.id for d in DAMAGE])
def test_compare_and_export_name_the_damage_and_agree_on_exit_2(run: Path, damage: Damage) -> None:
    damage.harm(run)
    started = time.monotonic()
    for verb in ("compare", "export"):
        code, out, err = cli_main(verb, str(run))
        assert code == 2, (verb, out, err)
        assert "Traceback" not in out + err
        errors = [line for line in err.splitlines() if line.startswith("error:")]
        assert errors and any(damage.names in line for line in errors), (verb, err)
    assert time.monotonic() - started < 120  # no hang (a generous bound; this takes seconds)
    assert "step time: predicted" in cli_main("compare", str(run))[1]  # the rest is still compared
    assert any((run / "chrome" / "predicted").glob("*.json"))  # and exported


@pytest.mark.parametrize("damage", DAMAGE, ids=[d.id for d in DAMAGE])
def test_the_dashboard_reader_turns_the_damage_into_a_named_problem(run: Path, damage: Damage) -> None:
    damage.harm(run)
    loaded = load_run(run)
    assert any(damage.names in p for p in loaded.problems), loaded.problems
    assert loaded.has_predicted


def test_nan_times_are_schema_errors() -> None:
    frame = simulate(load_scenario(SCENARIO).scenario).events
    frame.loc[frame.index[0], "start_us"] = float("nan")
    with pytest.raises(schema.SchemaError, match="'start_us' has 1 non-finite"):
        schema.validate(frame)
    with pytest.raises(schema.SchemaError):
        write_events(Path(os.devnull), frame)


def test_a_claimed_world_size_is_checked_against_the_files_present(run: Path) -> None:
    write_json(run / "measured/env.json", {"world_size": 5_000_000})
    read = read_measured(RunDir(run))
    assert read.problems == [
        "measured/rank-*.parquet of ranks 2-4999999 is missing (world size 5000000): "
        "4999998 ranks are left out"
    ]
    assert sorted(set(read.events["rank"])) == [0, 1]


def test_compare_reports_the_measured_status(run: Path) -> None:
    write_json(
        run / "measured/summary.json",
        {"status": "failed", "reason": "rank 1 failed first (killed by SIGKILL)"},
    )
    code, out, err = cli_main("compare", str(run), "--json")
    assert code == 0, err
    summary = json.loads(out)
    assert summary["measured_status"] == "failed"
    assert "rank 1 failed first" in summary["measured_reason"]
    assert "status is failed" in err
    code, out, _ = cli_main("compare", str(run))
    assert "measured run status: failed" in out
