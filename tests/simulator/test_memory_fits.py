"""`fits_in_memory` (costs/memory.py), the sweep's exact memory check: its verdict is `peak_memory`'s peak
against the limit, for every rank order it walks and wherever the limit falls."""

from __future__ import annotations

import pytest

from plancast.simulator.costs.memory import fits_in_memory, peak_memory
from plancast.simulator.schedules import build_schedule
from plancast.simulator.sweep_space import enumerate_plans
from tests.simulator.test_sweep_space import scenario


@pytest.mark.parametrize("preset", ["tiny-gpt", "tiny-moe"])
def test_fits_in_memory_is_the_peak_against_the_limit(preset: str) -> None:
    base = scenario(preset, 8, 1.0, 16)
    plans = [p for p in enumerate_plans(base, 8) if p.pp > 1][::7]
    assert {p.schedule for p in plans} >= {"1F1B", "DualPipeV"} and len(plans) > 100
    peaks_on = set()
    for plan in plans:
        s = plan.apply(base)
        schedule = build_schedule(s.parallelism.pipeline_parallel_schedule, s.pp, s.num_microbatches, s.vpp)
        rank, peak = peak_memory(s, schedule)
        peaks_on.add(rank == 0)
        for limit in (peak.total * (1 - 1e-12), peak.total, peak.total * (1 + 1e-12)):
            assert fits_in_memory(s, limit, schedule) == (peak.total <= limit), (plan, limit)
        assert fits_in_memory(s, peak.total) and not fits_in_memory(s, peak.total / 2)
    assert peaks_on == {True, False}  # the first rank's peak and the others' both decide some plans
