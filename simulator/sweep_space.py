"""The plan search's space: every valid plan of a model on N GPUs, as subtrees that the workers share.

The space is a tree: tp, then pp (a `Root`), then cp, ep and the batch shape (a `Branch`), then
schedule, SP, recompute and ZeRO stage. simulator/sweep.py ranks it one (tp, pp) subtree per task,
largest first (`by_size`), so that a pool of any size ends on short tasks.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Iterator
from typing import TypeVar

from plancast.simulator.scenario import Scenario
from plancast.simulator.sweep_axes import (
    RECOMPUTE,
    ZERO_STAGES,
    Plan,
    balanced_layers,
    cp_choices,
    divisors,
    ep_choices,
)

Root = tuple[int, int]
"""(tp, pp): the root of a subtree of plans (everything else varies below it)."""

Branch = tuple[int, int, int, int, int, int, int, bool]
"""(tp, pp, cp, dp, ep, micro_batch_size, micro-batches, SP possible): one batch shape of a subtree."""


def tensor_parallel_degrees(base: Scenario, gpus: int) -> list[int]:
    """The tp degrees `base`'s model splits evenly on `gpus` GPUs (heads, kv heads, ffn)."""
    m = base.model
    return [
        d
        for d in divisors(gpus)
        if not (m.num_attention_heads % d or m.kv_heads % d or m.ffn_size % d or m.expert_ffn_size % d)
    ]


def roots(base: Scenario, gpus: int) -> list[Root]:
    """Every (tp, pp) subtree of the search, tp-major, pp ascending (pp at most one layer per stage)."""
    layers = base.model.num_hidden_layers
    tps = tensor_parallel_degrees(base, gpus)
    return [(tp, pp) for tp in tps for pp in divisors(gpus // tp) if pp <= layers]


def branches(base: Scenario, gpus: int, subtrees: Iterable[Root]) -> Iterator[Branch]:
    """The valid batch shapes under `subtrees`: cp and dp that divide the GPUs and the global batch,
    expert-parallel degrees, micro-batch sizes."""
    t = base.training
    for tp, pp in subtrees:
        for cp in cp_choices(t.seq_len, gpus // tp):
            if (gpus // tp) % (cp * pp):
                continue
            dp = gpus // (tp * cp * pp)
            if t.global_batch_size % dp:
                continue
            sp_ok = tp > 1 and (t.seq_len // cp) % tp == 0
            for ep, b in itertools.product(ep_choices(base, dp), divisors(t.global_batch_size // dp)):
                yield tp, pp, cp, dp, ep, b, t.global_batch_size // (dp * b), sp_ok


def sequence_parallel_choices(sp_ok: bool) -> tuple[bool, ...]:
    return (False, True) if sp_ok else (False,)


def enumerate_plans(base: Scenario, gpus: int, subtrees: Iterable[Root] | None = None) -> Iterator[Plan]:
    """Every plan whose degrees and batch shape are valid for `base` on `gpus` GPUs (memory not checked);
    `subtrees` restricts the search to those (tp, pp) roots (one task of a worker)."""
    layers = base.model.num_hidden_layers
    chosen = roots(base, gpus) if subtrees is None else subtrees
    balancer = LayerBalancer(base, gpus)
    for tp, pp, cp, dp, ep, b, mbs, sp_ok in branches(base, gpus, chosen):
        for schedule, v in schedules(pp, mbs, layers):
            for sp in sequence_parallel_choices(sp_ok):
                for first, last in balancer.splits(pp, v, tp, cp, sp):
                    for rc, zero in itertools.product(RECOMPUTE, ZERO_STAGES):
                        yield Plan(tp, pp, dp, b, schedule, v, rc, sp, zero, ep, cp, first, last)


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


def schedules(pp: int, microbatches: int, layers: int) -> Iterator[tuple[str, int]]:
    """(schedule, virtual stages per rank) worth searching for `pp` stages and `microbatches`."""
    if pp == 1:
        yield "1F1B", 1
        return
    yield from (("1F1B", 1), ("GPipe", 1), ("ZeroBubble", 1))
    if microbatches % pp == 0:
        for v in range(2, layers // pp + 1):  # uneven splits allowed: layers go as evenly as possible
            yield "Interleaved1F1B", v


def subtree_sizes(base: Scenario, gpus: int) -> dict[Root, int]:
    """How many plans `enumerate_plans` yields under each (tp, pp) root, counted per batch shape
    (thousands of shapes, not the plans themselves: milliseconds for GPT-3 on 1,536 GPUs)."""
    layers, sizes = base.model.num_hidden_layers, dict.fromkeys(roots(base, gpus), 0)
    balancer = LayerBalancer(base, gpus)
    below = len(RECOMPUTE) * len(ZERO_STAGES)
    for tp, pp, cp, _, _, _, mbs, sp_ok in branches(base, gpus, sizes):
        for _, v in schedules(pp, mbs, layers):
            splits = sum(len(balancer.splits(pp, v, tp, cp, sp)) for sp in sequence_parallel_choices(sp_ok))
            sizes[tp, pp] += splits * below
    return sizes


Part = TypeVar("Part", int, Root)


def by_size(sizes: dict[Part, int]) -> list[Part]:
    """The non-empty parts of the space (tp degrees, roots), most plans first (ties in key order): a pool
    handing out tasks in this order ends on the shortest ones (longest-processing-time-first)."""
    return sorted((part for part, n in sizes.items() if n), key=lambda part: (-sizes[part], part))
