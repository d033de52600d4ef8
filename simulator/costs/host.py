"""Host (CPU-side) costs of a step: what the framework spends in Python and dispatch around the work.

On GPUs the host runs ahead of the device and these are ~0 (the ComputeModel defaults); on CPU, and for
small models on GPU, they are a large part of a step. Each is a per-unit cost the runtime's
microbenchmarks measure in isolation (`plancast.runtime.microbench.measure_host`), multiplied here by how
many of those units a plan's step has:

- a pipeline transfer post, each side (ComputeModel.p2p_overhead_us), and the transport threads' CPU
  beside it (p2p_thread_us: engine/core.py, only where ranks share the cores);
- an FSDP2 collective issued by a unit hook (dp_collective_overhead_us), per ZeRO-2/3 collective;
- a tensor-parallel transformer block's DTensor dispatch (tp_/sp_layer_overhead_us), per layer and
  micro-batch, forward and backward together;
- an FSDP2 unit's hooks beyond its collectives (fsdp_unit_overhead_us), per unit (every block, plus
  the chunk's root) and micro-batch, and its unshards (fsdp_gather_overhead_us each: two per unit and
  micro-batch under ZeRO-3, one under ZeRO-2);
- the optimizer's per-tensor loop (optimizer_overhead_us, DTensor: dtensor_optimizer_overhead_us).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from plancast.simulator.costs.params import chunk_tensor_bytes
from plancast.simulator.scenario import Scenario


def rank_stages(s: Scenario, pp_rank: int) -> list[int]:
    """The virtual stages pipeline rank `pp_rank` holds (simulator/schedules.py's looped placement)."""
    return [chunk * s.pp + pp_rank for chunk in range(s.vpp)]


@dataclass(frozen=True, slots=True)
class HostCosts:
    """Per-event host costs of one plan, in seconds (0 where the plan does not have the event)."""

    p2p_s: float
    dp_collective_s: float
    layer_s: float  # per transformer layer and micro-batch (DTensor dispatch + FSDP2 unit hooks)
    unit_s: float  # per FSDP2 unit and micro-batch (the root's hooks; blocks are in layer_s)

    @classmethod
    def of(cls, s: Scenario) -> HostCosts:
        c = s.cluster.compute
        fsdp = s.fsdp
        tp_layer_us = 0.0
        if s.tp > 1:
            tp_layer_us = (
                c.sp_layer_overhead_us if s.parallelism.sequence_parallel else c.tp_layer_overhead_us
            )
        unit_us = 0.0
        if fsdp:  # ZeRO-3 unshards a unit before forward and again before backward, ZeRO-2 once
            unshards = 2 if s.parallelism.zero_stage == 3 else 1
            unit_us = c.fsdp_unit_overhead_us + unshards * c.fsdp_gather_overhead_us
        return cls(
            p2p_s=c.p2p_overhead_us * 1e-6,
            dp_collective_s=c.dp_collective_overhead_us * 1e-6 if fsdp else 0.0,
            layer_s=(tp_layer_us + unit_us) * 1e-6,
            unit_s=unit_us * 1e-6,
        )

    def step_s(self, s: Scenario, pp_rank: int) -> float:
        """Per-step host work of pipeline rank `pp_rank` beyond its spans: every micro-batch passes each
        of its layers (and FSDP2 root units, one per chunk) once forward and once backward."""
        if not (self.layer_s or self.unit_s):
            return 0.0
        stages = rank_stages(s, pp_rank)
        layers = sum(s.layer_split[v] for v in stages)
        return s.num_microbatches * (layers * self.layer_s + len(stages) * self.unit_s)


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
