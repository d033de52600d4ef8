"""The plan search's space: every valid plan of a model on N GPUs, as subtrees that the workers share.

The space is a tree: tp, then pp (a `Root`), then cp, the expert grid (ep, folded etp) and the batch
shape (a `Branch`), then schedule, SP, layer split, the MoE dispatcher and overlap (ep > 1), recompute
and ZeRO stage. `Pins` (sweep --pin) cut each level to the values the user fixed. simulator/sweep.py
ranks it one (tp, pp) subtree per task, largest first (`by_size`), so that a pool of any size ends on
short tasks.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Iterator
from dataclasses import replace
from typing import TypeVar

from plancast.simulator.scenario import Scenario
from plancast.simulator.schedules import schedule_problems
from plancast.simulator.sweep_axes import (
    RECOMPUTE,
    ZERO_STAGES,
    Pins,
    Plan,
    balanced_layers,
    cp_choices,
    dispatcher_choices,
    divisors,
    ep_choices,
    folded_choices,
)
from plancast.simulator.validation_moe import megatron_overlap_refusals

Root = tuple[int, int]
"""(tp, pp): the root of a subtree of plans (everything else varies below it)."""

Branch = tuple[int, int, int, int, int, int, int, int, bool]
"""(tp, pp, cp, dp, ep, etp, micro_batch_size, micro-batches, SP possible): one batch shape of a subtree
(etp 0: the unfolded expert grid)."""

NO_PINS = Pins()


def tensor_parallel_degrees(base: Scenario, gpus: int) -> list[int]:
    """The tp degrees `base`'s model splits evenly on `gpus` GPUs (heads, kv heads, ffn)."""
    m = base.model
    return [
        d
        for d in divisors(gpus)
        if not (m.num_attention_heads % d or m.kv_heads % d or m.ffn_size % d or m.expert_ffn_size % d)
        and not (m.linear_num_key_heads or d) % d  # Gated DeltaNet heads whole (value heads: a multiple)
    ]


def roots(base: Scenario, gpus: int, pins: Pins = NO_PINS) -> list[Root]:
    """Every (tp, pp) subtree of the search, tp-major, pp ascending (pp at most one layer per stage)."""
    layers = base.model.num_hidden_layers
    tps = pins.keep("tp", tensor_parallel_degrees(base, gpus))
    return [(tp, pp) for tp in tps for pp in pins.keep("pp", divisors(gpus // tp)) if pp <= layers]


def expert_grids(base: Scenario, tp: int, cp: int, dp: int, pins: Pins = NO_PINS) -> list[tuple[int, int]]:
    """(ep, etp) of a stage's tp x cp x dp ranks: the unfolded degrees (etp 0, ep carved out of dp) and
    the folded grid's (sweep_axes.folded_choices; pinned etp values > 0 replace its default of 1)."""
    etps = tuple(int(e) for e in pins.get("etp") or (1,) if int(e) > 0)  # type: ignore[call-overload]
    grids = [(ep, 0) for ep in ep_choices(base, dp)] + folded_choices(base, tp, cp, dp, etps)
    return [(ep, etp) for ep, etp in grids if pins.allows("ep", ep) and pins.allows("etp", etp)]


def branches(base: Scenario, gpus: int, subtrees: Iterable[Root], pins: Pins = NO_PINS) -> Iterator[Branch]:
    """The valid batch shapes under `subtrees`: cp and dp that divide the GPUs and the global batch,
    expert grids, micro-batch sizes."""
    t = base.training
    for tp, pp in subtrees:
        for cp in pins.keep("cp", cp_choices(t.seq_len, gpus // tp, base.model.has_linear_attention)):
            if (gpus // tp) % (cp * pp):
                continue
            dp = gpus // (tp * cp * pp)
            if t.global_batch_size % dp or not pins.allows("dp", dp):
                continue
            sp_ok = tp > 1 and (t.seq_len // cp) % tp == 0
            sizes = pins.keep("mb", divisors(t.global_batch_size // dp))
            for (ep, etp), b in itertools.product(expert_grids(base, tp, cp, dp, pins), sizes):
                yield tp, pp, cp, dp, ep, etp, b, t.global_batch_size // (dp * b), sp_ok


def sequence_parallel_choices(sp_ok: bool, pins: Pins = NO_PINS) -> tuple[bool, ...]:
    return tuple(pins.keep("sp", (False, True) if sp_ok else (False,)))


def moe_choices(
    base: Scenario, ep: int, pins: Pins = NO_PINS, pp: int = 1, schedule: str = "1F1B"
) -> list[tuple[str, bool]]:
    """(dispatcher, overlap) searched for an expert-parallel degree: with ep > 1 the dispatchers the
    cluster runs (sweep_axes.dispatcher_choices, or the pinned ones) with and without overlap; with
    ep 1 no token leaves its rank, so the defaults alone. Under `pins.runnable`, without those the
    framework refuses on `pp` stages of `schedule` whatever the member (validation_moe.
    megatron_overlap_refusals at recompute none; full recompute's refusal stays an exact check)."""
    if ep == 1:
        return [("alltoall", False)]
    pinned = pins.get("dispatcher")
    dispatchers = [str(d) for d in pinned] if pinned is not None else dispatcher_choices(base)
    out = [(d, o) for d in dispatchers for o in pins.keep("overlap", (False, True))]
    if pins.runnable:
        framework = base.parallelism.framework
        refused = [megatron_overlap_refusals(framework, pp, schedule, ep, o, d, "none") for d, o in out]
        out = [choice for choice, no in zip(out, refused, strict=True) if not no]
    return out


def enumerate_plans(
    base: Scenario,
    gpus: int,
    subtrees: Iterable[Root] | None = None,
    pins: Pins = NO_PINS,
    variants: bool = True,
) -> Iterator[Plan]:
    """Every plan whose degrees and batch shape are valid for `base` on `gpus` GPUs (memory not checked);
    `subtrees` restricts the search to those (tp, pp) roots (one task of a worker). `variants` False:
    one plan per set of dispatcher/overlap variants (`MoeVariants` gives the others), which share their
    memory: a search checks memory once for all of them."""
    layers = base.model.num_hidden_layers
    chosen = roots(base, gpus, pins) if subtrees is None else subtrees
    balancer = LayerBalancer(base, gpus)
    below = [
        (rc, zero) for rc, zero in itertools.product(RECOMPUTE, ZERO_STAGES)
        if pins.allows("recompute", rc) and pins.allows("zero", zero)
    ]  # fmt: skip
    for tp, pp, cp, dp, ep, etp, b, mbs, sp_ok in branches(base, gpus, chosen, pins):
        for schedule, v in schedules(pp, mbs, layers, pins):
            moe = moe_choices(base, ep, pins, pp, schedule)
            moe = moe if variants else moe[:1]
            for sp in sequence_parallel_choices(sp_ok, pins):
                for first, last in balancer.splits(pp, v, tp, cp, sp):
                    for (dispatcher, overlap), (rc, zero) in itertools.product(moe, below):
                        yield Plan(
                            tp, pp, dp, b, schedule, v, rc, sp, zero, ep, cp, first, last, dispatcher,
                            overlap, etp,
                        )  # fmt: skip


class MoeVariants:
    """A plan's dispatcher/overlap variants (`moe_choices`), per expert-parallel degree worked out once."""

    def __init__(self, base: Scenario, pins: Pins = NO_PINS) -> None:
        self.base, self.pins = base, pins
        self._choices: dict[tuple[int, int, str], list[tuple[str, bool]]] = {}

    def of(self, plan: Plan) -> list[Plan]:
        """`plan` under each dispatcher and overlap searched for its ep, pp and schedule (itself alone
        where ep is 1)."""
        if plan.ep == 1:
            return [plan]
        key = (plan.ep, plan.pp, plan.schedule)
        choices = self._choices.get(key)
        if choices is None:
            choices = self._choices[key] = moe_choices(self.base, plan.ep, self.pins, plan.pp, plan.schedule)
        return [replace(plan, dispatcher=d, overlap_ep=o) for d, o in choices]


class LayerBalancer:
    """The layer splits searched for pp stages: the even one, and the balancer's
    (sweep_axes.balanced_layers) where it differs, from the embedding's and the output layer's time
    in blocks (forward and backward, tensor-parallel traffic included: the sweep's per-segment costs at
    micro-batch 1). Interleaved schedules (v > 1) keep the even split: the first rank's blocks then stay
    at least the smallest footprint's that prunes a subtree (simulator/sweep.py)."""

    def __init__(self, base: Scenario, gpus: int) -> None:
        self.base, self.gpus = base, gpus
        self._splits: dict[tuple[int, int, int, bool], tuple[tuple[int, int], ...]] = {}
        """Per (pp, tp, cp, sequence parallel)."""

    def splits(self, pp: int, v: int, tp: int, cp: int, sp: bool) -> tuple[tuple[int, int], ...]:
        """(first, last) blocks per split searched; (0, 0) is the even split."""
        if v > 1 or pp == 1:
            return ((0, 0),)
        key = (pp, tp, cp, sp)
        cached = self._splits.get(key)
        if cached is None:
            first, last = self._extra_blocks(tp, cp, sp)
            balanced = balanced_layers(self.base.model.num_hidden_layers, pp, first, last)
            cached = self._splits[key] = ((0, 0),) if balanced is None else ((0, 0), balanced)
        return cached

    def _extra_blocks(self, tp: int, cp: int, sp: bool) -> tuple[float, float]:
        """(embedding, output layer) time in blocks."""
        from plancast.simulator.sweep_estimate import Estimator  # the estimator imports this module's Plan

        est = Estimator(self.base, self.gpus)
        seg = est.layer(Plan(tp, 1, self.gpus // (tp * cp), 1, "1F1B", 1, "none", sp, 0, 1, cp)).segments
        blocks = len(seg.forward_s) - 1
        block = (seg.forward_s[-1] + seg.backward_input_s[-1] + seg.backward_weight_s[-1]) / blocks or 1.0
        return sum(seg.embedding) / block, sum(seg.head) / block


def smallest_footprints(base: Scenario, splits: LayerBalancer, plan: Plan) -> Iterator[Plan]:
    """The plans whose first-rank memory is the least of `plan`'s (tp, pp, ep, cp, etp) subtree (ZeRO-3,
    full recompute, micro-batch 1, SP where it applies): under each layer split searched, and where pp > 1
    under the V placement too (ZB-V, DualPipeV), whose first rank holds other stages and in-flight counts
    than the loop placement's 1F1B. GPipe, ZB-H1, ZB-H2 and interleaved 1F1B hold at least 1F1B's."""
    tp, pp, dp, ep, cp, etp = plan.tp, plan.pp, plan.dp, plan.ep, plan.cp, plan.etp
    sp = tp > 1 and (base.training.seq_len // cp) % tp == 0
    for first, last in splits.splits(pp, 1, tp, cp, sp):
        yield Plan(tp, pp, dp, 1, "1F1B", 1, "full", sp, 3, ep, cp, first, last, etp=etp)
    m = base.training.global_batch_size // dp
    for schedule in ("ZBV", "DualPipeV") if pp > 1 and 2 * pp <= base.model.num_hidden_layers else ():
        if not schedule_problems(schedule, pp, m, 2):
            yield Plan(tp, pp, dp, 1, schedule, 2, "full", sp, 3, ep, cp, etp=etp)


def schedules(pp: int, microbatches: int, layers: int, pins: Pins = NO_PINS) -> Iterator[tuple[str, int]]:
    """(schedule, virtual stages per rank) worth searching for `pp` stages and `microbatches`: 1F1B,
    GPipe, ZB-H1, interleaved 1F1B, and ZB-H2, ZB-V and DualPipeV where they build (schedules.py's rules:
    the V schedules hold two chunks per rank and need a layer per stage)."""
    for schedule, v in _schedules(pp, microbatches, layers):
        if pins.allows("schedule", schedule) and pins.allows("v", v):
            yield schedule, v


def _schedules(pp: int, microbatches: int, layers: int) -> Iterator[tuple[str, int]]:
    if pp == 1:
        yield "1F1B", 1
        return
    yield from (("1F1B", 1), ("GPipe", 1), ("ZeroBubble", 1))
    if microbatches % pp == 0:
        for v in range(2, layers // pp + 1):  # uneven splits allowed: layers go as evenly as possible
            yield "Interleaved1F1B", v
    for schedule, v in (("ZBH2", 1), ("ZBV", 2), ("DualPipeV", 2)):
        if pp * v <= layers and not schedule_problems(schedule, pp, microbatches, v):
            yield schedule, v


def subtree_sizes(base: Scenario, gpus: int, pins: Pins = NO_PINS) -> dict[Root, int]:
    """How many plans `enumerate_plans` yields under each (tp, pp) root, counted per batch shape
    (thousands of shapes, not the plans themselves: milliseconds for GPT-3 on 1,536 GPUs)."""
    layers, sizes = base.model.num_hidden_layers, dict.fromkeys(roots(base, gpus, pins), 0)
    balancer = LayerBalancer(base, gpus)
    below = sum(
        1 for rc, zero in itertools.product(RECOMPUTE, ZERO_STAGES)
        if pins.allows("recompute", rc) and pins.allows("zero", zero)
    )  # fmt: skip
    counts: dict[tuple[int, int, str], int] = {}  # MoE variants per (ep, pp, schedule)

    def variants(ep: int, pp: int, schedule: str) -> int:
        if not pins.runnable:  # then the same for every pipeline
            pp, schedule = 1, "1F1B"
        if (ep, pp, schedule) not in counts:
            counts[ep, pp, schedule] = len(moe_choices(base, ep, pins, pp, schedule))
        return counts[ep, pp, schedule]

    # per batch shape, (schedule, splits) and the splits of every schedule: branches of one shape count alike
    shapes: dict[tuple[int, int, int, int, bool], tuple[tuple[tuple[str, int], ...], int]] = {}
    for tp, pp, cp, _, ep, _, _, mbs, sp_ok in branches(base, gpus, sizes, pins):
        shape = (tp, pp, cp, mbs, sp_ok)
        known = shapes.get(shape)
        if known is None:
            sp_choices = sequence_parallel_choices(sp_ok, pins)
            per = tuple(
                (name, sum(len(balancer.splits(pp, v, tp, cp, sp)) for sp in sp_choices))
                for name, v in schedules(pp, mbs, layers, pins)
            )
            known = shapes[shape] = (per, sum(n for _, n in per))
        per, splits = known
        if pins.runnable:
            sizes[tp, pp] += below * sum(n * variants(ep, pp, name) for name, n in per)
        else:
            sizes[tp, pp] += below * splits * variants(ep, pp, "")
    return sizes


Part = TypeVar("Part", int, Root)


def by_size(sizes: dict[Part, int]) -> list[Part]:
    """The non-empty parts of the space (tp degrees, roots), most plans first (ties in key order): a pool
    handing out tasks in this order ends on the shortest ones (longest-processing-time-first)."""
    return sorted((part for part, n in sizes.items() if n), key=lambda part: (-sizes[part], part))
