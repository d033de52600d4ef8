"""Where an exact sweep's wall time goes, phase by phase, with the CLI's worker pool.

`plancast sweep` (simulator/sweep.py) groups the plans that fit into families, one (cp, ep) part of a
tp degree per task over the pool; then, in the main process, bounds the groups of the families the
search reaches, opens the groups it reaches (mixed groups into
their classes, the others into their plans' first bounds), refines first bounds into replayed ones over
the pool (each plan's exact checks first: `_replayed` is both), and simulates the plans whose bound beats
the k-th best. This times each `map_fn` call over
the pool and each opening in the main process, counts the items of each, and prints the load beside it
(a figure taken at load 3 on 2 cores is not a quiet machine's). docs/sweep.md quotes its output. Each
call is read in full before the search goes on, so the phases add up: at the CLI the main process opens
groups while a batch of refinements is out (simulator/sweep_frontier.py, `Frontier.pop`), and its wall
time is a little less than this total.

Run: `python -m benchmarks.sweep_phases [SCENARIO] [--gpus N] [--workers N] [--collector on]` (default:
the GPT-3 175B example on 1,536 GPUs; `examples/deepseek-v3-h800.toml --gpus 2048` takes about ten
seconds). With one worker the map is this process's own, and the refinements go through it one task
each as they would over a pool (the CLI refines in its shared bound then, a little faster). The
collector is paused as at the CLI (plancast/pool.py); `--collector on` runs it, to see what it costs.
"""

from __future__ import annotations

import argparse
import os
import time
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from contextlib import nullcontext
from pathlib import Path
from typing import Any

from benchmarks.peer_speed import EXAMPLE
from plancast.pool import available_cores, collector_paused, process_map
from plancast.simulator import sweep as search
from plancast.simulator import sweep_frontier
from plancast.simulator.loader import load_scenario


class Phases:
    """Seconds, calls and items per phase."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = defaultdict(float)
        self.calls: dict[str, int] = defaultdict(int)
        self.items: dict[str, int] = defaultdict(int)

    def add(self, name: str, seconds: float, items: int) -> None:
        self.seconds[name] += seconds
        self.calls[name] += 1
        self.items[name] += items


def timed_map(pool: search.MapFn, phases: Phases) -> search.MapFn:
    """`pool`, each call timed under the name of the function it maps (its results read in full)."""

    def mapped(fn: Callable[[Any], Any], items: Sequence[Any]) -> Iterable[Any]:
        items = list(items)
        start = time.perf_counter()
        out = list(pool(fn, items))
        phases.add(f"map: {getattr(fn, 'func', fn).__name__}", time.perf_counter() - start, len(items))
        return out

    return mapped


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("scenario", nargs="?", type=Path, default=EXAMPLE)
    p.add_argument("--gpus", type=int, default=1536)
    p.add_argument("--workers", type=int, default=None, help="worker processes (default: every core)")
    p.add_argument(
        "--collector", choices=("paused", "on"), default="paused",
        help="Python's cyclic garbage collector: paused in every process, as the CLI runs (plancast/pool.py "
        "collector_paused), or on, to see what it costs",
    )  # fmt: skip
    args = p.parse_args(argv)
    base = load_scenario(args.scenario).scenario
    workers = args.workers or available_cores()
    phases = Phases()
    frontier_open, family_open = sweep_frontier.Frontier._open, sweep_frontier.Frontier._open_family

    def opened(frontier: Any, group: Any) -> None:  # the main process's share of the search
        start = time.perf_counter()
        frontier_open(frontier, group)
        phases.add("main: open groups", time.perf_counter() - start, 1)

    def bounded(frontier: Any, family: Any) -> None:  # a family's groups bounded (sweep_groups.Family)
        start = time.perf_counter()
        family_open(frontier, family)
        phases.add("main: open families", time.perf_counter() - start, len(family.groups))

    print(f"{args.scenario} on {args.gpus:,} GPUs, {workers} workers, collector {args.collector}; "
          f"load {os.getloadavg()[0]:.1f}")  # fmt: skip
    paused = args.collector == "paused"
    sweep_frontier.Frontier._open = opened  # type: ignore[method-assign]
    sweep_frontier.Frontier._open_family = bounded  # type: ignore[method-assign]
    try:
        with collector_paused() if paused else nullcontext(), process_map(workers, None, paused) as pool:
            start = time.perf_counter()
            result = search.sweep(base, args.gpus, map_fn=timed_map(pool, phases))
            total = time.perf_counter() - start
    finally:
        sweep_frontier.Frontier._open = frontier_open  # type: ignore[method-assign]
        sweep_frontier.Frontier._open_family = family_open  # type: ignore[method-assign]
    print(f"{'phase':32s} {'seconds':>8s} {'calls':>7s} {'items':>9s}")
    for name, seconds in phases.seconds.items():
        print(f"{name:32s} {seconds:8.2f} {phases.calls[name]:7,d} {phases.items[name]:9,d}")
    print(f"{'total':32s} {total:8.2f}   ({result.enumerated:,} enumerated, {result.fits:,} fit, "
          f"{result.simulated} simulated, {result.refused} refused by the exact checks; "
          f"load {os.getloadavg()[0]:.1f})")  # fmt: skip
    for degree in result.ungrouped:
        print(f"tp {degree.tp} never grouped: its floor {degree.floor_s:.2f} s is above the 10th best")


if __name__ == "__main__":
    main()
