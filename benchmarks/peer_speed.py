"""plancast against Calculon (the fastest analytical peer), side by side on one machine, in one run.

Same plan for both: GPT-3 175B, TP 8, PP 8, DP 24, micro-batch 1, global batch 1,536, full recompute,
ZeRO-1 (Calculon: optimizer sharding), fp16, 1,536 A100 80GB (`examples/gpt3-175b-dgx-a100.toml`;
Calculon's own `models/gpt3-175B.json` and `systems/a100_80g.json`).

Three comparisons, each as alternating pairs (who goes first alternates) so that the drift of a shared
machine hits both sides alike; the figure is the median of the per-pair ratios:

- start-up: `plancast --help` vs `calculon -h`;
- one prediction, whole process: `plancast simulate X --json` vs `calculon llm APP EXE SYS OUT.json`;
- one prediction in-process, after import: `simulate(load_scenario(X), events=False)` vs Calculon's
  `Llm(...).compile(...)` + `run(...)` (both read their input files inside the timed call); then the same
  with plancast on its SimPy engine (the old path, docs/engine.md), and with the scenario already loaded
  (what benchmarks/sim_speed.py times; reading and validating the TOML is a few milliseconds of it).

Calculon is not a dependency: give a checkout with `--calculon PATH` (or $PLANCAST_CALCULON); without
one the benchmark says so and exits 0. Run: `python -m benchmarks.peer_speed --calculon PATH`.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from benchmarks.results_io import write_result
from plancast.simulator.loader import load_scenario
from plancast.simulator.predict import simulate

REPO = Path(__file__).resolve().parent.parent
EXAMPLE = REPO / "examples" / "gpt3-175b-dgx-a100.toml"

# The example scenario as a Calculon execution (its JSON keys; values from the example above).
CALCULON_EXECUTION: dict[str, Any] = {
    "num_procs": 1536,
    "tensor_par": 8,
    "pipeline_par": 8,
    "data_par": 24,
    "tensor_par_net": 0,
    "pipeline_par_net": 1,
    "data_par_net": 1,
    "batch_size": 1536,
    "microbatch_size": 1,
    "datatype": "float16",
    "fused_activation": True,
    "attention_type": "multihead",
    "activation_recompute": "full",
    "pipeline_interleaving": 1,
    "optimizer_sharding": True,
    "tensor_par_comm_type": "ar",
    "tensor_par_overlap": "none",
    "seq_par_ag_redo": False,
    "data_par_overlap": True,
    "weight_offload": False,
    "activations_offload": False,
    "optimizer_offload": False,
    "training": True,
}


def plancast_command() -> list[str]:
    """The installed `plancast` entry point beside this interpreter (what a user types)."""
    script = Path(sys.executable).parent / "plancast"
    return [str(script)] if script.exists() else [sys.executable, "-m", "plancast"]


def run_once(cmd: Sequence[str], env: dict[str, str] | None = None, cwd: Path | None = None) -> float:
    """Wall seconds of one whole process (run in `cwd`); a failure stops the benchmark with its output."""
    started = time.perf_counter()
    done = subprocess.run(list(cmd), capture_output=True, text=True, env=env, cwd=cwd, check=False)
    elapsed = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} exited {done.returncode}:\n{done.stdout}\n{done.stderr}")
    return elapsed


def paired(first: Callable[[], float], second: Callable[[], float], pairs: int) -> dict[str, float]:
    """Alternating pairs (who goes first alternates); medians of each side's seconds (`a_s`, `b_s`)
    and of the per-pair ratio first / second."""
    firsts, seconds, ratios = [], [], []
    for i in range(pairs):
        if i % 2 == 0:
            a, b = first(), second()
        else:
            b, a = second(), first()
        firsts.append(a)
        seconds.append(b)
        ratios.append(a / b)
    median = statistics.median
    return {"a_s": median(firsts), "b_s": median(seconds), "ratio": median(ratios)}


def with_load(figures: dict[str, float]) -> dict[str, float]:
    """The figures with the 1-minute load average now beside them (a busy machine is not a quiet one)."""
    return {**figures, "load_1min": os.getloadavg()[0]}


def calculon_in_process(checkout: Path, execution: Path) -> Callable[[], float]:
    """One Calculon prediction in this process (import done once, outside the timing)."""
    sys.path.insert(0, str(checkout))
    import calculon  # type: ignore[import-not-found]
    from calculon.llm import Llm  # type: ignore[import-not-found]

    logger = logging.getLogger("calculon")
    logger.setLevel(logging.ERROR)

    def once() -> float:
        started = time.perf_counter()
        app = Llm.Application(calculon.io.read_json_file(str(checkout / "models" / "gpt3-175B.json")))
        exe = Llm.Execution.from_json(calculon.io.read_json_file(str(execution)))
        system = calculon.System(calculon.io.read_json_file(str(checkout / "systems" / "a100_80g.json")))
        model = Llm(app, logger)
        model.compile(system, exe)
        model.run(system)
        return time.perf_counter() - started

    return once


def plancast_in_process(engine: str = "auto", load: bool = True) -> Callable[[], float]:
    """One plancast prediction in this process: reading the scenario file (as Calculon reads its three
    JSON files inside its timing) unless `load` is False, then `simulate` on `engine`."""
    loaded = load_scenario(EXAMPLE).scenario

    def once() -> float:
        started = time.perf_counter()
        s = load_scenario(EXAMPLE).scenario if load else loaded
        simulate(s, events=False, engine=engine)
        return time.perf_counter() - started

    return once


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.peer_speed", description=__doc__.splitlines()[0])
    p.add_argument("--calculon", type=Path, default=os.environ.get("PLANCAST_CALCULON"))
    p.add_argument("--pairs", type=int, default=7, help="alternating whole-process pairs")
    p.add_argument("--in-process-pairs", type=int, default=20)
    args = p.parse_args(argv)
    if args.calculon is None or not (Path(args.calculon) / "bin" / "calculon").exists():
        print("peer_speed: skipped: give a Calculon checkout with --calculon PATH (or $PLANCAST_CALCULON)")
        return 0
    checkout = Path(args.calculon).resolve()
    env = {**os.environ, "PYTHONPATH": str(checkout)}
    calculon = [sys.executable, str(checkout / "bin" / "calculon")]
    with tempfile.TemporaryDirectory() as tmp:
        execution = Path(tmp) / "gpt3-175b-tp8-pp8-dp24.json"
        execution.write_text(json.dumps(CALCULON_EXECUTION))
        stats = Path(tmp) / "stats.json"
        llm = [*calculon, "llm", str(checkout / "models" / "gpt3-175B.json"), str(execution)]
        llm += [str(checkout / "systems" / "a100_80g.json"), str(stats)]
        ours_cmd = plancast_command()
        rows = {
            "start-up (--help)": with_load(paired(
                lambda: run_once([*ours_cmd, "--help"]), lambda: run_once([*calculon, "-h"], env), args.pairs
            )),
            "one prediction, whole process": with_load(paired(
                lambda: run_once([*ours_cmd, "simulate", str(EXAMPLE), "--json"]),
                lambda: run_once(llm, env),
                args.pairs,
            )),
        }
        theirs = calculon_in_process(checkout, execution)
        for name, ours in (
            ("one prediction, in-process", plancast_in_process()),
            ("in-process, SimPy engine (old)", plancast_in_process("simpy")),
            ("in-process, scenario loaded", plancast_in_process(load=False)),
        ):
            ours(), theirs()  # warm both (first-call caches, lazy imports)
            rows[name] = with_load(paired(ours, theirs, args.in_process_pairs))
    print(f"{'what':32} {'plancast s':>11} {'Calculon s':>11} {'ratio':>7}  (median of alternating pairs)")
    for name, r in rows.items():
        print(f"{name:32} {r['a_s']:11.4f} {r['b_s']:11.4f} {r['ratio']:7.2f}x  load {r['load_1min']:4.1f}")
    print("ratio < 1: plancast faster. Load average now:", " ".join(f"{x:.1f}" for x in os.getloadavg()))
    write_result(
        "peer_speed",
        "python -m benchmarks.peer_speed --calculon PATH",
        {
            name.split(" (")[0]: {"plancast_s": r["a_s"], "calculon_s": r["b_s"], "ratio": r["ratio"],
                                  "load_1min": r["load_1min"]}
            for name, r in rows.items()
        },
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
