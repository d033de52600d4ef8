"""simulator/costs/tp_comm.py lists exactly the tensor-parallel collectives the DTensor plan issues."""

from __future__ import annotations

import pytest

from tests.distributed.checks import tiny_scenario, tp_sequence_matches_comm_plan
from tests.distributed.spawn import run_ranks


@pytest.mark.distributed
@pytest.mark.parametrize("sequence_parallel", [False, True])
def test_profiled_tp_collectives_equal_comm_plan(sequence_parallel: bool) -> None:
    data = tiny_scenario(2, tensor_parallel_degree=2, sequence_parallel=sequence_parallel)
    run_ranks(2, tp_sequence_matches_comm_plan, data)
