"""The event keys a measured run of a scenario must produce: one per predicted event, no more.

Pure (no torch): built from the simulator's schedule and rank grid (via ``runtime.plan``) and the
comm plan in ``simulator/costs/tp_comm.py``. The simulator emits the same set; the runtime's tests
assert a real run's events equal it. ``index`` counts events with the same
(rank, step, stream, kind, stage, chunk, microbatch) in issue order.
"""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from plancast.runtime.plan import Chunk, RankPlan, rank_plan
from plancast.simulator.costs.params import chunk_tensor_bytes
from plancast.simulator.costs.tp_comm import Part, Phase, ddp_bucket_bytes, scenario_tp_collectives
from plancast.simulator.scenario import Scenario
from plancast.simulator.schedules import Action

KEY_COLUMNS = ["rank", "step", "stream", "kind", "stage", "chunk", "microbatch", "index", "peer"]


@dataclass(frozen=True, slots=True)
class _Key:
    stream: str
    kind: str
    stage: int
    chunk: int
    microbatch: int
    peer: int = -1
    index: int = -1  # -1: assign in issue order


def chunk_param_bytes(scenario: Scenario, chunk: Chunk, dtype_bytes: int = 4) -> list[int]:
    """Bytes of each local dense parameter of ``chunk`` in registration order (tensor-parallel shards
    local; an MoE layer's router and shared experts included, its routed experts not)."""
    return chunk_tensor_bytes(
        scenario.model,
        scenario.tp,
        vocab_tp=scenario.vocab_tp,
        layers=chunk.last_layer - chunk.first_layer,
        has_embedding=chunk.has_embedding,
        has_head=chunk.has_head,
        dtype_bytes=dtype_bytes,
        first_layer=chunk.first_layer,
    )


def chunk_dense_expert_bytes(
    scenario: Scenario, chunk: Chunk, dtype_bytes: int = 4
) -> tuple[list[int], list[int]]:
    """Bytes of a chunk's parameters in registration order: (dense ones, this rank's routed experts').

    The routed experts are reduced by their own DDP reducer (runtime/parallel/ep.py), which sees each
    layer's stacked projections (runtime/moe_experts.py; SwiGLU: gate, up, down; else up, down), each
    holding the rank's E / ep experts.
    """
    m = scenario.model
    matrices = 3 if m.activation == "swiglu" else 2
    moe_layers = sum(1 for layer in range(chunk.first_layer, chunk.last_layer) if m.is_moe_layer(layer))
    local_experts = m.num_experts // scenario.ep if m.is_moe else 0
    stacked = [local_experts * m.hidden_size * m.expert_ffn_size * dtype_bytes] * matrices
    return chunk_param_bytes(scenario, chunk, dtype_bytes), stacked * moe_layers if local_experts else []


def _tp(plan: RankPlan, part: Part, phase: Phase, moe: bool = False) -> list[str]:
    return [c.kind for c in scenario_tp_collectives(plan.scenario, part, phase, dtype_bytes=4, moe=moe)]


def _tp_pass(plan: RankPlan, c: Chunk, phase: Phase) -> list[str]:
    """Tensor-parallel collective kinds of one pass through chunk ``c``, in issue order."""
    m = plan.scenario.model
    parts: list[tuple[Part, bool]] = [("embedding", False)] if c.has_embedding else []
    parts += [("layer", m.is_moe and m.is_moe_layer(i)) for i in range(c.first_layer, c.last_layer)]
    parts += [("head", False)] if c.has_head else []
    if phase == "backward":
        parts.reverse()
    return [kind for part, moe in parts for kind in _tp(plan, part, phase, moe)]


class _FsdpState:
    """FSDP2's gather/reshard rules for one chunk: which all-gathers and reduce-scatters a pass issues."""

    def __init__(self, plan: RankPlan, c: Chunk) -> None:
        self.zero3 = plan.scenario.parallelism.zero_stage == 3
        # HSDP: each unit's reduce-scattered shard is then all-reduced over the replicas (FSDP2 on a 2-D mesh)
        self.reduce = ["reduce_scatter"] + (["all_reduce"] if plan.grid.replicate > 1 else [])
        self.units = (["root"] if c.has_embedding or c.has_head else []) + [
            f"layer{i}" for i in range(c.first_layer, c.last_layer)
        ]
        self.gathered = dict.fromkeys(self.units, False)

    def forward(self) -> list[str]:
        out = []
        for unit in self.units:  # root first, then blocks
            if not self.gathered[unit]:
                out.append("all_gather")
                self.gathered[unit] = True
            if self.zero3:  # ZeRO-3 reshards every unit, the root included (observed with torch 2.13 on gloo)
                self.gathered[unit] = False
        return out

    def backward(self) -> list[str]:
        gathers = ["all_gather" for unit in self.units if not self.gathered[unit]]
        self.gathered = dict.fromkeys(self.units, False)  # post-backward reshards every unit
        return gathers + self.reduce * len(self.units)


def _moe_cp_pass(plan: RankPlan, c: Chunk, phase: Phase) -> list[tuple[str, str]]:
    """(stream, kind) of the expert all-to-alls and context-parallel K/V exchanges of one pass through
    chunk ``c`` (docs/moe.md): per MoE layer dispatch and combine (their gradients in backward), per
    attention layer one K/V all-gather forward, one dK/dV reduce-scatter backward."""
    p, m = plan.scenario.parallelism, plan.scenario.model
    layers = c.last_layer - c.first_layer
    out: list[tuple[str, str]] = []
    if p.expert_parallel_degree > 1 and m.num_local_experts:
        moe_layers = sum(1 for i in range(c.first_layer, c.last_layer) if i >= m.first_k_dense_replace)
        out += [("ep", "all_to_all")] * (2 * moe_layers)
    if p.context_parallel_degree > 1:
        out += [("cp", "all_gather" if phase == "forward" else "reduce_scatter")] * layers
    return out


def _ddp_buckets(plan: RankPlan, c: Chunk) -> int:
    """Gradient buckets of one chunk: dense ones over dp x cp, then the routed experts' (edp)."""
    s, grid = plan.scenario, plan.grid
    dense, experts = chunk_dense_expert_bytes(s, c)
    # torch DDP driven through the bare module keeps its first, unlimited bucket: the cap never applies
    n = len(ddp_bucket_bytes(dense, None))
    if experts and len(grid.group("edp", plan.rank)) > 1:
        n += len(ddp_bucket_bytes(experts, None))
    return n


def _rank_keys(plan: RankPlan) -> list[_Key]:
    s = plan.scenario
    recompute = s.training.recompute == "full" and s.training.recompute_num_layers is None  # stage pass
    fsdp = s.fsdp
    states = {c.stage: _FsdpState(plan, c) for c in plan.chunks} if fsdp else {}
    last_b = {a.stage: i for i, a in enumerate(plan.actions) if a.kind == "B"}
    dense_ranks = plan.grid.dp * plan.grid.cp  # dense gradients: data x context parallel (docs/moe.md)
    keys: list[_Key] = []

    def comm(kinds: list[str], stream: str, stage: int, chunk: int, mb: int) -> None:
        keys.extend(_Key(stream, k, stage, chunk, mb) for k in kinds)

    def moe_cp(a: Action, c: Chunk, phase: Phase) -> None:
        keys.extend(
            _Key(stream, k, a.stage, a.chunk, a.microbatch) for stream, k in _moe_cp_pass(plan, c, phase)
        )

    for i, a in enumerate(plan.actions):
        c = plan.chunk_of_stage(a.stage)
        last_stage = a.stage == plan.num_stages - 1
        if a.kind == "F":
            if a.stage > 0 and plan.holder(a.stage - 1) != plan.rank:
                keys.append(_Key("pp", "recv", a.stage, a.chunk, a.microbatch, plan.holder(a.stage - 1), 0))
            keys.append(_Key("compute", "forward", a.stage, a.chunk, a.microbatch))
            comm(states[a.stage].forward() if fsdp else [], "dp", a.stage, a.chunk, a.microbatch)
            comm(_tp_pass(plan, c, "forward"), "tp", a.stage, a.chunk, a.microbatch)
            moe_cp(a, c, "forward")
            if not last_stage and plan.holder(a.stage + 1) != plan.rank:
                keys.append(_Key("pp", "send", a.stage, a.chunk, a.microbatch, plan.holder(a.stage + 1), 0))
        elif a.kind == "B":
            if not last_stage and plan.holder(a.stage + 1) != plan.rank:
                keys.append(_Key("pp", "recv", a.stage, a.chunk, a.microbatch, plan.holder(a.stage + 1), 1))
            if recompute:
                keys.append(_Key("compute", "recompute", a.stage, a.chunk, a.microbatch))
                comm(states[a.stage].forward() if fsdp else [], "dp", a.stage, a.chunk, a.microbatch)
                comm(_tp_pass(plan, c, "forward"), "tp", a.stage, a.chunk, a.microbatch)
                moe_cp(a, c, "forward")
            kind = "backward_input" if plan.split_backward else "backward"
            keys.append(_Key("compute", kind, a.stage, a.chunk, a.microbatch))
            first_stage_split = plan.split_backward and a.stage == 0  # its whole backward runs in W
            if not first_stage_split:
                comm(_tp_pass(plan, c, "backward"), "tp", a.stage, a.chunk, a.microbatch)
                moe_cp(a, c, "backward")
            comm(states[a.stage].backward() if fsdp else [], "dp", a.stage, a.chunk, a.microbatch)
            if dense_ranks > 1 and not fsdp and last_b[a.stage] == i:
                comm(["all_reduce"] * _ddp_buckets(plan, c), "dp", a.stage, a.chunk, -1)
            if a.stage > 0 and plan.holder(a.stage - 1) != plan.rank:
                keys.append(_Key("pp", "send", a.stage, a.chunk, a.microbatch, plan.holder(a.stage - 1), 1))
        else:
            keys.append(_Key("compute", "backward_weight", a.stage, a.chunk, a.microbatch))
            if a.stage == 0:  # the first stage's whole backward, its blocking collectives with it
                comm(_tp_pass(plan, c, "backward"), "tp", a.stage, a.chunk, a.microbatch)
                moe_cp(a, c, "backward")
    return keys + _step_end_keys(plan, dense_ranks)


def _step_end_keys(plan: RankPlan, dense_ranks: int) -> list[_Key]:
    """After the last backward: the sequence-parallel norm sums, the tied-embedding sum, the optimizer
    and ZeRO-1's broadcasts (one per dense data-parallel owner)."""
    s, keys = plan.scenario, []
    for c in plan.chunks:
        if s.tp > 1 and s.parallelism.sequence_parallel and c.last_layer > c.first_layer:
            keys.append(_Key("tp", "all_reduce", c.stage, c.chunk, -1))
        peer = plan.tie_peer(c)
        if peer is not None:
            keys.append(_Key("pp", "all_reduce", c.stage, c.chunk, -1, peer))
    keys.append(_Key("compute", "optimizer", -1, -1, -1))
    if dense_ranks > 1 and s.parallelism.zero_stage == 1:
        for c in plan.chunks:
            keys += [_Key("dp", "broadcast", c.stage, c.chunk, -1)] * dense_ranks
    return keys


def expected_event_keys(scenario: Scenario, steps: int = 1) -> pd.DataFrame:
    """Every event key (``KEY_COLUMNS``) a measured run of ``steps`` steps must produce, sorted."""
    rows = []
    for rank in range(scenario.tp * scenario.pp * scenario.dp * scenario.parallelism.context_parallel_degree):
        plan = rank_plan(scenario, rank)
        counts: dict[tuple[str, str, int, int, int], int] = {}
        for k in _rank_keys(plan):
            index = k.index
            if index < 0:
                ident = (k.stream, k.kind, k.stage, k.chunk, k.microbatch)
                index = counts.get(ident, 0)
                counts[ident] = index + 1
            for step in range(steps):
                rows.append((rank, step, k.stream, k.kind, k.stage, k.chunk, k.microbatch, index, k.peer))
    frame = pd.DataFrame(rows, columns=KEY_COLUMNS)
    return frame.sort_values(KEY_COLUMNS).reset_index(drop=True)
