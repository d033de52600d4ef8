"""Seconds of one expert-parallel dispatch (or combine) under each token dispatcher, and how much of the
all-to-all time compute hides when it is overlapped (parallelism.moe_token_dispatcher,
parallelism.moe_overlap_ep_comm; docs/moe.md).

- alltoall: NCCL all-to-all of every (token, expert) copy (collectives.all_to_all_seconds).
- allgather: Megatron-Core's allgather dispatcher all-gathers the ep group's tokens (each rank keeps the
  copies its experts need) and reduce-scatters the outputs back.
- deepep / hybridep: DeepEP's normal kernels (deepseek-ai/DeepEP README; DeepSeek-V3 report sec. 3.2.2):
  a token crosses the scale-out tier once per destination node, to the GPU of the same local index, and
  fans out over NVLink once per destination rank, so the bytes are the token times the expected number
  of remote nodes (ranks) its k experts touch, not k copies (training.moe_token_spread says where they
  lie). Rates as the README measures them on H800 (NVLink
  200 GB/s per direction, CX7 400 Gb/s InfiniBand ~50 GB/s): intranode 153-158 GB/s, internode RDMA
  43-58 GB/s. hybridep (NVIDIA's HybridEP, the other backend of Megatron-Core's flex dispatcher)
  publishes no rates of its own here and is priced as DeepEP.
"""

from __future__ import annotations

from collections.abc import Sequence

from plancast.simulator.costs.collectives import Level, all_to_all_seconds, collective_seconds
from plancast.simulator.scenario_moe import Dispatcher, TokenSpread

DEEPEP_NVLINK_FRACTION = 153 / 200
"""DeepEP intranode dispatch (EP8) 153 GB/s over H800's 200 GB/s NVLink per direction (README table)."""
DEEPEP_RDMA_FRACTION = 1.0
"""DeepEP internode dispatch 43 / 58 / 51 GB/s at EP 16 / 32 / 64 over ~50 GB/s NICs (README table):
at the NIC's line rate (the bytes counted after per-node deduplication)."""


def remote_units(spread: TokenSpread, k: int, experts: int, units: int) -> float:
    """Expected units (ranks or nodes, each holding experts / units consecutive experts) other than the
    token's own that its k experts fall in. independent: k distinct experts at random, a unit is missed
    with probability C(E - E/U, k) / C(E, k). contiguous: experts ik .. ik+k-1 mod E, averaged over the
    starts; the token's own unit is one of the U equally often."""
    if units <= 1:
        return 0.0
    per_unit = experts // units
    if spread == "independent":
        missed = 1.0
        for j in range(k):
            missed *= max(experts - per_unit - j, 0) / (experts - j)
        return (units - 1) * (1 - missed)
    starts = {(i * k) % experts for i in range(experts)}
    touched = [len({((s + j) % experts) // per_unit for j in range(k)}) for s in starts]
    return sum(touched) / len(touched) * (1 - 1 / units)


def _deepep_seconds(
    levels: Sequence[Level], token_bytes: float, routing: tuple[int, int, TokenSpread]
) -> float:
    """NVLink carries a token once to each other rank holding one of its experts, the scale-out tiers once
    per remote node; both at once, the slower sets the time (one alpha per peer, as
    all_to_all_seconds). `levels` at the tiers' raw bandwidths (efficiency 1): DeepEP's measured
    fractions replace NCCL's. `routing`: (k, experts, spread)."""
    k, experts, spread = routing
    inner, outer = levels[0], levels[1:]
    n = inner.fan
    for lv in outer:
        n *= lv.fan
    nvlink_bytes = token_bytes * remote_units(spread, k, experts, n)
    nvlink = nvlink_bytes / (inner.link.bandwidth_Bps * DEEPEP_NVLINK_FRACTION)
    slowest = nvlink + (inner.fan - 1) * inner.link.latency_s
    nodes = n // inner.fan
    if nodes > 1:
        link = outer[-1].link
        rdma = token_bytes * remote_units(spread, k, experts, nodes)
        rate = link.bandwidth_Bps * DEEPEP_RDMA_FRACTION
        slowest = max(slowest, rdma / rate + (nodes - 1) * link.latency_s)
    return slowest


def dispatch_seconds(
    dispatcher: Dispatcher,
    levels: Sequence[Level],
    raw: Sequence[Level],
    slot_bytes: float,
    routing: tuple[int, int, TokenSpread],
) -> float:
    """One dispatch (or combine) of a rank's `slot_bytes` (its token slots x hidden) over the ep group
    whose tiers are `levels` (`raw`: the same at efficiency 1); `routing`: (k, experts, spread)."""
    k = routing[0]
    levels = [lv for lv in levels if lv.fan > 1]
    if not levels or slot_bytes <= 0:
        return 0.0
    token_bytes = slot_bytes / k
    if dispatcher == "alltoall":
        return all_to_all_seconds(levels, slot_bytes)
    if dispatcher == "allgather":
        group = 1
        for lv in levels:
            group *= lv.fan
        return collective_seconds("all_gather", levels, token_bytes * group)
    return _deepep_seconds([lv for lv in raw if lv.fan > 1], token_bytes, routing)


OVERLAP_SM_FRACTION = 20 / 132
"""Streaming multiprocessors the all-to-all kernels hold while they overlap compute: DeepSeek-V3 gives
20 of the H800's 132 SMs to communication (DeepSeek-V3 report sec. 3.2.2; DeepEP's normal kernels run
on 20-24), so the compute beside them runs on the rest."""


def exposed_fraction(ep_s: float, compute_s: float) -> float:
    """Share of ep seconds of all-to-alls the step still pays when they run beside c seconds of another
    micro-batch's compute (Megatron-Core's EP overlap, DualPipe; costs/moe_overlap.py gives each
    all-to-all its window of the other pass), which meanwhile runs on 1 - f of
    the SMs (f = OVERLAP_SM_FRACTION): the pair ends after c + f * ep, or after ep when the transfers
    are the longer, so the share is max(f, 1 - c/ep)."""
    if ep_s <= 0:
        return 1.0
    return max(OVERLAP_SM_FRACTION, (ep_s - compute_s) / ep_s)
