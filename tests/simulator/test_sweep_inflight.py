"""The sweep's memory check walks a schedule of at most M(pp) micro-batches for the schedules without a
closed form (sweep_inflight.INFLIGHT_STEADY): past M the first rank's peak of in-flight layers is M's."""

from __future__ import annotations

import pytest

from plancast.simulator.costs.memory import peak_inflight_layers
from plancast.simulator.schedules import SCHEDULES, schedule_problems
from plancast.simulator.sweep_inflight import CLOSED_FORM, INFLIGHT_STEADY

CHUNK_LAYERS = [(1, 1), (3, 1), (1, 4), (2, 0), (0, 2), (5, 3)]
"""(chunk 0, chunk 1) layers of the first rank: even and uneven splits, an empty chunk."""


def _peak(schedule: str, pp: int, m: int, layers: tuple[int, int]) -> int:
    """The first rank's peak as the sweep walks it (Estimator.first_rank_actions: rank 0's actions)."""
    actions = SCHEDULES[schedule].build(0, pp, m, 1)  # type: ignore[index]
    return peak_inflight_layers(actions, dict(enumerate(layers)))


@pytest.mark.parametrize("schedule", sorted(INFLIGHT_STEADY))
@pytest.mark.parametrize("pp", [1, 2, 3, 4, 5, 8, 13, 16])
def test_the_peak_stops_growing_at_the_steady_count(schedule: str, pp: int) -> None:
    cap = INFLIGHT_STEADY[schedule](pp)
    v = 2 if SCHEDULES[schedule].v_shape else 1  # type: ignore[index]
    valid = [m for m in range(cap, 3 * cap + 2) if not schedule_problems(schedule, pp, m, v)]
    if pp > 1:
        assert valid[0] == cap  # the steady count itself builds
    for layers in CHUNK_LAYERS:
        steady = _peak(schedule, pp, cap, layers)
        for m in valid:
            assert _peak(schedule, pp, m, layers) == steady, (schedule, pp, m, layers)


def test_every_schedule_has_a_closed_form_or_a_steady_count() -> None:
    assert set(SCHEDULES) == set(CLOSED_FORM) | set(INFLIGHT_STEADY)
