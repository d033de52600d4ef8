"""A grouping task's packed layers (simulator/sweep_layer.py) unpack to the layers it worked out, exactly,
and the search reads them unpacked (sweep_estimate.Estimator `packed`)."""

from __future__ import annotations

import pytest

from plancast.simulator.costs.memory import GiB
from plancast.simulator.sweep import _group_tp_degree, _per_tp
from plancast.simulator.sweep_estimate import Estimator
from plancast.simulator.sweep_groups import Grouper
from plancast.simulator.sweep_layer import pack, unpack
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
