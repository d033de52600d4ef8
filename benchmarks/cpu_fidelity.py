"""Predicted vs measured step time on this machine's CPU, after calibration (issue 10 target: every plan
within 15%, mean <= 8%; no fitted parameter outside its bound).

1. calibrate: this machine's microbenchmarks (once, at the scored plans' shapes, cached in --out) + twelve
   calibration runs (tiny-gpt: DP 2, PP 2, TP 2, TP 2 + SP, ZeRO-2 and ZeRO-3, each at micro-batch 4
   and 1) that are NOT among the scored runs (those use micro-batch 2); the
   calibration's own in-sample / held-out table is printed too;
2. for each plan of the matrix {DP 2, ZeRO-1/2/3 at 2, TP 2, TP 2 + SP, PP 2 GPipe and 1F1B at 4 and 8
   micro-batches, PP 4 interleaved}: run it with the runtime (torchrun, gloo) for 24 steps, simulate it
   on the calibrated profile, and compare the median measured step time (steps 1..23, >= 20 after the
   warm-up step) with the prediction.

Every run is repeated in `--rounds` interleaved rounds (default 3): the calibration uses all rounds'
calibration runs, and a plan's measured time is the median of its rounds' medians.

Every run records the machine-speed probe (runtime/microbench_probe.py); the calibration normalises its
runs to their median probe (runtime/calibrate.py), and each scored plan's error is printed twice: as
measured, and with each round's step time brought to that probe's speed (x reference probe / the run's
probe: the speed factor `plancast compare` applies, traces/contention.py). Beside them, each run's own
step spread (10th to 90th percentile over the median) and the errors against each plan's fastest tenth
of steps: how much of an error the machine's speed moving between steps can hold (a bound, not the
score; traces/contention.STEADY_SPREAD).

Run on a quiet machine: `python -m benchmarks.cpu_fidelity [--steps 24] [--rounds 3] [--out runs/fidelity]`
(about 5 minutes a round on a 2-core machine).
`--reuse` keeps the runs already finished in `--out` (calibration and scoring are redone on them): a
change to the simulator or the calibration is re-scored on the same measurements.
"""

from __future__ import annotations

import argparse
import copy
import functools
import os
import shutil
import statistics
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import tomli_w

from benchmarks.results_io import error_figures, write_result
from plancast.runtime.calibrate import adopt, calibrate, run_probe, runs_probe, write_profile
from plancast.runtime.launch import launch
from plancast.runtime.local_profile import cached_core_share, localize
from plancast.runtime.worker import own_core_share
from plancast.simulator.calibration.microbench import bound_violations
from plancast.simulator.calibration.runs import COMPUTE_FIELDS, HOST_FIELDS, score_table, with_fields
from plancast.simulator.cluster import Cluster
from plancast.simulator.loader import parse_scenario, to_toml_dict
from plancast.simulator.predict import simulate
from plancast.simulator.scenario import Scenario
from plancast.traces.contention import STEADY_SPREAD, machine_speed, step_spread
from plancast.traces.store import RunDir, read_json

BASE: dict[str, Any] = {
    "model": {"preset": "tiny-gpt"},
    "training": {"seq_len": 128, "micro_batch_size": 2, "global_batch_size": 16, "dtype": "fp32"},
    "parallelism": {},
    "cluster": {"preset": "local-cpu"},
}
MATRIX: dict[str, dict[str, Any]] = {
    "DP 2": {"data_parallel_degree": 2},
    "ZeRO-1 at 2": {"zero_stage": 1},
    "ZeRO-2 at 2": {"zero_stage": 2},
    "ZeRO-3 at 2": {"zero_stage": 3},
    "TP 2": {"tensor_parallel_degree": 2},
    "TP 2 + SP": {"tensor_parallel_degree": 2, "sequence_parallel": True},
    "PP 2 GPipe, 4 mb": {"pipeline_parallel_degree": 2, "pipeline_parallel_schedule": "GPipe", "_batch": 8},
    "PP 2 GPipe, 8 mb": {"pipeline_parallel_degree": 2, "pipeline_parallel_schedule": "GPipe"},
    "PP 2 1F1B, 4 mb": {"pipeline_parallel_degree": 2, "_batch": 8},
    "PP 2 1F1B, 8 mb": {"pipeline_parallel_degree": 2},
    "PP 4 interleaved": {
        "pipeline_parallel_degree": 4,
        "pipeline_parallel_schedule": "Interleaved1F1B",
        "virtual_stages_per_rank": 2,
        "_world": 4,
        "_model": {"preset": "tiny-gpt", "num_hidden_layers": 8},
    },
}
OPTIMIZER_FIELDS = ("optimizer_overhead_us", "dtensor_optimizer_overhead_us")
CALIBRATION: dict[str, dict[str, Any]] = {  # other micro-batch sizes than every scored run (those use 2):
    # 1 and 4 bracket it, so the per-op overhead and the efficiency scale separate in the compute fit
    "calibration DP 2, mb 4": {"_micro": 4},
    "calibration DP 2, mb 1": {"_micro": 1},
    # 16 and 4 micro-batches: 32 and 8 transfer sides a rank step separate a side's host time
    "calibration PP 2, mb 1": {"pipeline_parallel_degree": 2, "_micro": 1},
    "calibration PP 2, mb 4": {"pipeline_parallel_degree": 2, "_micro": 4},
    # two micro-batch counts (2 and 8 per rank) separate per-collective and per-step host times
    "calibration TP 2, mb 4": {"tensor_parallel_degree": 2, "_micro": 4},
    "calibration TP 2, mb 1": {"tensor_parallel_degree": 2, "_micro": 1},
    "calibration TP 2 + SP, mb 4": {"tensor_parallel_degree": 2, "sequence_parallel": True, "_micro": 4},
    "calibration TP 2 + SP, mb 1": {"tensor_parallel_degree": 2, "sequence_parallel": True, "_micro": 1},
    "calibration ZeRO-3 at 2, mb 4": {"zero_stage": 3, "_micro": 4},
    "calibration ZeRO-3 at 2, mb 1": {"zero_stage": 3, "_micro": 1},
    # ZeRO-2 unshards each unit once per micro-batch, ZeRO-3 twice: the pair separates the unshard's host
    "calibration ZeRO-2 at 2, mb 4": {"zero_stage": 2, "_micro": 4},
    "calibration ZeRO-2 at 2, mb 1": {"zero_stage": 2, "_micro": 1},
}


def scenario_data(plan: dict[str, Any]) -> dict[str, Any]:
    data = copy.deepcopy(BASE)
    data["parallelism"] = {k: v for k, v in plan.items() if not k.startswith("_")}
    data["training"]["global_batch_size"] = plan.get("_batch", 16)
    data["training"]["micro_batch_size"] = plan.get("_micro", 2)
    data["model"] = plan.get("_model", data["model"])
    data["cluster"] = {"preset": "local-cpu", "gpus_per_node": plan.get("_world", 2)}
    return data


@functools.cache
def machine() -> Cluster:
    """This machine measured once, at the scored plans' shapes (runtime/local_profile.py, cached): one
    device, link and host model for every run, so the fitted efficiencies are relative to one peak."""
    return localize(parse_scenario(scenario_data(MATRIX["DP 2"])).scenario, say=print).cluster


PER_WORLD = ("p2p_busy_delay_us", "p2p_thread_us")
"""Transfer costs measured with every rank of the plan busy at once (runtime/microbench_host.py): they
grow with the ranks sharing the cores (2-core machine: a busy sender's delay 0.4-0.9 ms at 2 ranks,
1.3-1.5 ms at 4), so a plan takes its own rank count's, as an uncalibrated plan does."""


@functools.cache
def per_world_us(world: int) -> dict[str, float]:
    """PER_WORLD's values measured with `world` ranks (cached as `machine`'s)."""
    plan = next(p for p in MATRIX.values() if p.get("_world", 2) == world)
    compute = localize(parse_scenario(scenario_data(plan)).scenario, say=print).cluster.compute
    return {field: getattr(compute, field) for field in PER_WORLD}


def measured_scenario(plan: dict[str, Any]) -> Scenario:
    """The plan on this machine's measured cluster (its own node shape and tier sizes; its own rank
    count's transfer costs, PER_WORLD)."""
    s = parse_scenario(scenario_data(plan)).scenario
    cluster = adopt(s.cluster, machine())
    world = plan.get("_world", 2)
    if world != 2:
        compute = cluster.compute.model_copy(update=per_world_us(world))
        cluster = cluster.model_copy(update={"compute": compute})
    return s.model_copy(update={"cluster": cluster})


def scenario_file(path: Path, plan: dict[str, Any]) -> Path:
    path.write_text(tomli_w.dumps(to_toml_dict(measured_scenario(plan))))
    return path


def measured_step_s(run: Path) -> float:
    """Median measured step time over the steps after warm-up (runtime/worker.py's summary)."""
    return float(read_json(RunDir(run).measured_summary)["step_time_s"])


def at_speed_s(run: Path, reference: dict[str, Any] | None) -> float:
    """The run's median step time at the reference probe's speed: where the run read the probe between
    steps, the median of each step at its own probe (traces/contention.step_speed); else x reference /
    the run's probe (the inverse of compare's speed factor on the prediction); as measured where
    either is missing."""
    probe = run_probe(run)
    if reference is None or probe is None or probe["workload"] != reference["workload"]:
        return measured_step_s(run)
    per_step = machine_speed(read_json(RunDir(run).measured_summary), reference).get("step_time_at_speed_s")
    return float(per_step) if per_step else measured_step_s(run) * reference["probe_s"] / probe["probe_s"]


def core_wait_ms(run: Path) -> str:
    """The run's median wait of a rank's threads for a CPU core per step (runtime/schedstat.py), ms,
    and its compute threads' core share (traces/contention.py)."""
    summary = read_json(RunDir(run).measured_summary)
    wait, share = summary.get("core_wait_s"), summary.get("core_share")
    return ("-" if wait is None else f"{wait * 1e3:.1f}") + ("" if share is None else f"@{share:.2f}")


def steps_spread(run: Path) -> dict[str, float] | None:
    """The run's own scored steps' 10th and 90th percentile and spread (traces/contention.step_spread)."""
    return step_spread(read_json(RunDir(run).measured_summary))


def lowest_share(runs: dict[str, list[Path]]) -> float | None:
    """The smallest core share of the scored runs relative to what the plan's own ranks leave each other
    (traces/contention.py): how busy the machine got. A PP 4 plan's four ranks on two cores each run
    about half their ready time on a machine with nothing else on it; that is the plan, not the load.
    Runs from before the runtime recorded ``core_share_own`` get min(1, cores / ranks) here: every
    run of this benchmark is one node, this machine."""
    shares = []
    for r in (r for n in MATRIX for r in runs[n]):
        summary = read_json(RunDir(r).measured_summary)
        share, ranks = summary.get("core_share"), summary.get("world_size")
        own = summary.get("core_share_own") or own_core_share(ranks if isinstance(ranks, int) else 1)
        if isinstance(share, float):
            shares.append(min(1.0, share / own))
    return min(shares, default=None)


def print_noise(rows: list[tuple[Any, ...]], spreads: dict[str, list[dict[str, float]]]) -> None:
    """How much of each error the runs' own step-to-step noise can hold: the runs whose steps spread
    wider than STEADY_SPREAD, and the errors against each plan's fastest tenth of steps (the median of
    its rounds' 10th percentiles): a bound on what a steadier machine would show, not the score."""
    wide = sum(x["spread"] > STEADY_SPREAD for v in spreads.values() for x in v)
    total = sum(len(v) for v in spreads.values())
    fast = [r[3] / statistics.median(x["p10_s"] for x in spreads[r[0]]) - 1 for r in rows if spreads[r[0]]]
    if not total or not fast:
        return
    print(
        f"{wide} of {total} scored runs' own steps spread wider than {STEADY_SPREAD:.0%} (10th to 90th "
        "percentile over the median: the machine's speed moved between steps, traces/contention.py); "
        f"against their fastest tenth of steps (a bound, not the score): MAPE "
        f"{statistics.fmean(map(abs, fast)):.1%}, worst {max(fast, key=abs):+.1%}"
    )


def _percents(values: Iterable[float]) -> str:
    return " ".join(f"{v:.0%}" for v in values)


def _finished(run: Path) -> bool:
    summary = RunDir(run).measured_summary
    return summary.is_file() and read_json(summary).get("status") == "ok"


def _slug(name: str) -> str:
    return "".join(c if c.isalnum() else "_" for c in name).strip("_")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--steps", type=int, default=24)
    parser.add_argument("--rounds", type=int, default=3, help="repeat every run this many times, interleaved")
    parser.add_argument("--out", type=Path, default=Path("runs/fidelity"))
    parser.add_argument("--reuse", action="store_true", help="keep the runs already finished in --out")
    parser.add_argument(
        "--max-ranks", type=int, default=None, help="leave out plans of more ranks (a shared machine: 2)"
    )
    args = parser.parse_args(argv)
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("PLANCAST_CACHE_DIR", str(out / "cache"))

    # 1. every run, round after round: a shared machine drifts by tens of percent over minutes, and
    #    interleaving spreads that drift over calibration and scored runs alike
    runs: dict[str, list[Path]] = {name: [] for name in [*CALIBRATION, *MATRIX]}
    loads: dict[str, list[float]] = {name: [] for name in [*CALIBRATION, *MATRIX]}  # 1-min load average
    for r in range(args.rounds):
        folder = out / f"round-{r}"
        folder.mkdir(exist_ok=True)
        for name, plan in [*CALIBRATION.items(), *MATRIX.items()]:
            if args.max_ranks is not None and plan.get("_world", 2) > args.max_ranks:
                continue  # runs[name] stays empty: the plan is left out of the score, and said so below
            run = folder / _slug(name)
            path = scenario_file(folder / f"{run.name}.toml", plan)
            loads[name].append(os.getloadavg()[0])  # at the run's start (or its re-scoring, --reuse)
            if args.reuse and _finished(run):
                # re-scored on this machine's current profile: the fit reads the run's own scenario
                shutil.copyfile(path, RunDir(run).scenario_toml)
                code = 0
            else:
                shutil.rmtree(run, ignore_errors=True)  # an interrupted run of an earlier attempt
                # the 4-rank plan shares a small machine's cores as it always has: its core share is
                # measured and scored (traces/contention.py); --max-ranks leaves it out instead
                code = launch(path, run, steps=args.steps, oversubscribe=True)
            if code:
                print(f"round {r}: {name}: run failed (exit {code})", file=sys.stderr)
                if name in CALIBRATION:
                    return code
                continue
            runs[name].append(run)

    # 2. the fit on every calibration run (none of them scored), on the measured machine
    result = calibrate([run for name in CALIBRATION for run in runs[name]], microbench=False)
    fitted = {f: getattr(result.cluster.compute, f) for f in COMPUTE_FIELDS + OPTIMIZER_FIELDS + HOST_FIELDS}
    write_profile(result.cluster, out / "local-cpu-calibrated.toml", result.notes)
    print("\n".join(result.notes + score_table(result.scores)))

    # 3. the scored matrix: the median over rounds of each run's median step time vs the prediction
    share = cached_core_share(parse_scenario(scenario_data(MATRIX["DP 2"])).scenario)
    reference = runs_probe([run for name in CALIBRATION for run in runs[name]])
    rows = []
    waits: dict[str, str] = {}  # what the ranks waited for a core, per round: the machine's contention
    spreads: dict[str, list[dict[str, float]]] = {}  # each round's own step spread (its median's noise)
    for name, plan in MATRIX.items():
        if not runs[name]:
            continue
        scenario = with_fields(measured_scenario(plan), fitted)
        scenario_path = out / f"{_slug(name)}.toml"
        scenario_path.write_text(tomli_w.dumps(to_toml_dict(scenario)))
        for run in runs[name]:  # `plancast compare RUN` then simulates on the calibrated profile
            RunDir(run).scenario_toml.write_text(scenario_path.read_text())
        predicted = simulate(scenario, events=False).summary["step_time_s"]
        per_round = [measured_step_s(run) for run in runs[name]]
        measured = statistics.median(per_round)
        at_speed = statistics.median(at_speed_s(run, reference) for run in runs[name])
        rows.append(
            (name, per_round, measured, predicted, predicted / measured - 1, predicted / at_speed - 1)
        )
        spreads[name] = [x for x in map(steps_spread, runs[name]) if x is not None]
        waits[name] = " ".join(core_wait_ms(run) for run in runs[name])
        violations = bound_violations(scenario.cluster.compute, share)
        if violations:
            print(f"{name}: parameters outside their bounds: {violations}")
    print(
        f"\n{'plan':22} {'measured s (rounds)':>26} {'median':>8} {'predicted s':>12} {'error':>8} "
        f"{'at speed':>8} {'load at run':>12} {'core wait ms@share':>19} {'steps p10-p90':>14}"
    )
    for name, per_round, measured, predicted, error, adjusted in rows:
        rounds = " ".join(f"{t:.3f}" for t in per_round)
        load = " ".join(f"{x:.1f}" for x in loads[name])
        print(
            f"{name:22} {rounds:>26} {measured:8.4f} {predicted:12.4f} {error:+8.1%} {adjusted:+8.1%} "
            f"{load:>12} {waits[name]:>19} {_percents(x['spread'] for x in spreads[name]):>14}"
        )
    left_out = [name for name in MATRIX if not runs[name]]
    if left_out:
        print(f"left out (more ranks than --max-ranks, or failed): {', '.join(left_out)}")
    mape = statistics.fmean(abs(r[4]) for r in rows) if rows else float("nan")
    worst = max(rows, key=lambda r: abs(r[4])) if rows else None
    print(
        f"MAPE {mape:.1%} over {len(rows)} plans (target <= 8%, each <= 15%)"
        + (f", worst {worst[0]} {worst[4]:+.1%}" if worst else "")
    )
    if reference is not None and rows:
        at_speed_errors = [r[5] for r in rows]
        print(
            f"at the calibration runs' speed (probe {reference['probe_s'] * 1e3:.2f} ms): MAPE "
            f"{statistics.fmean(map(abs, at_speed_errors)):.1%}, worst {max(at_speed_errors, key=abs):+.1%}"
        )
    print_noise(rows, spreads)
    print(
        f"fitted parameters outside their bounds (core share {share:.2f}): "
        f"{bound_violations(result.cluster.compute, share) or 'none'}"
    )
    write_result(
        "cpu_fidelity",
        f"python -m benchmarks.cpu_fidelity --rounds {args.rounds} --steps {args.steps}"
        + (f" --max-ranks {args.max_ranks}" if args.max_ranks is not None else ""),
        {
            **error_figures([r[4] for r in rows]),
            "plans": len(rows),
            "core_share_min": lowest_share(runs),
            "at_speed": error_figures([r[5] for r in rows]) if reference is not None else None,
        },
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
