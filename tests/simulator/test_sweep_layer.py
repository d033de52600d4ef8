"""A grouping task's packed layers (simulator/sweep_layer.py) unpack to the layers it worked out, exactly,
and the search reads them unpacked (sweep_estimate.Estimator `packed`); the segments `Pricing` shares
between keys are the ones stage_costs gives each key's plan."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest

from plancast.simulator.costs.memory import GiB
from plancast.simulator.costs.stage import DenseSegments, stage_costs
from plancast.simulator.engine import Topology
from plancast.simulator.loader import load_scenario
from plancast.simulator.sweep import _base_for, _group_tp_degree, _per_tp
from plancast.simulator.sweep_axes import Plan
from plancast.simulator.sweep_estimate import Estimator
from plancast.simulator.sweep_groups import Grouper
from plancast.simulator.sweep_keys import layer_key
from plancast.simulator.sweep_layer import Pricing, pack, unpack
from plancast.simulator.sweep_space import NO_PINS
from tests.simulator.test_sweep_space import scenario


@pytest.mark.parametrize("preset", ["tiny-gpt", "tiny-moe"])
def test_packed_layers_are_the_task_layers_exactly(preset: str) -> None:
    gpus, memory_gib, batch = 8, 1.0, 16
    base = scenario(preset, gpus, memory_gib, batch)
    limit = base.cluster.gpu.usable_memory_GiB * GiB
    (subtrees, *_) = _per_tp(base, gpus, NO_PINS)
    packed, families, *_ = _group_tp_degree(base, gpus, limit, (subtrees, None))
    grouper = Grouper(base, gpus, limit, Estimator(base, gpus), NO_PINS, defer=True)
    for family in families:
        for group in family.groups:
            for plan, _ in group.plans():
                grouper.est.layer(plan)
    assert packed.keys() == grouper.est.layers.keys()
    hidden = [layer for layer in grouper.est.layers.values() if layer.segments.alone_forward_s]
    assert bool(hidden) == (preset == "tiny-moe")  # ep overlap's hidden all-to-all columns packed too
    for key, layer in grouper.est.layers.items():
        assert unpack(packed[key]) == layer  # every float, bit for bit
        assert pack(unpack(packed[key])) == packed[key]
    est = Estimator(base, gpus, packed=dict(packed))
    key, data = next(iter(packed.items()))
    plan = next(p for f in families for g in f.groups for p, _ in g.plans() if est.key(p) == key)
    assert est.layer(plan) == unpack(data) and key in est.layers and key not in est.packed


EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def test_shared_segments_are_each_plans_own() -> None:
    """Keys that differ in ep, etp, dispatcher and overlap share their dense block, embedding and head,
    and keys that differ in recompute, ZeRO and overlap their ep/cp collectives (sweep_layer.Pricing):
    every key's segments equal stage_costs' of its own one-stage plan, on DeepSeek-V3's 2,048 H800 (MLA,
    MTP, dense first layers, node-limited routing), keys priced in an order that reaches each shared
    part from another key first."""
    gpus = 2048
    base = _base_for(load_scenario(EXAMPLES / "deepseek-v3-h800.toml").scenario, gpus)
    pricing, levels, dense, shared = Pricing(base), {}, {}, 0
    axes = itertools.product(
        (2, 8),
        (1, 2),
        ("none", "full", "selective"),
        (0, 3),
        (8, 64),
        (0, 1),
        ("alltoall", "deepep"),
        (False, True),
    )
    for tp, mbs, rc, zero, ep, etp, dispatcher, overlap in axes:
        flat = Plan(tp, 1, gpus // tp, mbs, "1F1B", 1, rc, True, zero, ep, 1, 0, 0, dispatcher, overlap, etp)
        s = flat.apply(base)
        tp_levels = levels.setdefault(tp, Topology.of(s).levels("tp"))
        assert pricing.segments(layer_key(flat), flat, tp_levels) == stage_costs(s, tp_levels)[0].segments
        own = DenseSegments.of(s, tp_levels)
        first = dense.setdefault((tp, mbs, rc, zero), own)
        shared += first is not own
        assert own == first, flat.label()
    assert shared > 0
