"""The sweep shares one-stage segments between layer keys only where stage_costs prices them alike."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from plancast.simulator import sweep_layer
from plancast.simulator.costs.stage import stage_costs
from plancast.simulator.engine import Topology
from plancast.simulator.loader import load_scenario
from plancast.simulator.sweep import _base_for
from plancast.simulator.sweep_axes import Plan
from plancast.simulator.sweep_estimate import Estimator
from plancast.simulator.sweep_keys import alike, layer_key, shared_key

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"

# (example, GPUs, flat plans on it: tp, micro-batch, SP, ep, cp), each run under recompute none, full,
# selective and ZeRO 0, 3: Megatron-LM (dense, MoE with MTP), torchtitan (autocast master weights,
# FSDP's fp32 gradient cast, gradient accumulation), cp
CASES = [
    ("gpt3-175b-dgx-a100.toml", 1536, [(2, 1, True, 1, 1), (8, 2, False, 1, 1)]),
    ("deepseek-v3-h800.toml", 2048, [(2, 1, True, 64, 1), (4, 3, False, 8, 1)]),
    ("mixtral-8x7b-dgx-h100.toml", 64, [(2, 1, True, 8, 1), (1, 2, False, 4, 1)]),
    ("llama3-8b-cp4-128k.toml", 64, [(2, 1, True, 1, 4), (1, 1, False, 1, 8)]),
]


def _segments(base: object, plan: Plan) -> tuple[object, ...]:
    s = plan.apply(base)  # type: ignore[arg-type]
    return stage_costs(s, Topology.of(s).levels("tp"))[0].segments


@pytest.mark.parametrize(("example", "gpus", "flats"), CASES, ids=[c[0] for c in CASES])
def test_keys_share_segments_only_where_stage_costs_prices_them_alike(
    example: str, gpus: int, flats: list[tuple[int, int, bool, int, int]]
) -> None:
    """Wherever `alike` says a key's one-stage scenario prices as its `shared_key`'s, stage_costs gives
    both the same segments; and it says so for Megatron-LM's ZeRO 0 and 3 and recompute none and full,
    not for torchtitan's ZeRO 0 and 3 (autocast casts each weight without FSDP, FSDP casts each
    gradient), so the check is not vacuous."""
    base = _base_for(load_scenario(EXAMPLES / example).scenario, gpus)
    framework = base.parallelism.framework
    shared = 0
    for tp, mbs, sp, ep, cp in flats:
        for recompute in ("none", "full", "selective"):
            for zero in (0, 3):
                plan = Plan(tp, 1, gpus // (tp * cp), mbs, "1F1B", 1, recompute, sp, zero, ep, cp)
                key = layer_key(plan)
                other = shared_key(key)
                if other == key:
                    continue
                twin = replace(plan, zero_stage=0, recompute=other[3])
                assert layer_key(twin) == other
                if alike(plan.apply(base), twin.apply(base)):
                    shared += 1
                    assert _segments(base, plan) == _segments(base, twin), (plan.label(), recompute, zero)
                elif framework == "megatron-lm" and recompute != "selective":
                    pytest.fail(f"{plan.label()}: Megatron-LM prices ZeRO 0/3 and recompute none/full alike")
    assert shared > 0 if framework == "megatron-lm" else True
    if framework == "torchtitan" and base.amp_master_params:
        tp, mbs, sp, ep, cp = flats[0]
        plan = Plan(tp, 1, gpus // (tp * cp), mbs, "1F1B", 1, "none", sp, 3, ep, cp)
        assert not alike(plan.apply(base), replace(plan, zero_stage=0).apply(base))


def test_the_estimator_shares_the_segments_it_would_have_worked_out(monkeypatch: pytest.MonkeyPatch) -> None:
    """Layer costs through shared segments equal those of an estimator that works out every key apart."""
    base = _base_for(load_scenario(EXAMPLES / "deepseek-v3-h800.toml").scenario, 2048)
    plans = [
        Plan(2, 16, 64, 1, "1F1B", 1, rc, True, zero, 64, 1, dispatcher=d, overlap_ep=o, etp=1)
        for rc in ("none", "full", "selective")
        for zero in (0, 1, 3)
        for d, o in (("alltoall", False), ("deepep", True))
    ]
    calls: list[str] = []
    priced = sweep_layer.stage_costs
    monkeypatch.setattr(sweep_layer, "stage_costs", lambda *a: calls.append("shared") or priced(*a))
    shared = Estimator(base, 2048)
    layers = [shared.layer(plan) for plan in plans]
    monkeypatch.setattr(sweep_layer, "alike", lambda a, b: False)
    monkeypatch.setattr(sweep_layer, "stage_costs", lambda *a: calls.append("apart") or priced(*a))
    apart = Estimator(base, 2048)
    assert [apart.layer(plan) for plan in plans] == layers
    assert calls.count("shared") == 4 and calls.count("apart") == 12  # (none, selective) x dispatchers
