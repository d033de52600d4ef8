"""Host (CPU-side) costs of a step: what the framework spends in Python and dispatch around the work.

On GPUs the host runs ahead of the device and these are ~0 (the ComputeModel defaults); on CPU, and for
small models on GPU, they are a large part of a step. Each is a per-unit cost the runtime's
microbenchmarks measure in isolation (`plancast.runtime.microbench.measure_host`), multiplied here by how
many of those units a plan's step has:

- a pipeline transfer post, each side (ComputeModel.p2p_overhead_us), and the transport threads' CPU
  beside it (p2p_thread_us: engine/core.py, only where ranks share the cores);
- an FSDP2 collective issued by a unit hook (dp_collective_overhead_us), per ZeRO-2/3 collective; a
  DDP gradient all-reduce's wait for the cores in a run (ddp_collective_wait_us);
- a tensor-parallel transformer block's DTensor dispatch (tp_/sp_layer_overhead_us), per layer and
  micro-batch, forward and backward together;
- an FSDP2 unit's hooks beyond its collectives (fsdp_unit_overhead_us), per unit (every block, plus
  the chunk's root) and micro-batch, and its unshards (fsdp_gather_overhead_us each: two per unit and
  micro-batch under ZeRO-3, one under ZeRO-2);
- the optimizer's per-tensor loop (optimizer_overhead_us, DTensor: dtensor_optimizer_overhead_us).

The per-layer and per-unit host time runs inside the forward and backward passes that issue it (DTensor
dispatch, a unit's hooks), where the runtime measures it and calibration fits it (calibration/runs.py,
spans beyond the compute model); costs/stage.py adds each pass's share to it (TP_FORWARD_SHARE,
FSDP_FORWARD_SHARE).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from plancast.simulator.costs.params import chunk_tensor_bytes
from plancast.simulator.scenario import Scenario
from plancast.simulator.schedules import owned_stages

# The forward's share of a block's host time, measured: (forward span - its compute) / (both spans -
# their compute) on the CPU runtime's runs (benchmarks/cpu_fidelity.py, 3 sets x 2 rounds, the
# calibrated compute model): DTensor blocks 0.41-0.52, mean 0.48 (each forward op dispatches one backward
# op through autograd); FSDP2 units mean 0.46 under ZeRO-2 (0.40-0.54) and 0.36 under ZeRO-3 (0.30-0.42),
# whose backward also re-gathers and issues the gradient reduce-scatter from its hooks.
TP_FORWARD_SHARE = 0.5
FSDP_FORWARD_SHARE = {2: 0.45, 3: 0.35}


def rank_stages(s: Scenario, pp_rank: int) -> list[int]:
    """The virtual stages pipeline rank `pp_rank` holds, by chunk (simulator/schedules.py's placement)."""
    return list(owned_stages(s.parallelism.pipeline_parallel_schedule, s.pp, pp_rank, s.vpp))


@dataclass(frozen=True, slots=True)
class HostCosts:
    """Per-event host costs of one plan, in seconds (0 where the plan does not have the event)."""

    p2p_s: float
    dp_collective_s: float
    ddp_all_reduce_s: float  # a DDP gradient all-reduce's wait for the cores in a run
    layer_forward_s: float  # per transformer layer and micro-batch: DTensor dispatch + FSDP2 unit hooks
    layer_backward_s: float
    unit_forward_s: float  # per FSDP2 root unit (one per chunk) and micro-batch
    unit_backward_s: float

    @classmethod
    def of(cls, s: Scenario) -> HostCosts:
        c = s.cluster.compute
        tp_us = 0.0
        if s.tp > 1:
            tp_us = c.sp_layer_overhead_us if s.parallelism.sequence_parallel else c.tp_layer_overhead_us
        unit_us, unit_share = 0.0, 0.0
        if s.fsdp:  # ZeRO-3 unshards a unit before forward and again before backward, ZeRO-2 once
            stage = s.parallelism.zero_stage
            unit_us = c.fsdp_unit_overhead_us + (2 if stage == 3 else 1) * c.fsdp_gather_overhead_us
            unit_share = FSDP_FORWARD_SHARE[stage]
        unit_fwd, unit_bwd = unit_us * unit_share * 1e-6, unit_us * (1 - unit_share) * 1e-6
        return cls(
            p2p_s=c.p2p_overhead_us * 1e-6,
            dp_collective_s=c.dp_collective_overhead_us * 1e-6 if s.fsdp else 0.0,
            ddp_all_reduce_s=0.0 if s.fsdp else c.ddp_collective_wait_us * 1e-6,
            layer_forward_s=tp_us * TP_FORWARD_SHARE * 1e-6 + unit_fwd,
            layer_backward_s=tp_us * (1 - TP_FORWARD_SHARE) * 1e-6 + unit_bwd,
            unit_forward_s=unit_fwd,
            unit_backward_s=unit_bwd,
        )

    @property
    def layer_s(self) -> float:
        """A block's host time per micro-batch, both passes."""
        return self.layer_forward_s + self.layer_backward_s

    @property
    def unit_s(self) -> float:
        """A chunk's root unit's host time per micro-batch, both passes."""
        return self.unit_forward_s + self.unit_backward_s


def optimizer_tensors(s: Scenario, stages: Iterable[int]) -> float:
    """Parameter tensors one rank's optimizer updates for its virtual `stages`: every tensor of the
    chunks (FSDP2 and DTensor shard each tensor), a 1/dp share under ZeRO-1 (ZeroRedundancyOptimizer
    gives each rank whole tensors)."""
    last = s.pp * s.vpp - 1
    count = sum(
        len(
            chunk_tensor_bytes(
                s.model, s.tp, layers=s.layer_split[v], has_embedding=v == 0, has_head=v == last
            )
        )
        for v in stages
    )
    return count / s.dp if s.parallelism.zero_stage == 1 else float(count)


def optimizer_host_s(s: Scenario, stages: Iterable[int]) -> float:
    """Host time of the optimizer's per-tensor loop (ComputeModel.optimizer_overhead_us); DTensor
    parameters (tp > 1, or FSDP2 under ZeRO-2/3 with dp > 1) take the DTensor rate."""
    c = s.cluster.compute
    per_tensor_us = c.dtensor_optimizer_overhead_us if s.dtensor_params else c.optimizer_overhead_us
    return optimizer_tensors(s, stages) * per_tensor_us * 1e-6 if per_tensor_us else 0.0
