"""The routed experts' grouped GEMMs under training.fp8 follow training.fp8_recipe as a dense layer does
(costs/fp8.py): its cast passes, its scales and its peak (issue 31)."""

from __future__ import annotations

import pytest

from plancast.simulator.costs.fp8 import recipe
from plancast.simulator.costs.moe import moe_block_forward
from plancast.simulator.costs.ops import Op, Shape
from plancast.simulator.loader import parse_scenario
from plancast.simulator.predict import simulate
from plancast.simulator.scenario import Scenario
from tests.simulator.test_moe_keys import MOE


def _scenario(fp8_recipe: str, cluster: str = "dgx-h100-80gb") -> Scenario:
    training = {**MOE["training"], "fp8": True, "fp8_recipe": fp8_recipe}
    data = {**MOE, "training": training, "cluster": {"preset": cluster, "num_nodes": 4}}
    return parse_scenario(data, "moe-fp8").scenario


def _expert_ops(s: Scenario) -> dict[str, Op]:
    ops = moe_block_forward(Shape.of(s), s.model, s.ep)
    return {op.name: op for op in ops if op.name.startswith("expert_")}


@pytest.mark.parametrize("name", ["tensorwise_delayed", "tensorwise_current", "blockwise"])
def test_the_cast_reads_and_writes_what_the_recipe_says(name: str) -> None:
    ops = _expert_ops(_scenario(name))
    gate_up, cast = ops["expert_gate_up"], ops["expert_gate_up_fp8_cast"]
    # the rank's token slots (4096 tokens x top-8 x the default imbalance 1.25) by the hidden size 1024
    assert cast.bytes == pytest.approx(recipe(name).cast_bytes(2) * 4096 * 8 * 1.25 * 1024)
    assert gate_up.fp8 and gate_up.peak == recipe(name).peak


def test_current_scaling_reads_its_input_twice_so_the_step_is_longer() -> None:
    """Current scaling's amax pass (TE Float8CurrentScaling) costs HBM time delayed scaling does not."""
    delayed, current = (_scenario(n) for n in ("tensorwise_delayed", "tensorwise_current"))
    cast = {n: _expert_ops(s)["expert_down_fp8_cast"].bytes for n, s in (("d", delayed), ("c", current))}
    assert cast["c"] == pytest.approx(cast["d"] * recipe("tensorwise_current").cast_bytes(2) / 4)
    assert (
        simulate(current, events=False).summary["step_time_s"]
        > simulate(delayed, events=False).summary["step_time_s"]
    )


def test_mxfp8_experts_run_at_the_mxfp8_peak_on_blackwell() -> None:
    ops = _expert_ops(_scenario("mxfp8", "dgx-b200"))
    assert ops["expert_gate_up"].peak == "mxfp8" and ops["expert_down"].peak == "mxfp8"


@pytest.mark.parametrize("activation", ["swiglu", "gelu", "relu2"])
def test_an_moe_layer_keeps_none_of_the_dense_mlps_ops_or_their_fp8_casts(activation: str) -> None:
    """The MoE block replaces the dense MLP: its GEMMs, activation and their FP8 input casts go with it."""
    from plancast.simulator.costs.moe import moe_layer_forward

    s = _scenario("tensorwise_current")
    s = s.model_copy(update={"model": s.model.model_copy(update={"activation": activation})})
    names = {op.name for op in moe_layer_forward(Shape.of(s), s.model, s.ep)}
    dense = {"gate_up", "swiglu", "fc1", "gelu", "relu2", "fc2"}
    assert not names & (dense | {f"{n}_fp8_cast" for n in dense})
    assert "qkv_fp8_cast" in names and "out_proj_fp8_cast" in names  # attention's casts stay
