"""Memory-bound time of the optimizer step (the engine's `optimizer` span, the calibration's fit)."""

from __future__ import annotations

from plancast.simulator.costs.offload import optimizer_offload_s
from plancast.simulator.costs.ops import DTYPE_BYTES
from plancast.simulator.scenario import Scenario


def optimizer_memory_s(s: Scenario, params: float) -> float:
    """Memory-bound time of an optimizer step over `params` local parameters; on the host when the
    optimizer is offloaded (costs/offload.py)."""
    if s.training.optimizer_cpu_offload:
        return optimizer_offload_s(s, params)
    return (
        params
        * optimizer_bytes_per_param(s)
        / (s.cluster.gpu.hbm_GBps * 1e9 * s.cluster.compute.memory_efficiency)
    )


def optimizer_bytes_per_param(s: Scenario) -> float:
    """HBM bytes one optimizer step moves per parameter.

    Fused Adam (apex / torch `fused=True`) reads the gradient and reads and writes the fp32 parameter,
    momentum and variance (g + 24 bytes); zeroing the gradient writes g again. Mixed precision adds
    Megatron-LM's MixedPrecisionOptimizer passes: unscale and inf check (read + write g), gradient
    norm (read g) and the copy of fp32 parameters to the model's 16-bit ones (4 + 2). Where the fp32
    parameters are the master weights (Scenario.amp_master_params: torchtitan's fused AdamW, `set_to_none`
    zeroing): the update (4 + 24) and the gradient-norm clip (read 4; torchtitan's `max_norm = 1.0`);
    the 16-bit copies are cast in the forward pass (autocast) or at the FSDP2 gather. Pure 16-bit training
    (training.master_weights = false: torch's fused Adam over 16-bit parameters, its state in their dtype):
    the same passes in the training dtype, gradient read, parameter and both moments read and written,
    the norm's read: 8 x its bytes."""
    if not s.training.master_weights and s.training.dtype != "fp32":
        return 8.0 * DTYPE_BYTES[s.training.dtype]
    # the fp32 parameter read and written, each moment read and written (24 with fp32 moments; bf16 ones
    # under training.optimizer_moment_dtype, Megatron-Core's precision-aware optimizer)
    update = 4 + 4 + 4 * DTYPE_BYTES[s.training.optimizer_moment_dtype]
    if s.amp_master_params or s.training.dtype == "fp32":
        return 4 + update + 4
    g = 4.0 if s.training.grad_accumulation_fp32 else 2.0
    return g + update + g + 2 * g + g + 6
