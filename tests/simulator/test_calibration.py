"""Calibration recovers known constants from synthetic measurements, and profiles load as presets."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
import tomli_w

from plancast.simulator.calibration.compute import (
    Measured,
    Observation,
    calibrated_cluster,
    fit_compute,
    model_x,
    stage_row,
)
from plancast.simulator.calibration.links import fit_link, ring_terms
from plancast.simulator.costs.stage import stage_costs
from plancast.simulator.engine import Topology
from plancast.simulator.loader import load_scenario, parse_scenario

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "tiny-local-cpu.toml"


def test_fit_link_recovers_alpha_and_beta() -> None:
    alpha, bandwidth = 150e-6, 2e9
    rows = []
    for kind in ("all_reduce", "all_gather", "send"):
        for nbytes in (1e3, 1e5, 1e6, 4e6):
            steps, volume = ring_terms(kind, 2, nbytes)
            rows.append(
                {"kind": kind, "ranks": 2, "bytes": nbytes, "seconds": steps * alpha + volume / bandwidth}
            )
    fitted_alpha, fitted_bw = fit_link(pd.DataFrame(rows))
    assert fitted_alpha == pytest.approx(alpha, rel=1e-6)
    assert fitted_bw == pytest.approx(bandwidth, rel=1e-6)


def test_fit_link_needs_two_sizes() -> None:
    with pytest.raises(ValueError, match="two different sizes"):
        fit_link(pd.DataFrame([{"kind": "send", "ranks": 2, "bytes": 10.0, "seconds": 1e-3}]))


@pytest.mark.parametrize("slowdown", [0.5, 2.0, 3.0])
def test_fit_compute_recovers_a_uniform_slowdown(slowdown: float) -> None:
    """Passes measured at `slowdown` x the compute model (no per-op overhead): efficiencies / slowdown."""
    s = load_scenario(EXAMPLE).scenario
    compute = s.cluster.compute.model_copy(update={"op_overhead_us": 0.0})
    s = s.model_copy(update={"cluster": s.cluster.model_copy(update={"compute": compute})})
    costs = stage_costs(s, Topology.of(s).levels("tp"))
    observations = [
        Observation(c.stage, kind, slowdown * seconds)
        for c in costs
        for kind, seconds in (("forward", c.forward_s), ("backward", c.backward_s))
    ]
    fitted = fit_compute([Measured(s, tuple(observations))])
    names = ("matmul_efficiency", "attention_efficiency", "memory_efficiency")
    # one scale on every efficiency, held where the largest reaches 1 (a fraction of the peak)
    scale = max(slowdown, *(getattr(compute, name) for name in names))
    for name in names:
        assert getattr(fitted, name) == pytest.approx(getattr(compute, name) / scale, rel=1e-3), name
    assert fitted.op_overhead_us == pytest.approx(0.0, abs=1e-3)


def test_runs_faster_than_the_peak_allows_hold_the_efficiencies_at_1_and_refit_the_overhead() -> None:
    """Passes measured faster than the profile's peak allows (its microbenchmark caught a slow moment):
    the largest efficiency stops at 1, the ratios stay, and the per-op overhead is fitted under that
    bound, so the fitted passes stay as close to the measured ones as the bound lets them."""
    s = load_scenario(EXAMPLE).scenario
    compute = s.cluster.compute.model_copy(update={"op_overhead_us": 0.0})
    s = s.model_copy(update={"cluster": s.cluster.model_copy(update={"compute": compute})})
    x = model_x(compute)  # 1 / efficiencies, and 0 s per op
    overhead_s = 40e-6  # truth: half the compute time, plus 40 us per op
    observations = []
    for c in stage_costs(s, Topology.of(s).levels("tp")):
        for kind in ("forward", "backward"):
            row = stage_row(s, c.stage, kind)  # seconds at efficiency 1 per class, and the op count
            observations.append(
                Observation(c.stage, kind, 0.5 * float(row[:3] @ x[:3]) + row[3] * overhead_s)
            )
    fitted = fit_compute([Measured(s, tuple(observations))])
    names = ("matmul_efficiency", "attention_efficiency", "memory_efficiency")
    assert max(getattr(fitted, name) for name in names) == pytest.approx(1.0)
    highest = max(getattr(compute, name) for name in names)
    for name in names:
        assert getattr(fitted, name) == pytest.approx(getattr(compute, name) / highest, rel=1e-6)
    # slower compute than the truth under the bound: the overhead takes some of it back
    assert 0.0 < fitted.op_overhead_us < overhead_s * 1e6
    fitted_s = [float(stage_row(s, o.stage, o.kind) @ model_x(fitted)) for o in observations]
    capped = fitted.model_copy(update={"op_overhead_us": overhead_s * 1e6})  # capping after the fit
    capped_s = [float(stage_row(s, o.stage, o.kind) @ model_x(capped)) for o in observations]
    error = sum(abs(f / o.seconds - 1) for f, o in zip(fitted_s, observations, strict=True))
    capped_error = sum(abs(f / o.seconds - 1) for f, o in zip(capped_s, observations, strict=True))
    assert error < capped_error


def test_stage_row_reproduces_the_cost_model() -> None:
    """The linear coefficients give back the stage costs when the roofline is memory- or compute-bound."""
    s = load_scenario(EXAMPLE).scenario
    c = s.cluster.compute
    x = [
        1 / c.matmul_efficiency,
        1 / c.attention_efficiency,
        1 / c.memory_efficiency,
        c.op_overhead_us * 1e-6,
    ]
    costs = stage_costs(s, Topology.of(s).levels("tp"))
    for cost in costs:
        row = stage_row(s, cost.stage, "forward")
        assert float(row @ x) == pytest.approx(cost.forward_s, rel=0.05)


def test_a_profile_file_is_a_cluster_preset(tmp_path: Path) -> None:
    s = load_scenario(EXAMPLE).scenario
    compute = s.cluster.compute.model_copy(update={"matmul_efficiency": 0.123})
    cluster = calibrated_cluster(s, compute, {0: (1e-4, 3e9)})
    profile = tmp_path / "cpu.toml"
    profile.write_text(tomli_w.dumps({"cluster": cluster.model_dump(mode="json", exclude_none=True)}))
    loaded = parse_scenario(
        {
            "model": {"preset": "tiny-gpt"},
            "training": {"seq_len": 64},
            "cluster": {"preset": str(profile), "gpus_per_node": 4},
        }
    ).scenario
    assert loaded.cluster.compute.matmul_efficiency == pytest.approx(0.123)
    assert loaded.cluster.tiers[0].bandwidth_GBps == pytest.approx(3.0)
    assert loaded.cluster.gpus_per_node == 4  # explicit keys override the profile


def test_a_missing_profile_names_the_key(tmp_path: Path) -> None:
    from plancast.simulator.loader import ScenarioError

    with pytest.raises(ScenarioError, match=r"cluster\.preset: cannot read profile"):
        parse_scenario({"model": {"preset": "tiny-gpt"}, "cluster": {"preset": str(tmp_path / "no.toml")}})
