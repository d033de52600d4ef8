"""The profiler capture path gives the same events as the dispatch spy (test_events.py) on CPU.

GPU runs always take the profiler path; on CPU it is the ``PLANCAST_CPU_CAPTURE=profiler`` fallback.
The worker reads that variable once and passes the mode down, so the test passes it directly.
"""

from __future__ import annotations

import pytest

from tests.distributed.checks import events_match_expected, tiny_scenario
from tests.distributed.spawn import run_ranks

pytestmark = pytest.mark.distributed


@pytest.mark.parametrize(
    "parallelism", [{"tensor_parallel_degree": 2}, {"data_parallel_degree": 2, "zero_stage": 3}], ids=str
)
def test_profiler_path_events_equal_expected_keys(parallelism: dict[str, int]) -> None:
    run_ranks(2, events_match_expected, tiny_scenario(2, **parallelism), 2, "profiler")
