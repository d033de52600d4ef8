"""Properties of the bounded readers (issue 35): the trace reader accepts a rank file exactly when its
rows agree with it, and the scenario loader answers any text with a scenario or a ScenarioError."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import pandas as pd
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from plancast.simulator.loader import ScenarioError, load_scenario
from plancast.traces import bounded, schema
from plancast.traces.store import TraceReadError, read_rank_events, write_events

REPO = Path(__file__).resolve().parents[2]
SCENARIO_TEXT = (REPO / "examples" / "tiny-local-cpu.toml").read_text()
FAST = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def events(rows: list[tuple[int, int]]) -> pd.DataFrame:
    return schema.to_frame(
        schema.Event("measured", rank, step, "compute", "forward", start_us=0.0, dur_us=1.0, index=i)
        for i, (rank, step) in enumerate(rows)
    )


@FAST
@given(
    file_rank=st.integers(0, 3),
    rows=st.lists(st.tuples(st.integers(-2, 3), st.integers(-2, 3)), min_size=1, max_size=12),
)
def test_a_rank_file_is_read_exactly_when_its_rows_agree(file_rank: int, rows: list[tuple[int, int]]) -> None:
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / f"rank-{file_rank:05d}.parquet"
        write_events(path, events(rows))
        agree = all(rank == file_rank and step >= 0 for rank, step in rows)
        try:
            frame = read_rank_events(path, file_rank)
        except TraceReadError as err:
            assert not agree, err
            assert str(path) in str(err)
        else:
            assert agree and len(frame) == len(rows)


# Put first in the scenario's [training] table: nesting, long numbers (past 309 digits no float holds
# them: the loader of 8e60db4 raised OverflowError there), stray text; with or without a BOM.
PIECES = st.one_of(
    st.integers(0, 150).map(lambda d: "x = " + "[" * d + "]" * d),
    st.integers(1, 400).map(lambda n: "seed = " + "9" * n),
    st.integers(300, 400).map(lambda n: "global_batch_size = " + "9" * n),
    st.integers(1, 100).map(lambda d: "y = " + "{a = " * d + "1" + "}" * d),
    st.text(alphabet=st.sampled_from('[]{}"#=\n 0123456789abc.-'), max_size=60),
)


@FAST
@given(piece=PIECES, bom=st.booleans())
def test_the_loader_answers_any_text_with_a_scenario_or_its_error(piece: str, bom: bool) -> None:
    text = ("\ufeff" if bom else "") + SCENARIO_TEXT.replace("[training]\n", f"[training]\n{piece}\n", 1)
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "s.toml"
        path.write_text(text, encoding="utf-8")
        try:
            load_scenario(path)
        except ScenarioError as err:
            assert str(path) in str(err)


@FAST
@given(depth=st.integers(0, 2 * bounded.MAX_NESTING))
def test_json_nesting_is_refused_exactly_past_the_cap(depth: int) -> None:
    value: object = 1
    for _ in range(depth):
        value = {"a": [value]} if depth % 2 else [value]
    text = json.dumps(value)
    levels = text.count("[") + text.count("{")
    try:
        bounded.load_json(text, "t.json")
    except bounded.BoundedReadError:
        assert levels > bounded.MAX_NESTING
    else:
        assert levels <= bounded.MAX_NESTING
