"""A floor under the step time of every plan of one tensor-parallel degree, priced without a layer key:
the sweep groups a tp degree's plans (their per-layer costs: most of a large MoE sweep's time) only once
no bound left is below this floor (simulator/sweep.py), so a degree whose floor is above the k-th best
simulated time is never priced at all.

Why it is a floor (docs/sweep.md, "A floor per tp degree"). Each pipeline rank runs its passes on one
compute stream, one after another (engine: `busy`), and a pass takes at least its segments' compute plus
their tensor-parallel collectives unless `tp_comm_overlap` hides them (costs/stage.py StageCost), so the
step takes at least the mean over pipeline ranks of that work. Of it:

- compute: every GEMM runs at most at peak x clock_fraction x its format's e_max (costs/efficiency.py:
  e(F) = e_max F / (F + F_half) times relative rates that are all <= 1, costs/moe_gemm.py), its backward
  its forward's time times costs/op.py `backward_multiples` (costs/stage.py `_phase_seconds`); all
  ranks' GEMMs together do at least the model's
  GEMM FLOPs with every expert at the mean load (tp splits GEMMs exactly; a replicated router or head,
  tile padding, imbalance and recompute only add), a capacity factor under 1 scaling the experts down;
- tensor parallel: each block issues, per micro-batch and pass, at least its attention's all-reduce or
  all-gather and reduce-scatter of micro_batch x seq_len / cp x hidden elements (costs/tp_comm.py), each
  at least its bandwidth term (costs/collectives.py: every algorithm is alpha + bytes / B, alpha >= 0), so
  over a step they come to at least 2 x layers x global_batch x seq_len x hidden x dtype bytes x tp /
  GPUs at that bandwidth, whatever the micro-batch, cp, pp and dp.

Attention cores, memory-bound ops, host time, bubbles, every other collective and the optimizer are
left out: the floor is loose, but it needs no layer key, and it rises with tp (the tp group's links).
"""

from __future__ import annotations

from dataclasses import replace

from plancast.simulator.costs.collectives import Level, Link, collective_seconds, group_levels
from plancast.simulator.costs.efficiency import op_seconds
from plancast.simulator.costs.fp8 import fp8_matmul_efficiency
from plancast.simulator.costs.moe import load_factor, moe_layer_forward
from plancast.simulator.costs.mtp import mtp_forward
from plancast.simulator.costs.op import pass_multiple
from plancast.simulator.costs.ops import DTYPE_BYTES, Op, Shape, head_forward, layer_forward
from plancast.simulator.scenario import Scenario

PROBE_BYTES = 2.0**30
"""A message size to read a collective's bandwidth term at (latencies set to 0: it is linear in bytes)."""


def compute_floor_s(base: Scenario, gpus: int) -> float:
    """Seconds every plan's busiest pipeline rank spends at least in GEMMs per step (module docstring);
    0 where the model's GEMM FLOPs are not linear in the tokens (then no floor is claimed)."""
    per_token = _seconds_per_token(base)
    if per_token is None:
        return 0.0
    tokens = base.training.global_batch_size * base.training.seq_len
    return per_token * tokens / gpus


def tp_floor_s(base: Scenario, gpus: int, tp: int) -> float:
    """Seconds of blocking tensor-parallel collectives every plan of degree `tp` has at least per step on
    its busiest pipeline rank (module docstring); 0 for tp 1 or under tp_comm_overlap."""
    if tp <= 1 or base.parallelism.tp_comm_overlap:
        return 0.0
    levels = _tp_levels(base, tp)
    pair = min(
        collective_seconds("all_reduce", levels, PROBE_BYTES),
        collective_seconds("all_gather", levels, PROBE_BYTES)
        + collective_seconds("reduce_scatter", levels, PROBE_BYTES),
    )
    m, t = base.model, base.training
    step_bytes = t.global_batch_size * t.seq_len * m.hidden_size * DTYPE_BYTES[t.dtype]
    return 2.0 * m.num_hidden_layers * step_bytes * tp / gpus * pair / PROBE_BYTES


def degree_floor_s(base: Scenario, gpus: int, tp: int, compute_s: float | None = None) -> float:
    """The floor of every plan of tensor-parallel degree `tp` (`compute_s`: compute_floor_s, if known)."""
    return (compute_floor_s(base, gpus) if compute_s is None else compute_s) + tp_floor_s(base, gpus, tp)


def _tp_levels(base: Scenario, tp: int) -> tuple[Level, ...]:
    """The levels of a tp group (tp innermost in the rank grid, simulator/mesh.py) without latencies."""
    tiers = base.cluster.tiers
    links = tuple(Link.of(t.bandwidth_GBps, 0.0, t.efficiency) for t in tiers)
    return group_levels(range(tp), base.cluster.tier_sizes, links)


def _fastest_gemm_flops(base: Scenario) -> float:
    """The most FLOP/s any GEMM of `base` can run at (costs/efficiency.py op_seconds, e(F) <= e_max): the
    training dtype's peak at matmul_efficiency, or under training.fp8 any format's at its FP8 efficiency."""
    gpu, compute = base.cluster.gpu, base.cluster.compute
    rates = [gpu.peak_flops(base.training.dtype) * compute.matmul_efficiency]
    if base.training.fp8:
        rates += [v * 1e12 * fp8_matmul_efficiency(compute, gpu, k) for k, v in gpu.peak_tflops.items()]
    return max(rates) * gpu.clock_fraction


def _seconds_per_token(base: Scenario) -> float | None:
    """`_pass_seconds` of one token of a full sequence; None unless they are linear in the micro-batch
    (a cost per step, as of weights, would not be split over the micro-batches): no floor is claimed."""
    seq = base.training.seq_len
    one = _pass_seconds(base, 1, seq)
    if one <= 0.0 or not _close(_pass_seconds(base, 2, seq), 2 * one):
        return None
    return one / seq


def _pass_seconds(base: Scenario, batch: int, seq: int) -> float:
    """The forward and backward of `batch` sequences of `seq` tokens at tp 1 and cp 1: its GEMM FLOPs at
    the fastest GEMM rate plus its attention cores' time less their per-call overhead (costs/efficiency.py:
    their FLOPs at their own rate, or their bytes; the same under any tp and cp, whose ranks each do 1/(tp
    cp) of them: costs/ops.py attention_core_forward), each op times its forward-plus-backward multiple
    (costs/op.py `pass_multiple`, as costs/stage.py `_phase_seconds` prices its backward)."""
    m, gpu, compute, dtype = base.model, base.cluster.gpu, base.cluster.compute, base.training.dtype
    x = replace(Shape.of(base), b=batch, s=seq, kv_s=seq, tp=1, vocab_tp=1, sp=False)
    factor = min(1.0, load_factor(m, base.training.moe_routing_imbalance))
    fastest = _fastest_gemm_flops(base)

    def floor(ops: tuple[Op, ...]) -> float:
        gemms = sum(op.flops * pass_multiple(op) for op in ops if op.category == "matmul") / fastest
        overhead = compute.op_overhead_us * 1e-6
        cores = [op for op in ops if op.category == "attention"]
        return gemms + sum(
            (op_seconds(op, gpu, compute, dtype) - overhead * op.calls) * pass_multiple(op) for op in cores
        )

    dense = floor(layer_forward(x))
    moe = floor(moe_layer_forward(x, m, 1, factor=factor)) if m.is_moe else dense
    moe_layers = sum(m.is_moe_layer(i) for i in range(m.num_hidden_layers)) if m.is_moe else 0
    total = (m.num_hidden_layers - moe_layers) * dense + moe_layers * moe + floor(head_forward(x))
    if m.num_nextn_predict_layers:
        total += m.num_nextn_predict_layers * floor(mtp_forward(x, m, 1, factor=factor))
    return total


def _close(a: float, b: float) -> bool:
    return abs(a - b) <= 1e-9 * max(abs(a), abs(b))
