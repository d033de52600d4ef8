"""``runtime.instrument.events_frame`` builds exactly the table ``traces.schema.to_frame`` builds."""

from __future__ import annotations

import pandas as pd

from plancast.runtime.instrument import events_frame
from plancast.traces.schema import Event, to_frame

EVENTS = [
    Event("measured", 1, 3, "compute", "forward", 0.0, 12.5, stage=1, chunk=0, microbatch=2),
    Event("measured", 1, 3, "pp", "send", 12.5, 3.25, stage=1, chunk=0, microbatch=2, peer=0, bytes=4096),
    Event("measured", 1, 3, "dp", "all_reduce", 20.0, 1.0, stage=1, chunk=0, index=3, flops=0.0),
    Event("measured", 1, 3, "compute", "optimizer", 30.0, 2.0),
]


def test_events_frame_equals_to_frame() -> None:
    pd.testing.assert_frame_equal(events_frame(EVENTS), to_frame(EVENTS))


def test_no_events_give_the_empty_schema_table() -> None:
    pd.testing.assert_frame_equal(events_frame([]), to_frame([]))
