"""Refresh tests/data/sweep/: for each real space, the engine's top 10 over every plan that fits whose
lower bound is below the 10th best, simulated one by one (no best-first order, no early stop).

    .venv/bin/python scripts/sweep_exhaustive.py [NAME ...]     # every space, or those named

Simulating every plan of these spaces one by one takes hours (GPT-3 on 1,536 GPUs: 71,079 plans that
fit); a plan whose lower bound (simulator/sweep_bound.py and sweep_chain.py, proven in docs/sweep.md,
checked by tests/simulator/test_sweep_bound.py) is above the 10th best time cannot be in the top 10,
so it is left out, and the file says how many plans that was. tests/test_sweep_exhaustive.py then checks that
`plancast sweep --top 10` returns exactly these plans (with the space's `pins`, `PINNED`, where it has any).
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from plancast.simulator.costs.memory import GiB, peak_memory  # noqa: E402
from plancast.simulator.loader import load_scenario, parse_scenario  # noqa: E402
from plancast.simulator.predict import simulate  # noqa: E402
from plancast.simulator.scenario import Scenario  # noqa: E402
from plancast.simulator.sweep import _base_for, _rank, sweep  # noqa: E402
from plancast.simulator.sweep_axes import Pins, Plan  # noqa: E402
from plancast.simulator.sweep_bound import TOLERANCE, Bound  # noqa: E402
from plancast.simulator.sweep_estimate import Estimator  # noqa: E402
from plancast.simulator.validation import check_plan  # noqa: E402

OUT = REPO / "tests" / "data" / "sweep"
TOP = 10


def _scenario(model: str, seq: int, batch: int, cluster: str, **parallelism: Any) -> dict[str, Any]:
    return {
        "model": {"preset": model},
        "training": {"seq_len": seq, "global_batch_size": batch, "dtype": "bf16", "recompute": "selective"},
        "parallelism": parallelism,
        "cluster": {"preset": cluster},
    }


# name: (scenario file or dict, GPUs)
SPACES: dict[str, tuple[str | dict[str, Any], int]] = {
    "gpt3-175b-1536-a100": ("examples/gpt3-175b-dgx-a100.toml", 1536),
    "llama3-70b-1024-h100": (_scenario("llama3-70b", 8192, 512, "dgx-h100-80gb"), 1024),
    "mixtral-8x7b-64-h100": ("examples/mixtral-8x7b-dgx-h100.toml", 64),
    "llama3-8b-128k-64-h100-cp": ("examples/llama3-8b-cp4-128k.toml", 64),
    # ZeRO-3-heavy: torchtitan's FSDP on 40 GiB cards, where the model states must be sharded
    "llama2-13b-32-a100-40gb-fsdp": (
        _scenario("llama2-13b", 4096, 64, "dgx-a100-40gb", framework="torchtitan"),
        32,
    ),
    # pp-deep: 96 layers on 40 GiB cards with a small batch per replica
    "gpt3-175b-512-a100-40gb": (_scenario("gpt3-175b", 2048, 256, "dgx-a100-40gb"), 512),
    # MoE with every MoE axis: DeepSeek's MLA + fine-grained experts (64 of them, 6 routed, 2 shared) on
    # H800 nodes, where DeepEP runs: dispatcher, EP overlap, the folded expert grid, ZB-V and DualPipeV
    "deepseek-v2-lite-32-h800": (
        _scenario("deepseek-v2-lite", 4096, 128, "hgx-h800", framework="megatron-lm"),
        32,
    ),
}


OLD_SCHEDULES = ["schedule=1F1B,GPipe,ZeroBubble,Interleaved1F1B"]
PINNED: dict[str, list[str]] = {
    "gpt3-175b-1536-a100": OLD_SCHEDULES,
    "gpt3-175b-512-a100-40gb": OLD_SCHEDULES,
}
"""Spaces searched with `sweep --pin`: the two GPT-3 spaces keep the four schedules searched before ZB-H2,
ZB-V and DualPipeV joined the sweep (their exhaustive runs take 5-16 minutes on a quiet core, hours on a
loaded one; not rerun with the new schedules yet). Every other space searches every axis."""


def base_of(name: str) -> tuple[Scenario, int]:
    source, gpus = SPACES[name]
    s = load_scenario(REPO / source).scenario if isinstance(source, str) else parse_scenario(source).scenario
    return _base_for(s, gpus), gpus


def exhaustive(name: str) -> dict[str, Any]:
    """The space's top TOP by simulating every plan whose lower bound is below the TOP-th best."""
    base, gpus = base_of(name)
    pins = Pins.parse(PINNED.get(name, []))
    started = time.perf_counter()
    tenth = sweep(base, gpus, finalists=TOP, pins=pins).finalists[-1].step_time_s or 0.0
    limit = base.cluster.gpu.usable_memory_GiB * GiB
    candidates = [c for part, _, _ in _rank(base, gpus, limit, map, pins=pins) for c in part]
    bound = Bound(Estimator(base, gpus))
    below = [c for c in candidates if c[0] * (1 - TOLERANCE) <= tenth]
    below = [c for c in below if bound.replayed(Plan(*c[1])) * (1 - TOLERANCE) <= tenth]
    timed = []
    for c in below:
        plan = Plan(*c[1])
        s = plan.apply(base)
        if check_plan(s)[0] or peak_memory(s)[1].total > limit:
            continue
        timed.append((simulate(s, events=False).summary["step_time_s"], plan))
    timed.sort()
    return {
        "space": name,
        "scenario": SPACES[name][0],
        "gpus": gpus,
        **({"pins": PINNED[name]} if name in PINNED else {}),
        "plans_fitting": len(candidates),
        "plans_below_the_tenth_best": len(below),
        "plans_left_out_by_their_bound": len(candidates) - len(below),
        "seconds": round(time.perf_counter() - started, 1),
        "top": [{"plan": p.label(), "step_time_s": t} for t, p in timed[:TOP]],
    }


def main(names: list[str]) -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    for name in names or list(SPACES):
        result = exhaustive(name)
        (OUT / f"{name}.json").write_text(json.dumps(result, indent=1) + "\n")
        print(f"{name}: {result['plans_below_the_tenth_best']} of {result['plans_fitting']} simulated, "
              f"{result['seconds']} s", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
