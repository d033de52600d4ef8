"""The axes of the plan search: one point of it (`Plan`), the expert- and context-parallel choices, the
MoE execution choices (token dispatcher, ep overlap, the folded expert grid) and `Pins`, the axes a user
fixes (simulator/sweep_space.py enumerates them)."""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, replace
from typing import TypeVar, get_args

from plancast.simulator.catalog.frameworks import PIPELINE_SCHEDULES, PLAN_DEPENDENT, parallelism_defaults
from plancast.simulator.layer_split import even_layer_split
from plancast.simulator.scenario import Scenario, with_defaults
from plancast.simulator.scenario_moe import Dispatcher
from plancast.simulator.schedules import SCHEDULES as SCHEDULE_RULES
from plancast.simulator.schedules import owned_stages, stage_holders

SCHEDULES = ("1F1B", "Interleaved1F1B", "ZeroBubble", "GPipe", "ZBH2", "ZBV", "DualPipeV")
RECOMPUTE = ("none", "selective", "full")
ZERO_STAGES = (0, 1, 2, 3)
DISPATCHERS: tuple[str, ...] = get_args(Dispatcher)


@dataclass(frozen=True, slots=True, order=True)
class Plan:
    """One point of the search space."""

    tp: int
    pp: int
    dp: int
    micro_batch_size: int
    schedule: str
    virtual_stages: int
    recompute: str
    sequence_parallel: bool
    zero_stage: int
    ep: int = 1  # expert parallel: carved out of dp, or over tp x cp x dp on the folded grid (etp)
    cp: int = 1  # context parallel: world = tp * cp * pp * dp
    first_layers: int = 0
    """Blocks on the first virtual stage, and on the last (Megatron-LM's --decoder-first/last-pipeline-
    num-layers); the rest spread evenly between them. 0 and 0: the even split (scenario.even_layer_split)."""
    last_layers: int = 0
    dispatcher: str = "alltoall"
    """parallelism.moe_token_dispatcher (searched where ep > 1: `dispatcher_choices`)."""
    overlap_ep: bool = False
    """parallelism.moe_overlap_ep_comm (searched where ep > 1)."""
    etp: int = 0
    """parallelism.expert_tensor_parallel_degree: 0 leaves it unset (experts split over tp, ep carved out
    of dp); set, the expert layers get their own folded grid etp x ep x edp over tp x cp x dp."""

    @property
    def v_shape(self) -> bool:
        """Whether the schedule places two chunks per rank in a V (ZB-V, DualPipeV)."""
        return SCHEDULE_RULES[self.schedule].v_shape  # type: ignore[index]

    def first_rank_stages(self) -> tuple[int, ...]:
        """The virtual stages of the first pipeline rank, by chunk (schedules.owned_stages)."""
        return owned_stages(self.schedule, self.pp, 0, self.virtual_stages)  # type: ignore[arg-type]

    def holders(self) -> tuple[int, ...]:
        """Per virtual stage, the pipeline rank holding it (schedules.stage_rank)."""
        return stage_holders(self.schedule, self.pp, self.virtual_stages)

    def layer_split(self, layers: int, trailing: int = 0) -> tuple[int, ...]:
        """Blocks per virtual stage; `trailing`: the MTP depths after them (scenario.even_layer_split)."""
        stages = self.pp * self.virtual_stages
        if not self.first_layers:
            return even_layer_split(layers, stages, trailing)
        rest = layers - self.first_layers - self.last_layers
        middle = even_layer_split(rest, stages - 2) if stages > 2 else ()
        return (self.first_layers, *middle, self.last_layers)

    def apply(self, base: Scenario) -> Scenario:
        """The base scenario with this plan's parallelism, batch shape and layer split: priced as the plan
        written as a scenario of its own, so a key whose framework default depends on the plan
        (frameworks.PLAN_DEPENDENT) and that the base left unset takes the plan's default (a ZeRO-2 plan
        under Megatron-LM overlaps its parameter gathers; a dp 64 plan's DDP buckets hold 64M
        parameters); a key the scenario sets is kept for every plan."""
        split = list(self.layer_split(base.model.num_hidden_layers)) if self.first_layers else None
        par = base.parallelism.model_copy(
            update={
                "tensor_parallel_degree": self.tp,
                "pipeline_parallel_degree": self.pp,
                "data_parallel_degree": self.dp,
                "zero_stage": self.zero_stage,
                "pipeline_parallel_schedule": self.schedule,
                "virtual_stages_per_rank": self.virtual_stages,
                "sequence_parallel": self.sequence_parallel,
                "pipeline_layer_split": split,
                "expert_parallel_degree": self.ep,
                "context_parallel_degree": self.cp,
                "expert_tensor_parallel_degree": self.etp or None,
                "moe_token_dispatcher": self.dispatcher,
                "moe_overlap_ep_comm": self.overlap_ep,
            }
        )
        training = base.training.model_copy(
            update={"micro_batch_size": self.micro_batch_size, "recompute": self.recompute}
        )
        s = base.model_copy(update={"parallelism": par, "training": training})
        again = [k for k in PLAN_DEPENDENT if k in base.derived_keys]
        if again:  # the framework's defaults for this plan, as if written as a scenario of its own
            fill = parallelism_defaults(
                par.framework, dtype=training.dtype, grad_fp32=bool(training.grad_accumulation_fp32),
                dp=self.dp, zero_stage=self.zero_stage,
            )  # fmt: skip
            updates = {k: fill[k] for k in again if fill[k] != getattr(par, k)}
            if updates:
                object.__setattr__(s, "parallelism", with_defaults(par, updates))
        return s

    def label(self) -> str:
        sched = self.schedule + (f"x{self.virtual_stages}" if self.virtual_stages > 1 else "")
        sp = "+SP" if self.sequence_parallel else ""
        extra = (f" ep{self.ep}" if self.ep > 1 else "") + (f" etp{self.etp}" if self.etp else "")
        extra += (f" {self.dispatcher}" if self.dispatcher != "alltoall" else "") + (
            " overlap" if self.overlap_ep else ""
        )
        extra += f" cp{self.cp}" if self.cp > 1 else ""
        if self.first_layers:
            extra += f" layers {self.first_layers}..{self.last_layers}"
        return (
            f"tp{self.tp}{sp} pp{self.pp} dp{self.dp}{extra} mb{self.micro_batch_size} {sched} "
            f"rc={self.recompute} zero{self.zero_stage}"
        )


def divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


Choice = TypeVar("Choice")

MIN_CP_TOKENS = 4096
"""Context parallel is searched while each rank keeps at least this many tokens of a sequence: below it
the K/V exchange outweighs the attention it splits (Llama 3 used cp 16 at 128k tokens, 8k per rank,
Dubey et al. 2024 sec. 3.3.2)."""


def cp_choices(seq_len: int, gpus: int, recurrent: bool = False) -> list[int]:
    """Context-parallel degrees worth searching: 1, and on long sequences the divisors cp of `gpus` with
    seq_len % (2 cp) == 0 and at least MIN_CP_TOKENS tokens per rank; 1 alone for a model with
    `recurrent` Gated DeltaNet layers, which have no context-parallel form (model_linear.py)."""
    if recurrent:
        return [1]
    return [c for c in divisors(gpus) if c == 1 or (seq_len % (2 * c) == 0 and seq_len // c >= MIN_CP_TOKENS)]


def ep_choices(base: Scenario, dp: int) -> list[int]:
    """Expert-parallel degrees: divisors of dp that divide the expert count (1 for a dense model)."""
    experts = base.model.num_experts
    return [e for e in divisors(dp) if experts % e == 0] if experts else [1]


def balanced_layers(
    layers: int, stages: int, first_extra: float, last_extra: float
) -> tuple[int, int] | None:
    """The pipeline layer balancer: (blocks on the first stage, on the last) that minimise the largest
    stage's work, in blocks, when the first stage also runs `first_extra` blocks' worth (the embedding)
    and the last `last_extra` (the output layer and loss); the middle stages split the rest evenly. None
    where that is the even split, or where there is no middle to move blocks to or from.

    Megatron-LM sets the same two numbers by hand (--decoder-first/last-pipeline-num-layers); a big
    vocabulary makes the last stage the bottleneck of an even split (Llama 3 8B's 128k-token output
    layer is about two blocks of work)."""
    if stages < 2 or layers < stages:
        return None
    best: tuple[float, int, int] | None = None
    # A candidate replaces the best only at a load no larger than the best's, and the load is at least
    # first + first_extra (at least last + last_extra), which only grows along each loop: past the best
    # load no later candidate of the loop can win, so the loops stop there (the same answer, in about
    # (layers / stages)^2 steps rather than layers^2).
    for first in range(1, layers - stages + 3):
        if best is not None and first + first_extra > best[0]:
            break
        for last in range(1, layers - first - (stages - 2) + 1):
            if best is not None and last + last_extra > best[0]:
                break
            rest = layers - first - last
            if stages == 2 and rest:
                continue
            middle = math.ceil(rest / (stages - 2)) if stages > 2 else 0
            load = max(first + first_extra, last + last_extra, middle)
            if best is None or (load, abs(first - last), first) < (best[0], abs(best[1] - best[2]), best[1]):
                best = (load, first, last)
    if best is None:
        return None
    _, first, last = best
    between = even_layer_split(layers - first - last, stages - 2) if stages > 2 else ()
    split = (first, *between, last)
    even = even_layer_split(layers, stages)
    even_load = max(even[0] + first_extra, even[-1] + last_extra, *even[1:-1])
    return None if split == even or best[0] >= even_load else (first, last)


# ------------------------------------------------------------------------------------ MoE execution
DEEPEP_GPUS = ("A100", "H100", "H800", "H200", "H20", "B200", "B300")
"""GPU families DeepEP runs on: "Ampere (SM80), Hopper (SM90) GPUs" (deepseek-ai/DeepEP README,
Requirements) and B200/B300 (Megatron-Bridge bridge/training/flex_dispatcher_backend.py: "DeepEP is
applicable only for MoE models on Ampere, Hopper, B200 and B300 GPUs")."""
HYBRIDEP_GPUS = (*DEEPEP_GPUS, "GB200", "GB300")
"""HybridEP: "GB200, GB300 with NVL72 and ... Ampere, Hopper, B200 and B300" (the same Bridge file)."""
SCALE_UP_TIERS = ("nvlink",)
"""DeepEP's intranode kernels need NVLink (README: "NVLink for intranode communication")."""
RDMA_TIERS = ("infiniband", "roce", "ethernet")
"""DeepEP's internode kernels need an RDMA network (README: "RDMA network for internode communication",
NVSHMEM over InfiniBand or RoCE); the catalog's ethernet tiers are RoCE (simulator/catalog/clusters.py,
eth-h100-80gb)."""


def dispatcher_choices(base: Scenario) -> tuple[str, ...]:
    """Token dispatchers the sweep searches on `base`'s cluster where ep > 1: alltoall and allgather
    always; DeepEP's kernels where its README's hardware is (an NVIDIA GPU of DEEPEP_GPUS, an NVLink
    innermost tier, RDMA tiers beyond it), else HybridEP where the GPU is one of HYBRIDEP_GPUS. Both are
    priced alike (costs/moe_dispatch.py prices hybridep as deepep), so one of them is searched: the other
    would repeat every plan at the same time. Pin `dispatcher=hybridep` to rank it instead."""
    cluster = base.cluster
    gpu = cluster.gpu.name.upper()
    tiers = [t.name.lower() for t in cluster.tiers]
    fabric = bool(tiers) and tiers[0] in SCALE_UP_TIERS and all(t in RDMA_TIERS for t in tiers[1:])
    if fabric and gpu.startswith(DEEPEP_GPUS):
        return ("alltoall", "allgather", "deepep")
    if fabric and gpu.startswith(HYBRIDEP_GPUS):
        return ("alltoall", "allgather", "hybridep")
    return ("alltoall", "allgather")


def folded_choices(
    base: Scenario, tp: int, cp: int, dp: int, etps: tuple[int, ...] = (1,)
) -> list[tuple[int, int]]:
    """(ep, etp) of the folded expert grid (Megatron-Core expert_tensor_parallel_size; Liu et al. 2025,
    arXiv 2504.14960) worth searching on a stage of tp x cp x dp ranks: ep > 1, ep x etp divides them, ep the
    expert count, etp the experts' width. etp 1 by default (the folding paper's and DeepSeek-V3's choice:
    fine-grained experts are too narrow to split); one equal to the unfolded grid (etp = tp, cp = 1,
    ep dividing dp: simulator/mesh.py) is left to `ep_choices`."""
    m = base.model
    if not m.num_experts:
        return []
    stage = tp * cp * dp
    return [
        (ep, etp)
        for etp in etps
        if not m.expert_ffn_size % etp and not stage % etp
        for ep in divisors(stage // etp)
        if ep > 1 and not m.num_experts % ep and not (etp == tp and cp == 1 and dp % ep == 0)
    ]


# --------------------------------------------------------------------------------------------- pins
PIN_AXES: dict[str, tuple[str, type]] = {
    "tp": ("tp", int),
    "pp": ("pp", int),
    "dp": ("dp", int),
    "cp": ("cp", int),
    "ep": ("ep", int),
    "etp": ("etp", int),
    "mb": ("micro_batch_size", int),
    "schedule": ("schedule", str),
    "v": ("virtual_stages", int),
    "recompute": ("recompute", str),
    "sp": ("sequence_parallel", bool),
    "zero": ("zero_stage", int),
    "dispatcher": ("dispatcher", str),
    "overlap": ("overlap_ep", bool),
}
"""`sweep --pin AXIS=VALUE[,VALUE]`: the axis name, the `Plan` field it fixes and its type."""
_TRUE, _FALSE = ("true", "on", "yes", "1"), ("false", "off", "no", "0")


@dataclass(frozen=True, slots=True)
class Pins:
    """Axes the user fixes (`sweep --pin`): each to the values given, the rest searched. A pinned etp of
    N > 0 searches the folded grid with expert tensor parallel N (0: unfolded); a pinned dispatcher is
    searched whatever `dispatcher_choices` finds on the cluster."""

    values: tuple[tuple[str, tuple[object, ...]], ...] = ()
    runnable: bool = False
    """Only plans the scenario's framework runs as given (`sweep --runnable`): `for_framework` keeps the
    schedule axis to what it ships, and the sweep's exact checks refuse what it refuses
    (validation_moe.framework_refusals)."""

    @classmethod
    def parse(cls, texts: list[str] | tuple[str, ...]) -> Pins:
        """From `AXIS=VALUE[,VALUE...]` strings; ValueError naming the axis and the fix."""
        out: dict[str, tuple[object, ...]] = {}
        for text in texts:
            axis, sep, raw = text.partition("=")
            axis = axis.strip()
            if not sep or axis not in PIN_AXES or not raw.strip():
                raise ValueError(
                    f"--pin {text!r}: write AXIS=VALUE[,VALUE...] with AXIS one of {', '.join(PIN_AXES)}"
                )
            out[axis] = tuple(_pin_value(axis, v.strip()) for v in raw.split(","))
        return cls(tuple(sorted(out.items())))

    def get(self, axis: str) -> tuple[object, ...] | None:
        return next((values for name, values in self.values if name == axis), None)

    def allows(self, axis: str, value: object) -> bool:
        pinned = self.get(axis)
        return pinned is None or value in pinned

    def keep(self, axis: str, choices: Iterable[Choice]) -> list[Choice]:
        """The `choices` of `axis` the pins allow."""
        pinned = self.get(axis)
        return list(choices) if pinned is None else [c for c in choices if c in pinned]

    def admits(self, plan: Plan) -> bool:
        return all(getattr(plan, PIN_AXES[axis][0]) in values for axis, values in self.values)

    def label(self) -> str:
        parts = [f"{a}={','.join(str(v) for v in vs)}" for a, vs in self.values]
        return " ".join(parts + (["(--runnable)"] if self.runnable else []))

    def for_framework(self, framework: str) -> Pins:
        """Under `runnable`, these pins with the schedules kept to those `framework` ships (catalog/
        frameworks.py PIPELINE_SCHEDULES; every one ships 1F1B, the schedule of a plan without a
        pipeline); ValueError when the pinned schedules leave none."""
        if not self.runnable:
            return self
        ships = PIPELINE_SCHEDULES[framework]  # type: ignore[index]
        pinned = self.get("schedule")
        kept = ships if pinned is None else tuple(s for s in ships if s in pinned)
        if not kept:
            raise ValueError(
                f"--pin schedule={','.join(map(str, pinned or ()))} with --runnable: framework {framework} "
                f"runs none of them (it runs {', '.join(ships)}); pin one of those, or drop --runnable"
            )
        return replace(self, values=tuple(sorted({**dict(self.values), "schedule": kept}.items())))


def _pin_value(axis: str, raw: str) -> object:
    kind = PIN_AXES[axis][1]
    if kind is bool:
        if raw.lower() in _TRUE + _FALSE:
            return raw.lower() in _TRUE
        raise ValueError(f"--pin {axis}={raw}: {axis} is true or false")
    if kind is int:
        if not raw.isdigit():
            raise ValueError(f"--pin {axis}={raw}: {axis} is a whole number (etp 0: the unfolded grid)")
        return int(raw)
    choices = {"schedule": SCHEDULES, "recompute": RECOMPUTE, "dispatcher": DISPATCHERS}[axis]
    if raw not in choices:
        raise ValueError(f"--pin {axis}={raw}: {axis} is one of {', '.join(choices)}")
    return raw
