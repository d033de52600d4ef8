"""Offloading to host memory: what it costs in time (the bytes it frees are in costs/memory.py).

- Optimizer offload (training.optimizer_cpu_offload: DeepSpeed ZeRO-Offload, Ren et al. 2021 sec. 4.1;
  Megatron-LM `--optimizer-cpu-offload`): each step the gradients go down to the host, the host's Adam
  updates the fp32 master weights and moments there (ZeRO-Offload's CPU-Adam), and the 16-bit
  parameters come back. The copies run over the GPU's host link (catalog/host.py) one after the other
  with the update between them, as ZeRO-Offload's step does without its one-step delayed update (the
  DPU, sec. 4.2, an option that changes the training); the update is memory-bound on the host's DRAM:
  read parameter, gradient and two moments, write parameter, moments and the 16-bit copy.
- Activation offload (training.activation_offload: Megatron-Core `--cpu-offloading`, torch
  `save_on_cpu`): each block's saved activations go down after its forward and come back before its
  backward, on a copy stream beside the next block's compute; only the part of a copy longer than a
  block's compute is exposed.
Both rates are the link's or DRAM's peak at the achieved fraction the GPU's HBM reaches
(cluster.compute.memory_efficiency), an assumption: no offloading run has been measured. A CPU rank's
host is its own memory: nothing moves.
"""

from __future__ import annotations

from plancast.simulator.catalog.host import host_side
from plancast.simulator.costs.ops import DTYPE_BYTES
from plancast.simulator.scenario import Scenario

CPU_ADAM_BYTES = 4 * 4 + 3 * 4
"""Host DRAM bytes per parameter of one Adam update beside the gradient and the 16-bit copy: read fp32
parameter, momentum, variance (and the gradient, counted apart), write the three back."""


def _on_cpu(s: Scenario) -> bool:
    return s.cluster.gpu.name.startswith("cpu")


def _rate(s: Scenario, GBps: float) -> float:
    return GBps * 1e9 * s.cluster.compute.memory_efficiency


def optimizer_offload_s(s: Scenario, params: float) -> float:
    """Seconds of one offloaded optimizer step over `params` local parameters: gradients down, the host's
    update, 16-bit parameters up."""
    side = host_side(s.cluster.gpu.name)
    grad = 4.0 if s.training.grad_accumulation_fp32 or s.amp_master_params else DTYPE_BYTES[s.training.dtype]
    copy = DTYPE_BYTES[s.training.dtype]
    link_s = params * (grad + copy) / _rate(s, side.link_GBps)
    update_s = params * (CPU_ADAM_BYTES + grad + copy) / _rate(s, side.host_memory_GBps)
    return update_s if _on_cpu(s) else link_s + update_s


def activation_offload_s(s: Scenario, block_bytes: float, block_compute_s: float) -> float:
    """Exposed seconds per block and pass (forward: the copy down; backward: the copy up) of offloading
    the `block_bytes` a block keeps, beside `block_compute_s` of compute."""
    if not s.training.activation_offload or _on_cpu(s):
        return 0.0
    copy_s = block_bytes / _rate(s, host_side(s.cluster.gpu.name).link_GBps)
    return offloaded_share(s) * max(copy_s - block_compute_s, 0.0)


def offloaded_share(s: Scenario) -> float:
    """The share of a stage's blocks that offload: training.activation_offload_num_layers of the blocks of
    a (virtual) stage, all when unset (the mean block's exposed copy, blocks being priced alike)."""
    n = s.training.activation_offload_num_layers
    per_stage = s.model.num_hidden_layers / (s.pp * s.vpp)
    return 1.0 if n is None else min(n / per_stage, 1.0)
