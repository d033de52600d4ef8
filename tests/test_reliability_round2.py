"""Reliability, round two (issue 35): one write guard for every verb that writes into a run directory,
bounded input everywhere, and one validating trace reader, each class through the CLI. The limits are
lowered where a test needs a big input, so that every case here uses small files."""

from __future__ import annotations

import gzip
import json
import os
import shutil
from pathlib import Path

import pytest

from plancast.commands import runs as runs_command
from plancast.dashboard.data import load_run
from plancast.runtime.launch import finished_steps
from plancast.simulator.importers.megatron import _known_tokens
from plancast.simulator.loader import load_scenario
from plancast.simulator.predict import simulate
from plancast.traces import bounded, kineto_files
from plancast.traces.lock import RunLock
from plancast.traces.rank_stream import RankEventWriter
from plancast.traces.store import RunDir, read_events, read_measured, write_events, write_json
from tests.cli_runner import REPO, cli_main

SCENARIO = REPO / "examples" / "tiny-local-cpu.toml"
KINETO = REPO / "tests" / "traces" / "data" / "kineto_annotated_gpu"


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A predicted run with three 'measured' steps on each of its two ranks."""
    path = tmp_path_factory.mktemp("template") / "run"
    code, _, err = cli_main("simulate", str(SCENARIO), "--out", str(path))
    assert code == 0, err
    events = simulate(load_scenario(SCENARIO).scenario).events.assign(source="measured")
    rd = RunDir(path)
    for rank, rows in events.groupby("rank"):
        writer = RankEventWriter(rd, int(rank))
        for step in range(3):
            writer.append_step(rows.assign(step=step))
        writer.close()
    write_json(rd.env_json, {"world_size": 2})
    write_json(rd.measured_summary, {"status": "ok", "step_time_s": 0.1, "peak_memory_gib": 0.01})
    return path


@pytest.fixture
def run(template: Path, tmp_path: Path) -> Path:
    return Path(shutil.copytree(template, tmp_path / "run"))


def files_of(folder: Path) -> dict[str, bytes]:
    return {
        p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()
    }


# --------------------------------------------------------------------------------- the write guard
WRITERS = {
    "import-kineto": ["import-kineto", str(KINETO), "--out", "RUN", "--force"],
    "simulate --out": ["simulate", str(SCENARIO), "--out", "RUN", "--force"],
    "export": ["export", "RUN"],
    "calibrate -o": ["calibrate", "RUN", "RUN", "-o", "RUN/profile.toml"],
}


@pytest.mark.parametrize("verb", list(WRITERS))
def test_every_writer_refuses_a_locked_run(run: Path, verb: str) -> None:
    before = files_of(run)
    with RunLock(run, "plancast run"):
        code, _, stderr = cli_main(*[a.replace("RUN", str(run)) for a in WRITERS[verb]])
    assert code == 2, stderr
    assert "is being written by" in stderr and "plancast run" in stderr and "Traceback" not in stderr
    after = {k: v for k, v in files_of(run).items() if not k.startswith(".plancast.lock")}
    assert after == {k: v for k, v in before.items() if not k.startswith(".plancast.lock")}


def test_import_kineto_refuses_a_measured_run_naming_it(run: Path) -> None:
    before = files_of(run)
    code, _, stderr = cli_main("import-kineto", str(KINETO), "--out", str(run))
    assert code == 2
    assert f"{run} holds a measured run" in stderr and "--force" in stderr and "Traceback" not in stderr
    assert files_of(run) == before


def test_import_kineto_force_replaces_only_measured_and_keeps_the_old_one(run: Path) -> None:
    before = files_of(run)
    code, _, stderr = cli_main("import-kineto", str(KINETO), "--out", str(run), "--force")
    assert code == 0, stderr
    kept = [p for p in run.iterdir() if p.name.startswith("measured.replaced-")]
    assert len(kept) == 1 and f"kept as {kept[0]}" in stderr
    assert files_of(kept[0]) == {
        k.removeprefix("measured/"): v for k, v in before.items() if k.startswith("measured/")
    }
    after = files_of(run)
    untouched = {k: v for k, v in before.items() if not k.startswith("measured/")}
    assert {k: after[k] for k in untouched} == untouched  # scenario.toml, predicted/, chrome/
    measured = read_measured(RunDir(run))  # a consistent run: the imported rank 3 of 4, nothing else
    assert sorted(p.name for p in RunDir(run).measured_dir.iterdir()) == ["env.json", "rank-00003.parquet"]
    assert json.loads((run / "measured" / "env.json").read_text())["world_size"] == 4
    assert set(measured.events["rank"]) == {3}


# --------------------------------------------------------------------------------- bounded input
def write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


BAD_SCENARIOS = {
    "nested 100 deep": ("x = " + "[" * 100 + "]" * 100 + "\n", "nested more than 64 deep"),
    "a 400-digit number": ("[training]\nglobal_batch_size = " + "9" * 400 + "\n", "400 digits"),
    "too large": ("# " + "x" * 5000 + "\n", "larger than"),
}


@pytest.mark.parametrize("case", list(BAD_SCENARIOS))
def test_unbounded_scenarios_are_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, case: str) -> None:
    monkeypatch.setattr(bounded, "MAX_SCENARIO_BYTES", 4096)
    text, message = BAD_SCENARIOS[case]
    code, _, stderr = cli_main("validate", str(write(tmp_path / "s.toml", text)))
    assert code == 2 and message in stderr and "Traceback" not in stderr, stderr


@pytest.mark.parametrize("where", ["fifo", "/dev/zero", "folder"])
def test_only_regular_files_are_read(tmp_path: Path, where: str) -> None:
    path = {"fifo": tmp_path / "pipe.toml", "/dev/zero": Path("/dev/zero"), "folder": tmp_path}[where]
    if where == "fifo":
        os.mkfifo(path)
    for args in (["validate", str(path)], ["import", "hf", str(path)]):
        code, _, stderr = cli_main(*args)
        assert code == 2 and "not a regular file" in stderr and "Traceback" not in stderr, (args, stderr)


def test_a_byte_order_mark_is_accepted(tmp_path: Path) -> None:
    path = tmp_path / "bom.toml"
    path.write_bytes(b"\xef\xbb\xbf" + SCENARIO.read_bytes())
    code, _, stderr = cli_main("validate", str(path))
    assert code == 0, stderr


def test_a_profile_naming_another_profile_says_so(tmp_path: Path) -> None:
    write(tmp_path / "base.toml", '[cluster]\npreset = "local-cpu"\n')
    write(tmp_path / "mine.toml", f'[cluster]\npreset = "{tmp_path / "base.toml"}"\n')
    text = SCENARIO.read_text().replace('preset = "local-cpu"', f'preset = "{tmp_path / "mine.toml"}"', 1)
    assert text != SCENARIO.read_text()
    code, _, stderr = cli_main("validate", str(write(tmp_path / "s.toml", text)))
    assert code == 2 and "names another profile" in stderr and "tiers" not in stderr, stderr


NESTED_JSON = '{"a": ' + "[" * 200 + "]" * 200 + "}"


@pytest.mark.parametrize(
    "args",
    [["import", "hf", "CONFIG"], ["import", "deepspeed", "DS", "--model", "CONFIG"]],
    ids=["hf", "deepspeed --model"],
)
def test_deep_json_configs_are_refused(tmp_path: Path, args: list[str]) -> None:
    config, ds = (
        write(tmp_path / "config.json", NESTED_JSON),
        write(tmp_path / "ds.json", '{"train_batch_size": 8}'),
    )
    code, _, stderr = cli_main(*[{"CONFIG": str(config), "DS": str(ds)}.get(a, a) for a in args])
    assert code == 2 and "nested more than 64 deep" in stderr and "Traceback" not in stderr, stderr


def test_megatron_arguments_are_read_in_one_pass_keeping_the_last() -> None:
    tokens = ["--num-layers", "2"] * 5000 + ["--lr", "0.1"] * 5000 + ["--num-layers=4", "--bf16"]
    known, unknown = _known_tokens(tokens)
    assert known == ["--num-layers=4", "--bf16"]  # argparse sees two tokens, not 20,002
    assert len(unknown) == 10_000


def kineto_trace(**info: object) -> dict[str, object]:
    trace = json.loads((KINETO / "worker.json").read_text())
    trace.pop("distributedInfo")
    if info:
        trace["distributedInfo"] = info
    return trace


def test_a_gzip_bomb_is_refused(tmp_path: Path) -> None:
    traces = tmp_path / "traces"
    traces.mkdir()
    text = json.dumps(kineto_trace(rank=0)) + " " * (4 * 1024**2)
    (traces / "rank0.json.gz").write_bytes(gzip.compress(text.encode()))
    code, _, stderr = cli_main("import-kineto", str(traces), "--out", str(tmp_path / "run"))
    assert code == 2 and "decompression bomb" in stderr and "Traceback" not in stderr, stderr
    assert not (tmp_path / "run" / "measured").exists()


def test_event_counts_are_bounded(run: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(kineto_files, "MAX_TRACE_EVENTS", 5)
    code, _, stderr = cli_main("import-kineto", str(KINETO), "--out", str(tmp_path / "new"))
    assert code == 2 and "more than the 5 plancast imports" in stderr, stderr
    monkeypatch.setattr(runs_command, "MAX_EXPORT_EVENTS", 10)
    code, _, stderr = cli_main("export", str(run))
    assert (
        code == 2
        and "more than the 10 `export` writes" in stderr
        and not (run / "chrome" / "measured").exists()
    )


def test_calibrate_on_a_summary_that_is_a_list_exits_2(run: Path, tmp_path: Path) -> None:
    (run / "measured" / "summary.json").write_text("[1, 2, 3]")
    code, _, stderr = cli_main("calibrate", str(run), str(run), "-o", str(tmp_path / "p.toml"))
    assert code == 2 and "summary.json should hold a JSON object" in stderr and "Traceback" not in stderr, (
        stderr
    )


# --------------------------------------------------------------------------- the trace reader
def rewrite(path: Path, **changes: object) -> None:
    frame = read_events(path)
    write_events(path.with_suffix(".parquet"), frame.assign(**changes))
    if path.suffix == ".arrows":
        path.unlink()


@pytest.mark.parametrize(
    ("changes", "message"),
    [({"rank": 0}, "holds rows of rank(s) 0"), ({"step": -1}, "negative step")],
    ids=["another rank's rows", "negative steps"],
)
def test_rows_that_contradict_their_file_are_refused_everywhere(
    run: Path, tmp_path: Path, changes: dict[str, object], message: str
) -> None:
    rewrite(RunDir(run).rank_files()[1], **changes)
    for args in (
        ["compare", str(run)],
        ["export", str(run)],
        ["calibrate", str(run), str(run), "-o", str(tmp_path / "p.toml")],
    ):
        code, _, stderr = cli_main(*args)
        assert code == 2 and message in stderr and "Traceback" not in stderr, (args, stderr)
    assert any(message in p for p in load_run(run).problems)


def test_a_rank_beyond_the_world_size_is_refused_everywhere(run: Path, tmp_path: Path) -> None:
    rd = RunDir(run)
    write_events(rd.rank_events(5), read_events(rd.rank_files()[1]).assign(rank=5))  # env.json: world 2
    calibrate = ["calibrate", str(run), str(run), "-o", str(tmp_path / "p.toml")]
    for args in (["compare", str(run)], ["export", str(run)], calibrate):
        code, _, stderr = cli_main(*args)
        assert code == 2 and "beyond the world size 2" in stderr and "Traceback" not in stderr, (args, stderr)
    assert any("beyond the world size 2" in p for p in load_run(run).problems)


@pytest.mark.parametrize("rank", [1_000_000_000, 1e9, -3, 4, "0"])
def test_import_kineto_refuses_a_rank_that_is_not_one(tmp_path: Path, rank: object) -> None:
    traces = tmp_path / "traces"
    traces.mkdir()
    write(traces / "worker.json", json.dumps(kineto_trace(rank=rank, world_size=4)))
    code, _, stderr = cli_main("import-kineto", str(traces), "--out", str(tmp_path / "run"))
    assert code == 2 and "not a rank" in stderr and "Traceback" not in stderr, stderr
    assert not (tmp_path / "run" / "measured").exists()


def test_a_plain_single_process_trace_is_rank_0(tmp_path: Path) -> None:
    traces = tmp_path / "traces"
    traces.mkdir()
    write(traces / "trace.json", json.dumps(kineto_trace()))
    code, _, stderr = cli_main("import-kineto", str(traces), "--out", str(tmp_path / "run"))
    assert code == 0, stderr
    assert "read as rank 0 of a single-process job" in stderr
    assert set(read_measured(RunDir(tmp_path / "run")).events["rank"]) == {0}
    write(traces / "other.json", json.dumps(kineto_trace()))  # two files: which is which is unknown
    code, _, stderr = cli_main("import-kineto", str(traces), "--out", str(tmp_path / "run2"))
    assert code == 2 and "names no rank" in stderr


# --------------------------------------------------------------------- a failed run's step times
def test_a_failed_run_keeps_the_step_times_of_its_finished_steps(run: Path) -> None:
    rd = RunDir(run)
    steps, times_s = finished_steps(rd, 2)
    assert steps == {0: [0, 1, 2], 1: [0, 1, 2]} and len(times_s) == 3 and min(times_s) > 0
    frame = read_events(rd.rank_files()[1])
    write_events(rd.rank_events(1), frame[frame["step"] < 2])
    rd.rank_stream(1).unlink(missing_ok=True)
    steps, times_s = finished_steps(rd, 2)
    assert steps[1] == [0, 1] and len(times_s) == 2
    ends = frame.assign(end=frame["start_us"] + frame["dur_us"]).groupby("step")["end"].max()
    assert times_s[0] >= float(ends[0]) / 1e6 * (1 - 1e-9)


def test_sweep_over_more_gpus_than_the_batch_splits_names_the_batch() -> None:
    code, _, stderr = cli_main("sweep", str(SCENARIO), "--gpus", "1000000", "--workers", "1")
    assert code == 1 and "training.global_batch_size" in stderr and "fits in" not in stderr, stderr


def test_install_hints_work_from_a_checkout(monkeypatch: pytest.MonkeyPatch) -> None:
    from plancast import app

    monkeypatch.setitem(app.EXTRAS, "runtime", ("plancast_no_such_module",))
    monkeypatch.setitem(app.EXTRAS, "dashboard", ("plancast_no_such_module_either",))
    with pytest.raises(app.UserError) as caught:
        app.require_extra("runtime,dashboard", "plancast demo")
    assert "pip install '.[runtime,dashboard]'" in str(caught.value)
    assert "pip install 'plancast[runtime,dashboard]'" in str(caught.value)


def test_the_documented_limits_are_the_ones_in_force() -> None:
    from plancast.dashboard.data import MAX_TYPED_CHARS
    from plancast.traces.store import MAX_JSON_BYTES

    text = (REPO / "docs" / "cli.md").read_text()
    mib = 1024**2
    for figure in (
        f"| {bounded.MAX_SCENARIO_BYTES // mib} MiB |",
        f"| {bounded.MAX_CONFIG_BYTES // mib} MiB |",
        f"| {MAX_JSON_BYTES // mib} MiB |",
        f"| {bounded.MAX_TRACE_BYTES // 1024**3} GiB; a `.json.gz` also at most {bounded.MAX_GZIP_RATIO}x",
        f"nested at most {bounded.MAX_NESTING} levels; integers of at most {bounded.MAX_INT_DIGITS} digits",
        f"{kineto_files.MAX_TRACE_EVENTS:,} events per trace file",
        f"{runs_command.MAX_EXPORT_EVENTS:,} events",
        f"{MAX_TYPED_CHARS} characters",
    ):
        assert figure in text, figure


def test_a_planted_lock_link_is_never_followed(run: Path, tmp_path: Path) -> None:
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    (run / ".plancast.lock").unlink(missing_ok=True)
    (run / ".plancast.lock").symlink_to(victim)
    code, _, stderr = cli_main("export", str(run))
    assert code == 2 and "cannot be used as the run's lock" in stderr and "Traceback" not in stderr, stderr
    assert victim.read_text() == "precious"


@pytest.mark.parametrize(
    ("name", "content", "message"),
    [
        ("measured/summary.json", "[1, 2]", "should hold a JSON object"),
        ("measured/summary.json", '{"steps": "six"}', "not a step count"),
        ("measured/checkpoints.json", "[]", "should hold a JSON object"),
    ],
)
def test_resume_reads_the_run_folder_without_a_traceback(
    run: Path, name: str, content: str, message: str
) -> None:
    (run / name).write_text(content)
    (run / "checkpoints" / "step-000002").mkdir(parents=True)
    (run / "checkpoints" / "step-000002" / "COMPLETE").touch()
    code, _, stderr = cli_main("run", "--resume", str(run))
    assert code == 2 and message in stderr and "Traceback" not in stderr, stderr


def test_a_deeply_nested_profiler_trace_is_refused(tmp_path: Path) -> None:
    traces = tmp_path / "traces"
    traces.mkdir()
    write(traces / "rank0.json", '{"traceEvents": [], "x": ' + "[" * 100_000 + "]" * 100_000 + "}")
    code, _, stderr = cli_main("import-kineto", str(traces), "--out", str(tmp_path / "run"))
    assert code == 2 and "nested too deeply" in stderr and "Traceback" not in stderr, stderr
