"""Fit the compute/link constants on published numbers, with leave-one-model-out cross-validation.

Parameters: GEMM, attention and memory efficiency, per-op overhead (ComputeModel) and the in-training
efficiency of the NVLink tier. Data: Korthikanti et al. 2022 Table 4 (ten per-layer times) and Table 5
(eight iteration times), relative residuals. The cross-validation refits without one model's Table 5
rows, each refit starting from the same fixed START (never from the full-data fit, which has seen
the held-out rows), and predicts them, so the reported held-out error is on runs the fit never saw.
`fit_on_runs` fits the same constants on other published runs (benchmarks/published_data.py): the
leave-one-source-out refit of benchmarks/published_runs.py.

Run: `python -m benchmarks.fit_published` (a few minutes; prints the fit and the held-out errors).
"""

from __future__ import annotations

import statistics
from typing import Any

import numpy as np
from scipy.optimize import least_squares

from benchmarks.published_data import PublishedRun, scenario_dict
from benchmarks.published_runs import TABLE4, TABLE5, korthikanti
from plancast.simulator.cluster import ComputeModel
from plancast.simulator.costs.stage import stage_costs
from plancast.simulator.engine import Topology
from plancast.simulator.loader import parse_scenario
from plancast.simulator.predict import simulate
from plancast.simulator.scenario import Scenario

NAMES = (
    "matmul_efficiency",
    "attention_efficiency",
    "memory_efficiency",
    "op_overhead_us",
    "nvlink_efficiency",
)
LOWER = np.array([0.6, 0.3, 0.5, 0.0, 0.3])
UPPER = np.array([0.9, 0.9, 0.95, 30.0, 0.9])
START = np.array([0.85, 0.76, 0.9, 15.0, 0.51])


def with_params(s: Scenario, x: np.ndarray) -> Scenario:
    compute = ComputeModel(
        matmul_efficiency=x[0],
        attention_efficiency=x[1],
        memory_efficiency=x[2],
        op_overhead_us=x[3],
        matmul_half_gflop=s.cluster.compute.matmul_half_gflop,
    )
    tiers = list(s.cluster.tiers)
    tiers[0] = tiers[0].model_copy(update={"efficiency": float(x[4])})
    return s.model_copy(update={"cluster": s.cluster.model_copy(update={"compute": compute, "tiers": tiers})})


def table4_residuals(x: np.ndarray) -> list[float]:
    out = []
    for sp, recompute, fwd_ms, bwd_ms in TABLE4.values():
        s = with_params(korthikanti("22B", sp=sp, recompute=recompute), x)
        layer = next(g for g in stage_costs(s, Topology.of(s).levels("tp"))[0].segments if g.part == "layer")
        fwd = (layer.forward_s + layer.tp_forward_s) * 1e3
        bwd = (layer.backward_input_s + layer.backward_weight_s + layer.tp_backward_s) * 1e3
        bwd += fwd if recompute == "full" else 0.0
        out += [fwd / fwd_ms - 1, bwd / bwd_ms - 1]
    return out


ROWS = [
    (model, sp, rc, meas)
    for model, pair in TABLE5.items()
    for (sp, rc), meas in zip(((False, "full"), (True, "selective")), pair, strict=True)
]


def table5_residual(x: np.ndarray, row: tuple[str, bool, str, float]) -> float:
    model, sp, rc, measured = row
    s = with_params(korthikanti(model, sp=sp, recompute=rc), x)
    return simulate(s, events=False).summary["step_time_s"] / measured - 1


def fit(rows: list[tuple[str, bool, str, float]], start: np.ndarray) -> np.ndarray:
    def residuals(x: np.ndarray) -> list[float]:
        return table4_residuals(x) + [table5_residual(x, r) for r in rows]

    return least_squares(residuals, start, bounds=(LOWER, UPPER), diff_step=1e-3, max_nfev=40).x


def run_scenario(run: PublishedRun) -> Scenario:
    """A published run as a scenario, its framework named where plancast models it."""
    data = scenario_dict(run)
    if run.framework in ("megatron-lm", "torchtitan", "deepspeed"):
        data["parallelism"]["framework"] = run.framework
    return parse_scenario(data, run.name).scenario


def fit_on_runs(runs: list[PublishedRun]) -> np.ndarray:
    """The five constants fitted on `runs` alone (relative step-time residuals), from START."""
    scenarios = [(run_scenario(r), r.measured_step_time_s) for r in runs]

    def residuals(x: np.ndarray) -> list[float]:
        return [
            simulate(with_params(s, x), events=False).summary["step_time_s"] / t - 1 for s, t in scenarios
        ]

    return least_squares(residuals, START, bounds=(LOWER, UPPER), diff_step=1e-3, max_nfev=40).x


def main() -> dict[str, Any]:
    full = fit(ROWS, START)
    print(
        "fit on Table 4 + all of Table 5:", {n: round(float(v), 3) for n, v in zip(NAMES, full, strict=True)}
    )
    in_sample = [table5_residual(full, r) for r in ROWS]
    print(
        f"  in-sample Table 5 MAPE {statistics.fmean(map(abs, in_sample)):.2%}, "
        f"worst {max(map(abs, in_sample)):.2%}",
        flush=True,
    )
    held_out = []
    for model in TABLE5:
        x = fit([r for r in ROWS if r[0] != model], START)
        for r in (r for r in ROWS if r[0] == model):
            err = table5_residual(x, r)
            held_out.append(err)
            print(f"  held out {model:5} {r[2]:9} error {err:+.2%}", flush=True)
    print(
        f"leave-one-model-out MAPE {statistics.fmean(map(abs, held_out)):.2%}, "
        f"worst {max(map(abs, held_out)):.2%}"
    )
    return {
        "params": dict(zip(NAMES, full.tolist(), strict=True)),
        "in_sample": in_sample,
        "held_out": held_out,
    }


if __name__ == "__main__":
    main()
