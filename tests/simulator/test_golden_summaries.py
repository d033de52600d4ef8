"""The summary of every example and published run is unchanged (issues 15 and 16: refactors and speed
work must not move a number).

Compares `simulate(s, events=False).summary` and, for every example and the first sampled row of each
published source, the object `plancast simulate FILE --json` prints, against tests/data/golden/ (floats
to a relative 1e-9). A change that is MEANT to move the numbers (a fidelity change) regenerates the data
with `.venv/bin/python scripts/update_golden.py`; the lead reruns it when such a change lands, and the
diff of the data is reviewed with it. Runs above `SAMPLE_MAX_ACTIONS` pipeline passes are in the data
but not compared here (they take seconds each); every source keeps sampled rows.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.golden import Case, cases, differences, outputs, read_group

CASES = cases()
SAMPLED = [c for c in CASES if c.sampled]


def test_the_data_holds_every_case_and_the_sample_covers_every_source() -> None:
    for group in {c.group for c in CASES}:
        stored = set(read_group(group))
        names = {c.name for c in CASES if c.group == group}
        assert names == stored, (
            f"tests/data/golden/{group}.json is out of date: missing {sorted(names - stored)}, stale "
            f"{sorted(stored - names)}; run scripts/update_golden.py and review the diff"
        )
    assert {c.name for c in SAMPLED if c.group == "examples"} == {
        p.name for p in (Path(__file__).resolve().parents[2] / "examples").glob("*.toml")
    }
    sources = {c.source for c in CASES}
    assert {c.source for c in SAMPLED if c.through_cli} == sources


@pytest.mark.parametrize("case", SAMPLED, ids=lambda c: f"{c.group}/{c.name}")
def test_summary_is_unchanged(case: Case, tmp_path: Path) -> None:
    golden = read_group(case.group).get(case.name)
    assert golden is not None, f"no golden data for {case.name}: run scripts/update_golden.py"
    found = differences(golden, outputs(case, tmp_path))
    assert not found, f"{case.group}/{case.name} moved:\n" + "\n".join(found[:20])


def test_differences_sees_a_moved_float_and_tolerates_the_last_bits() -> None:
    golden = {"a": 1.0, "b": {"c": [1, 2.5]}, "d": "x", "e": True}
    assert differences(golden, {"a": 1.0 + 1e-12, "b": {"c": [1, 2.5]}, "d": "x", "e": True}) == []
    moved = differences(golden, {"a": 1.0 + 1e-6, "b": {"c": [2, 2.5]}, "d": "x", "f": 0})
    assert sorted(moved) == [
        ".a: 1.000001, golden 1.0",
        ".b.c[0]: 2, golden 1",
        ".e: missing",
        ".f: not in the golden data",
    ]
