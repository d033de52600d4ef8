"""Ideal-case identities through the SimPy engine (zero latency, unbounded bandwidth, uniform stages).

Stage costs are injected (one uniform block per stage, no tensor-parallel traffic) so the pipeline
timing is exactly the schedule's: GPipe and 1F1B take (m + p - 1)(f + b), bubble (p - 1)/(m + p - 1).
"""

from __future__ import annotations

from typing import Any

import pytest

from plancast.simulator.costs.stage import Segment, StageCost
from plancast.simulator.engine import Engine
from plancast.simulator.loader import parse_scenario
from plancast.simulator.scenario import Scenario
from plancast.simulator.summary import PIPELINE_KINDS

F, B = 1.0, 2.0  # seconds per micro-batch on one rank's whole share of the model


def ideal(pp: int, m: int, schedule: str = "1F1B", v: int = 1) -> Scenario:
    data: dict[str, Any] = {
        "model": {"preset": "tiny-gpt", "num_hidden_layers": 2 * pp * v, "num_attention_heads": 4},
        "training": {"seq_len": 16, "micro_batch_size": 1, "global_batch_size": m, "dtype": "fp32"},
        "parallelism": {
            "pipeline_parallel_degree": pp,
            "pipeline_parallel_schedule": schedule,
            "virtual_stages_per_rank": v,
        },
        "cluster": {
            "gpu": "cpu-core",
            "num_nodes": 1,
            "gpus_per_node": pp,
            "tiers": [{"name": "ideal", "bandwidth_GBps": 1e15, "latency_us": 0.0}],
        },
    }
    return parse_scenario(data).scenario


def uniform_costs(s: Scenario, f: float = F, b: float = B) -> tuple[StageCost, ...]:
    v = s.vpp
    seg = Segment("layer", f / v, b / (2 * v), b / (2 * v), (), ())
    return tuple(StageCost(i, (seg,), 0.0, False, False) for i in range(s.pp * v))


def pipeline_makespan(s: Scenario) -> tuple[float, list[float]]:
    spans = Engine(s, costs_override=uniform_costs(s)).run()
    end = max(sp.start_s + sp.dur_s for sp in spans if sp.kind in PIPELINE_KINDS)
    busy = {}
    for sp in spans:
        if sp.kind in PIPELINE_KINDS:
            busy[sp.rank] = busy.get(sp.rank, 0.0) + sp.dur_s
    return end, [1 - b / end for b in busy.values()]


@pytest.mark.parametrize("schedule", ["GPipe", "1F1B"])
@pytest.mark.parametrize(
    ("p", "m", "bubble"), [(4, 4, 3 / 7), (4, 16, 3 / 19), (8, 4, 7 / 11), (8, 32, 7 / 39)]
)
def test_bubble_fraction_gpipe_1f1b(schedule: str, p: int, m: int, bubble: float) -> None:
    makespan, fractions = pipeline_makespan(ideal(p, m, schedule))
    assert makespan == pytest.approx((m + p - 1) * (F + B), rel=1e-9)
    assert fractions == pytest.approx([bubble] * p, rel=1e-9)


@pytest.mark.parametrize(("p", "m", "v"), [(4, 8, 2), (4, 16, 4), (2, 8, 2), (8, 16, 2)])
def test_interleaving_divides_the_bubble_by_v(p: int, m: int, v: int) -> None:
    flat, _ = pipeline_makespan(ideal(p, m, "1F1B"))
    inter, _ = pipeline_makespan(ideal(p, m, "Interleaved1F1B", v))
    bubble_1f1b = flat - m * (F + B)
    assert bubble_1f1b == pytest.approx((p - 1) * (F + B), rel=1e-9)
    assert inter - m * (F + B) == pytest.approx(bubble_1f1b / v, rel=1e-9)


@pytest.mark.parametrize(("p", "m"), [(4, 4), (4, 8), (8, 16)])
def test_zero_bubble_beats_1f1b(p: int, m: int) -> None:
    one_f_one_b, _ = pipeline_makespan(ideal(p, m, "1F1B"))
    zero_bubble, _ = pipeline_makespan(ideal(p, m, "ZeroBubble"))
    assert zero_bubble < one_f_one_b
