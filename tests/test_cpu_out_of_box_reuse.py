"""benchmarks/cpu_out_of_box.py --reuse: a model change re-scored on saved measurements (a run and a
machine record taken on a quiet machine, issue 36), with nothing re-run or re-measured; and the
microbenchmark figures that fresh measurements of the machine disagree on, named."""

from __future__ import annotations

import copy
import json
import shutil
from pathlib import Path

import pytest

from benchmarks.cpu_out_of_box import PLANS, main, scenario_data
from benchmarks.cpu_records import SPEED_KEYS, measured_figures, moved_by, record_notes, unsteady_figures
from plancast.runtime.local_profile import machine_key

DATA = Path(__file__).resolve().parent / "data" / "cpu_out_of_box"
RECORD = "h64-s128-b2-r2-86e2dc633a9c.json"  # the five plans' shape (local_profile.shape_key)
RESULTS = Path(__file__).resolve().parents[1] / "benchmarks" / "results" / "cpu_out_of_box.json"


def _saved(tmp_path: Path, key: str) -> tuple[Path, Path]:
    """A run folder as run_all leaves it (dp 2, one round) and a cache holding one machine record."""
    run = tmp_path / "out" / "round-0" / "dp_2" / "measured"
    run.mkdir(parents=True)
    shutil.copyfile(DATA / "dp_2_summary.json", run / "summary.json")
    cache = tmp_path / "cache"
    (cache / key).mkdir(parents=True)
    shutil.copyfile(DATA / RECORD, cache / key / RECORD)
    return tmp_path / "out", cache


def test_reuse_scores_the_saved_run_on_the_saved_record(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out, cache = _saved(tmp_path, machine_key())
    results_before = RESULTS.read_bytes() if RESULTS.is_file() else None
    code = main(["--out", str(out), "--plans", "dp 2", "--reuse", str(cache)])
    printed = capsys.readouterr().out
    assert code in (0, 1)  # 1: a target missed, which this one plan may well do
    row = next(line for line in printed.splitlines() if line.startswith("dp 2"))
    assert "0.0482" in row  # the saved run's median step, not a new run's
    assert "re-scored saved runs: figures not saved" in printed
    # the record was read, not measured again or rewritten; the saved results were left alone
    assert sorted(p.name for p in (cache / machine_key()).iterdir()) == [RECORD]
    assert (cache / machine_key() / RECORD).read_bytes() == (DATA / RECORD).read_bytes()
    assert (RESULTS.read_bytes() if RESULTS.is_file() else None) == results_before


@pytest.mark.parametrize("case", ["another machine's record", "no run in --out"])
def test_reuse_refuses_what_it_would_have_to_measure_or_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], case: str
) -> None:
    key = "another-host_cpu_2cores_torch0" if case == "another machine's record" else machine_key()
    out, cache = _saved(tmp_path, key)
    if case == "no run in --out":
        shutil.rmtree(out / "round-0" / "dp_2")
    with pytest.raises(SystemExit) as stopped:
        main(["--out", str(out), "--plans", "dp 2", "--reuse", str(cache)])
    assert stopped.value.code == 2
    message = capsys.readouterr().err
    assert message.startswith("--reuse: ")
    expected = "no saved measurement" if case == "another machine's record" else "no finished run of dp 2"
    assert expected in message


def test_the_figures_fresh_measurements_disagree_on_are_named_widest_first() -> None:
    record = json.loads((DATA / RECORD).read_text(encoding="utf-8"))
    figures = measured_figures(record)
    assert "link send 262144 B" in figures and "host.block_s.tp.3" in figures
    assert not any(name.startswith(SPEED_KEYS) for name in figures)  # the machine's state: its own line
    assert unsteady_figures([record, record]) == []  # one measurement twice: nothing moved
    slower = copy.deepcopy(record)
    slower["host"]["block_s"]["tp"]["3"] *= 1.5  # past the 25% that one figure may move a plan by
    slower["host"]["optimizer_s"]["plain"]["8"] *= 1.2  # within it
    slower["links"][0]["seconds"] *= 3.0
    assert unsteady_figures([record, slower, record]) == [
        ("link all_reduce 1024 B", pytest.approx(3.0)),
        ("host.block_s.tp.3", pytest.approx(1.5)),
    ]


def test_the_figure_group_that_moves_a_plan_between_measurements_is_found() -> None:
    record = json.loads((DATA / RECORD).read_text(encoding="utf-8"))
    slower = copy.deepcopy(record)
    for layers in ("1", "3"):  # the DTensor block step measured 1.5x slower, nothing else
        slower["host"]["block_s"]["tp"][layers] *= 1.5
    tp, dp = scenario_data(PLANS["tp 2"]), scenario_data(PLANS["dp 2"])
    group, low, high = moved_by(tp, [record, slower, record])[0]
    assert group == "host.block_s" and low == 0 and high > 0.1  # from `record` (the median) and `slower`
    assert all(low == high == 0 for _, low, high in moved_by(dp, [record, slower, record]))  # no tp block
    notes = record_notes([record, slower], {"tp 2": tp})
    assert "host.block_s.tp.3 x1.50" in notes[0] and notes[1].startswith("  tp 2: moved most by host.block_s")
    assert record_notes([record], {"tp 2": tp}) == []  # one measurement: nothing to disagree
