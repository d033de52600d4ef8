"""Groups of plans that the sweep bounds as one before it bounds any of them (docs/sweep.md, "The search").

A group is every plan of one batch shape, schedule, sequence-parallel choice, layer split, recompute
class (full or not) and ZeRO class (0-1, 2 or 3): they differ only in recompute within its class, ZeRO
0 against 1, and (ep > 1) the MoE dispatcher and overlap. The search checks each member's memory (which
fixes how many plans fit, exactly) but bounds the group with one number: the compute part of the bound
(sweep_bound.Bound.chain: sweep_chain.chain_bound with the ZeRO-2/3 gather waits) over the least
per-stage times of its members (`Grouper._floor`), and under ZeRO-2/3 the first rank's data-parallel
stream. The chain's terms are sums of those times and waits with non-negative weights, so it is at
most any member's chain; every member's bound (sweep_bound.Bound.seconds) is at least its chain's, and
at least its stream, each plus its optimizer (`_after`). A group whose bound cannot beat the k-th best
is never opened: none of its plans is bounded one by one (simulator/sweep.py, best_first).

Groups come out of a grouping task in families (`Family`), unbounded: those of one micro-batch size, SP
choice and folded etp of a (tp, cp, ep) part, under one floor from their per-layer costs alone (a
pipeline's ranks share its work, so the busiest holds at least a pp-th of it). Most of a large MoE
sweep's families are above the k-th best (DeepSeek-V3 on 2,048 H800: 65,773 of 72,146 groups), and a
family's groups are bounded only once the search reaches it (`Grouper.open`).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field, replace
from itertools import accumulate
from operator import sub
from typing import NamedTuple

from plancast.simulator.costs.memory import GiB, loss_bytes_per_logit, rebuilds_a_block
from plancast.simulator.scenario import Scenario
from plancast.simulator.sweep_axes import RECOMPUTE, ZERO_STAGES, Pins, Plan
from plancast.simulator.sweep_bound import Bound
from plancast.simulator.sweep_estimate import Estimator, degrees
from plancast.simulator.sweep_keys import LayerKey, fsdp_stage
from plancast.simulator.sweep_segments import SegmentTimes, StageTimes, model_total_s, stage_times
from plancast.simulator.sweep_space import (
    Branch,
    LayerBalancer,
    moe_choices,
    schedules,
    sequence_parallel_choices,
    smallest_footprints,
)

FLOOR_SLACK = 1e-12
"""A group's bound sums its least segment times in another order than each member's stage sums (prefix
differences): it is lowered by this relative amount so that rounding never lifts it above a member's."""

Shape = tuple[int, int, int, int, str, int, bool, int, int, int, int, int]
"""(tp, pp, dp, micro-batch size, schedule, virtual stages, SP, ep, cp, first, last blocks, etp)."""

FAMILY_SLACK = 1e-9
"""A family's floor sums the least segment times over the whole model, its groups' chains stage by stage
with waits and maxima: it is lowered by this relative amount so that rounding never lifts it above a
group's bound."""

Member = tuple[str, int, float]
"""(recompute, ZeRO stage, first-rank memory in GiB) of a group's plan that fits."""


class Group(NamedTuple):
    """Plans sharing everything but recompute, ZeRO stage and the MoE dispatcher and overlap."""

    bound_s: float
    """At most the bound (sweep_bound.Bound.seconds) of every member."""
    shape: Shape
    members: tuple[Member, ...]
    variants: tuple[tuple[str, bool], ...]
    """(dispatcher, overlap) of each member (sweep_space.moe_choices)."""
    mixed: bool = False
    """Members of several classes (recompute full or not; ZeRO 0-1, 2, 3), bounded as one over their
    common floor: `Grouper.classes` splits it, each class with its tighter bound, before it is opened."""

    def plans(self) -> Iterator[tuple[Plan, float]]:
        """Every member plan that fits, with its memory in GiB."""
        tp, pp, dp, b, schedule, v, sp, ep, cp, first, last, etp = self.shape
        for rc, zero, memory_gib in self.members:
            for dispatcher, overlap in self.variants:
                plan = Plan(
                    tp, pp, dp, b, schedule, v, rc, sp, zero, ep, cp, first, last, dispatcher, overlap, etp
                )  # fmt: skip
                yield plan, memory_gib


class Family(NamedTuple):
    """Groups of one (tp, cp, ep) part with one micro-batch size, SP choice and folded etp, not yet
    bounded (their bound_s is 0): their layer keys differ only in recompute, FSDP stage, dispatcher and
    overlap. `floor_s` is at most every group's bound: a group's bound is at least its chain's
    `other_ranks_s` (sweep_chain.chain_bound), the most any pipeline rank runs, so at least the mean over
    its pp ranks of m micro-batches of every stage: m / pp times the model's total over the group's
    floor segments (sweep_segments.model_total_s, whatever the split, schedule and virtual stages), and
    the family's floor segments are the least over a superset of its keys. m / pp = global batch x tp x
    cp / (micro-batch x GPUs) is the same for every group of the family."""

    floor_s: float
    groups: tuple[Group, ...]


def _classes(members: list[Member] | tuple[Member, ...]) -> list[tuple[Member, ...]]:
    """`members` by class: full recompute or not, ZeRO 0-1, 2 or 3."""
    parts: dict[tuple[bool, int], list[Member]] = {}
    for member in members:
        parts.setdefault((member[0] == "full", max(member[1], 1)), []).append(member)
    return [tuple(part) for part in parts.values()]


Acts = dict[tuple[int, int, bool, int, int, int, bool], list[tuple[float, float, bool]]]
"""Per (tp, micro-batch size, SP, ep, cp, etp, dp > 1), each (recompute, ZeRO stage) of one `below`'s
(act_bytes, full_act_bytes, whether backward rebuilds a block): what Estimator.activations_at reads, the
same for every pipeline layout of the branch."""


@dataclass
class MemberMemo:
    """`member_memories`' caches for one `below` (a Grouper's): the activations (`Acts`), the in-flight
    layers and whether the first rank holds the loss per pipeline layout (schedule, pp, v, first and last
    blocks, micro-batches), and the model states of each ZeRO stage of `below` per `degrees`."""

    acts: Acts = field(default_factory=dict)
    inflight: dict[tuple[object, ...], tuple[int, bool]] = field(default_factory=dict)
    states: dict[tuple[int, ...], dict[int, float]] = field(default_factory=dict)


def member_memories(
    est: Estimator, template: Plan, below: list[tuple[str, int]], memo: MemberMemo | None = None
) -> list[float]:
    """First-rank memory of `template` under each (recompute, ZeRO stage) of `below`: exactly
    `Estimator.memory_bytes` of each (the same terms in the same order), with the parts that do not
    depend on recompute and ZeRO (the split, the in-flight count, the loss buffers) worked out once per
    call, or once per `memo` key (a cache for one `below`: a Grouper's)."""
    memo = memo or MemberMemo()
    base, t = est.base, est.base.training
    m = t.global_batch_size // (template.micro_batch_size * template.dp)
    layout = (template.schedule, template.pp, template.virtual_stages, template.first_layers,
              template.last_layers, m)  # fmt: skip
    known = memo.inflight.get(layout)
    if known is None:
        split = est.split(template)
        chunk_layers = tuple(split[v] for v in template.first_rank_stages())
        known = memo.inflight[layout] = (
            est._inflight_layers(template, m, chunk_layers),
            template.pp * template.virtual_stages == 1 or template.v_shape,
        )
    inflight, holds_loss = known
    loss = None
    if holds_loss:
        logits = template.micro_batch_size * t.seq_len / template.cp * base.model.vocab_size / template.tp
        loss = loss_bytes_per_logit(base, template.tp) * logits
    tp, b, sp, ep, cp, etp = (template.tp, template.micro_batch_size, template.sequence_parallel, template.ep,
                              template.cp, template.etp)  # fmt: skip
    key = (tp, b, sp, ep, cp, etp, template.dp > 1)
    per = memo.acts.get(key)
    if per is None:
        moe = base.model.is_moe
        per = memo.acts[key] = [
            (*est.activations_at(template, rc, zero), rebuilds_a_block(rc, t.selective_recompute, moe=moe))
            for rc, zero in below
        ]
    d = degrees(template)
    states = memo.states.get(d)
    if states is None:
        states = memo.states[d] = est.states_at(template, {zero for _, zero in below})
    out = []
    for (_, zero), (act_bytes, full_act_bytes, rebuilt) in zip(below, per, strict=True):
        held = inflight * act_bytes + (full_act_bytes if rebuilt else 0.0)
        if loss is not None:
            held += loss
        out.append(states[zero] + held)
    return out


def floor_segments(segments: list[SegmentTimes]) -> SegmentTimes:
    """Per segment, the least forward, input-gradient and weight-gradient time over `segments` (with or
    without FSDP units), and the least an unpaired pass adds (none unless every one overlaps its
    all-to-alls); recompute only where every one recomputes in full. Its stage sums
    (sweep_segments.stage_times) are at most each one's, one sum for all of them."""
    segments = list({id(seg): seg for seg in segments}.values())  # alike keys share one (sweep_layer.Shared)
    columns = [
        [_diffs(prefix) for prefix in (seg.forward_s, seg.backward_input_s, seg.backward_weight_s)]
        for seg in segments
    ]
    least = [_prefix(map(min, zip(*parts, strict=True))) for parts in zip(*columns, strict=True)]
    alone_f = [_diffs(seg.alone_forward_s) for seg in segments]
    alone_b = [_diffs(seg.alone_backward_s) for seg in segments]
    every = all(alone_f)  # every one overlaps: else an unpaired pass may add nothing
    return segments[0]._replace(
        forward_s=least[0],
        backward_input_s=least[1],
        backward_weight_s=least[2],
        embedding=tuple(map(min, zip(*(seg.embedding for seg in segments), strict=True))),
        head=tuple(map(min, zip(*(seg.head for seg in segments), strict=True))),
        recompute_full=all(seg.recompute_full for seg in segments),
        alone_forward_s=_prefix(map(min, zip(*alone_f, strict=True))) if every else (),
        alone_backward_s=_prefix(map(min, zip(*alone_b, strict=True))) if every else (),
    )


def _diffs(prefix: tuple[float, ...]) -> list[float]:
    """The terms of a prefix sum."""
    return list(map(sub, prefix[1:], prefix[:-1]))


def _prefix(terms: Iterable[float]) -> tuple[float, ...]:
    return tuple(accumulate(terms, initial=0.0))


class Grouper:
    """One subtree's groups with plans that fit (one task of a sweep, from the tp degree's per-layer
    costs), and its counts: plans enumerated, fitting, pruned by the smallest-footprint check."""

    def __init__(
        self,
        base: Scenario,
        gpus: int,
        limit_bytes: float,
        est: Estimator,
        pins: Pins,
        bounds: bool = True,
        bound: Bound | None = None,
        defer: bool = False,
    ) -> None:
        self.base, self.gpus, self.limit_bytes, self.est, self.pins = base, gpus, limit_bytes, est, pins
        self.bounds = bounds
        """False: groups without their bounds (0), only their members' per-layer costs worked out."""
        self.bound = bound or Bound(est)
        """`est`'s bound (a search's own, whose caches its plans' first bounds share)."""
        self.defer = defer
        """True: groups left unbounded (`families` gives their floors, `open` their bounds)."""
        self.splits = LayerBalancer(base, gpus)
        self.below = [
            (rc, zero) for rc in RECOMPUTE for zero in ZERO_STAGES
            if pins.allows("recompute", rc) and pins.allows("zero", zero)
        ]  # fmt: skip
        self.groups: list[Group] = []
        self.enumerated = self.fits = self.pruned = 0
        self._floors: dict[tuple[object, ...], tuple[StageTimes, ...]] = {}  # per (members' keys, split)
        self._segment_floors: dict[tuple[LayerKey, ...], SegmentTimes] = {}
        self._smallest: dict[tuple[int, ...], bool] = {}
        self._memo = MemberMemo()
        self._moe: dict[tuple[int, int, str], tuple[tuple[str, bool], ...]] = {}
        self._afters: dict[tuple[int, ...], float] = {}
        self._streams: dict[tuple[object, ...], float] = {}

    def add(self, branch: Branch) -> None:
        """Add `branch`'s groups and counts (the plans sweep_space.enumerate_plans yields for it)."""
        tp, pp, cp, dp, ep, etp, b, mbs, sp_ok = branch
        fits = self._fits_smallest(tp, pp, dp, ep, cp, etp)
        for schedule, v in schedules(pp, mbs, self.base.model.num_hidden_layers, self.pins):
            moe = self._moe_choices(ep, pp, schedule)
            per_group = len(self.below) * len(moe)
            if not moe:  # --runnable: every variant refused on this pipeline
                continue
            for sp in sequence_parallel_choices(sp_ok, self.pins):
                for first, last in self.splits.splits(pp, v, tp, cp, sp):
                    self.enumerated += per_group
                    if not fits:
                        self.pruned += per_group
                        continue
                    shape = (tp, pp, dp, b, schedule, v, sp, ep, cp, first, last, etp)
                    for group in self._group(shape, moe, mbs):
                        self.groups.append(group)
                        self.fits += len(group.members) * len(moe)

    def _moe_choices(self, ep: int, pp: int, schedule: str) -> tuple[tuple[str, bool], ...]:
        """sweep_space.moe_choices, once per (ep, pp, schedule)."""
        key = (ep, pp, schedule)
        cached = self._moe.get(key)
        if cached is None:
            cached = self._moe[key] = tuple(moe_choices(self.base, ep, self.pins, pp, schedule))
        return cached

    def _fits_smallest(self, tp: int, pp: int, dp: int, ep: int, cp: int, etp: int) -> bool:
        """Whether the subtree's smallest footprint fits (simulator/sweep.py, _smallest_fits)."""
        key = (tp, pp, ep, cp, etp)
        cached = self._smallest.get(key)
        if cached is None:
            subtree = Plan(tp, pp, dp, 1, "1F1B", 1, "full", False, 3, ep, cp, etp=etp)
            cached = self._smallest[key] = any(
                self.est.memory_bytes(p) <= self.limit_bytes
                for p in smallest_footprints(self.base, self.splits, subtree)
            )
        return cached

    def _group(self, shape: Shape, moe: tuple[tuple[str, bool], ...], mbs: int) -> list[Group]:
        """The group of `shape` with its members that fit and its bound (none if none fits); mixed if
        they are of several classes (`classes` splits it once the search reaches it: splitting every
        group here cost more than it spared)."""
        template = _template(shape, moe)
        memories = member_memories(self.est, template, self.below, self._memo)
        fitting = [
            (rc, zero, memory / GiB)
            for (rc, zero), memory in zip(self.below, memories, strict=True)
            if memory <= self.limit_bytes
        ]
        if not fitting:
            return []
        group = Group(0.0, shape, tuple(fitting), moe, mixed=len(_classes(fitting)) > 1)
        return [group if self.defer else self._bounded(group, template, mbs)]

    def families(self) -> list[Family]:
        """The groups found so far (unbounded: `defer`) in their families, each with its floor."""
        found: dict[tuple[int, ...], list[Group]] = {}
        for group in self.groups:
            tp, _, _, b, _, _, sp, ep, cp, _, _, etp = group.shape
            found.setdefault((tp, b, sp, ep, cp, etp), []).append(group)
        out = []
        for groups in found.values():
            plans: dict[LayerKey, Plan] = {}
            seen: set[tuple[object, ...]] = set()
            for group in groups:
                # the keys depend on dp, the members' (recompute, ZeRO) and the variants alone: a family's
                # pipeline layouts repeat them, and a repeat adds no key the first did not
                alike = (group.shape[2], tuple(m[:2] for m in group.members), group.variants)
                if alike in seen:
                    continue
                seen.add(alike)
                members = self._member_keys(group)
                plans.update(_member_plans(group, {k: v for k, v in members.items() if k not in plans}))
            floor = floor_segments([self.est.layer(plan).segments for plan in plans.values()])
            share = min(self._micro_batches(group) / group.shape[1] for group in groups)  # m / pp
            out.append(Family(share * model_total_s(floor) * (1 - FAMILY_SLACK), tuple(groups)))
        return out

    def open(self, family: Family) -> list[Group]:
        """`family`'s groups, each with its bound (at least the family's floor, as every one is)."""
        out = []
        for group in family.groups:
            bounded = self._bounded(group, _template(group.shape, group.variants), self._micro_batches(group))
            out.append(bounded._replace(bound_s=max(bounded.bound_s, family.floor_s)))
        return out

    def _micro_batches(self, group: Group) -> int:
        """Micro-batches per step of the group's plans."""
        return self.base.training.global_batch_size // (group.shape[3] * group.shape[2])

    def classes(self, group: Group) -> list[Group]:
        """A mixed group's classes, each its own group with its bound: the members under full recompute
        apart from the others, so that their floor counts the recompute, and ZeRO-2 and ZeRO-3 apart,
        so that their bound counts the gathers (a mixed group's floor leaves both out: on GPT-3 175B on
        1,536 A100s, opening the mixed groups took 11,173 first bounds, 10,793 of them above the 10th
        best; opening their classes 1,368). Each bound is also at least the mixed group's (both are
        lower bounds of every member's), so no class comes out of the search before its group."""
        template, mbs = _template(group.shape, group.variants), self._micro_batches(group)
        parts = [Group(0.0, group.shape, part, group.variants) for part in _classes(group.members)]
        bounded = [self._bounded(part, template, mbs) for part in parts]
        return [part._replace(bound_s=max(part.bound_s, group.bound_s)) for part in bounded]

    def _bounded(self, group: Group, template: Plan, mbs: int) -> Group:
        """`group` with its bound (`Bound.chain` over its floor, plus the least `_after`; one class: with
        its gather waits, and under ZeRO-2/3 at least its least stream before the optimizer)."""
        if not self.bounds:
            for plan, _ in group.plans():
                self.est.layer(plan)
            return group
        rc, zero, _ = ("none", 0, 0.0) if group.mixed else group.members[0]
        plan, split = replace(template, recompute=rc, zero_stage=zero), self.est.split(template)
        # without ZeRO-2's schedule walks: one per schedule shape cost more than the groups they spared
        c = self.bound.chain(plan, mbs, split, self._floor(group, split), walk=False)
        after = min(self._after(template, zero) for zero in {m[1] for m in group.members})
        first = c.first_rank_s
        if zero >= 2 and template.dp * template.cp > 1:  # every member runs FSDP units
            first = max(first, min(self._stream(template, rc, zero, mbs) for rc, zero, _ in group.members))
        return group._replace(bound_s=max(c.other_ranks_s, first + after) * (1 - FLOOR_SLACK))

    def _stream(self, template: Plan, recompute: str, zero: int, m: int) -> float:
        """The first rank's ZeRO-2/3 data-parallel stream under `recompute` and `zero`, as
        `Bound.seconds` counts it (its optimizer waits for it: each member's bound is at least its
        stream plus its `_after`), once per degrees, stage, recompute class and schedule."""
        d = degrees(template)
        key = (*d[:6], zero, *d[7:], recompute == "full", template.schedule, m)
        cached = self._streams.get(key)
        if cached is None:
            plan = replace(template, recompute=recompute, zero_stage=zero)
            cached = self._streams[key] = self.bound.fsdp_stream_s(plan, m, self.est.split(plan), walk=False)
        return cached

    def _after(self, template: Plan, zero: int) -> float:
        """`Bound.after_passes_s` of `template` under ZeRO stage `zero`: it depends on the plan's degrees
        alone (its optimizer and dp caches are keyed by them), so once per degrees."""
        d = degrees(template)
        key = (*d[:6], zero, *d[7:])
        cached = self._afters.get(key)
        if cached is None:
            cached = self._afters[key] = self.bound.after_passes_s(replace(template, zero_stage=zero))
        return cached

    def _segment_floor(self, keys: tuple[LayerKey, ...], plans: dict[LayerKey, Plan]) -> SegmentTimes:
        """`floor_segments` of the members of `keys`, once per set of keys."""
        cached = self._segment_floors.get(keys)
        if cached is None:
            found = [self.est.layer(plans[key]).segments for key in keys]
            cached = self._segment_floors[keys] = floor_segments(found)
        return cached

    def _floor(self, group: Group, split: tuple[int, ...]) -> tuple[StageTimes, ...]:
        """The least per-stage times of the group's members: one floor of their segments
        (`floor_segments`) summed per stage (sweep_segments.stage_times, the same sum with or without
        FSDP units), once per set of members' layer keys and split; at most every member's stage times."""
        members = self._member_keys(group)
        keys = tuple(sorted(members))
        floor = self._floors.get((keys, split))
        if floor is None:
            plans = _member_plans(group, members)
            assert all(self.est.key(plan) == key for key, plan in plans.items())
            floor = self._floors[keys, split] = stage_times(self._segment_floor(keys, plans), split)
        return floor

    def _member_keys(self, group: Group) -> dict[LayerKey, tuple[str, int, str, bool]]:
        """The layer keys of the group's members, each with the (recompute, ZeRO stage, dispatcher,
        overlap) of one member holding it: worked out without building a plan."""
        tp, _, dp, b, _, _, sp, ep, cp, _, _, etp = group.shape
        members: dict[LayerKey, tuple[str, int, str, bool]] = {}
        for rc, zero, _ in group.members:
            for dispatcher, overlap in group.variants:
                fsdp = fsdp_stage(dp, zero, self.est.fsdp_stages)
                key = (tp, b, sp, rc, ep, cp, fsdp, dispatcher, overlap, etp)
                members.setdefault(key, (rc, zero, dispatcher, overlap))
        return members


def _member_plans(group: Group, members: dict[LayerKey, tuple[str, int, str, bool]]) -> dict[LayerKey, Plan]:
    """One plan of the group per layer key of `members` (`Grouper._member_keys`)."""
    tp, pp, dp, b, schedule, v, sp, ep, cp, first, last, etp = group.shape
    return {
        key: Plan(tp, pp, dp, b, schedule, v, rc, sp, zero, ep, cp, first, last, d, o, etp)
        for key, (rc, zero, d, o) in members.items()
    }


def _template(shape: Shape, variants: tuple[tuple[str, bool], ...]) -> Plan:
    """A group's plan under recompute none and ZeRO 0 with its first dispatcher and overlap."""
    tp, pp, dp, b, schedule, v, sp, ep, cp, first, last, etp = shape
    dispatcher, overlap = variants[0]
    return Plan(tp, pp, dp, b, schedule, v, "none", sp, 0, ep, cp, first, last, dispatcher, overlap, etp)
