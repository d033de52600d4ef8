"""Which plan should I buy? Enumerate every valid plan for a model on N GPUs, rank, simulate the best.

The space is tp x pp x dp (x ep for MoE models, x cp on long sequences) x micro-batch x schedule (with
virtual stages) x recompute x sequence parallel x ZeRO stage: millions of plans for GPT-3 on 1,536
GPUs. Three steps keep it fast:

1. enumerate with pruning: a (tp, pp) pair whose smallest possible footprint (ZeRO-3, full recompute,
   micro-batch 1) does not fit is skipped whole; memory is a closed form per plan;
2. rank every plan that fits with a closed-form step time built from cached per-layer costs (the same
   cost model the engine uses: pipeline (m + (p-1)/v)(F + B), ZB-H1's smaller bubble, exposed
   data-parallel traffic, optimizer);
3. run the SimPy engine on the best `finalists` plans and rank them by simulated step time.

`tests/simulator/test_sweep.py` checks on small spaces that this never misses the plan an exhaustive
engine search finds.
"""

from __future__ import annotations

import itertools
import math
import operator
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import asdict, dataclass, fields
from functools import partial
from typing import Any

from plancast.simulator.costs.memory import GiB, peak_memory
from plancast.simulator.predict import simulate
from plancast.simulator.scenario import Scenario
from plancast.simulator.sweep_axes import RECOMPUTE, Plan, cp_choices, divisors, ep_choices
from plancast.simulator.sweep_estimate import Estimator
from plancast.simulator.validation import MAX_WORLD_SIZE, check_plan


@dataclass(frozen=True, slots=True)
class Ranked:
    """A plan with its closed-form estimate and, for finalists, the engine's prediction."""

    plan: Plan
    estimate_s: float
    memory_gib: float
    step_time_s: float | None = None
    summary: dict[str, Any] | None = None

    def row(self) -> dict[str, Any]:
        """One table row: the plan's fields and label, its times, memory and throughput."""
        summary = self.summary or {}
        return {
            **asdict(self.plan),
            "plan": self.plan.label(),
            "step_time_s": self.step_time_s,
            "estimate_s": self.estimate_s,
            "peak_memory_gib": self.memory_gib,
            "mfu": summary.get("mfu"),
            "tokens_per_s": summary.get("tokens_per_s"),
        }


_divisors = divisors


def tensor_parallel_degrees(base: Scenario, gpus: int) -> list[int]:
    """The tp degrees `base`'s model splits evenly on `gpus` GPUs (heads, kv heads, ffn)."""
    m = base.model
    return [
        d
        for d in _divisors(gpus)
        if not (m.num_attention_heads % d or m.kv_heads % d or m.ffn_size % d or m.expert_ffn_size % d)
    ]


def enumerate_plans(base: Scenario, gpus: int, tps: Iterable[int] | None = None) -> Iterator[Plan]:
    """Every plan whose degrees and batch shape are valid for `base` on `gpus` GPUs (memory not checked);
    `tps` restricts the search to those tp degrees (one slice of the space per worker)."""
    m, t = base.model, base.training
    layers = m.num_hidden_layers
    for tp in tensor_parallel_degrees(base, gpus) if tps is None else tps:
        for cp, pp in itertools.product(cp_choices(t.seq_len, gpus // tp), _divisors(gpus // tp)):
            if pp > layers or (gpus // tp) % (cp * pp):
                continue
            dp = gpus // (tp * cp * pp)
            if t.global_batch_size % dp:
                continue
            sp_ok = tp > 1 and (t.seq_len // cp) % tp == 0
            for ep, b in itertools.product(ep_choices(base, dp), _divisors(t.global_batch_size // dp)):
                mbs = t.global_batch_size // (dp * b)
                for schedule, v in _schedules(pp, mbs, layers):
                    for sp in (False, True) if sp_ok else (False,):
                        for rc, zero in itertools.product(RECOMPUTE, range(4)):
                            yield Plan(tp, pp, dp, b, schedule, v, rc, sp, zero, ep, cp)


def _schedules(pp: int, microbatches: int, layers: int) -> Iterator[tuple[str, int]]:
    if pp == 1:
        yield "1F1B", 1
        return
    yield from (("1F1B", 1), ("GPipe", 1), ("ZeroBubble", 1))
    if microbatches % pp == 0:
        for v in range(2, layers // pp + 1):  # uneven splits allowed: layers go as evenly as possible
            yield "Interleaved1F1B", v


# ------------------------------------------------------------------------------------------ estimates
@dataclass(frozen=True)
class SweepResult:
    """Ranked finalists plus the search's bookkeeping."""

    finalists: list[Ranked]
    enumerated: int
    fits: int
    pruned_subtrees: int


def _base_for(base: Scenario, gpus: int) -> Scenario:
    """The base scenario resized to `gpus` GPUs (node count from the cluster's node size)."""
    per_node = base.cluster.gpus_per_node
    nodes = max(gpus // per_node, 1)
    per_node = min(per_node, gpus)
    if nodes * per_node != gpus:
        raise ValueError(
            f"--gpus {gpus} is not a multiple of cluster.gpus_per_node ({base.cluster.gpus_per_node})"
        )
    tiers = [
        t.model_copy(update={"size": None}) if i == len(base.cluster.tiers) - 1 else t
        for i, t in enumerate(base.cluster.tiers)
    ]
    cluster = base.cluster.model_copy(update={"num_nodes": nodes, "gpus_per_node": per_node, "tiers": tiers})
    return base.model_copy(update={"cluster": cluster})


MapFn = Callable[[Callable[[Any], Any], Sequence[Any]], Iterable[Any]]
"""`map`'s contract: fn over the items, results in the items' order (a process pool's map at the CLI)."""


Estimate = tuple[float, tuple[Any, ...], float]
"""(estimate_s, the plan's fields, memory_GiB): plain tuples cost a tenth of dataclasses to send back from
a worker process, and sort as (estimate_s, Plan) does."""
_plan_fields = operator.attrgetter(*(f.name for f in fields(Plan)))


def _rank_slice(base: Scenario, gpus: int, limit_bytes: float, tp: int) -> tuple[list[Estimate], int, int]:
    """The plans of one tp degree that fit in `limit_bytes`, estimated; with counts enumerated, pruned."""
    est = Estimator(base, gpus)
    candidates: list[Estimate] = []
    enumerated = pruned = 0
    smallest_fits: dict[tuple[int, int, int, int], bool] = {}
    for plan in enumerate_plans(base, gpus, (tp,)):
        enumerated += 1
        key = (plan.tp, plan.pp, plan.ep, plan.cp)
        if key not in smallest_fits:  # smallest footprint of the whole (tp, pp, ep, cp) subtree
            sp = plan.tp > 1 and (base.training.seq_len // plan.cp) % plan.tp == 0
            smallest = Plan(plan.tp, plan.pp, plan.dp, 1, "1F1B", 1, "full", sp, 3, plan.ep, plan.cp)
            smallest_fits[key] = est.memory_bytes(smallest) <= limit_bytes
        if not smallest_fits[key]:
            pruned += 1
            continue
        memory = est.memory_bytes(plan)
        if memory > limit_bytes:
            continue
        candidates.append((est.step_seconds(plan), _plan_fields(plan), memory / GiB))
    return candidates, enumerated, pruned


def _checked(base: Scenario, limit_bytes: float, candidate: Estimate) -> Scenario | None:
    """A candidate's scenario if it passes the exact checks (the plan's rules, peak memory over every
    pipeline rank), else None."""
    s = Plan(*candidate[1]).apply(base)
    return None if check_plan(s)[0] or peak_memory(s)[1].total > limit_bytes else s


def _simulated(finalist: tuple[Scenario, Estimate]) -> Ranked:
    """A finalist run through the engine: its simulated step time, peak memory and summary."""
    s, (estimate_s, plan_fields, _) = finalist
    summary = simulate(s, events=False).summary
    return Ranked(Plan(*plan_fields), estimate_s, summary["peak_memory_gib"], summary["step_time_s"], summary)


def _first_passing(
    candidates: list[Estimate], check: Callable[[Estimate], Scenario | None], wanted: int, map_fn: MapFn
) -> list[tuple[Scenario, Estimate]]:
    """The first `wanted` candidates, in order, that pass `check`, with their scenarios. The checks run
    in parallel over `map_fn`, in rounds of twice as many next candidates as are still missing; what
    passes beyond the `wanted`-th is dropped, so the result is that of checking one by one."""
    chosen: list[tuple[Scenario, Estimate]] = []
    position = 0
    while len(chosen) < wanted and position < len(candidates):
        batch = candidates[position : position + 2 * (wanted - len(chosen))]
        position += len(batch)
        chosen += [(s, c) for s, c in zip(map_fn(check, batch), batch, strict=True) if s is not None]
    return chosen[:wanted]


def sweep(
    base: Scenario,
    gpus: int,
    *,
    finalists: int = 24,
    progress: Callable[[int, int], None] | None = None,
    max_memory_gib: float | None = None,
    map_fn: MapFn = map,
) -> SweepResult:
    """Search all plans of `base`'s model and training on `gpus` GPUs; the best `finalists`, simulated.

    `max_memory_gib` caps the memory a plan may use per GPU below the GPU's own (headroom for the
    framework, or a smaller card of the same kind). `map_fn` runs the tp slices of the space, then the
    finalists (a process pool's map spreads them over cores); the result does not depend on it."""
    if not 0 < gpus <= MAX_WORLD_SIZE:  # ValueError: the CLI and the dashboard show it as bad input
        raise ValueError(f"--gpus must be between 1 and {MAX_WORLD_SIZE:,}, got {gpus:,}")
    base = _base_for(base, gpus)
    # headroom for context, NCCL, fragmentation; --max-memory-gib caps it further
    limit = min(base.cluster.gpu.usable_memory_GiB, max_memory_gib or math.inf) * GiB
    slices = list(map_fn(partial(_rank_slice, base, gpus, limit), tensor_parallel_degrees(base, gpus)))
    candidates = sorted(c for part, _, _ in slices for c in part)  # a total order: the same for any slicing
    chosen = _first_passing(candidates, partial(_checked, base, limit), finalists, map_fn)
    simulated: list[Ranked] = []
    for done in map_fn(_simulated, chosen):
        simulated.append(done)
        if progress is not None:
            progress(len(simulated), finalists)
    simulated.sort(key=lambda r: (r.step_time_s or math.inf, r.plan))
    return SweepResult(simulated, sum(n for _, n, _ in slices), len(candidates), sum(n for _, _, n in slices))
